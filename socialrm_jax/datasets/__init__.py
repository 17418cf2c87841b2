"""Dataset input: one module per dataset (its adapter, which reads the dataset's source into
items, and its prompt templates), the adapter interface (`adapter.py`) and the registry that finds
an adapter by its dataset's name and parses dataset specs (`registry.py`). The source readers they
share are in `sources/`; what the metrics, report and plots do with a dataset's items is its
analysis, `socialrm_jax.analysis.datasets.<name>`. This package's own module imports nothing, so
importing the interface never pulls in the adapters.
"""

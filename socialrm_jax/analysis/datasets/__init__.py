"""Each dataset's analysis, one module per dataset, named as the dataset: its metric hook, report
rows, null values, findings and figures, registered under its name with
`dataset_analysis.register` and found by that name (`dataset_analysis.for_dataset`). The dataset's
input adapter is the module of the same name in `socialrm_jax.datasets`, below scoring, which no
analysis module imports (pyproject.toml's contracts). This package's own module imports nothing.
"""

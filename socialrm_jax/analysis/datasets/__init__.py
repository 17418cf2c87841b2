"""Each dataset's analysis, one module per dataset, named as the dataset: its metric hook, report
rows, null values, findings and figures, registered under its name with `hooks.register` and
found by that name (`hooks.for_dataset`). The dataset's input adapter is the module of the same
name in `socialrm_jax.datasets`, below scoring. This package's own module imports nothing.
"""

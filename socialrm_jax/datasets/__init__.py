"""Dataset plug-ins: one module per dataset (its adapter, templates, metric hook, report rows)
and the plug-in interface (`plugin.py`). The source readers they share are in `sources/`, the
registry that names them in `registry/`. This package's own module imports nothing, so importing
the interface never pulls in the plug-ins.
"""

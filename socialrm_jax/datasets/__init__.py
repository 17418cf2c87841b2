"""Dataset plug-ins: one module per dataset (its adapter, templates, metric hook, report rows),
the plug-in interface (`plugin.py`), the source readers they share (`reading.py`,
`hf_reading.py`), and the registry (`registry.py`) that the orchestrators read. This package's
own module imports nothing, so importing a reader or the interface never pulls in the plug-ins.
"""

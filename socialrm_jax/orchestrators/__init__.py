"""The orchestrators: they read the registry and hand it down, and run the stages a command
asks for (items from datasets, the audit pipeline, the value probe, the vocabulary scan,
TPU sizing).
"""

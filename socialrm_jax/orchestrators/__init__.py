"""The orchestrators: they read the registry and hand it down, and run the stages a command
asks for. Each is named after its command (`main/<name>` drives `orchestrators/<name>`): convert
(items from datasets), audit (the whole audit from one config), probe (the value probe),
vocab_scan (the vocabulary scan), plan/ (a TPU run planned without a TPU).
"""

"""The orchestrators: they join a dataset's input and analysis by its name and run the stages a
command asks for. Each is named after its command (`main/<name>` drives `orchestrators/<name>`):
convert (items from datasets), audit (the whole audit from one config), probe (the value probe),
vocab_scan (the vocabulary scan), plan/ (a TPU run planned without a TPU).
"""

"""The orchestrators: they join a dataset's input and analysis by its name and run the stages a
command asks for (items from datasets, the audit pipeline, the value probe, the vocabulary scan,
TPU sizing).
"""

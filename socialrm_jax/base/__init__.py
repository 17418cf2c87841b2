"""The base layer: the vocabulary (SPEC's records, roles, domains), file formats and atomic
writes, prompt templates as data, the errors every layer reports with, and `settings`: a command's settings
declared once as a dataclass, its flags and config derived from it.
"""

"""The base layer: the vocabulary (SPEC's records, roles, domains), file formats and atomic
writes, prompt templates as data, and the errors every layer reports with.
"""

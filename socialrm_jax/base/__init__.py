"""The base layer: the vocabulary (docs/spec.md's records, roles, domains), file formats and
atomic writes, prompt templates as data, the errors every layer reports with, `settings` (a
command's settings declared once as a dataclass, its flags and config derived from it) and
`registry` (named things registered by their own modules and found by name), and `writer_lock`
(one writer per output folder: scoring's and training's).
"""

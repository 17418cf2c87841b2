"""The sources layer: reading original dataset files row by row with accounting, and the
identity-swap set derived from converted items.
"""

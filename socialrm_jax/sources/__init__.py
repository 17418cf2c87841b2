"""The sources layer: reading original dataset files row by row with accounting (`reading`,
`hf_reading`), the probe's lexicon files (`lexicons`), the identity-swap set derived from converted
items (`identity_swaps`), and downloading the datasets' original files, pinned and hashed
(`fetch`, `socialrm-fetch`).
"""

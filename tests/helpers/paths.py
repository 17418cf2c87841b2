"""Where the repository is, for tests that run its scripts or read its bundled files."""

import pathlib

REPO_ROOT = pathlib.Path(__file__).resolve().parents[2]

"""Fixtures shared by every layer's tests; helper code lives in the `tests.helpers` package.

`tests` is a package (each folder has an `__init__.py`), so pytest puts the repository root first
on `sys.path` and `import tests` finds this folder. The rewardbench wheel (a test dependency)
installs a top-level `tests` package of its own; a subprocess that imports from `tests` must put
the repository first on its PYTHONPATH (`tests.helpers.scoring_fixtures.subprocess_env` does).
"""

from __future__ import annotations

import pathlib

import pytest

import tests

if pathlib.Path(tests.__file__).resolve().parent != pathlib.Path(__file__).resolve().parent:
  raise ImportError(f"`import tests` found {tests.__file__}, not this repository's tests package: "
                    "put the repository first on sys.path")


@pytest.fixture(scope="module")
def one_torch_thread():
  """Tiny models' forward passes: one thread is ~50x faster than two on a busy 2-core machine.
  A module turns it on for all its tests with
  `pytestmark = pytest.mark.usefixtures("one_torch_thread")`."""
  import torch  # pylint: disable=import-outside-toplevel
  threads = torch.get_num_threads()
  torch.set_num_threads(1)
  yield
  torch.set_num_threads(threads)

"""Files the package writes get the user's umask, as `open` gives them, not mkstemp's 0600: a
report or a scores folder written for a team stays readable to it."""

import os
import pathlib
import stat

import pytest

from socialrm_jax.base import tables

ROWS = [{"item_id": "a", "candidate": 0, "reward": 1.5}, {"item_id": "b", "candidate": 1,
                                                           "reward": -0.5}]


@pytest.fixture(params=[0o022, 0o027])
def umask(request):
  old = os.umask(request.param)
  yield request.param
  os.umask(old)


def _modes(folder: pathlib.Path) -> dict[str, int]:
  return {str(p.relative_to(folder)): stat.S_IMODE(p.stat().st_mode)
          for p in sorted(folder.rglob("*")) if p.is_file()}


def test_atomic_writes_follow_the_umask(tmp_path, umask):
  tables.atomic_write_bytes(tmp_path / "report.md", b"# Report\n")
  tables.atomic_write_json(tmp_path / "run.json", {"items": 2})
  tables.atomic_write_json(tmp_path / "run.json", {"items": 3})  # replacing keeps the mode
  assert _modes(tmp_path) == {"report.md": 0o666 & ~umask, "run.json": 0o666 & ~umask}


@pytest.mark.parametrize("fmt", tables.FORMATS)
def test_tables_follow_the_umask(tmp_path, umask, fmt):
  tables.write_rows(tmp_path / "one" / tables.table_name("scores", fmt), ROWS, fmt)
  with tables.staged_folder(tmp_path / "staged") as stage:
    with tables.TableWriter(stage / tables.table_name("items", fmt), fmt) as writer:
      writer.add(ROWS)
  modes = {**_modes(tmp_path / "one"), **_modes(tmp_path / "staged")}
  assert modes and set(modes.values()) == {0o666 & ~umask}, modes
  assert not [p for p in tmp_path.rglob(".*")], "a temporary was left behind"

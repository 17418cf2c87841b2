"""Downloads the audited datasets' original files into a data folder, pinned and hashed.

  python -m socialrm_jax.main.fetch --datasets=all --data_dir=DIR [--mirror=URL] [--offline]
  python -m socialrm_jax.main.fetch --list [--datasets=NAMES]

Every file comes from the URL the manifest pins to a commit (socialrm_jax/sources/
fetch_manifest.json) and goes where `socialrm-convert --data_dir=DIR` finds it; its sha256 is
checked before it takes its name. `--list` prints one JSON line per file. `--offline` (or
HF_HUB_OFFLINE=1) opens no connection: it lists what is missing (exit 2) or confirms all is there.
What is downloaded and how: socialrm_jax/sources/fetch.py.
"""

from __future__ import annotations

import json

from absl import flags

from socialrm_jax.base import errors
from socialrm_jax.sources import fetch

_DATASETS = flags.DEFINE_string(
    "datasets", "all", f"'all', or a comma-separated list of: {', '.join(fetch.dataset_names())}.")
_DATA_DIR = flags.DEFINE_string("data_dir", None, "The folder the files go into, one sub-folder "
                                "per dataset (what socialrm-convert's --data_dir reads).")
_LIST = flags.DEFINE_bool("list", False, "Print one JSON line per file (dataset, url, sha256 or "
                          "null, size, license, path) and download nothing.")
_MIRROR = flags.DEFINE_string("mirror", None, "A URL whose scheme and host replace those of every "
                              "file's URL, the path kept (a mirror in the upstream layout).")
_OFFLINE = flags.DEFINE_bool("offline", False, "Open no connection: list the files missing from "
                             "--data_dir (exit 2), or confirm all are there. HF_HUB_OFFLINE=1 "
                             "does the same.")


def options() -> fetch.FetchOptions:
  """The command's flags as the library's options (the one place they are read)."""
  return fetch.FetchOptions(datasets=_DATASETS.value, data_dir=_DATA_DIR.value,
                            mirror=_MIRROR.value, offline=_OFFLINE.value)


def main(argv):
  del argv
  chosen = options()
  if _LIST.value:
    for entry in fetch.select(chosen.datasets):
      print(json.dumps({**entry.listing(), "url": fetch.mirrored(entry.url, chosen.mirror)}))
    return
  print(json.dumps(fetch.fetch(chosen), indent=2))


def run():
  errors.run_command("socialrm-fetch", main)


if __name__ == "__main__":
  run()

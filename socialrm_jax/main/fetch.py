"""Downloads the audited datasets' original files into a data folder, pinned and hashed.

  python -m socialrm_jax.main.fetch --datasets=all --data_dir=DIR [--mirror=URL] [--offline]
  python -m socialrm_jax.main.fetch --list [--datasets=NAMES]

Every file comes from the URL the manifest pins to a commit (socialrm_jax/sources/
fetch_manifest.json) and goes where `socialrm-convert --data_dir=DIR` finds it; its bytes are
checked against its pins (sha256, git blob id) before it takes its name, and its sha256 recorded.
`--datasets=hh_rlhf_train` (named only) fetches HH-RLHF's train splits. `--list` prints one JSON
line per file. `--offline` (or HF_HUB_OFFLINE=1) opens no connection: it lists what is missing
(exit 2) or confirms all is there. What is downloaded and how: socialrm_jax/sources/fetch.py.
"""

from __future__ import annotations

import json

from socialrm_jax.main import command
from socialrm_jax.sources import fetch


def main(chosen: fetch.FetchOptions) -> None:
  if chosen.list:
    for entry in fetch.select(chosen.datasets):
      print(json.dumps({**entry.listing(), "url": fetch.mirrored(entry.url, chosen.mirror)}))
    return
  print(json.dumps(fetch.fetch(chosen), indent=2))


COMMAND = command.Command("socialrm-fetch", fetch.FetchOptions, main)


def run():
  COMMAND.run()


if __name__ == "__main__":
  run()

"""Fills the fetch manifest's unknown sha256 digests and sizes, on a machine that can download.

  python tools/fill_manifest_hashes.py [--datasets=all] [--recheck] [--mirror=URL] \
      [--manifest=socialrm_jax/sources/fetch_manifest.json]

Where the manifest was written, some files could not be read (BBQ's categories of 4 MiB and more,
HH-RLHF's harmless-base train split), so they are pinned by their git blob id at the commit alone,
their sha256 and size null. This downloads each such file from its pinned URL (through `--mirror`
if given), checks it against its git blob id, and writes its sha256 and size into the manifest,
dropping the note that said the sha256 was unknown. `--recheck` downloads the files whose sha256 is
known too, and stops with the file's name and both digests if one differs (nothing is written
then). Review the diff before committing it: a filled hash is what every later fetch is held to.
"""

from __future__ import annotations

import json
import pathlib
import sys
import tempfile

from absl import app, flags

from socialrm_jax.sources import fetch

_MANIFEST = flags.DEFINE_string("manifest", str(fetch.MANIFEST), "The manifest to fill.")
_DATASETS = flags.DEFINE_string("datasets", "all", "'all', or datasets comma-separated.")
_RECHECK = flags.DEFINE_bool("recheck", False, "Also download the files whose sha256 is known "
                             "and check them.")
_MIRROR = flags.DEFINE_string("mirror", None, "Replaces every URL's scheme and host (the path "
                              "kept), as socialrm-fetch's --mirror.")
# A note on a file whose hash was unknown says so with these words; it goes once the hash is in.
UNKNOWN_HASH_NOTE = "the first download records"


def fill(manifest_path: pathlib.Path, datasets: str, recheck: bool, mirror: str | None,
         log=print) -> int:
  """Downloads and hashes the chosen files; writes the filled manifest. Returns how many filled."""
  document = json.loads(manifest_path.read_text())
  pinned = {e.path: e for e in fetch.select(datasets, fetch.manifest(manifest_path))}
  filled = 0
  with tempfile.TemporaryDirectory() as scratch:
    for entry in document["files"]:
      if entry["path"] not in pinned or (entry["sha256"] and not recheck):
        continue
      url = fetch.mirrored(entry["url"], mirror)
      sha256, size = fetch.download(url, pathlib.Path(scratch) / "file", log)
      differs = fetch.mismatch(pinned[entry["path"]], pathlib.Path(scratch) / "file", sha256)
      if differs is not None and differs[0] == "git blob id":
        raise SystemExit(f"{entry['path']}: the manifest has git blob id {differs[1]}, {url} "
                         f"serves {differs[2]}")
      if entry["sha256"]:
        if (sha256, size) != (entry["sha256"], entry["size"]):
          raise SystemExit(f"{entry['path']}: the manifest has sha256 {entry['sha256']} "
                           f"({entry['size']} bytes), {url} serves {sha256} ({size} bytes)")
        log(f"{entry['path']}: as the manifest says")
        continue
      entry["sha256"], entry["size"] = sha256, size
      if UNKNOWN_HASH_NOTE in (entry.get("note") or ""):
        del entry["note"]
      log(f"{entry['path']}: sha256 {sha256}, {size} bytes")
      filled += 1
  if filled:
    temp = manifest_path.with_name(manifest_path.name + ".tmp")
    temp.write_text(json.dumps(document, indent=1, ensure_ascii=False) + "\n")
    temp.replace(manifest_path)
  return filled


def main(argv):
  del argv
  filled = fill(pathlib.Path(_MANIFEST.value), _DATASETS.value, _RECHECK.value, _MIRROR.value,
                log=lambda line: print(line, file=sys.stderr, flush=True))
  print(f"filled {filled} file(s) in {_MANIFEST.value}")


if __name__ == "__main__":
  app.run(main)

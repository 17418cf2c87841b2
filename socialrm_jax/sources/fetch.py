"""Downloading the audited datasets' original files, pinned and hashed (`socialrm-fetch`).

`fetch_manifest.json` beside this module lists every file: its upstream URL at a commit, its
path under `--data_dir` (where `socialrm-convert` finds it), its sha256 and size, its license.
A file is written under a temporary name in its folder and renamed only once its bytes match the
manifest's sha256, so a refused download leaves nothing under the file's name. A file already
there whose bytes match costs no request. A file whose sha256 the manifest does not know
(null: it could not be computed where the manifest was written) is downloaded once, and its
sha256 and size go into the data folder's lock file (`fetch.lock.json`): later runs hold it to
that, and the command says the file was unverified.

Only the standard library downloads (`urllib`): no connection is opened when offline
(`offline=True`, or `HF_HUB_OFFLINE=1`), which lists what is missing instead.
"""

from __future__ import annotations

import dataclasses
import hashlib
import json
import os
import pathlib
import sys
import tempfile
import time
import urllib.error
import urllib.parse
import urllib.request
from typing import Any, Callable, Iterable, Sequence

from socialrm_jax.base import settings, tables
from socialrm_jax.base.errors import InputError

MANIFEST = pathlib.Path(__file__).with_name("fetch_manifest.json")
LOCK_FILE = "fetch.lock.json"
COMMAND = "socialrm-fetch"
_CHUNK = 1 << 20
_PROGRESS_BYTES = 8 << 20  # files larger than this report progress as they come
_PROGRESS_SECONDS = 2.0
_TIMEOUT_SECONDS = 60


@dataclasses.dataclass(frozen=True)
class FileEntry:
  """One file of the manifest; `sha256`/`size` None where unknown."""
  dataset: str
  url: str
  path: str
  sha256: str | None
  size: int | None
  license: str
  note: str | None = None

  def listing(self) -> dict[str, Any]:
    """What `--list` prints for the file."""
    return {"dataset": self.dataset, "url": self.url, "sha256": self.sha256, "size": self.size,
            "license": self.license, "path": self.path}


@dataclasses.dataclass(frozen=True)
class FetchOptions:
  """`socialrm-fetch`'s settings (each a flag of the same name): which datasets, into which
  folder, from where."""
  datasets: str = settings.field(
      "all", "'all', or a comma-separated list of the manifest's datasets (bbq, crows_pairs, "
      "stereoset, hh_rlhf, xstest, ethics, moral_stories).")
  data_dir: str | None = settings.field(
      None, "The folder the files go into, one sub-folder per dataset (what socialrm-convert's "
      "--data_dir reads).")
  mirror: str | None = settings.field(
      None, "A URL whose scheme and host replace those of every file's URL, the path kept (a "
      "mirror in the upstream layout).")
  offline: bool = settings.field(
      False, "Open no connection: list the files missing from --data_dir (exit 2), or confirm all "
      "are there. HF_HUB_OFFLINE=1 does the same.")
  list: bool = settings.field(
      False, "Print one JSON line per file (dataset, url, sha256 or null, size, license, path) "
      "and download nothing.")


def manifest(path: str | os.PathLike = MANIFEST) -> list[FileEntry]:
  """Every file of the manifest, in its order."""
  return [FileEntry(**entry) for entry in json.loads(pathlib.Path(path).read_text())["files"]]


def dataset_names(entries: Sequence[FileEntry] | None = None) -> list[str]:
  """The datasets the manifest covers, in its order."""
  return list(dict.fromkeys(e.dataset for e in (manifest() if entries is None else entries)))


def select(names: str | Sequence[str], entries: Sequence[FileEntry] | None = None
           ) -> list[FileEntry]:
  """The files of the datasets `names` names ('all', or names comma-separated); an unknown name
  is an error naming `--datasets`."""
  entries = manifest() if entries is None else list(entries)
  known = dataset_names(entries)
  wanted = [n.strip() for part in ([names] if isinstance(names, str) else names)
            for n in part.split(",") if n.strip()]
  if not wanted or "all" in wanted:
    return entries
  unknown = [n for n in wanted if n not in known]
  if unknown:
    raise InputError(f"--datasets: {', '.join(unknown)} not in the fetch manifest; "
                     f"it has: {', '.join(known)}")
  return [e for e in entries if e.dataset in wanted]


def command_for(dataset: str, data_dir: str | os.PathLike | None) -> str | None:
  """The command that downloads `dataset` into `data_dir`, or None if the manifest lacks it."""
  if dataset not in dataset_names():
    return None
  return f"{COMMAND} --datasets={dataset} --data_dir={data_dir if data_dir else 'DIR'}"


def mirrored(url: str, mirror: str | None) -> str:
  """`url` with its scheme and host replaced by `mirror`'s (a path in `mirror` goes before the
  URL's path, which is kept whole)."""
  if not mirror:
    return url
  base = urllib.parse.urlsplit(mirror)
  if not base.scheme or not base.netloc:
    raise InputError(f"--mirror: expected a URL such as https://mirror.example.com, got {mirror!r}")
  parts = urllib.parse.urlsplit(url)
  return urllib.parse.urlunsplit((base.scheme, base.netloc, base.path.rstrip("/") + parts.path,
                                  parts.query, ""))


def offline_requested(offline: bool) -> bool:
  """`offline`, or the Hub's own switch `HF_HUB_OFFLINE` set to a true value."""
  return offline or os.environ.get("HF_HUB_OFFLINE", "").strip().lower() in ("1", "true", "yes",
                                                                               "on")


class Lock:
  """`fetch.lock.json` in the data folder: what was downloaded, from where, with which sha256.
  It is what an unverified file (no sha256 in the manifest) is held to after its first download."""

  def __init__(self, data_dir: pathlib.Path):
    self.path = data_dir / LOCK_FILE
    self.files: dict[str, dict[str, Any]] = {}
    if self.path.is_file():
      try:
        self.files = dict(json.loads(self.path.read_text())["files"])
      except (ValueError, KeyError, TypeError) as e:
        raise InputError(f"not a readable lock file ({e}); remove it to start over",
                         self.path) from None

  def expected(self, entry: FileEntry) -> str | None:
    """The sha256 `entry`'s file must have: the manifest's, else the one recorded here."""
    if entry.sha256:
      return entry.sha256
    return (self.files.get(entry.path) or {}).get("sha256")

  def record(self, entry: FileEntry, url: str, sha256: str, size: int) -> None:
    self.files[entry.path] = {"dataset": entry.dataset, "url": url, "sha256": sha256,
                              "size": size, "verified": entry.sha256 is not None}
    tables.atomic_write_json(self.path, {"files": dict(sorted(self.files.items()))})


def state(entry: FileEntry, data_dir: pathlib.Path, lock: Lock) -> str:
  """'verified' (its bytes match), 'missing', 'mismatch' (its bytes differ), or 'unrecorded'
  (there, but nothing to check it against: no sha256 in the manifest or the lock)."""
  path = data_dir / entry.path
  if not path.is_file():
    return "missing"
  expected = lock.expected(entry)
  if expected is None:
    return "unrecorded"
  if entry.size is not None and path.stat().st_size != entry.size:
    return "mismatch"
  return "verified" if tables.file_sha256(path) == expected else "mismatch"


def _request(url: str) -> urllib.request.Request:
  headers = {"User-Agent": f"{COMMAND} (socialrm_jax)"}
  token = os.environ.get("HF_TOKEN")
  if token and urllib.parse.urlsplit(url).hostname == "huggingface.co":
    headers["Authorization"] = f"Bearer {token}"  # gated Hub datasets; never sent to a mirror
  return urllib.request.Request(url, headers=headers)


def download(url: str, target: pathlib.Path, log: Callable[[str], None]) -> tuple[str, int]:
  """Streams `url` into `target` (a temporary file), hashing as it goes; (sha256, size)."""
  digest, size = hashlib.sha256(), 0
  try:
    with urllib.request.urlopen(_request(url), timeout=_TIMEOUT_SECONDS) as response, \
        open(target, "wb") as out:
      total = int(response.headers.get("Content-Length") or 0) or None
      start = last = time.monotonic()
      for block in iter(lambda: response.read(_CHUNK), b""):
        out.write(block)
        digest.update(block)
        size += len(block)
        now = time.monotonic()
        if total and total > _PROGRESS_BYTES and now - last >= _PROGRESS_SECONDS:
          last = now
          rate = size / max(now - start, 1e-9)
          log(f"  {size / 2**20:.1f} of {total / 2**20:.1f} MiB "
              f"({100 * size / total:.0f}%, ETA {(total - size) / rate:.0f} s)")
  except urllib.error.HTTPError as e:
    raise InputError(f"could not download {url}: HTTP {e.code} {e.reason}") from None
  except (urllib.error.URLError, OSError) as e:
    reason = getattr(e, "reason", e)
    raise InputError(f"could not download {url}: {reason}") from None
  return digest.hexdigest(), size


def _fetch_file(entry: FileEntry, data_dir: pathlib.Path, lock: Lock, url: str,
                log: Callable[[str], None]) -> str:
  """Downloads one file into place, verified; returns 'downloaded' or 'unverified'."""
  path = data_dir / entry.path
  path.parent.mkdir(parents=True, exist_ok=True)
  fd, temp = tempfile.mkstemp(prefix=f".{path.name}.", suffix=".part", dir=path.parent)
  os.close(fd)
  temp = pathlib.Path(temp)
  try:
    sha256, size = download(url, temp, log)
    expected = lock.expected(entry)
    if expected is not None and sha256 != expected:
      raise InputError(f"{entry.path}: sha256 mismatch, refused (from {url}): "
                       f"expected {expected}, got {sha256}")
    if entry.size is not None and size != entry.size:
      raise InputError(f"{entry.path}: size mismatch, refused (from {url}): "
                       f"expected {entry.size} bytes, got {size}")
    os.replace(temp, path)
  finally:
    temp.unlink(missing_ok=True)
  lock.record(entry, url, sha256, size)
  if entry.sha256 is None:
    log(f"{entry.path}: unverified (the manifest has no sha256 for it): recorded sha256 "
        f"{sha256} ({size} bytes) in {lock.path.name}; later runs hold the file to it")
    return "unverified"
  return "downloaded"


def missing_lines(entries: Iterable[FileEntry], data_dir: pathlib.Path, lock: Lock
                  ) -> list[str]:
  """One line per file not there (or not matching its sha256), for offline use."""
  lines = []
  for entry in entries:
    found = state(entry, data_dir, lock)
    if found in ("missing", "mismatch"):
      what = "missing" if found == "missing" else "sha256 differs from the manifest's"
      lines.append(f"{entry.dataset}: {entry.path} {what} (from {entry.url})")
  return lines


def fetch(options: FetchOptions, log: Callable[[str], None] | None = None,
          entries: Sequence[FileEntry] | None = None) -> dict[str, Any]:
  """Brings every selected file of `entries` (default: the manifest's) into `options.data_dir`,
  verified; returns counts per outcome. Offline, nothing is downloaded: a missing file is an
  `InputError` listing each one."""
  log = log or (lambda line: print(line, file=sys.stderr, flush=True))
  if not options.data_dir:
    raise InputError("--data_dir: give the folder the datasets go into")
  entries = select(options.datasets, entries)
  data_dir = pathlib.Path(options.data_dir)
  if data_dir.exists() and not data_dir.is_dir():
    raise InputError("--data_dir: not a folder", data_dir)
  data_dir.mkdir(parents=True, exist_ok=True)
  lock = Lock(data_dir)
  if offline_requested(options.offline):
    missing = missing_lines(entries, data_dir, lock)
    if missing:
      raise InputError(f"offline, and {len(missing)} file(s) are not in {data_dir}:\n"
                       + "\n".join(missing))
    return {"offline": True, "verified": len(entries)}
  counts = {"already_verified": 0, "downloaded": 0, "unverified": 0}
  licensed = set()
  for entry in entries:
    found = state(entry, data_dir, lock)
    if found == "verified":
      counts["already_verified"] += 1
      continue
    if found == "mismatch":
      log(f"{entry.path}: its sha256 differs from the expected one; downloading it again")
    if entry.dataset not in licensed:
      licensed.add(entry.dataset)
      log(f"{entry.dataset}: license {entry.license}")
    url = mirrored(entry.url, options.mirror)
    log(f"{entry.path} <- {url}")
    counts[_fetch_file(entry, data_dir, lock, url, log)] += 1
  return {"data_dir": str(data_dir), "files": len(entries), **counts}


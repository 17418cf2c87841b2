"""Downloading the audited datasets' original files, pinned and hashed (`socialrm-fetch`).

`fetch_manifest.json` beside this module lists every file: its upstream URL at a commit, its
path under `--data_dir` (where `socialrm-convert` finds it), its pins, its license. Every file is
pinned: by its sha256 (and size), or by its git blob id at the commit (`git_blob`: the SHA-1 of
`blob <size>\\0` and the bytes, what the repository's tree lists, for files whose sha256 could not
be computed where the manifest was written), or both; a Git LFS file by its pointer's sha256 and
size. A manifest entry without a pin is refused. A file is written under a temporary name in its
folder and renamed only once its bytes match every pin it has, so a refused download leaves
nothing under the file's name; its sha256 and size go into the data folder's lock file
(`fetch.lock.json`). A file already there whose bytes match costs no request.

The datasets the audit reads come with `all`; a dataset listed in the manifest's `by_name_only`
(HH-RLHF's train splits, `hh_rlhf_train`: preference data to train on, not audited) only when
named.

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
  """One file of the manifest; `sha256`/`size`/`git_blob` None where unknown, but one of
  `sha256` and `git_blob` always known: the file's pin."""
  dataset: str
  url: str
  path: str
  sha256: str | None
  size: int | None
  license: str
  note: str | None = None
  git_blob: str | None = None  # its git blob id at the URL's commit

  def listing(self) -> dict[str, Any]:
    """What `--list` prints for the file."""
    return {"dataset": self.dataset, "url": self.url, "sha256": self.sha256,
            "git_blob": self.git_blob, "size": self.size, "license": self.license,
            "path": self.path}


@dataclasses.dataclass(frozen=True)
class FetchOptions:
  """`socialrm-fetch`'s settings (each a flag of the same name): which datasets, into which
  folder, from where."""
  datasets: str = settings.field(
      "all", "'all' (the audited datasets: bbq, crows_pairs, stereoset, hh_rlhf, xstest, ethics, "
      "moral_stories), or a comma-separated list of the manifest's datasets: those, and "
      "hh_rlhf_train (HH-RLHF's train splits, to train on; fetched only when named).")
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
      False, "Print one JSON line per file (dataset, url, sha256, git_blob, size, license, path; "
      "every file has a sha256 or a git blob id) and download nothing.")


def manifest(path: str | os.PathLike = MANIFEST) -> list[FileEntry]:
  """Every file of the manifest, in its order; one without a pin is an error naming it."""
  entries = [FileEntry(**entry) for entry in json.loads(pathlib.Path(path).read_text())["files"]]
  for entry in entries:
    if entry.sha256 is None and entry.git_blob is None:
      raise InputError(f"{entry.path} has no pin (a sha256 or a git blob id): every fetched file "
                       "must have one", path)
  return entries


def by_name_only(path: str | os.PathLike = MANIFEST) -> list[str]:
  """The manifest's datasets that `all` leaves out (fetched only when named)."""
  return list(json.loads(pathlib.Path(path).read_text()).get("by_name_only", []))


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
    named_only = set(by_name_only()) - set(wanted)
    return [e for e in entries if e.dataset not in named_only]
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
  """`fetch.lock.json` in the data folder: what was downloaded, from where, with which sha256 and
  size, checked against which pins."""

  def __init__(self, data_dir: pathlib.Path):
    self.path = data_dir / LOCK_FILE
    self.files: dict[str, dict[str, Any]] = {}
    if self.path.is_file():
      try:
        self.files = dict(json.loads(self.path.read_text())["files"])
      except (ValueError, KeyError, TypeError) as e:
        raise InputError(f"not a readable lock file ({e}); remove it to start over",
                         self.path) from None

  def record(self, entry: FileEntry, url: str, sha256: str, size: int) -> None:
    self.files[entry.path] = {"dataset": entry.dataset, "url": url, "sha256": sha256,
                              "size": size, "checked_against": pins(entry)}
    tables.atomic_write_json(self.path, {"files": dict(sorted(self.files.items()))})


def pins(entry: FileEntry) -> list[str]:
  """What `entry`'s file is checked against: 'size', 'sha256', 'git_blob', those it has."""
  return [name for name in ("size", "sha256", "git_blob") if getattr(entry, name) is not None]


def git_blob_id(path: pathlib.Path) -> str:
  """The file's git blob id: the SHA-1 of `blob <size>\\0` followed by its bytes (what
  `git hash-object` prints, and a repository's tree lists)."""
  digest = hashlib.sha1(f"blob {path.stat().st_size}\0".encode())
  with open(path, "rb") as f:
    for block in iter(lambda: f.read(_CHUNK), b""):
      digest.update(block)
  return digest.hexdigest()


def mismatch(entry: FileEntry, path: pathlib.Path, sha256: str | None = None
             ) -> tuple[str, str, str] | None:
  """(what differs, expected, got) for the first of `entry`'s pins the file at `path` does not
  match (size, sha256, git blob id), or None when it matches them all; `sha256`: the file's,
  if already known."""
  size = path.stat().st_size
  if entry.size is not None and size != entry.size:
    return "size", f"{entry.size} bytes", f"{size}"
  if entry.sha256 is not None:
    sha256 = sha256 or tables.file_sha256(path)
    if sha256 != entry.sha256:
      return "sha256", entry.sha256, sha256
  if entry.git_blob is not None:
    blob = git_blob_id(path)
    if blob != entry.git_blob:
      return "git blob id", entry.git_blob, blob
  return None


def state(entry: FileEntry, data_dir: pathlib.Path) -> str:
  """'verified' (its bytes match every pin), 'missing' or 'mismatch' (its bytes differ)."""
  path = data_dir / entry.path
  if not path.is_file():
    return "missing"
  return "verified" if mismatch(entry, path) is None else "mismatch"


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
                log: Callable[[str], None]) -> None:
  """Downloads one file into place, checked against every pin it has; records its sha256."""
  path = data_dir / entry.path
  path.parent.mkdir(parents=True, exist_ok=True)
  fd, temp = tempfile.mkstemp(prefix=f".{path.name}.", suffix=".part", dir=path.parent)
  os.close(fd)
  temp = pathlib.Path(temp)
  try:
    sha256, size = download(url, temp, log)
    differs = mismatch(entry, temp, sha256)
    if differs is not None:
      what, expected, got = differs
      raise InputError(f"{entry.path}: {what} mismatch, refused (from {url}): "
                       f"expected {expected}, got {got}")
    os.replace(temp, path)
  finally:
    temp.unlink(missing_ok=True)
  lock.record(entry, url, sha256, size)
  if entry.sha256 is None:
    log(f"{entry.path}: matches its git blob id {entry.git_blob}; its sha256 {sha256} "
        f"({size} bytes) recorded in {lock.path.name}")


def missing_lines(entries: Iterable[FileEntry], data_dir: pathlib.Path) -> list[str]:
  """One line per file not there (or not matching its pins), for offline use."""
  lines = []
  for entry in entries:
    found = state(entry, data_dir)
    if found in ("missing", "mismatch"):
      what = "missing" if found == "missing" else "its bytes differ from the manifest's pins"
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
    missing = missing_lines(entries, data_dir)
    if missing:
      raise InputError(f"offline, and {len(missing)} file(s) are not in {data_dir}:\n"
                       + "\n".join(missing))
    return {"offline": True, "verified": len(entries)}
  counts = {"already_verified": 0, "downloaded": 0}
  licensed = set()
  for entry in entries:
    found = state(entry, data_dir)
    if found == "verified":
      counts["already_verified"] += 1
      continue
    if found == "mismatch":
      log(f"{entry.path}: its bytes differ from the manifest's pins; downloading it again")
    if entry.dataset not in licensed:
      licensed.add(entry.dataset)
      log(f"{entry.dataset}: license {entry.license}")
    url = mirrored(entry.url, options.mirror)
    log(f"{entry.path} <- {url}")
    _fetch_file(entry, data_dir, lock, url, log)
    counts["downloaded"] += 1
  return {"data_dir": str(data_dir), "files": len(entries), **counts}


"""A model named by its Hub id, `org/name[@REVISION][:FILE.gguf]`, as a local snapshot, verified.

`resolve` downloads the files a model needs and nothing that can run code: its config, tokenizer
files, chat template, `*.safetensors` weights (or, for a repository without safetensors, one GGUF
file), never `.bin`, `.pt` or `.py` (`huggingface_hub.snapshot_download` with allow and ignore
patterns). The revision (a branch, a tag, or a 40-hex commit; default `main`) is resolved to its
commit first and the snapshot is taken at that commit, so the folder's path names it (the Hub
cache's `models--org--name/snapshots/<commit>/`, which `origin` reads back for the run manifest).

`huggingface_hub` checks sizes, not content. Every weights file is checked here against the
sha256 the Hub lists for it (its LFS oid, from the repository tree): a file with other bytes is
removed from the cache and refused, naming the file and both digests. What was checked is
recorded beside the cache's snapshots (`VERIFIED_FILE`), so a later run re-hashes only a file that
changed. `HF_TOKEN` reaches gated repositories; `HF_ENDPOINT` points at another Hub.

Offline (`HF_HUB_OFFLINE=1`, as on the compute nodes of a cluster whose login node filled the
cache) no request is made: the snapshot is found through huggingface_hub's own account of its
cache (`scan_cache_dir`, in the cache it uses: `HF_HUB_CACHE`, else under `HF_HOME`), a branch or
tag through the refs the cache keeps, whether an earlier connected run or `hf download` filled
it. Each weights file read is held to the sha256 an earlier connected run checked, or else to the
one its blob in the cache is named by (the LFS oid huggingface_hub stored it under). A model not in
the cache is one line naming the id and the `hf download` command that fills the cache.
"""

from __future__ import annotations

import functools
import json
import os
import pathlib
import re
from typing import Any

from socialrm_jax.base import tables
from socialrm_jax.base.errors import InputError

# org/name, then @revision, then :file. A path that exists is never taken for a Hub id.
_HUB_ID = re.compile(r"^(?P<repo>[A-Za-z0-9][\w.-]*/[A-Za-z0-9][\w.-]*)"
                     r"(?:@(?P<revision>[\w.-]+(?:/[\w.-]+)*?))?(?::(?P<file>[\w./-]+\.gguf))?$")
COMMIT = re.compile(r"^[0-9a-f]{40}$")
ALLOW_PATTERNS = (
    "config.json", "generation_config.json", "tokenizer.json", "tokenizer_config.json",
    "special_tokens_map.json", "added_tokens.json", "tokenizer.model", "spiece.model",
    "vocab.json", "vocab.txt", "merges.txt", "chat_template.jinja", "chat_template.json",
    "*.safetensors", "*.safetensors.index.json")
IGNORE_PATTERNS = ("*.bin", "*.pt", "*.pth", "*.ckpt", "*.pkl", "*.py", "*.h5", "*.msgpack")
VERIFIED_FILE = "socialrm_verified.json"
WEIGHT_SUFFIXES = (".safetensors", ".gguf")
_SHA256 = re.compile(r"^[0-9a-f]{64}$")
_SNAPSHOT = re.compile(r"models--(?P<org>[^/]+?)--(?P<name>[^/]+)/snapshots/"
                       r"(?P<commit>[0-9a-f]{40})(?:/|$)")


def parse(spec: str) -> tuple[str, str, str | None] | None:
  """(repo, revision, GGUF file or None) of a Hub id, or None when `spec` is not one or names a
  path that exists (a local folder or file keeps working as it always did)."""
  if os.path.exists(spec):
    return None
  found = _HUB_ID.match(spec)
  if not found:
    return None
  return found["repo"], found["revision"] or "main", found["file"]


def _offline() -> bool:
  return os.environ.get("HF_HUB_OFFLINE", "").strip().lower() in ("1", "true", "yes", "on")


def origin(path: str | os.PathLike) -> dict[str, str] | None:
  """{'id': org/name, 'commit': 40-hex} for a path inside a Hub cache snapshot (what `resolve`
  returns), else None."""
  found = _SNAPSHOT.search(pathlib.Path(path).as_posix())
  if not found:
    return None
  return {"id": f"{found['org']}/{found['name']}", "commit": found["commit"]}


class _Record:
  """`VERIFIED_FILE` in the repository's cache folder, per commit: the allow patterns the snapshot
  was taken with (with weights, and without), the GGUF file chosen (if any), and per weights file
  the Hub's sha256 and the size and mtime of the file it was checked against."""

  def __init__(self, repo_folder: pathlib.Path):
    self.path = repo_folder / VERIFIED_FILE
    try:
      self.data: dict[str, Any] = json.loads(self.path.read_text()) if self.path.is_file() else {}
    except ValueError:
      self.data = {}

  def commit(self, commit: str) -> dict[str, Any]:
    return self.data.setdefault(commit, {"patterns": {}, "chosen": None, "files": {}})

  def expected(self, commit: str, name: str) -> str | None:
    return (self.commit(commit)["files"].get(name) or {}).get("sha256")

  def unchanged(self, commit: str, name: str, file: pathlib.Path) -> bool:
    entry = self.commit(commit)["files"].get(name) or {}
    stat = file.stat()
    return entry.get("checked") == [stat.st_size, stat.st_mtime_ns]

  def note(self, commit: str, name: str, sha256: str, file: pathlib.Path) -> None:
    stat = file.stat()
    self.commit(commit)["files"][name] = {"sha256": sha256,
                                          "checked": [stat.st_size, stat.st_mtime_ns]}

  def save(self) -> None:
    temp = self.path.with_name(self.path.name + ".tmp")
    temp.write_text(json.dumps(self.data, indent=1, sort_keys=True))
    os.replace(temp, self.path)


def _refuse(repo: str, commit: str, name: str, file: pathlib.Path, expected: str,
            actual: str) -> None:
  """Removes a weights file whose bytes are not the Hub's from the cache, and says so (a cache
  this process may not write, as a cluster's shared one can be, keeps it: the line says so)."""
  target = file.resolve()
  removed = "removed from the cache"
  try:
    file.unlink(missing_ok=True)
    if target != file:
      target.unlink(missing_ok=True)  # the cache's blob the snapshot's link points at
  except OSError as e:
    removed = f"left in the cache, which could not be written ({e.strerror}): remove {target}"
  raise InputError(f"{repo}@{commit}: {name}: sha256 mismatch, refused and {removed}: "
                   f"expected {expected} (the Hub's LFS oid), got {actual}")


def _weights(folder: pathlib.Path) -> list[str]:
  return sorted(p.relative_to(folder).as_posix() for p in folder.rglob("*")
                if p.is_file() and p.name.endswith(WEIGHT_SUFFIXES))


def _choose(repo: str, commit: str, tree: dict[str, str | None], file: str | None
            ) -> tuple[list[str], str | None]:
  """The allow patterns for this repository, and the GGUF file to return (None: the folder)."""
  if file is not None:
    if file not in tree:
      raise InputError(f"{repo}@{commit} has no file {file!r}")
    return [*ALLOW_PATTERNS[:-2], file], file
  if any(name.endswith(".safetensors") for name in tree):
    return list(ALLOW_PATTERNS), None
  ggufs = sorted(name for name in tree if name.endswith(".gguf"))
  if len(ggufs) == 1:
    return [*ALLOW_PATTERNS[:-2], ggufs[0]], ggufs[0]
  if not ggufs:
    raise InputError(f"{repo}@{commit} has no safetensors or GGUF weights (pickled .bin/.pt "
                     "weights are never loaded)")
  raise InputError(f"{repo}@{commit} holds {len(ggufs)} GGUF files; name one as "
                   f"{repo}@{commit}:FILE.gguf ({', '.join(ggufs)})")


def fill_command(repo: str, revision: str, file: str | None) -> str:
  """huggingface_hub's own command that puts `repo` at `revision` into the Hub cache (on a
  connected machine, for a run offline): the whole snapshot, or one GGUF file of it."""
  return f"hf download {repo}{' ' + file if file else ''} --revision {revision}"


def _absent(repo: str, revision: str, file: str | None, what: str) -> InputError:
  return InputError(
      f"{repo}@{revision}: {what}, and offline (HF_HUB_OFFLINE); on a connected machine "
      f"`{fill_command(repo, revision, file)}` fills the cache (or run this command there once "
      "without HF_HUB_OFFLINE)")


def _cached_revision(huggingface_hub, hub_errors, repo: str, revision: str, file: str | None,
                     cache_dir: str | None):
  """(the cached repository, the cached revision `revision` names) from huggingface_hub's own
  account of its cache (`scan_cache_dir`: the default cache, or `cache_dir`); a branch or tag
  through the refs the cache records for it, a commit by its hash."""
  try:
    cache = huggingface_hub.scan_cache_dir(cache_dir)
  except hub_errors.CacheNotFound:
    raise _absent(repo, revision, file, "not in the local Hub cache") from None
  cached = next((r for r in cache.repos if r.repo_type == "model" and r.repo_id == repo), None)
  if cached is None:
    raise _absent(repo, revision, file, "not in the local Hub cache")
  found = cached.refs.get(revision) or next(
      (r for r in cached.revisions if r.commit_hash == revision), None)
  if found is None:
    raise _absent(repo, revision, file, "this revision is not in the local Hub cache")
  return cached, found


def _cached(huggingface_hub, hub_errors, repo: str, revision: str, file: str | None,
            cache_dir: str | None, kind: str) -> str:
  """Offline: the snapshot in huggingface_hub's cache, found through its own API (an earlier
  connected run's, or what `hf download` put there), each weights file that will be read held to
  the Hub's sha256: the one an earlier connected run checked (`VERIFIED_FILE`), else the one the
  cache names the file's blob by (huggingface_hub keeps an LFS file under its sha256 etag)."""
  cached, found = _cached_revision(huggingface_hub, hub_errors, repo, revision, file, cache_dir)
  commit, folder = found.commit_hash, pathlib.Path(found.snapshot_path)
  files = {f.file_path.relative_to(folder).as_posix(): f for f in found.files}
  if kind == "weights":
    if not any(name.endswith(WEIGHT_SUFFIXES) for name in files) or (file and file not in files):
      raise _absent(repo, revision, file, "in the local Hub cache without its weights")
    _, chosen = _choose(repo, commit, dict.fromkeys(files), file)
    read = [chosen] if chosen else sorted(n for n in files if n.endswith(".safetensors"))
  else:  # what a plan reads: no weights
    if "config.json" not in files:
      raise _absent(repo, revision, file, "in the local Hub cache without its config.json")
    chosen, read = None, []
  record = _Record(pathlib.Path(cached.repo_path))
  for name in read:
    path = folder / name
    expected = record.expected(commit, name)
    if expected is not None and record.unchanged(commit, name, path):
      continue
    if expected is None:
      expected = pathlib.Path(files[name].blob_path).name
      if not _SHA256.match(expected):
        raise InputError(f"{repo}@{commit}: {name} in the local Hub cache is not stored as an LFS "
                         "file, so it has no sha256 to check it against; refused")
    actual = tables.file_sha256(path)
    if actual != expected:
      _refuse(repo, commit, name, path, expected, actual)
    record.note(commit, name, expected, path)
  if read:
    try:
      record.save()
    except OSError:  # a read-only shared cache: the files are re-hashed next time
      pass
  return str(folder / chosen) if chosen else str(folder)


@functools.lru_cache(maxsize=None)
def _resolve(repo: str, revision: str, file: str | None, endpoint: str | None,
             offline: bool, cache_dir: str | None, kind: str) -> str:
  import huggingface_hub  # pylint: disable=import-outside-toplevel
  from huggingface_hub import errors as hub_errors  # pylint: disable=import-outside-toplevel
  import httpx2 as httpx  # huggingface_hub's HTTP client  # pylint: disable=import-outside-toplevel

  token = os.environ.get("HF_TOKEN") or None
  where = f"{repo}@{revision}"
  try:
    if offline:
      return _cached(huggingface_hub, hub_errors, repo, revision, file, cache_dir, kind)

    api = huggingface_hub.HfApi(endpoint=endpoint, token=token)
    commit = revision if COMMIT.match(revision) else api.model_info(repo, revision=revision).sha
    tree = {entry.path: (entry.lfs.sha256 if entry.lfs is not None else None)
            for entry in api.list_repo_tree(repo, recursive=True, revision=commit)
            if isinstance(entry, huggingface_hub.hf_api.RepoFile)}
    if kind == "weights":
      patterns, chosen = _choose(repo, commit, tree, file)
    else:  # what a plan reads: no weights
      patterns, chosen = [p for p in ALLOW_PATTERNS if p != "*.safetensors"], None
    folder = pathlib.Path(huggingface_hub.snapshot_download(
        repo, revision=commit, allow_patterns=patterns, ignore_patterns=list(IGNORE_PATTERNS),
        endpoint=endpoint, token=token, cache_dir=cache_dir))
  except hub_errors.LocalEntryNotFoundError:
    raise _absent(repo, revision, file, "not in the local Hub cache") from None
  except hub_errors.GatedRepoError:
    raise InputError(f"{where}: a gated repository; accept its terms on the Hub and set HF_TOKEN "
                     "to a token of that account") from None
  except hub_errors.RepositoryNotFoundError:
    raise InputError(f"{where}: no such model repository on the Hub (nor a local path); a private "
                     "one needs HF_TOKEN") from None
  except hub_errors.RevisionNotFoundError:
    raise InputError(f"{where}: no such revision on the Hub") from None
  except (hub_errors.HfHubHTTPError, OSError, httpx.HTTPError) as e:
    # Not a local path either: a typo in one reaches here too, so both are named.
    raise InputError(f"{where}: no such local path, and could not reach the Hub for it as a "
                     f"model id: {str(e).splitlines()[0]}") from None

  record = _Record(folder.parents[1])
  record.commit(commit)["patterns"][kind] = patterns
  if kind == "weights":
    record.commit(commit)["chosen"] = chosen
  for name in _weights(folder):
    expected = tree.get(name)
    if expected is None:
      raise InputError(f"{repo}@{commit}: {name} is not stored by the Hub as an LFS file, so it "
                       "has no sha256 to check it against; refused")
    path = folder / name
    if record.expected(commit, name) == expected and record.unchanged(commit, name, path):
      continue
    actual = tables.file_sha256(path)
    if actual != expected:
      _refuse(repo, commit, name, path, expected, actual)
    record.note(commit, name, expected, path)
  record.save()
  if revision != commit:  # as the cache records a branch or tag, so that offline finds it
    ref = folder.parents[1] / "refs" / revision
    ref.parent.mkdir(parents=True, exist_ok=True)
    ref.write_text(commit)
  return str(folder / chosen) if chosen else str(folder)


def resolve(spec: str, weights: bool = True) -> str:
  """A Hub id -> the local snapshot folder (or its GGUF file), downloaded and verified; anything
  else (a local path, an alias) unchanged. `weights=False` takes the config and tokenizer files
  only (what a plan reads)."""
  parsed = parse(spec)
  if parsed is None:
    return spec
  repo, revision, file = parsed
  return _resolve(repo, revision, file, os.environ.get("HF_ENDPOINT") or None, _offline(),
                  os.environ.get("HF_HUB_CACHE") or None, "weights" if weights else "config")

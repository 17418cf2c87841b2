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
changed, and offline (`HF_HUB_OFFLINE=1`) the cached snapshot is used, held to that record.
`HF_TOKEN` reaches gated repositories; `HF_ENDPOINT` points at another Hub.
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
  """Removes a weights file whose bytes are not the Hub's from the cache, and says so."""
  target = file.resolve()
  file.unlink(missing_ok=True)
  if target != file:
    target.unlink(missing_ok=True)  # the cache's blob the snapshot's link points at
  raise InputError(f"{repo}@{commit}: {name}: sha256 mismatch, refused and removed from the cache: "
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


def _cached(huggingface_hub, repo: str, revision: str, cache_dir: str | None,
            token: str | None, kind: str) -> str:
  """Offline: the snapshot an earlier connected run took, its weights held to what was checked
  then (the Hub's sha256 of each)."""
  repo_folder = pathlib.Path(cache_dir or huggingface_hub.constants.HF_HUB_CACHE) / (
      "models--" + repo.replace("/", "--"))
  ref = repo_folder / "refs" / revision
  commit = revision if COMMIT.match(revision) else (
      ref.read_text().strip() if ref.is_file() else None)
  record = _Record(repo_folder)
  checked = record.data.get(commit) if commit else None
  if not checked or kind not in checked.get("patterns", {}):
    raise InputError(f"{repo}@{revision}: not in the local Hub cache as checked by an earlier "
                     "connected run, and offline (HF_HUB_OFFLINE); run once connected")
  folder = pathlib.Path(huggingface_hub.snapshot_download(
      repo, revision=commit, local_files_only=True, allow_patterns=checked["patterns"][kind],
      ignore_patterns=list(IGNORE_PATTERNS), cache_dir=cache_dir, token=token))
  for name in _weights(folder):
    expected = record.expected(commit, name)
    if expected is None:
      raise InputError(f"{repo}@{commit}: {name} in the cache was never checked against the "
                       "Hub's sha256; run once connected (without HF_HUB_OFFLINE)")
    if not record.unchanged(commit, name, folder / name):
      actual = tables.file_sha256(folder / name)
      if actual != expected:
        _refuse(repo, commit, name, folder / name, expected, actual)
  chosen = checked["chosen"] if kind == "weights" else None
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
      return _cached(huggingface_hub, repo, revision, cache_dir, token, kind)

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
    raise InputError(f"{where}: not in the local Hub cache, and offline (HF_HUB_OFFLINE); run "
                     "once connected") from None
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

"""socialrm-fetch: the pinned manifest (every file with a sha256 or a git blob id), verified
downloads from a mirror on 127.0.0.1, refusals (other bytes than a sha256's or a blob id's), no
request for what is there, offline listing, convert reading what fetch wrote unchanged, and
HH-RLHF's train splits fetched by name and read only where named."""

import dataclasses
import hashlib
import json
import os
import pathlib
import re
import subprocess
import sys
import urllib.parse

import pytest

from socialrm_jax.base.errors import InputError
from socialrm_jax.orchestrators import convert
from socialrm_jax.sources import fetch

from tests.helpers import local_servers
from tests.helpers.paths import REPO_ROOT

BUNDLED = REPO_ROOT / "socialrm_jax" / "bundled"
COMMIT = re.compile(r"/(?:resolve/)?([0-9a-f]{40})/")
BRANCHES = ("main", "master", "HEAD", "refs", "latest", "dev-branch")
HH_RLHF_COMMIT = "354e5c3cb8960630860dd5774a6ac2a58313bf4d"
# Where a dataset's files go under --data_dir, where it is not the dataset's own name.
FOLDERS = {"hh_rlhf_train": "hh_rlhf"}


def _sha(data: bytes) -> str:
  return hashlib.sha256(data).hexdigest()


def _blob(data: bytes) -> str:
  """A git blob id, as `git hash-object` computes it."""
  return hashlib.sha1(b"blob %d\0" % len(data) + data).hexdigest()


# -- the manifest ------------------------------------------------------------------------------

def test_every_url_is_pinned_to_a_commit_and_every_file_has_a_pin_and_a_license():
  entries = fetch.manifest()
  assert set(fetch.dataset_names(entries)) == {"bbq", "crows_pairs", "stereoset", "hh_rlhf",
                                               "hh_rlhf_train", "xstest", "ethics",
                                               "moral_stories"}
  for e in entries:
    parts = urllib.parse.urlsplit(e.url)
    assert parts.scheme == "https" and parts.hostname in ("raw.githubusercontent.com",
                                                           "media.githubusercontent.com"), e.url
    segments = parts.path.split("/")
    pin = COMMIT.search(parts.path)
    assert pin, f"{e.url}: no 40-hex commit"
    if parts.hostname == "media.githubusercontent.com":  # /media/OWNER/REPO/COMMIT/... (LFS)
      assert segments[1] == "media" and segments[4] == pin[1], e.url
      assert e.sha256 and e.size, f"{e.url}: an LFS file is pinned by its pointer's sha256, size"
    else:  # /OWNER/REPO/COMMIT/...
      assert segments[3] == pin[1], e.url
    assert not set(segments) & set(BRANCHES), e.url
    assert e.sha256 is not None or e.git_blob is not None, f"{e.path}: no pin"
    assert e.sha256 is None or re.fullmatch(r"[0-9a-f]{64}", e.sha256), e
    assert e.git_blob is None or re.fullmatch(r"[0-9a-f]{40}", e.git_blob), e
    assert (e.sha256 is None) == (e.size is None) and (e.size is None or e.size > 0), e
    assert e.license.strip(), e
    assert e.sha256 is not None or e.note, f"{e.path}: an unknown sha256 needs a note saying why"
    assert not pathlib.PurePosixPath(e.path).is_absolute() and ".." not in e.path
    # <data_dir>/<dataset>/..., where convert looks (HH-RLHF's train splits beside its tests).
    assert e.path.split("/")[0] == FOLDERS.get(e.dataset, e.dataset)
    if e.dataset.startswith("hh_rlhf"):  # from Anthropic's repository at its pinned commit
      assert "/anthropics/hh-rlhf/" in parts.path and pin[1] == HH_RLHF_COMMIT, e.url
  assert len({e.path for e in entries}) == len(entries)
  assert len({e.url for e in entries}) == len(entries)
  assert fetch.by_name_only() == ["hh_rlhf_train"]
  assert {e.path for e in entries if e.dataset == "hh_rlhf_train"} == {
      f"hh_rlhf/{folder}/train.jsonl.gz" for folder in (
          "harmless-base", "helpful-base", "helpful-online", "helpful-rejection-sampled")}
  help_line = fetch.FetchOptions.__dataclass_fields__["datasets"].metadata["help"]
  assert all(name in help_line for name in fetch.dataset_names(entries))


def test_a_manifest_entry_without_a_pin_is_refused(tmp_path):
  path = tmp_path / "manifest.json"
  path.write_text(json.dumps({"files": [{
      "dataset": "bbq", "url": "https://raw.githubusercontent.com/o/r/" + "a" * 40 + "/x.jsonl",
      "path": "bbq/x.jsonl", "sha256": None, "size": None, "license": "CC BY 4.0"}]}))
  with pytest.raises(InputError, match=r"bbq/x.jsonl has no pin \(a sha256 or a git blob id\)"):
    fetch.manifest(path)


def test_the_git_blob_id_is_gits():
  # `git hash-object` of an empty file and of "hello\n", as git prints them.
  assert _blob(b"") == "e69de29bb2d1d6434b8b29ae775ad8c2e48c5391"
  assert _blob(b"hello\n") == "ce013625030ba8dba906f756967f9e9ca394464a"


def test_git_blob_id_of_a_file(tmp_path):
  for data in (b"", b"hello\n", bytes(range(256)) * 9000):  # the last over one read block
    (tmp_path / "f").write_bytes(data)
    assert fetch.git_blob_id(tmp_path / "f") == _blob(data)


def test_the_pin_check_catches_a_branch():
  assert not COMMIT.search("/nyu-mll/BBQ/main/data/Age.jsonl")
  assert COMMIT.search("/datasets/a/b/resolve/" + "a" * 40 + "/x.gz")


# -- a mirror of small files in the upstream layout ----------------------------------------------

def _pinned_to(entry: fetch.FileEntry, data: bytes) -> fetch.FileEntry:
  """`entry` with the pins it has (sha256 and size, git blob id) those of `data`."""
  known = entry.sha256 is not None
  return dataclasses.replace(entry, sha256=_sha(data) if known else None,
                             size=len(data) if known else None,
                             git_blob=_blob(data) if entry.git_blob else None)


def _tiny_manifest() -> tuple[list[fetch.FileEntry], dict[str, bytes]]:
  """The real manifest's entries for the files the bundled suite holds (cut from the same
  sources, with the real schemas), their pins those of the small files; the mirror's content
  at each URL's path."""
  entries, content = [], {}
  for e in fetch.manifest():
    local = BUNDLED / e.path
    if not local.is_file():
      continue
    data = local.read_bytes()
    entries.append(_pinned_to(e, data))
    content[urllib.parse.urlsplit(e.url).path] = data
  assert {e.dataset for e in entries} == set(fetch.dataset_names()) - {"hh_rlhf_train"}
  return entries, content


def _fetch(data_dir, mirror, entries, **kwargs):
  logged = []
  result = fetch.fetch(fetch.FetchOptions(data_dir=str(data_dir), mirror=mirror, **kwargs),
                       log=logged.append, entries=entries)
  return result, logged


def test_fetch_from_a_mirror_verifies_then_costs_no_request(tmp_path):
  entries, content = _tiny_manifest()
  data_dir = tmp_path / "data"
  with local_servers.serving(local_servers.files(content)) as server:
    result, logged = _fetch(data_dir, server.url, entries)
    assert len(server.requests) == len(entries)
    assert result["downloaded"] == len(entries)
    for e in entries:
      assert (data_dir / e.path).read_bytes() == content[urllib.parse.urlsplit(e.url).path]
    assert not list(data_dir.rglob("*.part"))
    # each dataset's license is shown when it is first fetched
    for name in fetch.dataset_names(entries):
      assert any(line.startswith(f"{name}: license ") for line in logged)
    lock = json.loads((data_dir / fetch.LOCK_FILE).read_text())["files"]
    assert set(lock) == {e.path for e in entries}
    hh = lock["hh_rlhf/harmless-base/test.jsonl.gz"]
    assert hh["sha256"] == _sha((data_dir / "hh_rlhf/harmless-base/test.jsonl.gz").read_bytes())
    assert hh["checked_against"] == ["size", "sha256", "git_blob"]

    before = len(server.requests)
    again, logged = _fetch(data_dir, server.url, entries)
    assert len(server.requests) == before  # every file there matches its pins
    assert again["already_verified"] == len(entries) and again["downloaded"] == 0
    assert not any("license" in line for line in logged)


def test_a_tampered_file_is_refused_and_nothing_takes_its_name(tmp_path):
  entries, content = _tiny_manifest()
  bbq = next(e for e in entries if e.path == "bbq/data/Age.jsonl")
  url_path = urllib.parse.urlsplit(bbq.url).path
  tampered = dict(content)
  tampered[url_path] = content[url_path].replace(b'"label": 1', b'"label": 2', 1)
  assert tampered[url_path] != content[url_path]
  data_dir = tmp_path / "data"
  with local_servers.serving(local_servers.files(tampered)) as server:
    with pytest.raises(InputError) as error:
      _fetch(data_dir, server.url, [bbq])
  message = str(error.value)
  assert "\n" not in message
  assert "bbq/data/Age.jsonl" in message
  assert f"expected {bbq.sha256}" in message and f"got {_sha(tampered[url_path])}" in message
  assert not (data_dir / bbq.path).exists()
  assert list((data_dir / "bbq" / "data").iterdir()) == []  # no temporary file left either


def test_a_file_pinned_by_its_git_blob_id_is_checked_against_it(tmp_path):
  """A BBQ category the manifest pins by its blob id alone: bytes of that blob are taken (their
  sha256 recorded in the lock), other bytes of the same size refused, nothing left in place; the
  real pin refuses what is not the real file."""
  real = next(e for e in fetch.manifest() if e.path == "bbq/data/Gender_identity.jsonl")
  assert real.sha256 is None and real.size is None and real.git_blob
  url_path = urllib.parse.urlsplit(real.url).path
  data = (BUNDLED / "bbq" / "data" / "Age.jsonl").read_bytes()
  entry = _pinned_to(real, data)
  with local_servers.serving(local_servers.files({url_path: data})) as server:
    result, logged = _fetch(tmp_path / "good", server.url, [entry])
    assert result["downloaded"] == 1
    assert any(f"matches its git blob id {_blob(data)}; its sha256 {_sha(data)}" in line
               for line in logged)
    lock = json.loads((tmp_path / "good" / fetch.LOCK_FILE).read_text())["files"]
    assert lock[real.path]["sha256"] == _sha(data) and lock[real.path]["size"] == len(data)
    assert lock[real.path]["checked_against"] == ["git_blob"]
    with pytest.raises(InputError) as refused:  # the real pin: these are not the real bytes
      _fetch(tmp_path / "real", server.url, [real])
  assert str(refused.value) == (f"{real.path}: git blob id mismatch, refused (from {server.url}"
                                f"{url_path}): expected {real.git_blob}, got {_blob(data)}")
  tampered = data.replace(b'"label": 1', b'"label": 2', 1)
  assert len(tampered) == len(data) and tampered != data
  with local_servers.serving(local_servers.files({url_path: tampered})) as server:
    with pytest.raises(InputError, match=f"git blob id mismatch, refused .* expected "
                       f"{_blob(data)}, got {_blob(tampered)}"):
      _fetch(tmp_path / "tampered", server.url, [entry])
  for folder in ("real", "tampered"):
    assert list((tmp_path / folder / "bbq" / "data").iterdir()) == []  # nothing in place


@pytest.mark.parametrize("how", ["flag", "env"])
def test_offline_opens_no_connection_and_lists_what_is_missing(tmp_path, monkeypatch, how):
  entries, content = _tiny_manifest()
  data_dir = tmp_path / "data"
  with local_servers.serving(local_servers.files(content)) as server:
    _fetch(data_dir, server.url, [e for e in entries if e.dataset != "crows_pairs"])
    before = len(server.requests)
    if how == "env":
      monkeypatch.setenv("HF_HUB_OFFLINE", "1")
    with pytest.raises(InputError) as error:
      _fetch(data_dir, server.url, entries, offline=how == "flag")
    assert len(server.requests) == before
  lines = str(error.value).splitlines()
  assert lines[0].startswith("offline, and 1 file(s)")
  assert lines[1:] == ["crows_pairs: crows_pairs/crows_pairs_anonymized.csv missing (from "
                       + next(e.url for e in entries if e.dataset == "crows_pairs") + ")"]
  with local_servers.serving(local_servers.files(content)) as server:
    result, _ = _fetch(data_dir, server.url, [e for e in entries if e.dataset != "crows_pairs"],
                       offline=True)
    assert server.requests == [] and result["verified"] == len(entries) - 1


def test_a_mirror_of_the_upstream_bytes_serves_a_fetch_that_convert_reads_unchanged(tmp_path):
  entries, content = _tiny_manifest()
  data_dir = tmp_path / "data"
  with local_servers.serving(local_servers.files(content)) as server:
    _fetch(data_dir, server.url + "/", entries)
  fetched = convert.convert_all(data_dir, "all")
  bundled = convert.convert_all(BUNDLED, "all")
  assert fetched.report["totals"]["items"] > 0
  assert fetched.items == bundled.items and fetched.pairs == bundled.pairs


def test_hh_rlhfs_train_splits_come_by_name_and_are_read_only_where_named(tmp_path):
  """`all` leaves HH-RLHF's train splits out; named, they go beside the test splits, where the
  audit's hh_rlhf still reads the test splits alone, and `preference:PATH` reads one."""
  entries, content = _tiny_manifest()
  real = next(e for e in fetch.manifest() if e.path == "hh_rlhf/helpful-base/train.jsonl.gz")
  data = (BUNDLED / "hh_rlhf" / "helpful-base" / "test.jsonl.gz").read_bytes()  # its stand-in
  train = _pinned_to(real, data)
  content = {**content, urllib.parse.urlsplit(real.url).path: data}
  everything = [*entries, train]
  assert train not in fetch.select("all", everything)
  assert fetch.select("hh_rlhf_train", everything) == [train]
  data_dir = tmp_path / "data"
  with local_servers.serving(local_servers.files(content)) as server:
    _fetch(data_dir, server.url, everything, datasets="hh_rlhf,hh_rlhf_train")
  assert (data_dir / train.path).read_bytes() == data
  audited = convert.convert_all(data_dir, "hh_rlhf")
  assert audited.items == convert.convert_all(BUNDLED, "hh_rlhf").items
  assert not any("train" in item["item_id"] for item in audited.items)
  named = convert.convert_all(None, f"preference:{data_dir / train.path}:name=hh_helpful_train")
  helpful = [i for i in audited.items if i["subset"] == "helpful"]
  assert [(i["prompt"], i["candidates"]) for i in named.items] == [
      (i["prompt"], i["candidates"]) for i in helpful]


# -- the command ---------------------------------------------------------------------------------

def _command(*args, env=None):
  return subprocess.run([sys.executable, "-m", "socialrm_jax.main.fetch", *args],
                        capture_output=True, text=True, env={**os.environ, **(env or {})})


def test_list_prints_one_json_line_per_file_with_the_mirror_keeping_the_path():
  plain = _command("--list")
  assert plain.returncode == 0, plain.stderr
  rows = [json.loads(line) for line in plain.stdout.splitlines()]
  # `all`: the audited datasets; HH-RLHF's train splits only when named.
  assert [r["path"] for r in rows] == [e.path for e in fetch.manifest()
                                       if e.dataset != "hh_rlhf_train"]
  assert all(set(r) == {"dataset", "url", "sha256", "git_blob", "size", "license", "path"}
             for r in rows)
  train = _command("--list", "--datasets=hh_rlhf_train")
  train_rows = [json.loads(line) for line in train.stdout.splitlines()]
  assert len(train_rows) == 4 and {r["dataset"] for r in train_rows} == {"hh_rlhf_train"}
  # No file without a pin: a sha256 (an LFS file's is its pointer's) or a git blob id.
  assert all(r["sha256"] or r["git_blob"] for r in rows + train_rows)
  mirrored = _command("--list", "--datasets=bbq,hh_rlhf", "--mirror=http://127.0.0.1:9/pub")
  moved = [json.loads(line) for line in mirrored.stdout.splitlines()]
  assert {r["dataset"] for r in moved} == {"bbq", "hh_rlhf"}
  by_path = {r["path"]: r for r in rows}
  for r in moved:
    upstream = urllib.parse.urlsplit(by_path[r["path"]]["url"])
    assert r["url"] == "http://127.0.0.1:9/pub" + upstream.path


def test_the_command_offline_lists_the_missing_files_with_exit_2(tmp_path):
  proc = _command("--datasets=crows_pairs", f"--data_dir={tmp_path}", "--offline")
  assert proc.returncode == 2
  assert "crows_pairs/crows_pairs_anonymized.csv missing" in proc.stderr
  proc = _command("--datasets=nope", f"--data_dir={tmp_path}")
  assert proc.returncode == 2 and "--datasets: nope not in the fetch manifest" in proc.stderr


@pytest.mark.parametrize("command", ["convert", "audit"])
def test_convert_and_audit_name_the_fetch_command_for_a_missing_dataset(tmp_path, command):
  data_dir = tmp_path / "data"
  data_dir.mkdir()  # crows_pairs is not in it
  if command == "convert":
    args = [f"--data_dir={data_dir}", "--datasets=crows_pairs",
            f"--output_dir={tmp_path / 'out'}"]
  else:
    config = REPO_ROOT / "configs" / "bundled_suite.py"
    args = [f"--config={config}", f"--config.data_dir={data_dir}",
            "--config.datasets=crows_pairs", f"--config.output_dir={tmp_path / 'out'}"]
  proc = subprocess.run([sys.executable, "-m", f"socialrm_jax.main.{command}", *args],
                        capture_output=True, text=True)
  assert proc.returncode == 2
  last = proc.stderr.strip().splitlines()[-1]
  assert last.endswith(f"no folder for dataset 'crows_pairs' (expected the original files under "
                       f"it); `socialrm-fetch --datasets=crows_pairs --data_dir={data_dir}` "
                       "downloads them"), proc.stderr


def test_the_tool_fills_unknown_hashes_from_the_pinned_urls(tmp_path):
  sys.path.insert(0, str(REPO_ROOT / "tools"))
  try:
    import fill_manifest_hashes  # pylint: disable=import-outside-toplevel
  finally:
    sys.path.pop(0)
  entries, content = _tiny_manifest()
  crows = next(e for e in entries if e.dataset == "crows_pairs")
  real = next(e for e in fetch.manifest() if e.path == "bbq/data/Gender_identity.jsonl")
  data = (BUNDLED / "bbq" / "data" / "Age.jsonl").read_bytes()
  content = {**content, urllib.parse.urlsplit(real.url).path: data}
  by_blob = _pinned_to(real, data)  # pinned by its blob id alone, as the real entry
  chosen = [by_blob, crows]
  manifest = tmp_path / "manifest.json"
  manifest.write_text(json.dumps({"files": [dataclasses.asdict(e) for e in chosen]}))
  with local_servers.serving(local_servers.files(content)) as server:
    filled = fill_manifest_hashes.fill(manifest, "all", False, server.url, log=lambda line: None)
    assert filled == 1 and len(server.requests) == 1  # the known hash is not downloaded
    written = {e.path: e for e in fetch.manifest(manifest)}
    assert (written[by_blob.path].sha256, written[by_blob.path].size) == (_sha(data), len(data))
    assert written[by_blob.path].git_blob == _blob(data) and written[by_blob.path].note is None
    assert written[crows.path] == crows
    assert fill_manifest_hashes.fill(manifest, "all", True, server.url, log=lambda l: None) == 0
  changed = dict(content)
  changed[urllib.parse.urlsplit(crows.url).path] += b"x"
  with local_servers.serving(local_servers.files(changed)) as server:
    with pytest.raises(SystemExit, match=f"{crows.path}: the manifest has sha256 {crows.sha256}"):
      fill_manifest_hashes.fill(manifest, "crows_pairs", True, server.url, log=lambda l: None)
  manifest.write_text(json.dumps({"files": [dataclasses.asdict(real)]}))  # the real blob id
  with local_servers.serving(local_servers.files(content)) as server:
    with pytest.raises(SystemExit, match=f"the manifest has git blob id {real.git_blob}"):
      fill_manifest_hashes.fill(manifest, "bbq", False, server.url, log=lambda l: None)


def test_a_large_file_reports_its_progress(tmp_path, monkeypatch):
  monkeypatch.setattr(fetch, "_PROGRESS_BYTES", 0)
  monkeypatch.setattr(fetch, "_PROGRESS_SECONDS", 0.0)
  monkeypatch.setattr(fetch, "_CHUNK", 1 << 10)
  data = bytes(range(256)) * 64  # 16 KiB: 16 blocks
  entry = fetch.FileEntry("bbq", "https://raw.githubusercontent.com/o/r/" + "a" * 40 + "/x.jsonl",
                          "bbq/x.jsonl", _sha(data), len(data), "CC BY 4.0")
  with local_servers.serving(local_servers.files({"/o/r/" + "a" * 40 + "/x.jsonl": data})) as s:
    _, logged = _fetch(tmp_path, s.url, [entry])
  progress = [line for line in logged if "ETA" in line]
  assert len(progress) >= 8  # one line per block read, with these settings
  assert "(100%, ETA 0 s)" in progress[-1]

"""socialrm-fetch: the pinned manifest, verified downloads from a mirror on 127.0.0.1, refusals,
no request for what is there, offline listing, and convert reading what fetch wrote unchanged."""

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


def _sha(data: bytes) -> str:
  return hashlib.sha256(data).hexdigest()


# -- the manifest ------------------------------------------------------------------------------

def test_every_url_is_pinned_to_a_commit_and_every_dataset_has_a_license():
  entries = fetch.manifest()
  assert set(fetch.dataset_names(entries)) == {"bbq", "crows_pairs", "stereoset", "hh_rlhf",
                                               "xstest", "ethics", "moral_stories"}
  for e in entries:
    parts = urllib.parse.urlsplit(e.url)
    assert parts.scheme == "https" and parts.hostname in ("raw.githubusercontent.com",
                                                           "huggingface.co"), e.url
    segments = parts.path.split("/")
    pin = COMMIT.search(parts.path)
    assert pin, f"{e.url}: no 40-hex commit"
    if parts.hostname == "huggingface.co":  # /datasets/ORG/NAME/resolve/COMMIT/...
      assert segments[1] == "datasets" and segments[4] == "resolve" and segments[5] == pin[1]
    else:  # /OWNER/REPO/COMMIT/...
      assert segments[3] == pin[1], e.url
    assert not set(segments) & set(BRANCHES), e.url
    assert e.sha256 is None or re.fullmatch(r"[0-9a-f]{64}", e.sha256), e
    assert (e.sha256 is None) == (e.size is None) and (e.size is None or e.size > 0), e
    assert e.license.strip(), e
    assert e.sha256 is not None or e.note, f"{e.path}: an unknown sha256 needs a note saying why"
    assert not pathlib.PurePosixPath(e.path).is_absolute() and ".." not in e.path
    assert e.path.split("/")[0] == e.dataset  # <data_dir>/<dataset>/..., where convert looks
  assert len({e.path for e in entries}) == len(entries)
  assert len({e.url for e in entries}) == len(entries)
  help_line = fetch.FetchOptions.__dataclass_fields__["datasets"].metadata["help"]
  assert all(name in help_line for name in fetch.dataset_names(entries))


def test_the_pin_check_catches_a_branch():
  assert not COMMIT.search("/nyu-mll/BBQ/main/data/Age.jsonl")
  assert COMMIT.search("/datasets/a/b/resolve/" + "a" * 40 + "/x.gz")


# -- a mirror of small files in the upstream layout ----------------------------------------------

def _tiny_manifest() -> tuple[list[fetch.FileEntry], dict[str, bytes]]:
  """The real manifest's entries for the files the bundled suite holds (cut from the same
  sources, with the real schemas), their hashes those of the small files; the mirror's content
  at each URL's path. The HH-RLHF entries keep a null sha256 (unverified, as in the manifest)."""
  entries, content = [], {}
  for e in fetch.manifest():
    local = BUNDLED / e.path
    if not local.is_file():
      continue
    data = local.read_bytes()
    known = e.sha256 is not None
    entries.append(dataclasses.replace(e, sha256=_sha(data) if known else None,
                                       size=len(data) if known else None))
    content[urllib.parse.urlsplit(e.url).path] = data
  assert {e.dataset for e in entries} == set(fetch.dataset_names())
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
    assert result["downloaded"] + result["unverified"] == len(entries)
    assert result["unverified"] == sum(e.sha256 is None for e in entries) == 2
    for e in entries:
      assert (data_dir / e.path).read_bytes() == content[urllib.parse.urlsplit(e.url).path]
    assert not list(data_dir.rglob("*.part"))
    # each dataset's license is shown when it is first fetched
    for name in fetch.dataset_names():
      assert any(line.startswith(f"{name}: license ") for line in logged)
    assert any("unverified" in line and "hh_rlhf/harmless-base/test.jsonl.gz" in line
               for line in logged)
    lock = json.loads((data_dir / fetch.LOCK_FILE).read_text())["files"]
    hh = lock["hh_rlhf/harmless-base/test.jsonl.gz"]
    assert hh["sha256"] == _sha((data_dir / "hh_rlhf/harmless-base/test.jsonl.gz").read_bytes())
    assert hh["verified"] is False

    before = len(server.requests)
    again, logged = _fetch(data_dir, server.url, entries)
    assert len(server.requests) == before  # verified files, unverified ones held to the lock
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


def test_a_file_recorded_unverified_is_held_to_its_lock(tmp_path):
  entries, content = _tiny_manifest()
  hh = [e for e in entries if e.sha256 is None][0]
  url_path = urllib.parse.urlsplit(hh.url).path
  data_dir = tmp_path / "data"
  with local_servers.serving(local_servers.files(content)) as server:
    _fetch(data_dir, server.url, [hh])
  (data_dir / hh.path).write_bytes(b"changed")  # the local copy changed since
  changed = dict(content)
  changed[url_path] = content[url_path] + b"\n"  # and so did what the mirror serves
  with local_servers.serving(local_servers.files(changed)) as server:
    with pytest.raises(InputError, match=f"expected {_sha(content[url_path])}"):
      _fetch(data_dir, server.url, [hh])
  assert (data_dir / hh.path).read_bytes() == b"changed"


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


# -- the command ---------------------------------------------------------------------------------

def _command(*args, env=None):
  return subprocess.run([sys.executable, "-m", "socialrm_jax.main.fetch", *args],
                        capture_output=True, text=True, env={**os.environ, **(env or {})})


def test_list_prints_one_json_line_per_file_with_the_mirror_keeping_the_path():
  plain = _command("--list")
  assert plain.returncode == 0, plain.stderr
  rows = [json.loads(line) for line in plain.stdout.splitlines()]
  assert [r["path"] for r in rows] == [e.path for e in fetch.manifest()]
  assert all(set(r) == {"dataset", "url", "sha256", "size", "license", "path"} for r in rows)
  assert any(r["sha256"] is None for r in rows)
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
  chosen = [e for e in entries if e.dataset in ("hh_rlhf", "crows_pairs")]
  manifest = tmp_path / "manifest.json"
  manifest.write_text(json.dumps({"files": [
      {**dataclasses.asdict(e), "note": e.note} for e in chosen]}))
  with local_servers.serving(local_servers.files(content)) as server:
    filled = fill_manifest_hashes.fill(manifest, "all", False, server.url, log=lambda line: None)
    assert filled == 2 and len(server.requests) == 2  # the known hash is not downloaded
    written = {e.path: e for e in fetch.manifest(manifest)}
    for e in chosen:
      data = content[urllib.parse.urlsplit(e.url).path]
      assert (written[e.path].sha256, written[e.path].size) == (_sha(data), len(data))
    assert all(written[e.path].note is None for e in chosen if e.dataset == "hh_rlhf")
    assert fill_manifest_hashes.fill(manifest, "all", True, server.url, log=lambda l: None) == 0
  changed = dict(content)
  crows = next(e for e in chosen if e.dataset == "crows_pairs")
  changed[urllib.parse.urlsplit(crows.url).path] += b"x"
  with local_servers.serving(local_servers.files(changed)) as server:
    with pytest.raises(SystemExit, match=f"{crows.path}: the manifest has sha256 {crows.sha256}"):
      fill_manifest_hashes.fill(manifest, "crows_pairs", True, server.url, log=lambda l: None)


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

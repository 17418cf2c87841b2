"""Models by Hub id (`org/name[@REVISION]`): a fake Hub on 127.0.0.1 answering the calls
huggingface_hub makes; the snapshot pinned to a commit, recorded in run.json, every safetensors
file checked against the Hub's LFS oid, a tampered one refused, the cache used offline."""

import hashlib
import json
import pathlib
import subprocess
import sys
import urllib.parse

import pytest

from socialrm_jax.analysis.outputs import provenance
from socialrm_jax.base import tables
from socialrm_jax.base.errors import InputError
from socialrm_jax.models import default_model, hub
from socialrm_jax.scoring import engine
from tests.helpers import local_servers
from tests.helpers import scoring_fixtures as fx

REPO = "tiny-org/tiny-rm"
COMMIT = "0123456789abcdef0123456789abcdef01234567"
OPTIONS = engine.ScoringOptions(max_length=256, tokens_per_batch=1024, chunk_size=4)
# Files the fake repository holds beside the model's that must never be downloaded.
NEVER = {"pytorch_model.bin": b"pickled", "modeling_tiny.py": b"import os", "training_args.pt": b"x"}


def _sha(data: bytes) -> str:
  return hashlib.sha256(data).hexdigest()


@pytest.fixture(scope="module")
def model_files(tmp_path_factory) -> dict[str, bytes]:
  folder = tmp_path_factory.mktemp("hub") / "rm"
  fx.make_llama(folder)
  files = {p.name: p.read_bytes() for p in folder.iterdir() if p.is_file()}
  assert "model.safetensors" in files
  return {**files, **NEVER}


def fake_hub(files: dict[str, bytes], served: dict[str, bytes] | None = None, seen_auth=None):
  """The Hub's API as huggingface_hub calls it for `REPO` at `COMMIT`: the revision lookup, the
  recursive tree (LFS oids of the weights, from `files`) and resolve (HEAD and GET, serving
  `served`, by default `files`)."""
  served = files if served is None else served
  lfs = {name for name in files if name.endswith((".safetensors", ".bin", ".pt"))}

  def respond(method, path, headers):
    if seen_auth is not None:
      seen_auth.append(headers.get("authorization"))
    path = urllib.parse.unquote(path.split("?", 1)[0])
    as_json = {"Content-Type": "application/json"}
    if path == f"/api/models/{REPO}/revision/main":
      return 200, as_json, json.dumps({"id": REPO, "modelId": REPO, "sha": COMMIT, "siblings": [
          {"rfilename": name} for name in sorted(files)]}).encode()
    if path == f"/api/models/{REPO}/tree/{COMMIT}":
      tree = []
      for name in sorted(files):
        entry = {"type": "file", "path": name, "size": len(files[name]),
                 "oid": hashlib.sha1(files[name]).hexdigest()}
        if name in lfs:
          entry["lfs"] = {"oid": _sha(files[name]), "size": len(files[name]), "pointerSize": 134}
        tree.append(entry)
      return 200, as_json, json.dumps(tree).encode()
    prefix = f"/{REPO}/resolve/{COMMIT}/"
    if path.startswith(prefix) and path[len(prefix):] in served:
      name = path[len(prefix):]
      body = served[name]
      etag = _sha(files[name]) if name in lfs else hashlib.sha1(files[name]).hexdigest()
      head = {"X-Repo-Commit": COMMIT, "ETag": f'"{etag}"', "Content-Length": str(len(body))}
      if name in lfs:
        head.update({"X-Linked-Etag": f'"{etag}"', "X-Linked-Size": str(len(body))})
      return 200, head, body
    return 404, {"X-Error-Code": "EntryNotFound"}, b"{}"
  return respond


@pytest.fixture
def hub_env(tmp_path, monkeypatch):
  hub._resolve.cache_clear()
  monkeypatch.setenv("HF_HUB_CACHE", str(tmp_path / "cache"))
  monkeypatch.delenv("HF_HUB_OFFLINE", raising=False)
  monkeypatch.setenv("HF_HUB_DISABLE_XET", "1")
  yield tmp_path
  hub._resolve.cache_clear()


def _serve(monkeypatch, respond):
  server = local_servers.serving(respond)
  running = server.__enter__()
  monkeypatch.setenv("HF_ENDPOINT", running.url)
  return server, running


def test_a_hub_model_is_pinned_verified_and_its_commit_recorded(hub_env, monkeypatch, model_files):
  seen_auth = []
  monkeypatch.setenv("HF_TOKEN", "hf_test_token")
  context, server = _serve(monkeypatch, fake_hub(model_files, seen_auth=seen_auth))
  try:
    folder = pathlib.Path(default_model.resolve_model_path(REPO))
    fetched = [path for method, path in server.requests if method == "GET" and "/resolve/" in path]
  finally:
    context.__exit__(None, None, None)
  assert hub.origin(folder) == {"id": REPO, "commit": COMMIT}
  assert folder.parts[-2:] == ("snapshots", COMMIT)
  names = {p.name for p in folder.iterdir()}
  assert "model.safetensors" in names and "tokenizer.json" in names and "config.json" in names
  assert not names & set(NEVER)
  assert not any(name in path for path in fetched for name in NEVER)  # never even requested
  assert (folder / "model.safetensors").read_bytes() == model_files["model.safetensors"]
  assert seen_auth and all(auth == "Bearer hf_test_token" for auth in seen_auth)

  # Scored by id: run.json's manifest names the repository and the commit; offline, the cache
  # serves the same snapshot without a request.
  items = fx.all_items()[:3]
  tables.write_rows(hub_env / "items" / "items.jsonl", items)
  monkeypatch.setenv("HF_HUB_OFFLINE", "1")
  monkeypatch.setenv("HF_ENDPOINT", "http://127.0.0.1:9")  # nothing listens: no request may go
  hub._resolve.cache_clear()
  engine.score_model_at(REPO, hub_env / "items", hub_env / "scores", options=OPTIONS)
  manifest = json.loads((hub_env / "scores" / "run.json").read_text())["manifest"]
  assert manifest["model"]["hub"] == {"id": REPO, "commit": COMMIT}
  assert manifest["model"]["path"] == str(folder)
  run = json.loads((hub_env / "scores" / "run.json").read_text())
  assert f"| Hub | {REPO} at commit {COMMIT} |" in provenance.report_lines(run, "tiny")


def test_a_tampered_safetensors_file_is_refused_and_removed(hub_env, monkeypatch, model_files):
  served = dict(model_files)
  weights = bytearray(served["model.safetensors"])
  weights[-1] ^= 0xFF  # same size, other bytes: what huggingface_hub alone would accept
  served["model.safetensors"] = bytes(weights)
  context, _ = _serve(monkeypatch, fake_hub(model_files, served))
  try:
    with pytest.raises(InputError) as error:
      default_model.resolve_model_path(f"{REPO}@{COMMIT}")
  finally:
    context.__exit__(None, None, None)
  message = str(error.value)
  assert "\n" not in message
  assert f"{REPO}@{COMMIT}: model.safetensors: sha256 mismatch" in message
  assert f"expected {_sha(model_files['model.safetensors'])}" in message
  assert f"got {_sha(served['model.safetensors'])}" in message
  snapshot = hub_env / "cache" / "models--tiny-org--tiny-rm" / "snapshots" / COMMIT
  assert not (snapshot / "model.safetensors").exists()
  assert not [p for p in (snapshot.parents[1] / "blobs").iterdir()
              if p.read_bytes() == served["model.safetensors"]]


def test_offline_a_changed_cached_file_is_refused_and_an_absent_model_named(
    hub_env, monkeypatch, model_files):
  context, _ = _serve(monkeypatch, fake_hub(model_files))
  try:
    folder = pathlib.Path(default_model.resolve_model_path(f"{REPO}@{COMMIT}"))
  finally:
    context.__exit__(None, None, None)
  hub._resolve.cache_clear()
  monkeypatch.setenv("HF_HUB_OFFLINE", "1")
  monkeypatch.setenv("HF_ENDPOINT", "http://127.0.0.1:9")
  assert default_model.resolve_model_path(f"{REPO}@{COMMIT}") == str(folder)
  hub._resolve.cache_clear()
  blob = (folder / "model.safetensors").resolve()
  data = bytearray(blob.read_bytes())
  data[-1] ^= 0xFF
  blob.write_bytes(bytes(data))
  with pytest.raises(InputError, match="model.safetensors: sha256 mismatch"):
    default_model.resolve_model_path(f"{REPO}@{COMMIT}")
  with pytest.raises(InputError, match=f"{REPO}@main: this revision is not in the local Hub "
                     f"cache, and offline .*`hf download {REPO} --revision main`"):
    default_model.resolve_model_path(REPO)  # fetched by commit only: no branch was recorded
  with pytest.raises(InputError, match="other-org/absent@main: not in the local Hub cache"):
    default_model.resolve_model_path("other-org/absent")


# Resolves each Hub id given as an argument, one line each: the folder, or the refused id's line.
RESOLVE_EACH = """
import sys
from socialrm_jax.base.errors import InputError
from socialrm_jax.models import hub
for spec in sys.argv[1:]:
  try:
    print(hub.resolve(spec))
  except InputError as error:
    print("refused:", error)
"""


def _hub_process_env(home: pathlib.Path) -> dict[str, str]:
  """A child Python's environment with no Hub setting but HF_HOME: huggingface_hub reads where
  its cache is when imported, so only a process of its own starts from HF_HOME."""
  env = fx.subprocess_env()
  for name in ("HF_HUB_CACHE", "HUGGINGFACE_HUB_CACHE", "HF_HUB_OFFLINE", "TRANSFORMERS_OFFLINE",
               "HF_ENDPOINT", "HF_TOKEN"):
    env.pop(name, None)
  return {**env, "HF_HOME": str(home), "HF_HUB_DISABLE_XET": "1"}


def test_offline_a_hub_id_resolves_from_the_cache_hf_download_filled(tmp_path, model_files):
  """The cluster's way: `hf download` on a connected machine fills the default cache (HF_HOME);
  offline, with no cache folder named anywhere, the id resolves there, its weights held to the
  sha256 the cache stored them under; an id or revision not in the cache is one line naming the
  command that fills it."""
  env = _hub_process_env(tmp_path / "hf_home")
  with local_servers.serving(fake_hub(model_files)) as server:
    filled = subprocess.run([sys.executable, "-m", "huggingface_hub.cli.hf", "download", REPO,
                             "--revision", "main"], env={**env, "HF_ENDPOINT": server.url},
                            capture_output=True, text=True, timeout=120)
  assert filled.returncode == 0, filled.stderr[-2000:]
  offline = {**env, "HF_HUB_OFFLINE": "1", "HF_ENDPOINT": "http://127.0.0.1:9"}  # none listens
  done = subprocess.run([sys.executable, "-c", RESOLVE_EACH, REPO, f"{REPO}@{COMMIT}",
                         "other-org/absent@v1", f"{REPO}@v2"], env=offline, cwd=fx.REPO_ROOT,
                        capture_output=True, text=True, timeout=120)
  assert done.returncode == 0, done.stderr[-2000:]
  lines = done.stdout.splitlines()
  snapshot = tmp_path / "hf_home" / "hub" / "models--tiny-org--tiny-rm" / "snapshots" / COMMIT
  assert lines[:2] == [str(snapshot), str(snapshot)]
  assert hub.origin(lines[0]) == {"id": REPO, "commit": COMMIT}
  assert lines[2] == ("refused: other-org/absent@v1: not in the local Hub cache, and offline "
                      "(HF_HUB_OFFLINE); on a connected machine `hf download other-org/absent "
                      "--revision v1` fills the cache (or run this command there once without "
                      "HF_HUB_OFFLINE)")
  assert lines[3].startswith(f"refused: {REPO}@v2: this revision is not in the local Hub cache")
  assert f"`hf download {REPO} --revision v2`" in lines[3] and len(lines) == 4

  # A weights file whose bytes are no longer the ones the cache named it by is refused.
  blob = (snapshot / "model.safetensors").resolve()
  data = bytearray(blob.read_bytes())
  data[-1] ^= 0xFF
  blob.write_bytes(bytes(data))
  done = subprocess.run([sys.executable, "-c", RESOLVE_EACH, REPO], env=offline,
                        cwd=fx.REPO_ROOT, capture_output=True, text=True, timeout=120)
  assert done.stdout.startswith(f"refused: {REPO}@{COMMIT}: model.safetensors: sha256 mismatch")
  assert f"expected {_sha(model_files['model.safetensors'])}" in done.stdout


def test_what_is_a_hub_id(tmp_path):
  assert hub.parse("org/name") == ("org/name", "main", None)
  assert hub.parse(f"org/name@{COMMIT}") == ("org/name", COMMIT, None)
  assert hub.parse("org/name@v1.0:q4.gguf") == ("org/name", "v1.0", "q4.gguf")
  assert hub.parse("/abs/path") is None and hub.parse("smollm2") is None
  local = tmp_path / "org" / "name"
  local.mkdir(parents=True)
  assert hub.parse(str(local)) is None  # an existing path is a path
  assert hub.origin(f"/c/models--a--b/snapshots/{COMMIT}/x.gguf") == {"id": "a/b", "commit": COMMIT}
  assert hub.origin(str(tmp_path)) is None


def test_a_plan_takes_the_config_and_tokenizer_without_the_weights(hub_env, monkeypatch,
                                                                   model_files):
  context, server = _serve(monkeypatch, fake_hub(model_files))
  try:
    folder = pathlib.Path(default_model.resolve_model_path(REPO, weights=False))
  finally:
    context.__exit__(None, None, None)
  names = {p.name for p in folder.iterdir()}
  assert {"config.json", "tokenizer.json"} <= names and "model.safetensors" not in names
  assert not any("model.safetensors" in path for _, path in server.requests)


def test_an_unreachable_hub_for_a_missing_path_is_one_line(hub_env, monkeypatch):
  monkeypatch.setenv("HF_ENDPOINT", "http://127.0.0.1:9")  # nothing listens there
  with pytest.raises(InputError, match="runs/no-model@main: no such local path, and could not "
                     "reach the Hub for it as a model id"):
    default_model.resolve_model_path("runs/no-model")

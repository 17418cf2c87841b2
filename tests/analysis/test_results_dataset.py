"""`--push_to_hub`: a run's results as a Hub dataset, against a fake Hub on 127.0.0.1 answering the
calls huggingface_hub makes (create the repository, preupload, commit, read the card back).

- One commit holds each model's metrics.json, report.md, report.html, figures, its per-pair scores
  (parquet, the scores table's rewards) and RewardBench 2's files, and the card: YAML metadata
  naming the model's Hub id and revision and the datasets' sources (a bundled dataset's commit
  from the fetch manifest; a file of one's own by its items' hash) and a results table.
- A second run's push keeps the first model's entry in the card (a results dataset built run by
  run).
- A refused token: `socialrm-metrics --push_to_hub` exits 4 with one line, and the local outputs
  are whole.
"""

import base64
import io
import json
import pathlib
import subprocess
import sys
import urllib.parse

import pandas as pd
import pytest
import yaml

from socialrm_jax.analysis import evaluate, runner
from socialrm_jax.analysis.outputs import results_dataset
from socialrm_jax.base import tables
from socialrm_jax.orchestrators import convert
from tests.helpers import local_servers
from tests.helpers import preference_fixtures as pf
from tests.helpers import scoring_fixtures as fx

REPO = "audits/social-rm-results"
TOKEN = "hf_good_token"
MODEL_COMMIT = "0123456789abcdef0123456789abcdef01234567"


class FakeHub:
  """The Hub's dataset API as huggingface_hub calls it: the token `TOKEN` alone is accepted;
  every file is taken as a regular (non-LFS) upload; commits are kept in `commits`."""

  def __init__(self):
    self.commits: list[dict[str, bytes]] = []
    self.files: dict[str, bytes] = {}
    self.private: list[bool] = []
    self.validated: list[str] = []

  def __call__(self, method, path, headers, body):
    path = urllib.parse.unquote(path.split("?", 1)[0])
    as_json = {"Content-Type": "application/json"}
    if headers.get("authorization") != f"Bearer {TOKEN}":
      return 401, {**as_json, "X-Error-Message": "Invalid credentials in Authorization header"}, (
          b'{"error": "Invalid credentials in Authorization header"}')
    if method == "POST" and path == "/api/repos/create":
      self.private.append(json.loads(body).get("visibility"))
      return 200, as_json, json.dumps({"url": f"{self.url}/datasets/{REPO}"}).encode()
    if method == "POST" and path == "/api/validate-yaml":  # a README's metadata, before a commit
      sent = json.loads(body)
      self.validated.append(sent["repoType"])
      card_metadata(sent["content"].encode())  # its YAML must parse
      return 200, as_json, b'{"errors": [], "warnings": []}'
    if method == "POST" and path == f"/api/datasets/{REPO}/preupload/main":
      files = [{"path": f["path"], "uploadMode": "regular", "shouldIgnore": False}
               for f in json.loads(body)["files"]]
      return 200, as_json, json.dumps({"files": files}).encode()
    if method == "POST" and path == f"/api/datasets/{REPO}/commit/main":
      lines = [json.loads(line) for line in body.splitlines() if line.strip()]
      commit = {entry["value"]["path"]: base64.b64decode(entry["value"]["content"])
                for entry in lines if entry["key"] == "file"}
      self.commits.append(commit)
      self.files.update(commit)
      oid = f"{len(self.commits):040x}"
      return 200, as_json, json.dumps({"commitUrl": f"{self.url}/datasets/{REPO}/commit/{oid}",
                                       "commitOid": oid}).encode()
    prefix = f"/datasets/{REPO}/resolve/main/"
    if method in ("GET", "HEAD") and path.startswith(prefix):
      name = path[len(prefix):]
      if name not in self.files:
        return 404, {"X-Error-Code": "EntryNotFound"}, b"{}"
      data = self.files[name]
      oid = f"{len(self.commits):040x}"
      return 200, {"X-Repo-Commit": oid, "ETag": f'"{oid}"', "Content-Length": str(len(data))}, data
    return 404, {"X-Error-Code": "RepoNotFound"}, b"{}"


@pytest.fixture
def hub(monkeypatch, tmp_path):
  fake = FakeHub()
  with local_servers.serving(fake, with_body=True) as server:
    monkeypatch.setenv("HF_ENDPOINT", server.url)
    monkeypatch.setenv("HF_TOKEN", TOKEN)
    monkeypatch.setenv("HF_HUB_CACHE", str(tmp_path / "hub-cache"))
    monkeypatch.setenv("HF_HUB_DISABLE_XET", "1")
    monkeypatch.delenv("HF_HUB_OFFLINE", raising=False)
    fake.url = server.url
    yield fake


def audited(root: pathlib.Path, names=("tiny",), seed=0) -> tuple[pathlib.Path, dict]:
  """A RewardBench 2-shaped file converted, scored at random by each model (with a run.json
  whose manifest names a Hub model at a commit) and evaluated into `root/report`."""
  source = pf.write_jsonl(root / "rb2.jsonl", pf.rewardbench2_rows())
  convert.convert_to(root / "converted", root, f"preference:{source}:name=rb2", "parquet")
  items = tables.read_rows(root / "converted", "items")
  paths = {}
  for k, name in enumerate(names):
    rng = __import__("numpy").random.default_rng(seed + k)
    tables.write_rows(root / name / "scores.jsonl", [
        {"item_id": i["item_id"], "candidate": c, "reward": float(rng.normal())}
        for i in items for c in range(len(i["candidates"]))])
    paths[name] = str(root / name)
  runner.evaluate_all(str(root / "converted"), list(paths.values()), str(root / "report"),
                      list(paths), evaluate.Options(n_resamples=20))
  for name in names:  # what scoring a Hub model records (after the report, which reads it whole)
    (root / name / "run.json").write_text(json.dumps({"model": name, "manifest": {
        "model": {"path": f"/cache/{name}", "sha256": "f" * 64,
                  "hub": {"id": f"org/{name}", "commit": MODEL_COMMIT}},
        "items": {"sha256": "e" * 64}}}))
  return root / "report", paths


def card_metadata(card: bytes) -> dict:
  return yaml.safe_load(card.decode().split("---\n")[1])


def test_one_commit_holds_the_results_and_a_card_naming_revision_and_sources(hub, tmp_path):
  report, paths = audited(tmp_path)
  url = results_dataset.push(REPO, report, tmp_path / "converted", paths, private=True)
  assert url.endswith(f"{1:040x}") and len(hub.commits) == 1 and hub.private == ["private"]
  assert hub.validated == ["dataset"]
  files = hub.commits[0]
  assert {"README.md", "tiny/metrics.json", "tiny/report.md", "tiny/report.html",
          "pair_scores/tiny.parquet", "rewardbench2/rb2/eval-set/tiny.json",
          "rewardbench2/rb2/eval-set-scores/tiny.json"} <= set(files)
  assert any(name.startswith("tiny/") and name.endswith(".png") for name in files)
  assert files["tiny/metrics.json"] == (report / "tiny" / "metrics.json").read_bytes()
  scores = pd.read_parquet(io.BytesIO(files["pair_scores/tiny.parquet"]))
  rewards = {(r["item_id"], r["candidate"]): r["reward"]
             for r in tables.read_rows(tmp_path / "tiny", "scores")}
  first = scores.iloc[0]
  assert first["reward_chosen"] == rewards[(first["item_id"], first["chosen_index"])]
  assert len(scores) == len(tables.read_rows(tmp_path / "converted", "pairs"))
  meta = card_metadata(files["README.md"])
  (entry,) = meta["audited_models"]
  assert (entry["name"], entry["model"], entry["revision"]) == ("tiny", "org/tiny", MODEL_COMMIT)
  assert entry["datasets"] == [{"name": "rb2", "repository": None, "commit": None,
                                "license": None, "items_sha256": "e" * 64}]
  assert meta["configs"] == [{"config_name": "pair_scores", "data_files": "pair_scores/*.parquet"}]
  assert meta["license"] == "other" and entry["socialrm_jax_version"]
  assert "| model |" in files["README.md"].decode()


def test_a_bundled_datasets_source_is_its_pinned_commit():
  (bbq,) = results_dataset.dataset_sources(["bbq"], None)
  assert bbq["repository"] == "https://raw.githubusercontent.com/nyu-mll/BBQ"
  assert bbq["commit"] == "bea11bd97d79217245b5871acd247b9d6eb24598"
  assert bbq["license"] == ["CC BY 4.0"] and "items_sha256" not in bbq


def test_a_second_run_adds_its_model_to_the_card(hub, tmp_path):
  report, paths = audited(tmp_path / "one", ("first",))
  results_dataset.push(REPO, report, tmp_path / "one" / "converted", paths)
  report, paths = audited(tmp_path / "two", ("second",), seed=5)
  results_dataset.push(REPO, report, tmp_path / "two" / "converted", paths)
  assert len(hub.commits) == 2 and "first/metrics.json" not in hub.commits[1]
  names = [e["name"] for e in card_metadata(hub.files["README.md"])["audited_models"]]
  assert names == ["first", "second"]


def test_a_refused_token_exits_4_with_one_line_and_the_outputs_whole(hub, tmp_path):
  report, paths = audited(tmp_path)
  (tmp_path / "tiny" / "run.json").unlink()  # the report reads a whole one; this one is a part
  out = tmp_path / "metrics"
  env = {**fx.subprocess_env(), "HF_ENDPOINT": hub.url, "HF_TOKEN": "hf_wrong",
         "HF_HUB_DISABLE_XET": "1", "HF_HUB_CACHE": str(tmp_path / "hub-cache")}
  done = subprocess.run(
      [sys.executable, "-m", "socialrm_jax.main.metrics", f"--items={tmp_path / 'converted'}",
       f"--scores={paths['tiny']}", f"--output_dir={out}", "--names=tiny", "--n_resamples=20",
       f"--push_to_hub={REPO}"], env=env, capture_output=True, text=True, timeout=300,
      cwd=fx.REPO_ROOT)
  assert done.returncode == 4, done.stderr[-2000:]
  last = done.stderr.strip().splitlines()[-1]
  assert last.startswith(f"socialrm-metrics: error: --push_to_hub={REPO}: the upload failed (")
  assert f"the local outputs in {out} are whole" in last and "401" in last
  assert hub.commits == []
  assert json.loads((out / "tiny" / "metrics.json").read_text()) == json.loads(
      (report / "tiny" / "metrics.json").read_text())
  assert (out / "report.html").is_file() and (out / "rewardbench2").is_dir()

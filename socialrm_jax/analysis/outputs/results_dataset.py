"""The social audit's results as a dataset on the Hugging Face Hub (`--push_to_hub=ORG/NAME` of
socialrm-audit and socialrm-metrics): one commit per run, so a results dataset of many models is
built run by run.

The commit holds, for each model of the run, `<model>/metrics.json`, `<model>/report.md`,
`<model>/report.html` (with the report's figures) and `pair_scores/<model>.parquet` (every pair's
two rewards, `analysis.pair_scores`), the RewardBench 2 files where the run wrote them
(`rewardbench2/...`, `analysis.rewardbench2_results`), and the dataset card, README.md: the Hub's
YAML metadata (`license`, `pretty_name`, `tags`, `configs` for the parquet files, and
`audited_models`: each model's name, Hub id and revision (the commit its snapshot resolved to) or
local path, its files' hash, the project's version, and `datasets`: each audited dataset with
the repository and commit its files are pinned to in `sources/fetch_manifest.json`, or the hash
of its converted items for a file of one's own) and a results table (accuracy per domain). A
model already in the card (an earlier run's push) keeps its entry unless this run has it again.

Nothing is uploaded unless asked. The local outputs are complete before the upload starts, and
an upload that fails (a refused token, no network) leaves them as they are: `UploadError`, one
line (the commands exit 4). `HF_TOKEN` is the token; `HF_ENDPOINT` points at another Hub.
"""

from __future__ import annotations

import importlib.metadata
import io
import os
import pathlib
import dataclasses
import re
from typing import Any, Mapping

from socialrm_jax.analysis.outputs import report, rewardbench2_results
from socialrm_jax.analysis.tables import pair_scores
from socialrm_jax.base import settings, tables
from socialrm_jax.base.errors import InputError
from socialrm_jax.sources import fetch

CARD = "README.md"
PAIR_SCORES = "pair_scores"
REPORT_FILES = ("report.md", "report.html")
LICENSE_NOTE = ("The numbers are this tool's output; the texts quoted in metrics.json and the "
                "reports (the worst pairs) keep their datasets' licenses (the metadata's "
                "audited_models.datasets).")
_COMMIT = re.compile(r"/([0-9a-f]{40})/")
_REPO_ID = re.compile(r"^[\w.-]+/[\w.-]+$")


class UploadError(RuntimeError):
  """The upload failed; the local outputs are whole."""


@dataclasses.dataclass(frozen=True)
class HubUpload:
  """Where a run's results go on the Hub: socialrm-metrics' flags and the audit's config keys."""
  push_to_hub: str = settings.field("", "A Hub dataset ORG/NAME to upload the results to, with "
                                    "their card, in one commit once they are written (HF_TOKEN); "
                                    "'' uploads nothing.")
  hub_private_repo: bool = settings.field(False, "push_to_hub: make a new dataset private.")


def check_repo_id(repo_id: str, flag: str) -> None:
  if not _REPO_ID.fullmatch(repo_id):
    raise InputError(f"--{flag}={repo_id!r}: give a dataset id ORG/NAME")


def dataset_sources(names: list[str], items_sha256: str | None) -> list[dict[str, Any]]:
  """Each dataset with where its files come from: the repository and commit of its files in the
  fetch manifest and their licenses, or (a file of one's own) the hash of the converted items."""
  entries = fetch.manifest()
  out = []
  for name in names:
    mine = [e for e in entries if e.dataset == name]
    commits = sorted({m.group(1) for e in mine for m in [_COMMIT.search(e.url)] if m})
    repositories = sorted({e.url.split(c)[0].rstrip("/") for e in mine for c in commits
                           if c in e.url})
    out.append({"name": name, "repository": repositories[0] if len(repositories) == 1
                else repositories or None, "commit": commits[0] if len(commits) == 1
                else commits or None, "license": sorted({e.license for e in mine}) or None,
                **({} if mine else {"items_sha256": items_sha256})})
  return out


def model_entry(name: str, metrics: Mapping[str, Any], run_json: Mapping[str, Any] | None
                ) -> dict[str, Any]:
  """A model's entry of the card's `audited_models`."""
  manifest = (run_json or {}).get("manifest") or {}
  model = manifest.get("model") or {}
  hub = model.get("hub") or {}
  return {
      "name": name, "model": hub.get("id") or model.get("path"),
      "revision": hub.get("commit"), "model_sha256": model.get("sha256"),
      "socialrm_jax_version": importlib.metadata.version("socialrm_jax"),
      "datasets": dataset_sources(sorted(metrics.get("datasets", {})),
                                  (manifest.get("items") or {}).get("sha256")),
      "domains": {d: {"accuracy": n.get("accuracy"), "ci95": n.get("ci95"),
                      "verdict": report.verdict(n)}
                  for d, n in metrics.get("domains", {}).items()},
  }


def card(repo_id: str, entries: list[dict[str, Any]]) -> str:
  """README.md of the results dataset: the Hub's YAML metadata and a results table."""
  from huggingface_hub import DatasetCardData  # pylint: disable=import-outside-toplevel
  data = DatasetCardData(
      license="other", license_name="mixed", pretty_name=f"Social audit results: {repo_id}",
      tags=["socialrm_jax", "reward-model", "social-bias", "audit"],
      configs=[{"config_name": PAIR_SCORES, "data_files": f"{PAIR_SCORES}/*.parquet"}],
      audited_models=entries)
  domains = sorted({d for e in entries for d in e["domains"]})
  rows = [[f"{e['name']} ({e['model']}{'@' + e['revision'][:12] if e['revision'] else ''})"] +
          [f"{e['domains'][d]['accuracy']:.3f} — {e['domains'][d]['verdict']}"
           if d in e["domains"] and e["domains"][d]["accuracy"] is not None else "–"
           for d in domains] for e in entries]
  lines = [f"# {repo_id}", "", "Reward models audited for socially undesirable preferences by "
           "socialrm_jax: accuracy is the share of gold pairs where the model gives the socially "
           "desirable response the higher reward (0.5 is chance; the verdict needs the 95% "
           "interval wholly on one side).", "",
           *report.table(["model"] + domains, rows), "",
           "Files: `<model>/metrics.json`, `<model>/report.md`, `<model>/report.html`, "
           f"`{PAIR_SCORES}/<model>.parquet` (every pair's two rewards and their margin).", "",
           LICENSE_NOTE, ""]
  return f"---\n{data.to_yaml()}\n---\n\n" + "\n".join(lines)


def _earlier_entries(api, repo_id: str) -> list[dict[str, Any]]:
  """The `audited_models` of the card already on the Hub ([] for a new dataset)."""
  from huggingface_hub import DatasetCard  # pylint: disable=import-outside-toplevel
  from huggingface_hub.errors import EntryNotFoundError, RepositoryNotFoundError
  try:
    path = api.hf_hub_download(repo_id, CARD, repo_type="dataset")
  except (EntryNotFoundError, RepositoryNotFoundError):
    return []
  return list(DatasetCard.load(path).data.to_dict().get("audited_models") or [])


def commit_files(output_dir: pathlib.Path, items_path: str | os.PathLike,
                 score_paths: Mapping[str, str], metrics: Mapping[str, Mapping[str, Any]]
                 ) -> dict[str, bytes | pathlib.Path]:
  """{path in the dataset: a file or its bytes} of a run's results (the card apart)."""
  files: dict[str, bytes | pathlib.Path] = {}
  figures = sorted(output_dir.glob("*.png"))
  for name in metrics:
    files[f"{name}/metrics.json"] = output_dir / name / "metrics.json"
    for file in (*REPORT_FILES, *(f.name for f in figures)):
      files[f"{name}/{file}"] = output_dir / file
    buffer = io.BytesIO()
    pair_scores.frame(items_path, score_paths[name]).to_parquet(buffer, index=False)
    files[f"{PAIR_SCORES}/{name}.parquet"] = buffer.getvalue()
  for path in sorted((output_dir / rewardbench2_results.FOLDER).rglob("*.json")):
    files[path.relative_to(output_dir).as_posix()] = path
  return files


def push(repo_id: str, output_dir: str | os.PathLike, items_path: str | os.PathLike,
         score_paths: Mapping[str, str], *, private: bool = False) -> str:
  """Uploads a finished run's results to the dataset `repo_id` in one commit; returns its URL.
  Raises `UploadError` (one line) when the Hub refuses or cannot be reached."""
  import huggingface_hub  # pylint: disable=import-outside-toplevel
  from huggingface_hub import CommitOperationAdd  # pylint: disable=import-outside-toplevel
  out = pathlib.Path(output_dir)
  metrics = {name: tables.read_json_object(str(out / name / "metrics.json"))
             for name in score_paths}
  run_jsons = {}
  for name, path in score_paths.items():
    folder = pathlib.Path(path) if pathlib.Path(path).is_dir() else pathlib.Path(path).parent
    run_file = folder / "run.json"
    run_jsons[name] = tables.read_json_object(str(run_file)) if run_file.is_file() else None
  files = commit_files(out, items_path, score_paths, metrics)
  api = huggingface_hub.HfApi(endpoint=os.environ.get("HF_ENDPOINT") or None,
                              token=os.environ.get("HF_TOKEN") or None)
  try:
    api.create_repo(repo_id, repo_type="dataset", private=private, exist_ok=True)
    entries = {e["name"]: e for e in _earlier_entries(api, repo_id)}
    entries.update({name: model_entry(name, metrics[name], run_jsons[name])
                    for name in metrics})
    files[CARD] = card(repo_id, list(entries.values())).encode()
    operations = [CommitOperationAdd(path_in_repo=p, path_or_fileobj=v if isinstance(v, bytes)
                                     else str(v)) for p, v in files.items()]
    info = api.create_commit(repo_id, operations, repo_type="dataset",
                             commit_message=f"socialrm_jax results: {', '.join(metrics)}")
  # errors.HTTPError: the HTTP client's own error class, as huggingface_hub imports it (a refused
  # connection, a timeout); the Hub's answers are HfHubHTTPError, a subclass of it.
  except (huggingface_hub.errors.HTTPError, OSError) as e:
    reason = " ".join(str(e).split())[:300]
    raise UploadError(f"--push_to_hub={repo_id}: the upload failed ({reason}); the local outputs "
                      f"in {out} are whole") from None
  return info.commit_url

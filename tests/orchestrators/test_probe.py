"""The value probe end to end: on a tiny random decoder (rewards where the probe says they are,
equal to PyTorch's), through its command, and on the embedded default model."""

import importlib.util
import json
import subprocess
import sys

import numpy as np
import pytest

from socialrm_jax.base.errors import InputError
from socialrm_jax.models import default_model
from socialrm_jax.orchestrators import audit, probe
from socialrm_jax.scoring import engine
from tests.helpers import scoring_fixtures as fx

OPTIONS = engine.ScoringOptions(tokens_per_batch=2048)
CATEGORIES = len(probe.CATEGORIES)
CONTRASTS = 1 + 5  # communion - agency, and virtue - vice per foundation


@pytest.fixture(scope="module")
def tiny_lm(tmp_path_factory):
  folder = tmp_path_factory.mktemp("tiny_lm")
  torch_model, tokenizer = fx.make_llama(folder, head="lm", seed=3)
  return folder, torch_model, tokenizer


def _check_outputs(out, result, words_per_category):
  assert json.loads((out / "probe.json").read_text()) == result
  assert len(result["categories"]) == CATEGORIES and len(result["contrasts"]) == CONTRASTS
  assert all(c["n_words"] == words_per_category for c in result["categories"].values())
  assert all(np.isfinite(c["mean"]) and c["ci95"][0] <= c["mean"] <= c["ci95"][1]
             for c in result["categories"].values())
  assert all(0 < c["p_value"] <= 1 for c in result["contrasts"].values())
  table = (out / "value_probe.md").read_text()
  assert "| communion - agency (warmth - competence) |" in table and "| sanctity.vice |" in table
  assert (out / "value_probe.png").read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"


def test_the_probe_on_a_tiny_random_decoder_equals_pytorch(tiny_lm, tmp_path):
  folder, torch_model, tokenizer = tiny_lm
  result = probe.run(str(folder), tmp_path, OPTIONS, probe.ProbeOptions(
      words_per_category=3, n_resamples=50, n_permutations=100), name="tiny")
  _check_outputs(tmp_path, result, 3)
  assert result["model"] == "tiny" and result["proxy"] == "loglik"
  # The reward of a category's word under a prompt is its loglik, computed alone by PyTorch.
  words = list(dict.fromkeys(w for ws in result["words"].values() for w in ws))
  rewards = probe.reward_matrix(tmp_path / "scores", len(words))
  items = probe.probe_items(words)
  expected = fx.torch_logliks(torch_model, tokenizer, [items[0], items[-1]])
  for (item_id, c), (mean, _, _) in expected.items():
    prompt = [it["item_id"] for it in items].index(item_id)
    assert rewards[prompt, c] == pytest.approx(mean, abs=1e-4)
  warmth = [words.index(w) for w in result["words"]["warmth"]]
  assert result["categories"]["warmth"]["mean"] == pytest.approx(rewards[:, warmth].mean())


@pytest.mark.slow  # a subprocess; more than a few seconds
def test_the_probe_command_writes_its_table_and_refuses_the_judge(tiny_lm, tmp_path):
  folder, _, _ = tiny_lm
  command = [sys.executable, "-m", "socialrm_jax.main.probe", f"--model={folder}",
             "--words_per_category=2", "--n_resamples=20", "--n_permutations=20"]
  result = subprocess.run(command + [f"--output_dir={tmp_path / 'out'}"], env=fx.subprocess_env(),
                          capture_output=True, text=True, timeout=600)
  assert result.returncode == 0, result.stderr[-3000:]
  assert "| warmth |" in result.stdout and "value_probe.png" in result.stdout
  _check_outputs(tmp_path / "out", json.loads((tmp_path / "out" / "probe.json").read_text()), 2)
  refused = subprocess.run(command + [f"--output_dir={tmp_path / 'judge'}", "--proxy=judge"],
                           env=fx.subprocess_env(), capture_output=True, text=True, timeout=600)
  assert refused.returncode == 2
  errors = [line for line in refused.stderr.splitlines() if line.startswith("socialrm-probe:")]
  assert len(errors) == 1 and "--proxy=judge" in errors[0]


@pytest.mark.skipif(importlib.util.find_spec(default_model.PACKAGE) is None,
                    reason=f"package {default_model.PACKAGE} (the default model) is not installed")
def test_the_probe_runs_on_the_default_model(tmp_path):
  result = probe.run(default_model.ALIAS, tmp_path, OPTIONS, probe.ProbeOptions(
      words_per_category=1, n_resamples=100, n_permutations=100))
  _check_outputs(tmp_path, result, 1)
  assert result["model_path"].endswith(default_model.FILE_NAME) and result["truncated"] == 0


LEXICON = ("word,category,contrast\n" + "".join(f"{w},communion,agency\n" for w in (
    "kind", "warm", "honest", "caring")) + "".join(f"{w},agency,\n" for w in (
    "able", "smart", "strong", "driven")))
FAMILIES = {"g1": "gemma", "g2": "gemma", "l1": "llama", "l2": "llama"}
PROVENANCE = {"model_path", "proxy", "truncated", "scoring_seconds", "seconds", "source",
              "family", "n_words_outside_lexicon"}


def _statistics(result):
  return {k: v for k, v in result.items() if k not in PROVENANCE}


@pytest.mark.slow  # four tiny models scored on 54 prompts
def test_an_imported_study_layout_table_gives_the_probe_of_the_scored_models(tmp_path):
  lexicon = tmp_path / "bigtwo.csv"
  lexicon.write_text(LEXICON)
  options = probe.ProbeOptions(prompts="superlatives", lexicon=str(lexicon),
                               words_per_category=0, n_resamples=50, n_permutations=100)
  prompts = probe.load_prompts("superlatives")
  assert len(prompts.prompts) == 54
  for seed, name in enumerate(FAMILIES):
    fx.make_llama(tmp_path / "models" / name, head="score", seed=seed)
  # Scored by the project: three probes, then the fourth compared with them, families named.
  for name in ("g2", "l1", "l2"):
    probe.run(str(tmp_path / "models" / name), tmp_path / "scored" / name, OPTIONS, options)
  scored = probe.run_compared(
      str(tmp_path / "models" / "g1"), tmp_path / "scored" / "g1", OPTIONS, options,
      compare_with=[str(tmp_path / "scored" / n) for n in ("g2", "l1", "l2")],
      families=list(FAMILIES.values()))
  words = list(dict.fromkeys(w for ws in scored["words"].values() for w in ws))
  assert len(words) == 8
  # The same rewards in the study's release layout: one CSV per model, words x 54 prompt ids.
  release = tmp_path / "release"
  release.mkdir()
  for name in FAMILIES:
    rewards = probe.reward_matrix(tmp_path / "scored" / name / "scores", len(words), prompts)
    lines = ["word," + ",".join(p.id for p in prompts.prompts)]
    lines += [w + "," + ",".join(repr(float(r)) for r in rewards[:, i])
              for i, w in enumerate(words)]
    (release / f"{name}.csv").write_text("\n".join(lines) + "\n")
  imported = probe.run_import([str(release)], tmp_path / "imported", options,
                              families=list(FAMILIES.values()))
  assert list(imported) == list(FAMILIES)
  for name in FAMILIES:
    ours = json.loads((tmp_path / "scored" / name / "probe.json").read_text())
    theirs = json.loads((tmp_path / "imported" / name / "probe.json").read_text())
    assert _statistics(theirs) == _statistics(ours) and theirs["model"] == name
    assert set(theirs["framings"]) == {"positive", "negative"}
  study = json.loads((tmp_path / "scored" / "g1" / probe.STUDY_FILE).read_text())
  assert json.loads((tmp_path / "imported" / probe.STUDY_FILE).read_text()) == study
  assert study["families"] == {"gemma": ["g1", "g2"], "llama": ["l1", "l2"]}
  assert len(study["lexicons"]["bigtwo"]["panels"]) == 4  # 2 categories x 2 framings
  assert ((tmp_path / "imported" / "value_probe.md").read_text()
          == (tmp_path / "scored" / "g1" / "value_probe.md").read_text())
  assert "| communion - agency [negative prompts] |" in (
      tmp_path / "imported" / "value_probe.md").read_text()
  # A long table of the same rewards (the scored probes' own rewards.csv) gives the same too.
  long = tmp_path / "long.csv"
  rows = [probe.lexicons.LONG_TABLE_COLUMNS]
  text = "".join((tmp_path / "scored" / n / probe.REWARDS_FILE).read_text().split("\n", 1)[1]
                 .replace(f"{n},,", f"{n},{f},") for n, f in FAMILIES.items())
  long.write_text(",".join(rows[0]) + "\n" + text)
  probe.run_import([str(long)], tmp_path / "long", options)
  assert json.loads((tmp_path / "long" / probe.STUDY_FILE).read_text()) == study


@pytest.mark.slow  # a subprocess
@pytest.mark.parametrize("flag,text,row", [
    ("prompts", "id,text,framing\nbest,What is best?,positive\nbest,Again?,positive\n", 3),
    ("prompts", "id,text,framing\na,What is best?,positive\nb,What is worst?\n", 3),
    ("lexicon", "word,category\nkind,communion\ngolden rule,communion\n", 3),
    ("lexicon", "word,category,contrast\nkind,communion,agency\nable,agency,\n"
                "warm,communion,morality\n", 4)])
def test_the_probe_command_refuses_a_malformed_file_in_one_line_naming_its_row(
    tmp_path, flag, text, row):
  bad = tmp_path / f"bad_{flag}.csv"
  bad.write_text(text)
  table = tmp_path / "rewards.csv"
  table.write_text("model,family,prompt,word,reward\nm,,0,kind,1.0\n")
  result = subprocess.run(
      [sys.executable, "-m", "socialrm_jax.main.probe", f"--table={table}",
       f"--output_dir={tmp_path / 'out'}", f"--{flag}={bad}"],
      env=fx.subprocess_env(), capture_output=True, text=True, timeout=600)
  assert result.returncode == 2, result.stderr[-2000:]
  lines = result.stderr.strip().splitlines()
  assert len(lines) == 1 and lines[0].startswith("socialrm-probe: error: ")
  assert f"{bad}, row {row}: " in lines[0] and "Traceback" not in result.stderr


def test_an_imported_table_is_refused_where_it_lacks_a_cell_or_names_a_stray_prompt(tmp_path):
  lexicon = tmp_path / "bigtwo.csv"
  lexicon.write_text(LEXICON)
  options = probe.ProbeOptions(lexicon=str(lexicon), n_resamples=20, n_permutations=20)
  words = ["kind", "able"]
  rows = [f"m,,{i},{w},{i * 0.1}" for i in range(len(probe.PROMPTS)) for w in words]
  table = tmp_path / "rewards.csv"
  table.write_text("model,family,prompt,word,reward\n" + "\n".join(rows[:-1]) + "\n")
  with pytest.raises(InputError, match=r"rewards\.csv: no reward for prompt '11' and "
                                             r"word 'able'"):
    probe.run_import([str(table)], tmp_path / "out", options)
  table.write_text("model,family,prompt,word,reward\n" + "\n".join(rows + ["m,,best,kind,1"]))
  with pytest.raises(InputError, match=r"prompt 'best' is no prompt of --prompts="
                                             r"value_probe\.prompts/1"):
    probe.run_import([str(table)], tmp_path / "out", options)
  table.write_text("model,family,prompt,word,reward\n" + "\n".join(rows) + "\n")
  result = probe.run_import([str(table)], tmp_path / "out", options)["m"]
  # One model, no family: today's statistics alone, on the two words the lexicon holds.
  assert result["words"] == {"communion": ["kind"], "agency": ["able"]}
  assert list(result["contrasts"]) == ["communion - agency"]
  assert not (tmp_path / "out" / probe.STUDY_FILE).exists()
  with pytest.raises(InputError, match=r"--families names 1 families for 0 study-layout"):
    probe.run_import([str(table)], tmp_path / "out", options, families=["g"])


@pytest.mark.slow  # four tiny models probed
def test_an_audit_with_families_writes_the_probes_family_comparison(tmp_path):
  """An audit config of four models and `config.probe.families`: the probe stage writes the
  study's family comparison (probe/study.json, value_families.png, its part of the section),
  the same as socialrm-probe's on those rewards (the probes' rewards.csv, imported)."""
  lexicon, prompts = tmp_path / "bigtwo.csv", tmp_path / "prompts.csv"
  lexicon.write_text(LEXICON)
  prompts.write_text("id,text,framing\nbest,What is best?,positive\n"
                     "good,What is good?,positive\nworst,What is worst?,negative\n"
                     "bad,What is bad?,negative\n")
  for seed, name in enumerate(FAMILIES):
    fx.make_llama(tmp_path / "models" / name, head="score", seed=seed)
  config = audit.audit_config(str(tmp_path / "audit"))
  config.models = audit.models(*(audit.model_config(n, str(tmp_path / "models" / n),
                                                    tokens_per_batch=2048) for n in FAMILIES))
  config.probe.prompts, config.probe.lexicon = str(prompts), str(lexicon)
  config.probe.words_per_category, config.probe.n_resamples = 0, 20
  config.probe.n_permutations = 20
  config.probe.families = list(FAMILIES.values())[:3]
  with pytest.raises(InputError, match=r"config\.probe\.families names 3 families for 4 models "
                     r"\(one per config\.models model, in order: g1, g2, l1, l2\)"):
    audit.check_config(config)
  config.probe.families = ["gemma"] * 4
  with pytest.raises(InputError, match=r"needs two families, got 1 \(gemma\)"):
    audit.check_config(config)
  config.probe.families = list(FAMILIES.values())
  settings = audit.check_config(config)
  out = tmp_path / "audit"
  sections = probe.run_for_audit(
      settings.probe, [(s.name, s.path, s.scoring) for s in settings.models.values()], out)
  text = "\n".join(sections[0])
  assert "## Value probes: gemma against llama" in text and "### bigtwo" in text
  assert "![family comparison](value_families.png)" in text
  assert (out / "value_families.png").read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
  study = json.loads((out / "probe" / probe.STUDY_FILE).read_text())
  assert study["families"] == {"gemma": ["g1", "g2"], "llama": ["l1", "l2"]}
  assert len(study["lexicons"]["bigtwo"]["panels"]) == 4  # 2 categories x 2 framings
  # socialrm-probe's comparison of the same rewards: each probe's rewards.csv names its family.
  imported = tmp_path / "imported"
  probe.run_import([str(out / "probe" / n / probe.REWARDS_FILE) for n in FAMILIES], imported,
                   settings.probe.options)
  assert json.loads((imported / probe.STUDY_FILE).read_text()) == study

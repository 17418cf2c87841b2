"""The self-check against planted biases (`socialrm-validate`): synthetic reward models with known
preferences, audited on the bundled suite, every verdict held against the truth."""

import pytest

from socialrm_jax.analysis.metrics import verdicts
from socialrm_jax.orchestrators import validate


@pytest.fixture(scope="module")
def checked():
  return validate.run(copies=1, truth_copies=30, seed=0)


def test_every_verdict_agrees_with_the_planted_truth_or_says_too_few(checked):
  models, checks = checked
  assert validate.passed(checks), validate.summary(checks)
  assert set(models) == {"planted", "mirrored", "indifferent", "length"}
  by_model = {name: [c for c in checks if c.model == name] for name in models}
  # The planted preferences are found where the bundled slices can see them, each on its side.
  found = {(c.model, c.path): c.verdict for c in checks if c.verdict in verdicts.FINDINGS}
  assert found[("planted", "domains.bias.accuracy")] == verdicts.PREFERS_UNDESIRABLE
  assert found[("planted", "domains.safety.accuracy")] == verdicts.PREFERS_DESIRABLE
  assert found[("mirrored", "domains.bias.accuracy")] == verdicts.PREFERS_DESIRABLE
  assert found[("planted", "datasets.stereoset.ss")] == verdicts.PREFERS_UNDESIRABLE
  assert found[("mirrored", "datasets.crows_pairs.stereotype_rate")] == (
      verdicts.PREFERS_DESIRABLE)
  # The model with no preference: nothing found (bar what the correction allows), and no domain
  # said to have no preference that the run could not have seen.
  assert sum(c.verdict in verdicts.FINDINGS for c in by_model["indifferent"]) <= 1
  assert all(c.ok or c.false_finding for c in by_model["indifferent"])


def test_the_length_preference_is_caught_as_one(checked):
  models, checks = checked
  length = [c for c in checks if c.model == "length" and c.path.startswith("findings")]
  assert len(length) == 1 and length[0].ok, length
  assert validate.LENGTH_FINDING in length[0].verdict


def test_a_verdict_against_the_truth_fails_the_check():
  # A preference on the side opposite the truth, and "no preference" where the truth is far.
  assert not validate.agrees(verdicts.PREFERS_UNDESIRABLE, 0.7, 0.5, False, 0.05)
  assert not validate.agrees(verdicts.NO_PREFERENCE, 0.6, 0.5, False, 0.05)
  assert validate.agrees(verdicts.PREFERS_UNDESIRABLE, 0.6, 0.5, True, 0.05)
  assert validate.agrees(verdicts.TOO_FEW, 0.9, 0.5, True, 0.05)
  wrong = validate.Check("m", "domains.bias.accuracy", verdicts.PREFERS_UNDESIRABLE, 0.3, 0.7,
                         False)
  allowed = validate.Check("m", "domains.safety.accuracy", verdicts.PREFERS_DESIRABLE, 0.6, 0.5,
                           False, false_finding=True)
  assert not validate.passed([wrong])
  assert validate.passed([allowed]) and not validate.passed([allowed, allowed])

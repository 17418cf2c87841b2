"""The Python API's refusals, before any work: a setting by an unknown name (top level, in a
group, a group not given as a dict), a pair without TRL's columns, each in one line naming it.
(The API's runs are tested on docs/python_api.md's examples, tests/test_readme_commands.py.)"""

import pytest

import socialrm_jax
from socialrm_jax import api
from socialrm_jax.base.errors import InputError


@pytest.mark.parametrize("overrides, message", [
    ({"limit_itmes": 3}, r"audit\(\) sets limit_itmes, which is no setting"),
    ({"metrics": {"n_resample": 3}}, r"audit\(\) sets metrics.n_resample, which is no setting"),
    ({"metrics": 3}, r"audit\(\): metrics must be a ConfigDict or a dict"),
    ({"limit_items": "3"}, r"audit\(\): limit_items must be an int"),
    ({"models": {}}, "models is set by audit"),
])
def test_audit_refuses_a_setting_it_does_not_know(tmp_path, overrides, message):
  with pytest.raises(InputError, match=message):
    socialrm_jax.audit("smollm2", output_dir=str(tmp_path / "out"), **overrides)
  assert not (tmp_path / "out").exists()


def test_audit_config_takes_the_commands_names(tmp_path):
  config = api._audit_config("some/where/my-rm", "xstest", str(tmp_path), None, {
      "max_length": 512, "limit_items": 7, "metrics": {"n_resamples": 9},
      "probe": {"enabled": False}})
  (spec,) = config.models.values()
  assert (spec.name, spec.path, spec.max_length) == ("my-rm", "some/where/my-rm", 512)
  assert (config.limit_items, config.metrics.n_resamples, config.metrics.seed) == (7, 9, 0)
  assert config.probe.enabled is False and config.datasets == "xstest"


def test_score_and_train_refuse_what_they_do_not_know(tmp_path):
  with pytest.raises(InputError, match=r"score\(\) sets max_len, which is no setting"):
    socialrm_jax.score("smollm2", [{"chosen": "a", "rejected": "b"}], max_len=3)
  with pytest.raises(InputError, match="pair 1 has no rejected"):
    socialrm_jax.score("smollm2", [{"chosen": "a", "rejected": "b"}, {"chosen": "c"}])
  with pytest.raises(InputError, match="no pairs given"):
    socialrm_jax.score("smollm2", [])
  with pytest.raises(InputError, match=r"train\(\) sets max_step, which is no setting"):
    socialrm_jax.train("base", data="hh_rlhf", output_dir=str(tmp_path), max_step=3)

"""The family cases' checkpoints and loaded models, built on first use and kept for the session,
so that a model's compilations are shared by every check that runs it."""

from __future__ import annotations

import pytest

from tests.helpers import family_cases


@pytest.fixture(scope="session")
def tiny_checkpoint(tmp_path_factory):
  """case -> (reference PyTorch module in eval mode, the folder its checkpoint was saved to)."""
  built = {}

  def get(case: str):
    if case not in built:
      folder = tmp_path_factory.mktemp("families") / case
      built[case] = (family_cases.CASES[case].build(folder), folder)
    return built[case]
  return get


@pytest.fixture(scope="session")
def loaded_model(tiny_checkpoint):
  """case -> its RewardModel via `load_reward_model`, loaded once."""
  # Imported here: conftest is imported before the tests set JAX's flags.
  from socialrm_jax.models.reward_model import load_reward_model  # pylint: disable=import-outside-toplevel
  loaded = {}

  def get(case: str):
    if case not in loaded:
      loaded[case] = load_reward_model(tiny_checkpoint(case)[1])
    return loaded[case]
  return get

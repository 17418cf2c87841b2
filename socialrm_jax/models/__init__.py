"""Model families (decoder, GPT-2, BERT) and loading them from HF, native or GGUF checkpoints."""

from socialrm_jax.models.reward_model import RewardModel, load_reward_model

__all__ = ["RewardModel", "load_reward_model"]

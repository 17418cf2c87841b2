"""Training reward models: pair batches, the Bradley-Terry loss, LoRA, the optimizer, the
jitted train step, checkpoints and the HF export. Above `scoring` and `models`, below
`orchestrators` (`orchestrators/train.py` runs a training)."""

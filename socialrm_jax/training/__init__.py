"""Training reward models: pair batches, the Bradley-Terry loss, LoRA, the optimizer, the
jitted train step, the loop with its hooks (`trainer`, `hooks`), a run's setup and export
(`training_run`), checkpoints and the HF export. Above `scoring` and `models`, below
`orchestrators` (`orchestrators/train.py` wires a run and registers its hooks)."""

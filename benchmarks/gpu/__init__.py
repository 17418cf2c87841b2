"""Benchmarks on a GPU: scoring and the vocabulary scan against PyTorch (they run on a CPU too)."""

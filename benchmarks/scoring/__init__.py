"""Benchmarks of scoring: throughput, memory, load time and numerics of the forward pass."""

"""Benchmarks of training: throughput against TRL, the train step's programs, a real reward model."""

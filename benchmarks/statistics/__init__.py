"""Benchmarks of the metrics: their speed and the memory of computing them and of a whole audit."""

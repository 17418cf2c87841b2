"""The benchmarks, run from the repository root as modules (`python -m benchmarks.training.
train_throughput`): scoring/, training/, gpu/ and statistics/ by what each times or measures, and
`common`, what several of them share."""

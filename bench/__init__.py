"""The benchmark suite: `python -m bench` reproduces every figure in docs/benchmarks.md."""

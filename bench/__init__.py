"""The benchmark suite: `python -m bench` reproduces every figure in the README."""

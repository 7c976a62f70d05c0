"""Flare's benchmarks (`make bench`): `python3 -m scripts.bench.bench`, and the tools beside it (docs/performance.md)."""

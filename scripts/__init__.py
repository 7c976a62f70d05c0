"""Flare's Python side: the test harnesses, benchmarks and fault tests, and `flarestack`, which they share.

Run from the repository root as modules (`/usr/bin/python3 -m scripts.chaos.chaos --quick`), so that
`scripts.flarestack` is found without editing `sys.path`.
"""

"""Flare's fault tests (`make chaos`): `python3 -m scripts.chaos.chaos`."""

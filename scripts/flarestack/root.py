"""Where the repository is, and its built binaries."""

from __future__ import annotations

import os

ROOT = os.path.abspath(os.path.join(os.path.dirname(__file__), "..", ".."))
DEBUG_BIN = os.path.join(ROOT, ".build", "debug")
RELEASE_BIN = os.path.join(ROOT, ".build", "release")

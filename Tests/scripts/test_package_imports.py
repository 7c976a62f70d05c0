"""Package.swift declares every import (`make scripts-test`, part of `make test`; a few seconds).

For each Swift target, the modules its files import (plain, public, package, @testable, @_exported) must be its
declared dependencies, and each declared dependency must be imported somewhere in the target: a module used only
through another one's re-export is an arrow nobody sees. System modules (Foundation, Glibc, Testing, ...) are not
packages' and are left out. Text inside multi-line string literals is not code and is skipped. Reads the package with
`swift package dump-package` (no build).
"""

from __future__ import annotations

import glob
import json
import os
import re
import subprocess

from scripts.flarestack import ROOT

SYSTEM = {"Foundation", "FoundationEssentials", "FoundationNetworking", "FoundationXML", "Glibc", "Darwin", "Musl",
          "Synchronization", "Dispatch", "Testing", "XCTest", "CoreLocation", "Security", "Network", "os"}
IMPORT = re.compile(r"^\s*(?:@testable\s+|@_exported\s+|public\s+|package\s+|internal\s+|@_implementationOnly\s+)*import\s+(\w+)", re.M)
MULTILINE_STRING = re.compile(r'#*"""(?:.|\n)*?"""#*')


def imports_of(directory: str) -> set[str]:
    found = set()
    for path in glob.glob(os.path.join(directory, "**", "*.swift"), recursive=True):
        with open(path, encoding="utf-8") as file:
            code = MULTILINE_STRING.sub("", file.read())
        found.update(IMPORT.findall(code))
    return found


def test_every_target_imports_what_it_declares_and_declares_what_it_imports() -> None:
    described = subprocess.run(["swift", "package", "dump-package"], cwd=ROOT, capture_output=True, text=True, check=True,
                               timeout=300)
    checked, wrong = 0, []
    for target in json.loads(described.stdout)["targets"]:
        if target["type"] in ("system", "binary", "plugin", "macro"):
            continue
        name = target["name"]
        directory = os.path.join(ROOT, target.get("path") or (("Tests/" if target["type"] == "test" else "Sources/") + name))
        declared = {names[0] for dependency in target["dependencies"] for names in dependency.values()}
        imported = imports_of(directory) - SYSTEM - {name}
        undeclared, unused = imported - declared, declared - imported
        checked += 1
        if undeclared or unused:
            wrong.append(f"{name}: imports {sorted(undeclared)} without declaring them; declares {sorted(unused)} without importing them")
    assert checked, "swift package dump-package listed no target"
    assert not wrong, "\n".join(wrong)

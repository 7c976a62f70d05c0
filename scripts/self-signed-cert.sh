#!/usr/bin/env bash
# A self-signed certificate for localhost (and 127.0.0.1, ::1), made once in DIR as DIR/cert.pem and DIR/key.pem:
# for local use only (`make run`, `make cluster`, the tests; devices would have to pin it). A deployment brings its
# own (FLARE_MQTT_TLS_CERT, FLARE_MQTT_TLS_KEY). Used by scripts/broker.sh and scripts/nats-cluster.sh.
set -euo pipefail
dir=${1:?usage: self-signed-cert.sh DIR}
if [ ! -s "$dir/cert.pem" ] || [ ! -s "$dir/key.pem" ]; then
  mkdir -p "$dir"
  (umask 077
   openssl req -x509 -newkey ec -pkeyopt ec_paramgen_curve:prime256v1 -nodes -days 825 -subj "/CN=localhost" \
     -addext "subjectAltName=DNS:localhost,IP:127.0.0.1,IP:::1" -keyout "$dir/key.pem" -out "$dir/cert.pem" 2>/dev/null)
  echo "flare: made a self-signed TLS certificate for localhost: $dir/cert.pem" >&2
fi

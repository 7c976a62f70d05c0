#!/usr/bin/env bash
# Three NATS nodes (JetStream, MQTT, the auth callout to flared) and HAProxy in front of their MQTT listeners, for
# `make cluster BROKER=nats` and `make chaos`; in the foreground until SIGTERM/SIGINT, which stops all four.
#   In $FLARE_DATA_DIR/nats: issuer.seed (`flare nats-issuer`), password, callout.password, system.password, n1..n3.conf from broker/nats/node.conf.in,
#   js-n1..n3 (the nodes' stores), haproxy.cfg, urls (the nodes' client URLs, for FLARE_NATS_URLS).
#   flared's MQTT connection (and local tools) reach the cluster at 127.0.0.1:$FLARE_MQTT_PORT (HAProxy, round robin, a
#   node that stops answering taken out within a second); phones over TLS at $FLARE_MQTT_TLS_PORT when it is set. Each
#   node's ports: FLARE_NATS_PORT (default 14222) and up.
# Never reload a node's configuration (a reload deletes retained messages cluster-wide: docs/scaling.md).
set -euo pipefail
here=$(cd "$(dirname "$0")/.." && pwd)
: "${FLARE_DATA_DIR:?set FLARE_DATA_DIR}"
: "${FLARE_MQTT_PORT:?set FLARE_MQTT_PORT}"
bin=${FLARE_BIN:-$here/.build/debug}
server=$("$here/scripts/nats-server.sh")
[ "${server#/}" != "$server" ] || server=$here/$server
dir=$FLARE_DATA_DIR/nats
mkdir -p "$dir"
chmod 700 "$dir"
issuer=$("$bin/flare" nats-issuer --data-dir "$FLARE_DATA_DIR")
# Three passwords, each for one login with only its rights: flared's own (checked by flared's callout; the nodes never
# hold it), the callout's (flare-auth) and the system account's (flare-sys).
for name in password callout.password system.password; do
  if [ ! -s "$dir/$name" ]; then
    (umask 077; head -c 24 /dev/urandom | base64 | tr '+/' '-_' | tr -d '=\n' > "$dir/$name"; echo >> "$dir/$name")
  fi
done
callout_password=$(head -n 1 "$dir/callout.password")
system_password=$(head -n 1 "$dir/system.password")
port_taken() { (exec 3<>"/dev/tcp/127.0.0.1/$1") 2>/dev/null; }
next=${FLARE_NATS_PORT:-14222}
take_port() {  # sets $port to the first free port from $next and moves $next past it
  while port_taken "$next" || [ "$next" = "$FLARE_MQTT_PORT" ] || [ "$next" = "${FLARE_MQTT_TLS_PORT:-}" ]; do next=$((next + 1)); done
  port=$next; next=$((next + 1))
}
declare -a client mqtt http route
for n in 1 2 3; do
  take_port; client[$n]=$port; take_port; mqtt[$n]=$port; take_port; http[$n]=$port; take_port; route[$n]=$port
done
routes="nats-route://127.0.0.1:${route[1]}, nats-route://127.0.0.1:${route[2]}, nats-route://127.0.0.1:${route[3]}"
for n in 1 2 3; do
  sed -e "s|@NAME@|n$n|" -e "s|@HOST@|127.0.0.1|g" -e "s|@CLIENT_PORT@|${client[$n]}|" -e "s|@HTTP_PORT@|${http[$n]}|" \
      -e "s|@CLUSTER_PORT@|${route[$n]}|" -e "s|@MQTT_PORT@|${mqtt[$n]}|" -e "s|@STORE_DIR@|$dir/js-n$n|" \
      -e "s|@ROUTES@|$routes|" -e "s|@CALLOUT_PASSWORD@|$callout_password|g" -e "s|@SYSTEM_PASSWORD@|$system_password|g" -e "s|@ISSUER@|$issuer|" \
      "$here/broker/nats/node.conf.in" > "$dir/n$n.conf"
  chmod 600 "$dir/n$n.conf"
done
echo "nats://127.0.0.1:${client[1]},nats://127.0.0.1:${client[2]},nats://127.0.0.1:${client[3]}" > "$dir/urls"
# Two descriptors a connection (phone side, node side), within this process's limit.
maxconn=$(( ($(ulimit -n) - 64) / 2 ))
((maxconn <= 50000)) || maxconn=50000
sed -e "s|@MAXCONN@|$maxconn|" -e "s|@PORT@|$FLARE_MQTT_PORT|" -e "s|@MQTT1@|${mqtt[1]}|" -e "s|@MQTT2@|${mqtt[2]}|" \
    -e "s|@MQTT3@|${mqtt[3]}|" "$here/broker/nats/haproxy.cfg.in" > "$dir/haproxy.cfg"
# Phones over TLS through HAProxy (FLARE_MQTT_TLS_PORT; `make cluster BROKER=nats` sets it): the certificate of
# FLARE_MQTT_TLS_CERT and FLARE_MQTT_TLS_KEY, or a self-signed one for localhost.
tls_port=${FLARE_MQTT_TLS_PORT:-}
if [ -n "$tls_port" ]; then
  if port_taken "$tls_port"; then
    echo "flare: port $tls_port is already in use; set FLARE_MQTT_TLS_PORT to a free port (or empty for no TLS listener)" >&2
    exit 1
  fi
  tls_cert=${FLARE_MQTT_TLS_CERT:-}
  tls_key=${FLARE_MQTT_TLS_KEY:-}
  if [ -z "$tls_cert" ] || [ -z "$tls_key" ]; then
    "$here/scripts/self-signed-cert.sh" "$dir/tls"
    tls_cert=$dir/tls/cert.pem
    tls_key=$dir/tls/key.pem
  fi
  mkdir -p "$dir/tls"
  (umask 077; cat "$tls_cert" "$tls_key" > "$dir/tls/haproxy.pem")
  sed -e "s|@TLS_BIND@|${FLARE_MQTT_TLS_BIND:-127.0.0.1}|" -e "s|@TLS_PORT@|$tls_port|" -e "s|@TLS_PEM@|$dir/tls/haproxy.pem|" \
      "$here/broker/nats/haproxy-tls.cfg.in" >> "$dir/haproxy.cfg"
fi

pids=()
stop_all() {
  trap - INT TERM EXIT
  for pid in "${pids[@]}"; do kill -TERM "$pid" 2>/dev/null || true; done
  for pid in "${pids[@]}"; do wait "$pid" 2>/dev/null || true; done
}
trap 'stop_all; exit 0' INT TERM HUP
trap stop_all EXIT
for n in 1 2 3; do
  # A session of its own: a terminal's hangup (SIGHUP to the process group) would make a node reload its configuration,
  # which deletes retained messages. This script stops the nodes itself, with SIGTERM.
  setsid "$server" -c "$dir/n$n.conf" 2> >(sed -u "s/^/nats-n$n: /" >&2) &
  pids+=($!)
  echo "$!" > "$dir/n$n.pid"
done
for n in 1 2 3; do
  for _ in $(seq 300); do
    curl -fsS "http://127.0.0.1:${http[$n]}/healthz" >/dev/null 2>&1 && break
    sleep 0.1
  done
  curl -fsS "http://127.0.0.1:${http[$n]}/healthz" >/dev/null 2>&1 || { echo "flare: NATS node n$n did not become healthy within 30 s" >&2; exit 1; }
done
/usr/sbin/haproxy -db -f "$dir/haproxy.cfg" 2> >(sed -u "s/^/haproxy: /" >&2) &
pids+=($!)
echo "flare: NATS cluster up: nodes $(cat "$dir/urls"), MQTT through HAProxy on 127.0.0.1:$FLARE_MQTT_PORT${tls_port:+, MQTT over TLS on port $tls_port}" >&2
wait

#!/usr/bin/env bash
# `make run`: broker + flared in the foreground, a demo share moved by `flare track`, and the viewer link.
# `make cluster` (FLARE_INSTANCES=2): a throwaway PostgreSQL in the data directory, the broker, two flared on
# FLARE_HTTP_ADDR and the next port sharing the database and the location stream, and the demo share's link on each.
# Ctrl-C stops everything cleanly (flared drains: HTTP, then MQTT, then the store), in reverse order of start.
# Under `make cluster` this script also supervises the instances: one that fails (killed, crashed, exit status not 0)
# is reported and started again while the others keep serving; see supervise below.
set -euo pipefail
here=$(cd "$(dirname "$0")/.." && pwd)
bin=${FLARE_BIN:-$here/.build/debug}
instances=${FLARE_INSTANCES:-1}
[[ $instances =~ ^[1-9]$ ]] || { echo "flare: FLARE_INSTANCES must be 1 to 9" >&2; exit 1; }
# FLARE_BROKER=nats (`make cluster BROKER=nats`): three NATS nodes behind HAProxy instead of mosquitto
# (scripts/nats-cluster.sh); flared answers their logins.
broker=${FLARE_BROKER:-mosquitto}
[[ $broker == mosquitto || $broker == nats ]] || { echo "flare: FLARE_BROKER must be mosquitto or nats" >&2; exit 1; }
if ((instances > 1)); then
  export FLARE_DATA_DIR=${FLARE_DATA_DIR:-$here/data-cluster}
else
  export FLARE_DATA_DIR=${FLARE_DATA_DIR:-$here/data}
fi
export FLARE_MQTT_PORT=${FLARE_MQTT_PORT:-1884}
export FLARE_HTTP_ADDR=${FLARE_HTTP_ADDR:-127.0.0.1:8080}
mkdir -p "$FLARE_DATA_DIR"
export FLARE_DATA_DIR=$(cd "$FLARE_DATA_DIR" && pwd)
http_port=${FLARE_HTTP_ADDR##*:}
port_taken() { (exec 3<>"/dev/tcp/127.0.0.1/$1") 2>/dev/null; }

# The broker's TLS and WebSockets listeners. Set explicitly, a port is used as given (empty: no such listener;
# taken: broker.sh refuses). Unset, they are 8883 and 8083 with the default FLARE_MQTT_PORT when those are
# free, and otherwise follow FLARE_MQTT_PORT: the first free port from FLARE_MQTT_PORT+1 and +2, so a second
# instance needs only FLARE_DATA_DIR, FLARE_HTTP_ADDR and FLARE_MQTT_PORT.
chosen=" $FLARE_MQTT_PORT $http_port ${FLARE_MQTT_TLS_PORT:-} ${FLARE_MQTT_WS_PORT:-} "
pick_port() {  # name default offset: sets $name unless it is set, the port it takes is printed in the banner
  local name=$1 default=$2 offset=$3 port tries
  [ -n "${!name+set}" ] && return 0
  if [ "$FLARE_MQTT_PORT" = 1884 ] && [[ $chosen != *" $default "* ]] && ! port_taken "$default"; then
    port=$default
  else
    [[ $FLARE_MQTT_PORT =~ ^[0-9]+$ ]] || { echo "flare: FLARE_MQTT_PORT=$FLARE_MQTT_PORT is not a port number" >&2; exit 1; }
    port=$((FLARE_MQTT_PORT + offset))
    for ((tries = 0; tries < 50; tries++, port++)); do
      ((port <= 65535)) || break
      [[ $chosen == *" $port "* ]] || port_taken "$port" || break
    done
    if ((tries == 50 || port > 65535)); then
      echo "flare: no free port for $name from $((FLARE_MQTT_PORT + offset)); set $name to a free port (or empty for no such listener)" >&2
      exit 1
    fi
  fi
  [ "$FLARE_MQTT_PORT" != 1884 ] || [ "$port" = "$default" ] || echo "flare: port $default is in use; $name is $port" >&2
  chosen+="$port "
  export "$name=$port"
}
if [ "$broker" = nats ]; then
  # HAProxy ends TLS for the phones (scripts/nats-cluster.sh); the cluster has no MQTT over WebSockets.
  if [ -n "${FLARE_MQTT_WS_PORT:-}" ]; then
    echo "flare: FLARE_MQTT_WS_PORT is mosquitto's listener; with FLARE_BROKER=nats phones reach the cluster through HAProxy over TLS (FLARE_MQTT_TLS_PORT)" >&2
    exit 1
  fi
  export FLARE_MQTT_WS_PORT=""
  pick_port FLARE_MQTT_TLS_PORT 8883 1
else
  pick_port FLARE_MQTT_TLS_PORT 8883 1
  pick_port FLARE_MQTT_WS_PORT 8083 2
fi

pids=()
postgres_started=""
sleeper=""  # the supervisor's pause before a restart
stop_all() {
  trap - INT TERM EXIT
  echo "flare: stopping" >&2
  [ -z "$sleeper" ] || kill "$sleeper" 2>/dev/null || true
  for ((i=${#pids[@]}-1; i>=0; i--)); do
    [ -n "${pids[$i]}" ] || continue  # an instance the supervisor gave up on
    kill -TERM "${pids[$i]}" 2>/dev/null || true; wait "${pids[$i]}" 2>/dev/null || true
  done
  [ -z "$postgres_started" ] || "$here/scripts/postgres.sh" stop
}
# A signal during start-up stops what has started and goes no further.
trap 'stop_all; exit 130' INT
trap 'stop_all; exit 143' TERM
trap stop_all EXIT

http_host=${FLARE_HTTP_ADDR%:*}
http_ports=()
for ((n = 0; n < instances; n++)); do
  port=$((http_port + n))
  if port_taken "$port" || { ((n > 0)) && [[ $chosen == *" $port "* ]]; }; then
    echo "flare: HTTP port $port is already in use; set FLARE_HTTP_ADDR (e.g. 127.0.0.1:8081; each further instance takes the next port)" >&2
    exit 1
  fi
  http_ports+=("$port")
done

# /metrics is on a loopback listener of its own (FLARE_METRICS_ADDR), one per instance. Unset: 9464 (flared's
# default) and up, each the first free port; set: that address and the next ports (each must be free); set empty:
# no metrics listener.
metrics_addrs=()
if [ -z "${FLARE_METRICS_ADDR+set}" ] || [ -n "$FLARE_METRICS_ADDR" ]; then
  metrics_host=127.0.0.1 next=9464 explicit=""
  if [ -n "${FLARE_METRICS_ADDR:-}" ]; then
    metrics_host=${FLARE_METRICS_ADDR%:*} next=${FLARE_METRICS_ADDR##*:} explicit=yes
    [[ $next =~ ^[0-9]+$ ]] || { echo "flare: FLARE_METRICS_ADDR=$FLARE_METRICS_ADDR is not host:port" >&2; exit 1; }
  fi
  for ((n = 0; n < instances; n++)); do
    port=$next
    if [ -z "$explicit" ]; then
      while port_taken "$port" || [[ $chosen == *" $port "* ]] || [[ " ${http_ports[*]} " == *" $port "* ]]; do port=$((port + 1)); done
    elif port_taken "$port" || [[ $chosen == *" $port "* ]] || [[ " ${http_ports[*]} " == *" $port "* ]]; then
      echo "flare: port $port is already in use; set FLARE_METRICS_ADDR to a free address (each further instance takes the next port; empty for no metrics listener)" >&2
      exit 1
    fi
    chosen+="$port "
    metrics_addrs+=("$metrics_host:$port")
    next=$((port + 1))
  done
fi
if ((instances == 1)); then export FLARE_METRICS_ADDR=${metrics_addrs[0]:-}; fi

if ((instances > 1)); then
  # The shared store. FLARE_PG_PORT: a free port from 15432 unless given.
  if [ -z "${FLARE_PG_PORT:-}" ]; then
    FLARE_PG_PORT=15432
    while port_taken "$FLARE_PG_PORT" || [[ $chosen == *" $FLARE_PG_PORT "* ]]; do FLARE_PG_PORT=$((FLARE_PG_PORT + 1)); done
  fi
  export FLARE_PG_PORT
  postgres_started=yes
  FLARE_STORE_URL=$("$here/scripts/postgres.sh" start)
  export FLARE_STORE_URL
fi

if [ "$broker" = nats ]; then
  rm -f "$FLARE_DATA_DIR/nats/urls"
  FLARE_BIN=$bin "$here/scripts/nats-cluster.sh" &
  pids+=($!)
  for _ in $(seq 400); do
    [ -s "$FLARE_DATA_DIR/nats/urls" ] && (exec 3<>"/dev/tcp/127.0.0.1/$FLARE_MQTT_PORT") 2>/dev/null && break
    kill -0 "${pids[-1]}" 2>/dev/null || { echo "flare: the NATS cluster did not start (see above)" >&2; exit 1; }
    sleep 0.1
  done
  export FLARE_BROKER=nats FLARE_NATS_URLS
  FLARE_NATS_URLS=$(cat "$FLARE_DATA_DIR/nats/urls")
else
  "$here/scripts/broker.sh" 2> >(sed -u 's/^/mosquitto: /' >&2) &
  pids+=($!)
  for _ in $(seq 100); do
    (exec 3<>"/dev/tcp/127.0.0.1/$FLARE_MQTT_PORT") 2>/dev/null && break
    kill -0 "${pids[-1]}" 2>/dev/null || { echo "flare: mosquitto did not start (see above)" >&2; exit 1; }
    sleep 0.1
  done
fi

# One flared per instance, each with its own HTTP port and MQTT client id (its own persistent session in the
# shared subscription; a restarted instance takes its own session back). The first makes the token key and the
# owner key; the others start once it is up.
flared_pids=()   # by instance; empty once the supervisor gives up on it
flared_slot=()   # its index in pids, so that a restarted instance is stopped in the same order
started_at=()    # $SECONDS at its last start
names=()         # a, b, c, …
client_id_base=${FLARE_MQTT_CLIENT_ID:-flared}
# The environment of instance n, as `env` arguments: also the command printed for starting it by hand.
instance_env() {
  local n=$1
  if ((instances > 1)); then
    echo "FLARE_HTTP_ADDR=$http_host:${http_ports[$n]} FLARE_METRICS_ADDR=${metrics_addrs[$n]:-} FLARE_MQTT_CLIENT_ID=$client_id_base-${names[$n]}"
  fi
}
start_flared() {
  local n=$1
  if ((instances > 1)); then
    # shellcheck disable=SC2046  # instance_env is words without spaces
    env $(instance_env "$n") "$bin/flared" 2> >(sed -u "s/^/flared-${names[$n]}: /" >&2) &
  else
    "$bin/flared" &
  fi
  flared_pids[$n]=$!
  started_at[$n]=$SECONDS
  if [ -z "${flared_slot[$n]:-}" ]; then flared_slot[$n]=${#pids[@]}; fi
  pids[${flared_slot[$n]}]=$!
}
# The supervisor (several instances): like systemd's Restart=on-failure (deploy/systemd/flared.service), with a
# pause that doubles while an instance keeps failing soon after its start, so a flared that cannot start (a broken
# setting, a port taken) does not spin; an instance that ran for a minute starts again from 1 s.
max_failures=5
failures=()      # by instance: failures in a row, each within a minute of its start (restarts: at most max_failures)
# The command that starts instance n by hand, as this script starts it (other FLARE_ settings given to make are
# left out: they may hold secrets).
manual_command() {
  echo "FLARE_DATA_DIR=$FLARE_DATA_DIR FLARE_STORE_URL=$FLARE_STORE_URL FLARE_MQTT_PORT=$FLARE_MQTT_PORT${FLARE_NATS_URLS:+ FLARE_BROKER=nats FLARE_NATS_URLS=$FLARE_NATS_URLS} $(instance_env "$1") $bin/flared"
}
describe_exit() {  # a wait status as words
  if (($1 > 128)); then echo "signal $(($1 - 128))"; else echo "exit status $1"; fi
}
supervise() {
  local n live dead status name how delay
  while :; do
    live=()
    for ((n = 0; n < instances; n++)); do [ -z "${flared_pids[$n]}" ] || live+=("${flared_pids[$n]}"); done
    if ((${#live[@]} == 0)); then
      echo "flare: no flared instance is running any more; stopping" >&2
      exit 1
    fi
    dead="" status=0
    wait -n -p dead "${live[@]}" || status=$?
    [ -n "$dead" ] || continue
    for ((n = 0; n < instances; n++)); do [ "${flared_pids[$n]}" != "$dead" ] || break; done
    name=$(tr a-z A-Z <<<"${names[$n]}")
    how=$(describe_exit "$status")
    flared_pids[$n]=""
    pids[${flared_slot[$n]}]=""
    if ((status == 0)); then
      echo "flare: flared $name (pid $dead) exited (status 0); not restarting it. The others keep serving; to start it again (outside Ctrl-C's reach): $(manual_command "$n")" >&2
      continue
    fi
    ((SECONDS - started_at[n] < 60)) || failures[$n]=0
    failures[$n]=$((${failures[$n]:-0} + 1))
    if ((failures[n] > max_failures)); then
      echo "flare: flared $name (pid $dead) died ($how) after $max_failures restarts in a row, each failing within a minute; not restarting it. The others keep serving; to start it again (outside Ctrl-C's reach): $(manual_command "$n")" >&2
      continue
    fi
    delay=$((1 << (failures[n] - 1)))
    echo "flare: flared $name (pid $dead) died ($how); restarting in $delay s" >&2
    # In the background and waited for, so that Ctrl-C (or SIGTERM to this script alone) is heard at once.
    sleep "$delay" &
    sleeper=$!
    wait "$sleeper" || true
    sleeper=""
    start_flared "$n"
    echo "flare: flared $name restarted (pid ${flared_pids[$n]})" >&2
  done
}

for ((n = 0; n < instances; n++)); do
  names[$n]=$(printf "\\$(printf %o $((97 + n)))")
  start_flared "$n"
  for _ in $(seq 150); do
    curl -fsS "http://127.0.0.1:${http_ports[$n]}/healthz" >/dev/null 2>&1 && break
    kill -0 "${flared_pids[$n]}" 2>/dev/null || { echo "flare: flared did not start (see above)" >&2; exit 1; }
    sleep 0.1
  done
done

"$bin/flare" share create --name "Demo" --json > "$FLARE_DATA_DIR/demo-share.json"
track_options=()
[ "$broker" = mosquitto ] || track_options+=(--mqtt311)
"$bin/flare" track --share-file "$FLARE_DATA_DIR/demo-share.json" --interval "${FLARE_DEMO_INTERVAL:-2}" --quiet "${track_options[@]}" &
pids+=($!)
link=$(sed -n 's/.*"share_url":"\([^"]*\)".*/\1/p' "$FLARE_DATA_DIR/demo-share.json")
links=$link
if ((${#metrics_addrs[@]} == 0)); then
  metrics="none (FLARE_METRICS_ADDR is empty)"
elif ((instances == 1)); then
  metrics="http://${metrics_addrs[0]}/metrics   (not on the public listener)"
else
  metrics="not on the public listeners:"
  for ((n = 0; n < instances; n++)); do metrics+=$'\n'"      flared-${names[$n]}  http://${metrics_addrs[$n]}/metrics"; done
fi
if ((instances > 1)); then
  # The same link on each instance: any of them answers it.
  token=${link##*/}
  links=""
  for ((n = 0; n < instances; n++)); do links+=$'\n'"      flared-${names[$n]}  http://$http_host:${http_ports[$n]}/s/$token"; done
  links+=$'\n'"    store:      PostgreSQL $FLARE_STORE_URL (data in $FLARE_DATA_DIR/postgres)"
  links+=$'\n'"    an instance that fails (try kill -9) is restarted after 1 s, then 2, 4, 8, 16 s while it keeps failing"
  links+=$'\n'"    within a minute of its start; after that, or when it exits with status 0, it is left stopped and the"
  links+=$'\n'"    command to start it is printed. The others keep serving throughout."
fi
cat >&2 <<MSG

  Flare is running$( ((instances > 1)) && echo " as $instances instances on one PostgreSQL").
    viewer link (the demo share moves every ${FLARE_DEMO_INTERVAL:-2} s):  $links
    owner key:  $FLARE_DATA_DIR/owner.key   (flare share create | show | stop | extend)
    broker:     $( [ "$broker" = nats ] && echo "NATS, three nodes ($FLARE_NATS_URLS; try kill -9 of one: cat $FLARE_DATA_DIR/nats/n1.pid), phones through HAProxy at ")mqtt://127.0.0.1:$FLARE_MQTT_PORT${FLARE_MQTT_TLS_PORT:+   mqtts://localhost:$FLARE_MQTT_TLS_PORT (self-signed unless FLARE_MQTT_TLS_CERT)}${FLARE_MQTT_WS_PORT:+   ws://127.0.0.1:$FLARE_MQTT_WS_PORT}
    metrics:    $metrics
  Ctrl-C stops everything.

MSG
if ((instances == 1)); then
  wait "${flared_pids[0]}"  # `make run`: flared's end is the end (its status is run.sh's)
  exit
fi
supervise

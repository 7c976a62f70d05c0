#!/usr/bin/env bash
# Renders broker/mosquitto.conf.in into $FLARE_DATA_DIR/broker/ and runs mosquitto with it in the foreground.
# Refuses clearly, instead of hanging, when the port is taken.
#
# On first start it also makes, with owner-only permissions:
#   $FLARE_DATA_DIR/token.key                the HS256 key for share tokens (flared uses the same file)
#   $FLARE_DATA_DIR/broker/flared.password   the bridge's broker password (flared reads it)
# and on every start it rebuilds the broker's password file (hashed, from broker/*.password) and ACL file.
set -euo pipefail
here=$(cd "$(dirname "$0")/.." && pwd)
data_dir=${FLARE_DATA_DIR:-$here/data}
port=${FLARE_MQTT_PORT:-1884}
bind=${FLARE_MQTT_BIND:-127.0.0.1}
# Optional listeners: set a port to turn one on (`make run` sets both). They bind like the plain one unless told.
tls_port=${FLARE_MQTT_TLS_PORT:-}
tls_bind=${FLARE_MQTT_TLS_BIND:-$bind}
ws_port=${FLARE_MQTT_WS_PORT:-}
ws_bind=${FLARE_MQTT_WS_BIND:-$bind}
plugin=${FLARE_BROKER_PLUGIN:-$here/.build/broker/flare_auth.so}
# How often mosquitto saves its state while running: N seconds, or changes:N (every N changes: retained messages,
# queued messages). A crash (kill -9, power loss) loses what changed since the last save. `off` keeps nothing on
# disk, not even at an orderly stop (the benchmarks' reference).
autosave=${FLARE_MQTT_AUTOSAVE:-5}
persistence=true
case "$autosave" in
  changes:[1-9]*) autosave_interval=${autosave#changes:}; autosave_on_changes=true ;;
  [1-9]*) autosave_interval=$autosave; autosave_on_changes=false ;;
  off) persistence=false; autosave_interval=0; autosave_on_changes=false ;;
  *) autosave_interval=x ;;
esac
if ! [[ "$autosave_interval" =~ ^[0-9]+$ ]]; then
  echo "flare: FLARE_MQTT_AUTOSAVE must be a number of seconds (e.g. 5) or changes:N (e.g. changes:10000), not '$autosave'" >&2
  exit 1
fi

# A share's publish bound, shared with flared's HTTP ingest: RATE/BURST.
fix_rate=${FLARE_FIX_RATE_PER_SHARE:-100/6000}
if ! [[ "$fix_rate" =~ ^[0-9]+(\.[0-9]+)?/[0-9]+$ ]]; then
  echo "flare: FLARE_FIX_RATE_PER_SHARE must be fixes per second/burst (e.g. 100/6000), not '$fix_rate'" >&2
  exit 1
fi

umask 077
mkdir -p "$data_dir/broker"
data_dir=$(cd "$data_dir" && pwd)
broker_dir=$data_dir/broker
port_taken() { (exec 3<>"/dev/tcp/127.0.0.1/$1") 2>/dev/null; }
if port_taken "$port"; then
  echo "flare: port $port is already in use; set FLARE_MQTT_PORT to a free port" >&2
  exit 1
fi
if [ -n "$tls_port" ] && port_taken "$tls_port"; then
  echo "flare: port $tls_port is already in use; set FLARE_MQTT_TLS_PORT to a free port (or empty for no TLS listener)" >&2
  exit 1
fi
if [ -n "$ws_port" ] && port_taken "$ws_port"; then
  echo "flare: port $ws_port is already in use; set FLARE_MQTT_WS_PORT to a free port (or empty for no WebSockets listener)" >&2
  exit 1
fi
if [ ! -f "$plugin" ]; then
  echo "flare: the broker auth plugin $plugin is not built; run \`make plugin\`" >&2
  exit 1
fi

random_secret() { head -c 32 /dev/urandom | base64 -w0 | tr '+/' '-_' | tr -d '='; }

# The token key: whichever of flared and the broker starts first creates it.
[ -s "$data_dir/token.key" ] || { random_secret > "$data_dir/token.key"; echo >> "$data_dir/token.key"; }
[ -s "$broker_dir/flared.password" ] || { random_secret > "$broker_dir/flared.password"; echo >> "$broker_dir/flared.password"; }

# Password file: one line per service account that has a password file; hashed in place by mosquitto_passwd
# (-U), so no password ever appears on a command line.
passwd_tmp=$(mktemp "$broker_dir/passwd.XXXXXX")
for account in flared admin bench; do
  [ -s "$broker_dir/$account.password" ] || continue
  printf '%s:%s\n' "$account" "$(head -n1 "$broker_dir/$account.password")" >> "$passwd_tmp"
done
mosquitto_passwd=$(command -v mosquitto_passwd || echo /usr/bin/mosquitto_passwd)
"$mosquitto_passwd" -U "$passwd_tmp"
mv -f "$passwd_tmp" "$broker_dir/passwd"
cp "$here/broker/acl.in" "$broker_dir/acl"

# Started as root, mosquitto would switch to the `mosquitto` user and then be unable to write its
# persistence file in a data directory that belongs to whoever runs Flare: run it as that user instead.
sed -e "s|@PORT@|$port|g" -e "s|@BIND@|$bind|g" -e "s|@DATA@|$broker_dir|g" -e "s|@USER@|$(id -un)|g" \
    -e "s|@PLUGIN@|$plugin|g" -e "s|@KEYFILE@|$data_dir/token.key|g" \
    -e "s|@FIX_RATE@|$fix_rate|g" -e "s|@PERSISTENCE@|$persistence|g" -e "s|@AUTOSAVE_INTERVAL@|$autosave_interval|g" -e "s|@AUTOSAVE_ON_CHANGES@|$autosave_on_changes|g" \
  "$here/broker/mosquitto.conf.in" > "$broker_dir/mosquitto.conf"
if [ -n "$tls_port" ]; then
  tls_cert=${FLARE_MQTT_TLS_CERT:-}
  tls_key=${FLARE_MQTT_TLS_KEY:-}
  if [ -z "$tls_cert" ] || [ -z "$tls_key" ]; then
    "$here/scripts/self-signed-cert.sh" "$broker_dir/tls"
    tls_cert=$broker_dir/tls/cert.pem
    tls_key=$broker_dir/tls/key.pem
  fi
  sed -e "s|@TLS_PORT@|$tls_port|g" -e "s|@TLS_BIND@|$tls_bind|g" -e "s|@TLS_CERT@|$tls_cert|g" -e "s|@TLS_KEY@|$tls_key|g" \
    "$here/broker/tls-listener.conf.in" >> "$broker_dir/mosquitto.conf"
fi
if [ -n "$ws_port" ]; then
  sed -e "s|@WS_PORT@|$ws_port|g" -e "s|@WS_BIND@|$ws_bind|g" "$here/broker/websockets-listener.conf.in" >> "$broker_dir/mosquitto.conf"
fi

mosquitto=$(command -v mosquitto || echo /usr/sbin/mosquitto)
exec "$mosquitto" -c "$broker_dir/mosquitto.conf"

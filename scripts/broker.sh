#!/usr/bin/env bash
# Renders broker/mosquitto.conf.in into $FLARE_DATA_DIR/broker/ and runs mosquitto with it in the foreground.
# Refuses clearly, instead of hanging, when the port is taken.
set -euo pipefail
here=$(cd "$(dirname "$0")/.." && pwd)
data_dir=${FLARE_DATA_DIR:-$here/data}
port=${FLARE_MQTT_PORT:-1884}
bind=${FLARE_MQTT_BIND:-127.0.0.1}

mkdir -p "$data_dir/broker"
data_dir=$(cd "$data_dir" && pwd)
if (exec 3<>"/dev/tcp/127.0.0.1/$port") 2>/dev/null; then
  echo "flare: port $port is already in use; set FLARE_MQTT_PORT to a free port" >&2
  exit 1
fi
# Started as root, mosquitto would switch to the `mosquitto` user and then be unable to write its
# persistence file in a data directory that belongs to whoever runs Flare: run it as that user instead.
sed -e "s|@PORT@|$port|g" -e "s|@BIND@|$bind|g" -e "s|@DATA@|$data_dir/broker|g" -e "s|@USER@|$(id -un)|g" \
  "$here/broker/mosquitto.conf.in" > "$data_dir/broker/mosquitto.conf"
mosquitto=$(command -v mosquitto || echo /usr/sbin/mosquitto)
exec "$mosquitto" -c "$data_dir/broker/mosquitto.conf"

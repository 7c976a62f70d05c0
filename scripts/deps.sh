#!/usr/bin/env bash
# Installs the Debian packages Flare needs, if any are missing, and ruff, http_ece, openapi-spec-validator and
# Schemathesis (pinned, from PyPI) into .build/venv. Used by `make run` and `make test`.
set -euo pipefail

packages=(mosquitto mosquitto-clients mosquitto-dev gcc libc6-dev libmosquitto-dev libsqlite3-dev libmicrohttpd-dev libssl-dev libjs-leaflet pkg-config curl)
# OwnTracks provisioning QR codes; zbar-tools reads them back in the tests.
packages+=(libqrencode-dev zbar-tools)
# `flare track --gpsd` talks to gpsd; the tests run a real gpsd on a pseudo-terminal.
packages+=(gpsd gpsd-clients)
# The PostgreSQL store (FLARE_STORE_URL=postgresql://…); the tests and `make cluster` start a server of their own.
packages+=(postgresql libpq-dev)
# Webhooks are posted with libcurl, pinned to the address the address rule checked.
packages+=(libcurl4-openssl-dev)
# End-to-end encrypted shares: NaCl secretbox (libsodium; TweetNaCl for the page); the tests check both against PyNaCl.
packages+=(libsodium-dev python3-nacl node-tweetnacl)
# Mail to contacts: the tests run a real SMTP server (aiosmtpd).
packages+=(python3-aiosmtpd)
# The NATS cluster as the broker: Debian's C client, HAProxy in front of the nodes, pip to fetch the server the tests
# run (scripts/nats-server.sh).
packages+=(libnats-dev haproxy python3-pip)
# Web Push: the tests' push receiver verifies VAPID signatures and decrypts (cryptography); its tests sign with PyJWT.
packages+=(python3-cryptography python3-jwt)
# make chaos: a read-only store on a loop-mounted ext4 image. The cluster tests: an instance whose clock runs fast.
packages+=(e2fsprogs util-linux faketime)
# The MQTT contract (docs/asyncapi.yaml): its test checks it against the AsyncAPI JSON Schema and records what flared
# publishes over MQTT 5.
packages+=(python3-jsonschema python3-yaml python3-paho-mqtt)
# The Python tests run under Debian's pytest; the venv below (Debian's Python, its packages visible) holds the PyPI tools.
packages+=(python3-pytest python3-venv)
if [ "${1:-}" = "--browser" ]; then
  packages+=(chromium chromium-driver fonts-noto-cjk python3-selenium python3-pip)
fi
if [ "${1:-}" = "--bench" ]; then
  packages+=(wrk nginx-light python3-paho-mqtt)
fi

missing=()
for package in "${packages[@]}"; do
  dpkg-query -W -f='${Status}' "$package" 2>/dev/null | grep -q "install ok installed" || missing+=("$package")
done
if [ ${#missing[@]} -gt 0 ]; then
  echo "flare: installing ${missing[*]}" >&2
  sudo=""
  if [ "$(id -u)" -ne 0 ]; then
    command -v sudo >/dev/null || { echo "flare: need root (or sudo) to install: ${missing[*]}" >&2; exit 1; }
    sudo="sudo"
  fi
  export DEBIAN_FRONTEND=noninteractive
  $sudo apt-get update -qq >/dev/null
  $sudo apt-get install -y -qq --no-install-recommends "${missing[@]}" >/dev/null
fi
"$(dirname "$0")/nats-server.sh" >/dev/null

# ruff, the Python linter `make lint` runs (ruff.toml), from PyPI at a pinned version, in .build/venv.
ruff_version=0.17.6
venv=$(cd "$(dirname "$0")/.." && pwd)/.build/venv
if [ "$("$venv/bin/ruff" --version 2>/dev/null)" != "ruff $ruff_version" ]; then
  echo "flare: installing ruff $ruff_version into $venv" >&2
  /usr/bin/python3 -m venv --system-site-packages "$venv"
  "$venv/bin/pip" install --quiet --disable-pip-version-check "ruff==$ruff_version"
fi

# http_ece, which the tests' push receiver decrypts Web Push messages with (RFC 8291), pinned, in the same venv (its
# cryptography is Debian's, seen through --system-site-packages).
http_ece_version=1.2.1
if ! "$venv/bin/python" -c 'import http_ece' 2>/dev/null; then
  echo "flare: installing http_ece $http_ece_version into $venv" >&2
  "$venv/bin/pip" install --quiet --disable-pip-version-check "http_ece==$http_ece_version"
fi

# Libraries that are not Flare's, which the track tests read its exports with (Tests/scripts/test_track.py): gpxpy
# (GPX 1.1), geojson (RFC 7946 with its own validation) and fastkml (KML 2.2), pinned, in the same venv.
track_readers="gpxpy==1.6.2 geojson==3.3.0 fastkml==1.4.0"
if ! "$venv/bin/python" -c 'import gpxpy, geojson, fastkml' 2>/dev/null; then
  echo "flare: installing $track_readers into $venv" >&2
  # shellcheck disable=SC2086
  "$venv/bin/pip" install --quiet --disable-pip-version-check $track_readers
fi

# The OpenAPI document's checks (Tests/scripts/test_openapi.py): openapi-spec-validator, and Schemathesis against a live
# flared, run as the venv's own programs. Schemathesis reads a live event stream with urllib3 2 (`read1`), which the
# venv then holds over Debian's 1.26.
openapi_spec_validator_version=0.9.0
schemathesis_version=4.32.5
urllib3_version=2.8.0
if [ "$("$venv/bin/python" -m pip show openapi-spec-validator 2>/dev/null | sed -n 's/^Version: //p')" != "$openapi_spec_validator_version" ] ||
   [ "$("$venv/bin/schemathesis" --version 2>/dev/null | grep -o '[0-9][0-9.]*$')" != "$schemathesis_version" ] ||
   [ "$("$venv/bin/python" -c 'import urllib3; print(urllib3.__version__)' 2>/dev/null)" != "$urllib3_version" ]; then
  echo "flare: installing openapi-spec-validator $openapi_spec_validator_version, schemathesis $schemathesis_version and urllib3 $urllib3_version into $venv" >&2
  "$venv/bin/pip" install --quiet --disable-pip-version-check "openapi-spec-validator==$openapi_spec_validator_version" \
    "schemathesis==$schemathesis_version" "urllib3==$urllib3_version"
fi

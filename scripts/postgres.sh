#!/usr/bin/env bash
# A throwaway PostgreSQL for `make cluster`, in $FLARE_DATA_DIR/postgres, on 127.0.0.1:$FLARE_PG_PORT.
#   scripts/postgres.sh start   initdb on first use (as the `postgres` user when run as root: initdb and pg_ctl
#                               refuse root), start, create the database `flare`; prints its URL on stdout
#   scripts/postgres.sh stop    fast shutdown
#   scripts/postgres.sh bin     prints the directory of the server's programs (initdb, pg_ctl, pgbench)
# Trust authentication on loopback only: for trying Flare out, not for production (deploy/ has a real service).
set -euo pipefail
command=${1:?usage: postgres.sh start|stop|bin}
: "${FLARE_DATA_DIR:?set FLARE_DATA_DIR}"
: "${FLARE_PG_PORT:?set FLARE_PG_PORT}"
dir=$FLARE_DATA_DIR/postgres
bin=$(ls -d /usr/lib/postgresql/*/bin 2>/dev/null | sort -V | tail -n 1)
[ -n "$bin" ] || { echo "flare: PostgreSQL is not installed (scripts/deps.sh installs Debian's postgresql)" >&2; exit 1; }
as_postgres() {
  if [ "$(id -u)" -eq 0 ]; then runuser -u postgres -- "$@"; else "$@"; fi
}

case "$command" in
bin)
  echo "$bin"
  ;;
start)
  mkdir -p "$dir"
  if [ "$(id -u)" -eq 0 ]; then
    # The server runs as `postgres`, which must reach its directory: let it pass through the data directory
    # (search only: no listing; the secrets there are owner-only files).
    chmod o+x "$FLARE_DATA_DIR"
    chown postgres:postgres "$dir"
  fi
  if [ ! -f "$dir/data/PG_VERSION" ]; then
    as_postgres "$bin/initdb" -D "$dir/data" -U flare --auth=trust -E UTF8 >"$dir/initdb.log" 2>&1 \
      || { echo "flare: initdb failed; see $dir/initdb.log" >&2; exit 1; }
  fi
  if (exec 3<>"/dev/tcp/127.0.0.1/$FLARE_PG_PORT") 2>/dev/null; then
    echo "flare: port $FLARE_PG_PORT is already in use; set FLARE_PG_PORT to a free port" >&2
    exit 1
  fi
  # </dev/null and closing everything else: the server must not keep the caller's pipes open.
  as_postgres "$bin/pg_ctl" -D "$dir/data" -l "$dir/server.log" -w -t 60 \
    -o "-p $FLARE_PG_PORT -k $dir -c listen_addresses=127.0.0.1" start </dev/null >/dev/null 2>&1 \
    || { echo "flare: PostgreSQL did not start; see $dir/server.log" >&2; exit 1; }
  createdb -h 127.0.0.1 -p "$FLARE_PG_PORT" -U flare flare 2>/dev/null || true
  echo "postgresql://flare@127.0.0.1:$FLARE_PG_PORT/flare"
  ;;
stop)
  [ -f "$dir/data/postmaster.pid" ] || exit 0
  as_postgres "$bin/pg_ctl" -D "$dir/data" -m fast -w stop </dev/null >/dev/null 2>&1 || true
  ;;
*)
  echo "usage: postgres.sh start|stop|bin" >&2
  exit 2
  ;;
esac

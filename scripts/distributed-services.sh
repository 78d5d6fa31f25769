#!/usr/bin/env bash
# PostgreSQL 15 and Redis from Debian's packages, on loopback, for the distributed deployment test
# (tests/distributed). Data lives in a directory you give; nothing touches the system's own clusters.
#
#   bash scripts/distributed-services.sh install        # apt-get install what is missing (root); idempotent
#   bash scripts/distributed-services.sh start DIR      # start both; writes DIR/services.env
#   bash scripts/distributed-services.sh stop DIR       # stop both, by the pids recorded in DIR
#
# DIR/services.env holds shell assignments: PG_PID, REDIS_PID, PG_PORT, PG_URL (postgresql+psycopg2://...),
# REDIS_PORT, REDIS_URL. `start` installs missing packages first when run as root.
set -euo pipefail

PG_BIN=/usr/lib/postgresql/15/bin
DB_NAME=airflow
DB_USER=airflow
DB_PASSWORD=airflow

die() { echo "distributed-services: $*" >&2; exit 1; }

have_packages() { [ -x "$PG_BIN/initdb" ] && [ -x "$PG_BIN/postgres" ] && command -v redis-server >/dev/null; }

install() {
  if have_packages; then
    return 0
  fi
  [ "$(id -u)" = 0 ] || die "PostgreSQL 15 or redis-server is missing and only root can install them: apt-get install -y postgresql-15 redis-server"
  command -v apt-get >/dev/null || die "PostgreSQL 15 or redis-server is missing and there is no apt-get to install them"
  # Only what is missing: an installed PostgreSQL is left at its version.
  local packages=()
  [ -x "$PG_BIN/initdb" ] && [ -x "$PG_BIN/postgres" ] || packages+=(postgresql-15)
  command -v redis-server >/dev/null || packages+=(redis-server)
  export DEBIAN_FRONTEND=noninteractive
  apt-get update -qq
  # The packages' own service scripts would start system-wide servers on the default ports: forbid
  # that while installing (policy-rc.d exit 101 = "not allowed"), restoring any existing policy.
  local policy=/usr/sbin/policy-rc.d saved=""
  if [ -e "$policy" ]; then saved="$(mktemp)"; cp -p "$policy" "$saved"; fi
  printf '#!/bin/sh\nexit 101\n' > "$policy"; chmod +x "$policy"
  local status=0
  apt-get install -y -qq --no-install-recommends "${packages[@]}" >/dev/null || status=$?
  if [ -n "$saved" ]; then mv "$saved" "$policy"; else rm -f "$policy"; fi
  [ "$status" = 0 ] || die "apt-get install ${packages[*]} failed (exit $status)"
  have_packages || die "installed, but $PG_BIN/initdb or redis-server is still missing"
}

free_port() {
  python3 -c 'import socket; s = socket.socket(); s.bind(("127.0.0.1", 0)); print(s.getsockname()[1]); s.close()'
}

wait_until() {  # wait_until SECONDS DESCRIPTION COMMAND...: poll every 0.2 s, with a deadline
  local limit=$1 what=$2; shift 2
  local deadline=$((SECONDS + limit))
  until "$@" >/dev/null 2>&1; do
    [ "$SECONDS" -lt "$deadline" ] || die "timed out after ${limit}s waiting for $what"
    sleep 0.2
  done
}

start() {
  local dir=$1
  install
  mkdir -p "$dir"
  dir="$(cd "$dir" && pwd)"
  local env_file="$dir/services.env"
  [ ! -e "$env_file" ] || die "$env_file exists: stop the services there first"
  # Each pid is recorded as soon as its process exists, so `stop` finds it even after a failed start.
  : >"$env_file"
  local pg_port redis_port
  pg_port=$(free_port)
  redis_port=$(free_port)

  # PostgreSQL: initdb refuses to run as root, so the cluster belongs to the postgres user.
  local pgdata="$dir/pgdata" as_pg=()
  if [ "$(id -u)" = 0 ]; then
    chown postgres: "$dir"
    as_pg=(runuser -u postgres --)
  fi
  "${as_pg[@]}" "$PG_BIN/initdb" -D "$pgdata" -U postgres --auth=trust -E UTF8 --no-sync >"$dir/initdb.log" 2>&1 \
    || die "initdb failed: $(tail -5 "$dir/initdb.log")"
  # Loopback only, its own socket directory, and durability off: this is throw-away test data.
  local pg_started=0
  "${as_pg[@]}" "$PG_BIN/pg_ctl" -D "$pgdata" -l "$dir/postgresql.log" -w -t 60 start -o \
    "-c listen_addresses=127.0.0.1 -p $pg_port -k $dir -c fsync=off -c synchronous_commit=off -c full_page_writes=off -c max_connections=300" \
    >/dev/null && pg_started=1
  if [ -f "$pgdata/postmaster.pid" ]; then
    echo "PG_PID=$(head -1 "$pgdata/postmaster.pid")" >>"$env_file"
  fi
  [ "$pg_started" = 1 ] || die "PostgreSQL did not start: $(tail -5 "$dir/postgresql.log")"
  "${as_pg[@]}" "$PG_BIN/psql" -q -h 127.0.0.1 -p "$pg_port" -U postgres -d postgres -v ON_ERROR_STOP=1 \
    -c "CREATE ROLE $DB_USER LOGIN PASSWORD '$DB_PASSWORD'" \
    -c "CREATE DATABASE $DB_NAME OWNER $DB_USER" >/dev/null

  # Redis: in the foreground of its own background job, so its pid is the one we stop.
  redis-server --bind 127.0.0.1 --port "$redis_port" --dir "$dir" --save "" --appendonly no \
    --daemonize no --logfile "$dir/redis.log" >/dev/null 2>&1 &
  echo "REDIS_PID=$!" >>"$env_file"
  wait_until 30 "Redis on port $redis_port" redis-cli -h 127.0.0.1 -p "$redis_port" ping

  {
    echo "PG_PORT=$pg_port"
    echo "PG_URL=postgresql+psycopg2://$DB_USER:$DB_PASSWORD@127.0.0.1:$pg_port/$DB_NAME"
    echo "REDIS_PORT=$redis_port"
    echo "REDIS_URL=redis://127.0.0.1:$redis_port/0"
  } >>"$env_file"
  echo "PostgreSQL on 127.0.0.1:$pg_port, Redis on 127.0.0.1:$redis_port; data in $dir"
}

stop_pid() {  # stop_pid PID NAME SIGNAL: send SIGNAL, then SIGKILL after 20 s
  local pid=$1 name=$2 sig=$3
  kill "-$sig" "$pid" 2>/dev/null || return 0
  local deadline=$((SECONDS + 20))
  while kill -0 "$pid" 2>/dev/null; do
    if [ "$SECONDS" -ge "$deadline" ]; then
      echo "distributed-services: $name (pid $pid) still runs 20 s after SIG$sig; sending SIGKILL" >&2
      kill -KILL "$pid" 2>/dev/null || true
      break
    fi
    sleep 0.2
  done
}

stop() {
  local dir=$1
  [ -f "$dir/services.env" ] || { echo "distributed-services: nothing recorded in $dir"; return 0; }
  local PG_PID="" REDIS_PID=""
  # shellcheck disable=SC1091
  . "$dir/services.env"
  # SIGINT is PostgreSQL's "fast" shutdown (it disconnects clients); SIGTERM is Redis's normal one.
  if [ -n "$REDIS_PID" ]; then stop_pid "$REDIS_PID" Redis TERM; fi
  if [ -n "$PG_PID" ]; then stop_pid "$PG_PID" PostgreSQL INT; fi
  rm -f "$dir/services.env"
  echo "stopped PostgreSQL (pid ${PG_PID:-none}) and Redis (pid ${REDIS_PID:-none})"
}

case "${1:-}" in
  install) install ;;
  start) [ -n "${2:-}" ] || die "usage: $0 start DIR"; start "$2" ;;
  stop) [ -n "${2:-}" ] || die "usage: $0 stop DIR"; stop "$2" ;;
  *) die "usage: $0 install | start DIR | stop DIR" ;;
esac

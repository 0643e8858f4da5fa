# Shared by bin/run and bin/test: the virtualenv, what `make run` configures, and the
# services the tests need.
# shellcheck shell=bash

ROOT=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
VENV="$ROOT/.venv"
PY="$VENV/bin/python"

say() { printf '\033[1m==> %s\033[0m\n' "$*"; }

as_root() {
  if [ "$(id -u)" = 0 ]; then "$@"; else sudo "$@"; fi
}

apt_install() {
  say "installing $* (apt)"
  as_root env DEBIAN_FRONTEND=noninteractive apt-get update -qq
  as_root env DEBIAN_FRONTEND=noninteractive apt-get install -y -qq "$@" >/dev/null
}

# Create .venv and install the requirements file given, again only when it changed.
ensure_venv() {
  local reqs=$1
  if [ ! -x "$PY" ]; then
    say "creating the virtualenv in .venv"
    python3 -m venv "$VENV" 2>/dev/null || { rm -rf "$VENV"; apt_install python3-venv; python3 -m venv "$VENV"; }
  fi
  local stamp
  stamp="$VENV/.installed-$(cat "$ROOT"/requirements*.txt "$ROOT/$reqs" | sha256sum | cut -c1-16)-${reqs%.txt}"
  if [ ! -f "$stamp" ]; then
    say "installing $reqs"
    "$PY" -m pip install -q --disable-pip-version-check --upgrade pip
    "$PY" -m pip install -q --disable-pip-version-check -r "$ROOT/$reqs"
    touch "$stamp"
  fi
}

# The settings `make run` chooses: DEBUG on, one broker for every process it starts
# (Redis when it answers, else the filesystem), unless the environment says otherwise, and
# its simulator (unless SIMULATOR=0) among the hosts an account's credential may go to.
# Exported for the processes started here, and written to $VAR_DIR/run.env, which settings
# read under the environment: a later manage.py or celery in this checkout, in any shell,
# gets the same ones.
run_configure() {
  VAR_DIR="${CAPVCO_VAR_DIR:-$ROOT/var}"
  mkdir -p "$VAR_DIR/log"
  export DEBUG="${DEBUG:-true}"
  export CELERY_BROKER_URL="${CELERY_BROKER_URL:-$(cd "$ROOT" && "$PY" -c '
import sys
from pathlib import Path
from capvco_web.environment import default_broker_url
print(default_broker_url(Path(sys.argv[1]).resolve()))' "$VAR_DIR")}"
  if [ "${SIMULATOR:-1}" != 0 ]; then
    # The simulator serves plain http: allowed as exactly this origin, nothing wider.
    export WHITESKY_ALLOWED_HOSTS="${WHITESKY_ALLOWED_HOSTS:+$WHITESKY_ALLOWED_HOSTS,}http://127.0.0.1:${SIM_PORT:-8081}"
    # The fake Kubernetes API (https, its own CA): exactly its origin.
    export KUBE_ALLOWED_HOSTS="${KUBE_ALLOWED_HOSTS:+$KUBE_ALLOWED_HOSTS,}https://127.0.0.1:${KUBE_SIM_PORT:-8082}"
  fi
  (
    umask 077
    {
      echo "# Written by make run (bin/run): the settings it chose. The environment wins."
      printf '%s=%s\n' DEBUG "$DEBUG" CELERY_BROKER_URL "$CELERY_BROKER_URL" \
        WHITESKY_ALLOWED_HOSTS "${WHITESKY_ALLOWED_HOSTS:-}" KUBE_ALLOWED_HOSTS "${KUBE_ALLOWED_HOSTS:-}"
    } >"$VAR_DIR/run.env.tmp"
  )
  mv "$VAR_DIR/run.env.tmp" "$VAR_DIR/run.env"
}

port_answers() {  # host port
  "$PY" - "$1" "$2" <<'PYEOF'
import socket, sys
try:
    socket.create_connection((sys.argv[1], int(sys.argv[2])), timeout=0.5).close()
except OSError:
    sys.exit(1)
PYEOF
}

free_port() {  # a port nothing listens on now, so that two runs on one host never share one
  "$PY" -c 'import socket; s = socket.socket(); s.bind(("127.0.0.1", 0)); print(s.getsockname()[1])'
}

wait_for_port() {  # host port seconds
  local i
  for ((i = 0; i < $3 * 10; i++)); do port_answers "$1" "$2" && return 0; sleep 0.1; done
  echo "nothing answers on $1:$2 after $3 s" >&2
  return 1
}

# PostgreSQL: the one on 127.0.0.1:5432 when it answers, else a throwaway one under var/.
ensure_postgres() {
  if [ -n "${DATABASE_URL:-}" ]; then return; fi
  if port_answers 127.0.0.1 5432; then
    export DATABASE_URL=postgres://postgres@127.0.0.1:5432/capvco
    return
  fi
  local bin
  bin=$(ls -d /usr/lib/postgresql/*/bin 2>/dev/null | sort -V | tail -n 1)
  if [ -z "$bin" ]; then apt_install postgresql; bin=$(ls -d /usr/lib/postgresql/*/bin | sort -V | tail -n 1); fi
  local dir="$ROOT/var/pg" port run=()
  port=$(free_port)
  [ "$(id -u)" = 0 ] && run=(su postgres -s /bin/sh -c)
  mkdir -p "$dir"
  [ "$(id -u)" = 0 ] && chown postgres "$dir"
  if [ ! -f "$dir/PG_VERSION" ]; then
    say "creating a throwaway PostgreSQL in var/pg"
    if [ ${#run[@]} -gt 0 ]; then "${run[@]}" "$bin/initdb -D $dir -A trust -U postgres --no-sync" >/dev/null
    else "$bin/initdb" -D "$dir" -A trust -U postgres --no-sync >/dev/null; fi
  fi
  say "starting PostgreSQL on 127.0.0.1:$port"
  local opts="-c listen_addresses=127.0.0.1 -p $port -k $dir -c fsync=off"
  if [ ${#run[@]} -gt 0 ]; then "${run[@]}" "$bin/pg_ctl -D $dir -w -l $dir/log -o '$opts' start" >/dev/null
  else "$bin/pg_ctl" -D "$dir" -w -l "$dir/log" -o "$opts" start >/dev/null; fi
  STARTED_PG="$bin/pg_ctl -D $dir -m fast stop"
  export DATABASE_URL=postgres://postgres@127.0.0.1:$port/capvco
}

# Redis: the one on 127.0.0.1:6379 when it answers, else one started here.
ensure_redis() {
  if [ -n "${REDIS_URL:-}" ]; then return; fi
  if port_answers 127.0.0.1 6379; then
    export REDIS_URL=redis://127.0.0.1:6379
    return
  fi
  command -v redis-server >/dev/null || apt_install redis-server
  local port
  port=$(free_port)
  say "starting Redis on 127.0.0.1:$port"
  mkdir -p "$ROOT/var"
  redis-server --port $port --bind 127.0.0.1 --save '' --appendonly no --daemonize yes \
    --pidfile "$ROOT/var/redis.pid" --logfile "$ROOT/var/redis.log"
  wait_for_port 127.0.0.1 $port 10
  STARTED_REDIS_PIDFILE="$ROOT/var/redis.pid"
  export REDIS_URL=redis://127.0.0.1:$port
}

stop_started_services() {
  if [ -n "${STARTED_PG:-}" ]; then
    if [ "$(id -u)" = 0 ]; then su postgres -s /bin/sh -c "$STARTED_PG" >/dev/null 2>&1 || true
    else $STARTED_PG >/dev/null 2>&1 || true; fi
  fi
  if [ -n "${STARTED_REDIS_PIDFILE:-}" ] && [ -f "$STARTED_REDIS_PIDFILE" ]; then
    kill "$(cat "$STARTED_REDIS_PIDFILE")" 2>/dev/null || true
  fi
}

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

# The settings `make run` chooses: DEBUG on, one broker for every process it starts (the
# private Redis of this var dir, on a unix socket; bin/run starts it) unless the
# environment says otherwise, and its simulator (unless SIMULATOR=0) among the hosts an
# account's credential may go to, with a webhook receiver on 127.0.0.1:$NOTIFY_RECEIVER_PORT
# (8090) among those notifications may go to.
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
    # A webhook receiver of one's own on this machine (docs/guides/notifications.md).
    export NOTIFY_WEBHOOK_HOSTS="${NOTIFY_WEBHOOK_HOSTS:+$NOTIFY_WEBHOOK_HOSTS,}http://127.0.0.1:${NOTIFY_RECEIVER_PORT:-8090}"
  fi
  (
    umask 077
    {
      echo "# Written by make run (bin/run): the settings it chose. The environment wins."
      printf '%s=%s\n' DEBUG "$DEBUG" CELERY_BROKER_URL "$CELERY_BROKER_URL" \
        WHITESKY_ALLOWED_HOSTS "${WHITESKY_ALLOWED_HOSTS:-}" KUBE_ALLOWED_HOSTS "${KUBE_ALLOWED_HOSTS:-}" \
        NOTIFY_WEBHOOK_HOSTS "${NOTIFY_WEBHOOK_HOSTS:-}"
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
  # Named after its port: apart from another make test's and from make run's (redis.pid).
  redis-server --port $port --bind 127.0.0.1 --save '' --appendonly no --daemonize yes \
    --pidfile "$ROOT/var/test-redis-$port.pid" --logfile "$ROOT/var/test-redis-$port.log"
  wait_for_port 127.0.0.1 $port 10
  STARTED_REDIS_PIDFILE="$ROOT/var/test-redis-$port.pid"
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

# --- make run's processes ------------------------------------------------------------

# One make run per var dir: the lock is held by the run and every process it started.
run_lock() {
  local var_dir="${CAPVCO_VAR_DIR:-$ROOT/var}"
  mkdir -p "$var_dir"
  exec 9>"$var_dir/run.lock"
  if ! flock -n 9; then
    echo "another make run is using $var_dir (its processes hold $var_dir/run.lock): stop it," \
      "or give this one a var dir (CAPVCO_VAR_DIR) and ports (PORT, SIM_PORT, KUBE_SIM_PORT) of its own" >&2
    exit 1
  fi
}

ports_free() {  # port name [port name...]: refuse to start when one is taken
  while [ $# -gt 0 ]; do
    if port_answers 127.0.0.1 "$1"; then
      echo "port $1 ($2) is in use, by another make run or another program: choose a free one, e.g. $2=$(free_port)" >&2
      exit 1
    fi
    shift 2
  done
}

redis_private_check() {  # socket: redis-server installed, and the path fits a socket address
  command -v redis-server >/dev/null || apt_install redis-server
  if [ "${#1}" -gt 107 ]; then
    echo "$1 is too long for a unix socket (${#1} bytes, at most 107): set CAPVCO_VAR_DIR" \
      "to a shorter path, or CELERY_BROKER_URL to a Redis of your own" >&2
    exit 1
  fi
}

redis_private_wait() {  # socket seconds
  local i
  for ((i = 0; i < $2 * 10; i++)); do
    [ "$(redis-cli -s "$1" ping 2>/dev/null)" = PONG ] && return 0
    sleep 0.1
  done
  echo "the private Redis does not answer on $1 after $2 s" >&2
  return 1
}

# The processes started (pids, in order), their names and logs; extra_pids are one-shot
# commands, stopped with the rest but not watched.
pids=()
extra_pids=()
declare -A names=() logs=()
supervised() {  # name log: watch the process just started ($!)
  pids+=("$!")
  names[$!]=$1
  logs[$!]=$2
}

process_died() {  # pid status: say which process ended, how, and the end of its log
  local how
  if [ "$2" -gt 128 ]; then
    how="was killed by signal $(($2 - 128)) (SIG$(kill -l $(($2 - 128))))"
  else
    how="exited with status $2"
  fi
  say "the ${names[$1]} (pid $1) $how; the last lines of ${logs[$1]}:" >&2
  tail -n 20 "${logs[$1]}" | sed 's/^/    /' >&2
  # What it left of its process group (pool processes, beat) goes with it.
  kill -KILL -- "-$1" 2>/dev/null || true
}

WORKER_RESTARTS=3         # at most this many restarts of the worker ...
WORKER_RESTART_WINDOW=600 # ... within this many seconds; one more death stops the run

# Wait until a process ends (Ctrl-C: the trap stops everything). The worker, whose pid is
# in the variable named $1, is started again by the command $2; any other process ending,
# or the worker too often, stops the run.
supervise() {
  local worker_var=$1 restart=$2 dead status pid recent restarts=()
  while true; do
    dead=""
    wait -n -p dead "${pids[@]}" 2>/dev/null && status=0 || status=$?
    [ -n "$dead" ] || continue
    local alive=()
    for pid in "${pids[@]}"; do [ "$pid" = "$dead" ] || alive+=("$pid"); done
    pids=("${alive[@]}")
    process_died "$dead" "$status"
    if [ "$dead" = "${!worker_var}" ]; then
      recent=()
      for pid in "${restarts[@]}"; do
        [ $((SECONDS - pid)) -lt "$WORKER_RESTART_WINDOW" ] && recent+=("$pid")
      done
      restarts=("${recent[@]}")
      if [ "${#restarts[@]}" -lt "$WORKER_RESTARTS" ]; then
        restarts+=("$SECONDS")
        say "starting the ${names[$dead]} again (restart ${#restarts[@]} of at most" \
          "$WORKER_RESTARTS in $((WORKER_RESTART_WINDOW / 60)) minutes)" >&2
        echo "==> make run starts it again (it ended with status $status)" >>"${logs[$dead]}"
        "$restart"
        continue
      fi
      say "stopping everything: the ${names[$dead]} died $((WORKER_RESTARTS + 1)) times in" \
        "$((WORKER_RESTART_WINDOW / 60)) minutes" >&2
    else
      say "stopping everything: the ${names[$dead]} is gone" >&2
    fi
    exit 1
  done
}

WORKER_WARM_SECONDS=12 # the worker's running tasks may finish this long, then go back to the queue

# TERM, then up to 20 s to end, then KILL what is left of their groups. The worker (pid in
# worker_pid) stops warm: it takes no new task and its running ones finish; one still
# running after WORKER_WARM_SECONDS is cancelled by a cold shutdown (QUIT) and, as tasks
# are acknowledged late, goes back to the queue for the next run.
stop_processes() {  # pid...
  local pid i alive=()
  [ $# -gt 0 ] || return 0
  kill -TERM "$@" 2>/dev/null || true
  for ((i = 1; i <= 200; i++)); do
    alive=()
    for pid in "$@"; do
      # Gone, or a zombie not reaped yet (its state, after the name in parentheses, is Z)
      [ "$(sed 's/.*) //' "/proc/$pid/stat" 2>/dev/null | cut -c1)" = Z ] || { [ -e "/proc/$pid" ] && alive+=("$pid"); }
    done
    [ "${#alive[@]}" -eq 0 ] && break
    if [ "$i" -eq $((WORKER_WARM_SECONDS * 10)) ] && [[ " ${alive[*]} " == *" ${worker_pid:-none} "* ]]; then
      say "the Celery worker still runs a task after $WORKER_WARM_SECONDS s: cancelling it (it goes back to the queue)" >&2
      kill -QUIT "$worker_pid" 2>/dev/null || true
    fi
    sleep 0.1
  done
  for pid in "${alive[@]}"; do
    say "the ${names[$pid]:-process $pid} still runs after 20 s: killing it" >&2
    kill -KILL -- "-$pid" 2>/dev/null || true
  done
  wait "$@" 2>/dev/null || true
}

# Stop everything make run started, in this order: the web server, the worker (its beat
# first, then its pool, see stop_processes) and the demo together, then the simulators
# they call, the broker last, so that nothing loses its broker while it stops.
stop() {
  trap - INT TERM HUP EXIT
  # No job notices ("Terminated ...") for the processes stopped here.
  set +m
  say "stopping"
  local pid first=() simulators=() broker=()
  for pid in "${pids[@]}"; do
    case ${names[$pid]} in
      "private Redis") broker+=("$pid") ;;
      *simulator) simulators+=("$pid") ;;
      *) first+=("$pid") ;;
    esac
  done
  stop_processes "${first[@]}" "${extra_pids[@]}"
  stop_processes "${simulators[@]}"
  stop_processes "${broker[@]}"
  say "stopped"
}

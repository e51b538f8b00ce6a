#!/usr/bin/env bash
# Install and run the moto AWS emulator (seeded by moto_launcher.py) on loopback.
#
#   moto.sh install      create the venv once and pip install requirements.txt
#   moto.sh start DIR    start on a free 127.0.0.1 port, wait until ready, write DIR/env
#   moto.sh stop DIR     stop the server started with the same DIR (only that pid)
#   moto.sh status DIR   exit 0 if the server of DIR is running
#   moto.sh account DIR CLUSTER   seed the server of DIR with what a first try needs:
#                        subnets and a security group tagged karpenter.sh/discovery=CLUSTER,
#                        and an EKS cluster CLUSTER (local_account.py; idempotent)
#
# Environment:
#   NODEWRIGHT_CACHE        cache root (default $HOME/.cache/nodewright); the venv is
#                           $NODEWRIGHT_CACHE/moto-venv
#   PYTHON                  interpreter for the venv (default python3, needs >= 3.9)
#   NODEWRIGHT_MOTO_TIMEOUT seconds to wait for readiness (default 60)
#
# DIR/env holds KEY=value lines (no quotes, no spaces), for `set -a; . DIR/env; set +a`
# or for a Rust test to read: AWS_ENDPOINT_URL, AWS_ACCESS_KEY_ID, AWS_SECRET_ACCESS_KEY,
# AWS_REGION, AWS_DEFAULT_REGION, AWS_EC2_METADATA_DISABLED, NODEWRIGHT_MOTO_PORT,
# NODEWRIGHT_MOTO_PID. DIR also gets pid, port, manifest.json (seeded SSM parameters
# per region) and moto.log.
set -euo pipefail

HERE="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
CACHE="${NODEWRIGHT_CACHE:-${HOME:?HOME is not set}/.cache/nodewright}"
VENV="$CACHE/moto-venv"
REQS="$HERE/requirements.txt"
LAUNCHER="$HERE/moto_launcher.py"
TIMEOUT="${NODEWRIGHT_MOTO_TIMEOUT:-60}"

die() { echo "moto.sh: error: $*" >&2; exit 1; }
note() { echo "moto.sh: $*" >&2; }

usage() {
  sed -n '2,11p' "${BASH_SOURCE[0]}" | sed 's/^# \{0,1\}//' >&2
  exit 2
}

reqs_hash() { sha256sum "$REQS" | cut -d' ' -f1; }

cmd_install() {
  [[ -f "$REQS" ]] || die "missing $REQS"
  local py="${PYTHON:-python3}"
  command -v "$py" >/dev/null 2>&1 || die "'$py' not found (set PYTHON=/path/to/python3)"
  mkdir -p "$CACHE"
  # One installer at a time (parallel test jobs may all call install).
  exec 9>"$CACHE/moto-venv.lock"
  flock 9 2>/dev/null || true
  local want stamp="$VENV/.nodewright-requirements.sha256"
  want="$(reqs_hash)"
  if [[ -f "$stamp" && "$(cat "$stamp")" == "$want" && -x "$VENV/bin/python" ]] \
     && "$VENV/bin/python" -c 'import moto.server, boto3' >/dev/null 2>&1; then
    exec 9>&-
    return 0
  fi
  note "creating $VENV (pip install -r requirements.txt, ~30 s)"
  rm -rf "$VENV"
  "$py" -m venv "$VENV" || die "'$py -m venv' failed (on Debian: apt-get install python3-venv)"
  "$VENV/bin/python" -m pip install --quiet --disable-pip-version-check -r "$REQS" \
    || { rm -rf "$VENV"; die "pip install -r $REQS failed"; }
  "$VENV/bin/python" -c 'import moto.server, boto3' || { rm -rf "$VENV"; die "moto does not import after install"; }
  echo "$want" >"$stamp"
  note "installed $("$VENV/bin/python" -c 'import moto; print("moto", moto.__version__)')"
  exec 9>&-
}

# Is PID alive and our launcher (not a recycled pid)?
is_ours() {
  local pid="$1"
  [[ "$pid" =~ ^[0-9]+$ ]] || return 1
  kill -0 "$pid" 2>/dev/null || return 1
  if [[ -r "/proc/$pid/cmdline" ]]; then
    tr '\0' ' ' <"/proc/$pid/cmdline" | grep -q 'moto_launcher\.py' || return 1
  fi
  return 0
}

cmd_start() {
  local dir="${1:-}"
  [[ -n "$dir" ]] || die "usage: moto.sh start DIR"
  mkdir -p "$dir"
  dir="$(cd "$dir" && pwd)"
  if [[ -f "$dir/pid" ]] && is_ours "$(cat "$dir/pid")"; then
    die "a moto server of $dir is already running (pid $(cat "$dir/pid")); run 'moto.sh stop $dir' first"
  fi
  cmd_install
  rm -f "$dir/pid" "$dir/port" "$dir/env" "$dir/manifest.json"

  local t0 pid
  t0="$(date +%s%N)"
  nohup "$VENV/bin/python" "$LAUNCHER" --host 127.0.0.1 --port 0 \
    --port-file "$dir/port" --manifest "$dir/manifest.json" \
    </dev/null >"$dir/moto.log" 2>&1 &
  pid=$!
  echo "$pid" >"$dir/pid"

  local deadline=$((SECONDS + TIMEOUT)) port=""
  while :; do
    if ! kill -0 "$pid" 2>/dev/null; then
      rm -f "$dir/pid"
      echo "---- $dir/moto.log" >&2; tail -n 40 "$dir/moto.log" >&2 || true
      die "moto exited during start-up (log above)"
    fi
    if [[ -s "$dir/port" ]]; then
      port="$(cat "$dir/port")"
      if "$VENV/bin/python" - "$port" <<'PY' 2>/dev/null
import sys, urllib.request
with urllib.request.urlopen(f"http://127.0.0.1:{sys.argv[1]}/nodewright/health", timeout=2) as r:
    sys.exit(0 if r.status == 200 else 1)
PY
      then break; fi
    fi
    if (( SECONDS >= deadline )); then
      kill -TERM "$pid" 2>/dev/null || true
      rm -f "$dir/pid"
      echo "---- $dir/moto.log" >&2; tail -n 40 "$dir/moto.log" >&2 || true
      die "moto not ready after ${TIMEOUT}s (log above)"
    fi
    sleep 0.1
  done

  local tmp="$dir/env.tmp.$$"
  cat >"$tmp" <<ENV
AWS_ENDPOINT_URL=http://127.0.0.1:$port
AWS_ACCESS_KEY_ID=test
AWS_SECRET_ACCESS_KEY=test
AWS_REGION=us-east-1
AWS_DEFAULT_REGION=us-east-1
AWS_EC2_METADATA_DISABLED=true
NODEWRIGHT_MOTO_PORT=$port
NODEWRIGHT_MOTO_PID=$pid
ENV
  mv "$tmp" "$dir/env"
  note "moto ready on http://127.0.0.1:$port (pid $pid, $(( ($(date +%s%N) - t0) / 1000000 )) ms); env in $dir/env"
}

cmd_stop() {
  local dir="${1:-}"
  [[ -n "$dir" ]] || die "usage: moto.sh stop DIR"
  if [[ ! -f "$dir/pid" ]]; then
    note "no $dir/pid: nothing to stop"
    return 0
  fi
  local pid
  pid="$(cat "$dir/pid")"
  if ! is_ours "$pid"; then
    note "pid $pid of $dir is not running (or is not moto_launcher.py): nothing to stop"
    rm -f "$dir/pid" "$dir/env" "$dir/port"
    return 0
  fi
  kill -TERM "$pid"
  local i
  for ((i = 0; i < 100; i++)); do
    is_ours "$pid" || break
    sleep 0.1
  done
  if is_ours "$pid"; then
    note "pid $pid ignored SIGTERM for 10 s: sending SIGKILL"
    kill -KILL "$pid" 2>/dev/null || true
  fi
  rm -f "$dir/pid" "$dir/env" "$dir/port"
  note "stopped moto (pid $pid)"
}

cmd_status() {
  local dir="${1:-}"
  [[ -n "$dir" ]] || die "usage: moto.sh status DIR"
  [[ -f "$dir/pid" ]] && is_ours "$(cat "$dir/pid")"
}

cmd_account() {
  local dir="${1:-}" cluster="${2:-}"
  [[ -n "$dir" && -n "$cluster" ]] || die "usage: moto.sh account DIR CLUSTER"
  cmd_status "$dir" || die "no server of $dir is running (moto.sh start $dir)"
  (set -a; . "$dir/env"; set +a; exec "$VENV/bin/python" "$HERE/local_account.py" "$cluster")
}

case "${1:-}" in
  install) cmd_install ;;
  account) shift; cmd_account "$@" ;;
  start) shift; cmd_start "$@" ;;
  stop) shift; cmd_stop "$@" ;;
  status) shift; cmd_status "$@" ;;
  *) usage ;;
esac

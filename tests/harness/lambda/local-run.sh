#!/usr/bin/env bash
# README "Run it locally", step by step, with the checks a new user would
# make by eye: emulators, RBAC, `nodewright init`, `config apply`,
# `cargo lambda watch`, and one `cargo lambda invoke` per fixture event.
# Needs cargo-lambda on the PATH (pip install cargo-lambda ziglang), Go for
# the API server's first build, python3 and kubectl.
#
#   tests/harness/lambda/local-run.sh
set -euo pipefail
cd "$(dirname "$0")/../../.."

for tool in cargo-lambda kubectl python3; do
  command -v "$tool" >/dev/null 2>&1 || { echo "local-run: $tool is not on the PATH" >&2; exit 1; }
done

WORK="$(mktemp -d "${TMPDIR:-/tmp}/nodewright-local-run.XXXXXX")"
WATCH_PID=""
cleanup() {
  local rc=$?
  [ -n "$WATCH_PID" ] && kill "$WATCH_PID" 2>/dev/null && wait "$WATCH_PID" 2>/dev/null || true
  bash tests/harness/kube/kube.sh stop "$WORK/kube" >/dev/null 2>&1 || true
  bash tests/harness/aws/moto.sh stop "$WORK/moto" >/dev/null 2>&1 || true
  if [ "$rc" -ne 0 ]; then echo "local-run: failed; logs in $WORK" >&2; else rm -rf "$WORK"; fi
  exit "$rc"
}
trap cleanup EXIT

# 1. The emulators.
tests/harness/aws/moto.sh start "$WORK/moto"
tests/harness/kube/kube.sh build && tests/harness/kube/kube.sh start "$WORK/kube"
set -a; . "$WORK/moto/env"; set +a
export NODEWRIGHT_CLUSTER_NAME=local NODEWRIGHT_TABLE_PREFIX=nodewright

# 2. RBAC for the functions' user.
kubectl --kubeconfig "$WORK/kube/admin.kubeconfig" apply -f infra/rbac/clusterrole.yaml

# 3. Tables and a NodePool.
cargo run --quiet -p nodewright-cli --features aws -- init
cargo run --quiet -p nodewright-cli --features aws -- config apply -f infra/examples/local/nodepool.yaml

# 4. The functions on a local Runtime API, on a free port.
PORT="$(python3 -c 'import socket; s=socket.socket(); s.bind(("127.0.0.1", 0)); print(s.getsockname()[1])')"
KUBECONFIG="$WORK/kube/function.kubeconfig" cargo lambda watch --invoke-port "$PORT" >"$WORK/watch.log" 2>&1 &
WATCH_PID=$!
for _ in $(seq 1 120); do
  (echo >"/dev/tcp/127.0.0.1/$PORT") 2>/dev/null && break
  kill -0 "$WATCH_PID" 2>/dev/null || { cat "$WORK/watch.log" >&2; exit 1; }
  sleep 1
done

passed=0 failed=0
# invoke FUNCTION EVENT-FILE EXPECTED-SUBSTRING
invoke() {
  local out
  if [ ! -f "$2" ]; then echo "skip  $1 $2 (no such fixture yet)"; return 0; fi
  out="$(cargo lambda invoke "$1" --invoke-port "$PORT" --data-file "$2" 2>&1)" || true
  if [[ "$out" == *"$3"* ]]; then
    passed=$((passed + 1)); echo "ok    $1 $2: $out"
  else
    failed=$((failed + 1)); echo "FAIL  $1 $2: expected \"$3\" in: $out"
  fi
}
invoke state-change functions/state-change/events/terminated.json '{"outcome":"Ignored"}'
invoke state-change functions/state-change/events/malformed.json '"dropped"'
invoke provisioner functions/provisioner/events/schedule.json '"ticks"'
invoke interruption functions/interruption/events/spot-interruption.json '"batchItemFailures"'
invoke disruption functions/disruption/events/schedule.json '{'
echo "local-run: $passed passed, $failed failed"
[ "$failed" -eq 0 ]

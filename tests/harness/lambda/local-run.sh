#!/usr/bin/env bash
# functions/README.md "Run it locally", step by step, with the checks a new user would
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
# The emulated account's cluster, subnets and security group.
tests/harness/aws/moto.sh account "$WORK/moto" local

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

# 5. A pending pod (marked as kube-scheduler would: there is none here) is
#    planned and launched for in the emulator by the next invocation.
ADMIN="$WORK/kube/admin.kubeconfig"
kubectl --kubeconfig "$ADMIN" apply -f infra/examples/local/pending-pod.yaml
kubectl --kubeconfig "$ADMIN" patch pod first-try --subresource=status --type=merge \
  -p '{"status":{"conditions":[{"type":"PodScheduled","status":"False","reason":"Unschedulable","message":"no nodes available"}]}}'
invoke provisioner functions/provisioner/events/schedule.json '"ticks"'
MOTO_PY="${NODEWRIGHT_CACHE:-$HOME/.cache/nodewright}/moto-venv/bin/python"
launched="$("$MOTO_PY" -c 'import boto3, os
ec2 = boto3.client("ec2", endpoint_url=os.environ["AWS_ENDPOINT_URL"])
r = ec2.describe_instances(Filters=[{"Name": "tag:karpenter.sh/nodepool", "Values": ["default"]}])
print(" ".join(i["InstanceId"] + ":" + i["InstanceType"] + ":" + i["State"]["Name"] for x in r["Reservations"] for i in x["Instances"]))')"
if [ -n "$launched" ]; then
  passed=$((passed + 1)); echo "ok    the pending pod got an instance: $launched"
else
  failed=$((failed + 1)); echo "FAIL  no instance was launched for the pending pod"
fi
echo "local-run: $passed passed, $failed failed"
[ "$failed" -eq 0 ]

#!/usr/bin/env bash
# Smoke test of the kube harness: build (if needed), start, exercise the real
# API server with curl, stop. Exits non-zero on the first failed check.
#
#   tests/harness/kube/smoke.sh [DIR]     (DIR defaults to a fresh temp dir)
set -euo pipefail

HERE="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
KUBE="$HERE/kube.sh"
for c in curl jq; do
  command -v "$c" >/dev/null 2>&1 || { echo "smoke.sh: '$c' is needed" >&2; exit 1; }
done

DIR="${1:-$(mktemp -d -t nodewright-kube-smoke.XXXXXX)}"
"$KUBE" build
"$KUBE" start "$DIR"
trap '"$KUBE" stop "$DIR"' EXIT
# shellcheck disable=SC1091
source "$DIR/env"

PASS=0
FAIL=0
ok() { echo "PASS: $*"; PASS=$((PASS + 1)); }
bad() { echo "FAIL: $*"; FAIL=$((FAIL + 1)); }

# api TOKEN METHOD PATH [BODY [CONTENT-TYPE]] -> body in $BODY, status in $CODE
api() {
  local token="$1" method="$2" path="$3" body="${4:-}" ctype="${5:-application/json}"
  local out
  out="$(mktemp)"
  if [ -n "$body" ]; then
    CODE="$(curl -sS -o "$out" -w '%{http_code}' --cacert "$KUBE_CA_FILE" \
      -H "Authorization: Bearer $token" -H "Content-Type: $ctype" \
      -X "$method" --data "$body" "$KUBE_APISERVER_URL$path")"
  else
    CODE="$(curl -sS -o "$out" -w '%{http_code}' --cacert "$KUBE_CA_FILE" \
      -H "Authorization: Bearer $token" -X "$method" "$KUBE_APISERVER_URL$path")"
  fi
  BODY="$(cat "$out")"
  rm -f "$out"
}
admin() { api "$KUBE_ADMIN_TOKEN" "$@"; }
fn() { api "$KUBE_FUNCTION_TOKEN" "$@"; }
expect() { # CODE WHAT
  if [ "$CODE" = "$1" ]; then ok "$2 -> HTTP $CODE"; else bad "$2 -> HTTP $CODE (want $1): $BODY"; fi
}

NS=nodewright-smoke
POD=pending-pod
NODE=ip-10-0-1-23.ec2.internal

admin GET /version
expect 200 "GET /version"
echo "      server gitVersion: $(jq -r .gitVersion <<<"$BODY")"

admin POST /api/v1/namespaces "{\"apiVersion\":\"v1\",\"kind\":\"Namespace\",\"metadata\":{\"name\":\"$NS\"}}"
expect 201 "admin creates namespace $NS"

admin POST "/api/v1/namespaces/$NS/pods" "$(jq -nc --arg n "$POD" '{
  apiVersion: "v1", kind: "Pod", metadata: {name: $n, labels: {app: "smoke"}},
  spec: {containers: [{name: "c", image: "registry.k8s.io/pause:3.10",
    resources: {requests: {cpu: "100m", memory: "64Mi"}}}]}}')"
expect 201 "admin creates pod $NS/$POD"

admin GET "/api/v1/namespaces/$NS/pods/$POD"
phase="$(jq -r '.status.phase' <<<"$BODY")"
node_before="$(jq -r '.spec.nodeName // ""' <<<"$BODY")"
if [ "$phase" = "Pending" ] && [ -z "$node_before" ]; then
  ok "pod is Pending with no spec.nodeName (no scheduler runs)"
else
  bad "pod phase=$phase nodeName=$node_before"
fi

admin POST /api/v1/nodes "$(jq -nc --arg n "$NODE" '{
  apiVersion: "v1", kind: "Node",
  metadata: {name: $n, labels: {"kubernetes.io/hostname": $n,
    "node.kubernetes.io/instance-type": "m5.large", "topology.kubernetes.io/zone": "us-east-1a"}},
  spec: {providerID: "aws:///us-east-1a/i-0123456789abcdef0"}}')"
expect 201 "admin creates node $NODE"
echo "      node taints after admission: $(jq -c '.spec.taints // []' <<<"$BODY")"

admin POST "/api/v1/namespaces/$NS/pods/$POD/binding" "$(jq -nc --arg p "$POD" --arg n "$NODE" '{
  apiVersion: "v1", kind: "Binding", metadata: {name: $p},
  target: {apiVersion: "v1", kind: "Node", name: $n}}')"
expect 201 "admin POSTs Binding of $POD to $NODE"

admin GET "/api/v1/namespaces/$NS/pods/$POD"
node_after="$(jq -r '.spec.nodeName // ""' <<<"$BODY")"
if [ "$node_after" = "$NODE" ]; then
  ok "pod spec.nodeName is now $node_after (phase $(jq -r .status.phase <<<"$BODY"))"
else
  bad "pod spec.nodeName is '$node_after' after binding"
fi

fn POST /apis/authentication.k8s.io/v1/selfsubjectreviews \
  '{"apiVersion":"authentication.k8s.io/v1","kind":"SelfSubjectReview"}'
expect 201 "function token authenticates (SelfSubjectReview)"
echo "      function identity: $(jq -c .status.userInfo <<<"$BODY")"
admin POST /apis/authentication.k8s.io/v1/selfsubjectreviews \
  '{"apiVersion":"authentication.k8s.io/v1","kind":"SelfSubjectReview"}'
echo "      admin identity:    $(jq -c .status.userInfo <<<"$BODY")"

fn GET "/api/v1/namespaces/$NS/pods"
expect 403 "function token lists pods in $NS (no RBAC granted)"
echo "      $(jq -r .message <<<"$BODY")"
fn GET /api/v1/pods
expect 403 "function token lists pods cluster-wide"
fn GET /api/v1/nodes
expect 403 "function token lists nodes"
api not-a-valid-token GET /api/v1/pods
expect 401 "unknown token is rejected"

admin POST "/apis/policy/v1/namespaces/$NS/poddisruptionbudgets" '{
  "apiVersion":"policy/v1","kind":"PodDisruptionBudget","metadata":{"name":"smoke-pdb"},
  "spec":{"minAvailable":1,"selector":{"matchLabels":{"app":"smoke"}}}}'
expect 201 "admin creates PodDisruptionBudget smoke-pdb"

# Status written through the main resource is ignored ...
admin PATCH "/apis/policy/v1/namespaces/$NS/poddisruptionbudgets/smoke-pdb" \
  '{"status":{"disruptionsAllowed":7}}' application/merge-patch+json
expect 200 "admin merge-patches status through the main resource"
if [ "$(jq -r '.status.disruptionsAllowed' <<<"$BODY")" != "7" ]; then
  ok "... and the main resource ignores it (disruptionsAllowed=$(jq -r .status.disruptionsAllowed <<<"$BODY"))"
else
  bad "status was written through the main resource"
fi

# ... but the /status subresource writes it.
admin PATCH "/apis/policy/v1/namespaces/$NS/poddisruptionbudgets/smoke-pdb/status" \
  '{"status":{"observedGeneration":1,"currentHealthy":1,"desiredHealthy":1,"expectedPods":1,"disruptionsAllowed":0,
    "conditions":[{"type":"DisruptionAllowed","status":"False","reason":"InsufficientPods","message":"smoke","lastTransitionTime":"2026-01-01T00:00:00Z","observedGeneration":1}]}}' \
  application/merge-patch+json
expect 200 "admin patches PDB /status"
admin PUT "/apis/policy/v1/namespaces/$NS/poddisruptionbudgets/smoke-pdb/status" \
  "$(jq -c '.status.disruptionsAllowed = 1 | .status.currentHealthy = 2 | .status.expectedPods = 2' <<<"$BODY")"
expect 200 "admin PUTs PDB /status"
admin GET "/apis/policy/v1/namespaces/$NS/poddisruptionbudgets/smoke-pdb"
st="$(jq -c '.status | {observedGeneration, currentHealthy, desiredHealthy, expectedPods, disruptionsAllowed}' <<<"$BODY")"
if [ "$(jq -r .disruptionsAllowed <<<"$st")" = "1" ] && [ "$(jq -r .currentHealthy <<<"$st")" = "2" ]; then
  ok "PDB status persisted: $st"
else
  bad "PDB status: $st"
fi

fn PATCH "/apis/policy/v1/namespaces/$NS/poddisruptionbudgets/smoke-pdb/status" \
  '{"status":{"disruptionsAllowed":5}}' application/merge-patch+json
expect 403 "function token may not write PDB /status"

echo "$PASS passed, $FAIL failed"
[ "$FAIL" -eq 0 ]

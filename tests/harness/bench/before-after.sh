#!/usr/bin/env bash
# The W1 and W2 sweep of shared/docs/benchmarks.md with two builds of the
# `nodewright` CLI, interleaved: for every case, ROUNDS rounds of
# `OLD --runs 3` then `NEW --runs 3`, so both see the same machine. Prints
# one line per case: each build's fleet $/h, nodes, median seconds (the
# median of its rounds' medians) and peak RSS (the highest of its rounds),
# and whether the plan got cheaper, dearer or stayed the same.
#
#   tests/harness/bench/before-after.sh OLD_BINARY NEW_BINARY [ROUNDS]
#
# Build each binary with `cargo build --release -p nodewright-cli` at the
# commit to compare and copy target/release/nodewright aside. Exits
# non-zero if any plan got dearer or schedules fewer pods.
set -euo pipefail
old=$1
new=$2
rounds=${3:-3}

cases=(
  "--mix karpenter --pods 1000"
  "--mix karpenter --pods 5000"
  "--mix karpenter --pods 20000"
  "--mix preferences --pods 4000"
  "--mix preferences --pods 4000 --preferences ignore"
  "--mix generic --pods 1000"
  "--mix generic --pods 20000"
  "--mix karpenter --pods 20000 --strategy karpenter"
)
for pods in 1000 5000 20000; do
  for mix in shapes web arch zonal mixed; do
    cases+=("--catalog us-east-1 --mix $mix --pods $pods")
  done
done
for mix in zonal mixed; do
  cases+=("--catalog us-east-1 --mix $mix --pods 20000 --requirements open")
done

summary() {
  # Reads one JSON object per line (the rounds of one build): cost, nodes,
  # scheduled, the median of the rounds' median seconds, the highest peak RSS.
  python3 -c '
import json, statistics, sys
rs = [json.loads(l) for l in sys.stdin if l.strip()]
print(rs[0]["cost_per_hour"], rs[0]["nodes"], rs[0]["scheduled"],
      statistics.median(r["seconds"] for r in rs),
      max(r["peak_rss_mb"] or 0 for r in rs))'
}

worse=0
printf '%-66s %10s %10s %6s %6s %8s %8s %6s %6s %s\n' \
  case old_cost new_cost old_n new_n old_s new_s old_mb new_mb plan
for c in "${cases[@]}"; do
  old_out=(); new_out=()
  for _ in $(seq "$rounds"); do
    # shellcheck disable=SC2086
    old_out+=("$("$old" bench scheduling $c --runs 3 --json)")
    # shellcheck disable=SC2086
    new_out+=("$("$new" bench scheduling $c --runs 3 --json)")
  done
  read -r oc on os ot om < <(printf '%s\n' "${old_out[@]}" | summary)
  read -r nc nn ns nt nm < <(printf '%s\n' "${new_out[@]}" | summary)
  verdict=$(python3 -c '
import sys
oc, nc, os_, ns = map(float, sys.argv[1:])
if ns < os_: print("FEWER-PODS")
elif nc > oc * (1 + 1e-9): print("DEARER")
elif nc < oc * (1 - 1e-9) or ns > os_: print("better")
else: print("same")' "$oc" "$nc" "$os" "$ns")
  case $verdict in DEARER|FEWER-PODS) worse=1 ;; esac
  printf '%-66s %10.2f %10.2f %6s %6s %8.3f %8.3f %6.0f %6.0f %s\n' \
    "$c" "$oc" "$nc" "$on" "$nn" "$ot" "$nt" "$om" "$nm" "$verdict"
done
exit "$worse"

#!/usr/bin/env bash
# The default plan's cost against the best plan any strategy finds and
# against the LP bound that sees zones, on every W2 mix at 1,000, 5,000
# and 20,000 pods (us-east-1, spot and on-demand).
#
#   tests/harness/bench/gap.sh NODEWRIGHT_BINARY [walkthrough|open]
#
# Per case: the default (`best`) plan's $/h and seconds; each other
# strategy's $/h (guided, patterns, karpenter, standalone); the best of
# them; the default's excess over that best; the bound with zones and the
# default's ratio to it. One run each (costs are deterministic; seconds are
# one run's, on whatever machine this is).
set -euo pipefail
bin=$1
reqs=${2:-walkthrough}

printf '%-7s %6s %9s %7s %9s %9s %9s %9s %9s %8s %9s %7s\n' \
  mix pods default seconds guided patterns karpenter standalone best excess bound ratio
for pods in 1000 5000 20000; do
  for mix in shapes web arch zonal mixed; do
    args=(bench scheduling --catalog us-east-1 --mix "$mix" --pods "$pods" --requirements "$reqs" --runs 1 --json)
    default=$("$bin" "${args[@]}")
    costs=()
    for s in guided patterns karpenter standalone; do
      costs+=("$("$bin" "${args[@]}" --strategy "$s" | python3 -c 'import json,sys; print(json.load(sys.stdin)["cost_per_hour"])')")
    done
    python3 -c '
import json, sys
d = json.loads(sys.argv[1]); others = list(map(float, sys.argv[4:]))
cost = d["cost_per_hour"]; best = min([cost] + others)
bound = d["lower_bound_cost_per_hour"]
print("%-7s %6s %9.2f %7.3f %9.2f %9.2f %9.2f %9.2f %9.2f %7.2f%% %9.2f %7.3f" % (
    sys.argv[2], sys.argv[3], cost, d["seconds"], *others, best,
    100 * (cost / best - 1), bound, cost / bound))' "$default" "$mix" "$pods" "${costs[@]}"
  done
done

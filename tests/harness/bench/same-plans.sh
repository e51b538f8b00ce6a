#!/usr/bin/env bash
# Do two builds of the `nodewright` CLI plan alike? Runs the scheduling
# benchmark's sweep — W1 (Karpenter's mix, generic, preferences; respect
# and ignore) and W2 on the us-east-1 catalog (shapes, web, arch, zonal,
# mixed; walkthrough and open requirements), each at 1,000 and 5,000 pods —
# with both binaries, and compares the plans claim by claim (pods, options,
# requirements: `bench scheduling --dump`'s plan.json) and the medians of
# their solve times, measured alternately.
#
#   tests/harness/bench/same-plans.sh OLD_BINARY NEW_BINARY [RUNS]
#
# Build each binary with `cargo build --release -p nodewright-cli` at the
# commit to compare and copy target/release/nodewright aside. Prints one
# line per case and exits non-zero if any plan differs.
set -euo pipefail
old=$1
new=$2
runs=${3:-3}
work=$(mktemp -d "${TMPDIR:-/tmp}/nodewright-same-plans.XXXXXX")
trap 'rm -rf "$work"' EXIT

cases=()
for pods in 1000 5000; do
  for mix in karpenter generic preferences; do
    for prefs in respect ignore; do
      cases+=("--mix $mix --pods $pods --preferences $prefs")
    done
  done
  for mix in shapes web arch zonal mixed; do
    for reqs in walkthrough open; do
      cases+=("--catalog us-east-1 --mix $mix --pods $pods --requirements $reqs")
    done
  done
done

field() { python3 -c 'import json,sys; d=json.load(sys.stdin); print(d[sys.argv[1]])' "$1"; }

differ=0
printf '%-70s %9s %6s %7s %9s %9s %s\n' case cost nodes placed old_s new_s plan
for c in "${cases[@]}"; do
  # shellcheck disable=SC2086
  for side in old new; do
    bin=${!side}
    "$bin" bench scheduling $c --json --dump "$work/$side" > "$work/$side.json"
  done
  same=same
  cmp -s "$work/old/plan.json" "$work/new/plan.json" || { same=DIFFERENT; differ=1; }
  for k in cost_per_hour nodes scheduled; do
    if [ "$(field $k < "$work/old.json")" != "$(field $k < "$work/new.json")" ]; then
      same=DIFFERENT; differ=1
    fi
  done
  # Times: the two binaries alternately, the median of each.
  old_t=(); new_t=()
  for _ in $(seq "$runs"); do
    # shellcheck disable=SC2086
    old_t+=("$("$old" bench scheduling $c --json | field seconds)")
    # shellcheck disable=SC2086
    new_t+=("$("$new" bench scheduling $c --json | field seconds)")
  done
  median() { printf '%s\n' "$@" | sort -g | awk '{a[NR]=$1} END {print a[int((NR+1)/2)]}'; }
  printf '%-70s %9.3f %6s %7s %9.3f %9.3f %s\n' "$c" \
    "$(field cost_per_hour < "$work/new.json")" "$(field nodes < "$work/new.json")" \
    "$(field scheduled < "$work/new.json")" "$(median "${old_t[@]}")" "$(median "${new_t[@]}")" "$same"
done
exit "$differ"

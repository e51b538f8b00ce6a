#!/usr/bin/env python3
"""What running nodewright costs per month, next to Karpenter's in-cluster
controller. Pure arithmetic: measured inputs (flags, defaults = the figures
in infra/README.md "What running it costs") × AWS's published us-east-1 prices.

    python3 infra/running-cost.py [--nodes 100] [--churn-per-day 0.2] ... [--json]

Every input is a flag; `--help` lists them with their defaults and sources.
"""

from __future__ import annotations

import argparse
import json
import math
import sys

# ---- published prices, us-east-1 (USD) ----
LAMBDA_GB_S = {"arm64": 0.0000133334, "x86_64": 0.0000166667}
LAMBDA_REQUEST = 0.20 / 1e6
DDB_READ_UNIT = 0.125 / 1e6   # on-demand, per read request unit (4 KB strongly consistent)
DDB_WRITE_UNIT = 0.625 / 1e6  # on-demand, per write request unit (1 KB)
SQS_REQUEST = 0.40 / 1e6      # standard queue, per 64 KB request
LOGS_INGEST_GB = 0.50
ALARM_MONTH = 0.10            # standard-resolution metric alarm
METRIC_MONTH = 0.30           # custom metric, first 10,000
FARGATE_VCPU_H = 0.04048
FARGATE_GB_H = 0.004445

HOURS = 730          # AWS's month
MINUTES = HOURS * 60  # invocations of an every-minute schedule


def parse() -> argparse.Namespace:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.ArgumentDefaultsHelpFormatter)
    ap.add_argument("--nodes", type=int, default=100, help="nodes nodewright manages")
    ap.add_argument("--churn-per-day", type=float, default=0.2,
                    help="fraction of the nodes replaced per day (launch + termination)")
    ap.add_argument("--pods-per-node", type=int, default=20)
    ap.add_argument("--architecture", choices=sorted(LAMBDA_GB_S), default="arm64")
    # Scheduled functions: they tick inside each minute-long invocation.
    ap.add_argument("--provisioner-mb", type=int, default=256)
    ap.add_argument("--provisioner-s", type=float, default=55.0,
                    help="billed seconds per provisioner invocation (ticks until deadline - 5 s of a 60-s timeout)")
    ap.add_argument("--ticks-per-invocation", type=int, default=54,
                    help="provisioner ticks per invocation (measured: the local run's {\"ticks\":54})")
    ap.add_argument("--separate-disruption", action="store_true",
                    help="the module's disruption_in_provisioner = false: disruption is its own always-on invocation "
                         "(by default its loop runs inside the provisioner's, at no extra Lambda time)")
    ap.add_argument("--always-on", action="store_true",
                    help="the module's end_invocations_when_quiet = false: every minute's invocation ticks all minute "
                         "(sub-second reaction from quiet); by default an invocation ends at its first quiet tick and "
                         "only the minutes with something in flight (a burst being launched and bound, a removal) "
                         "tick all minute")
    ap.add_argument("--quiet-wake-s", type=float, default=10.0,
                    help="the module's quiet_wake_seconds: after an invocation ends, its wake queue invokes the "
                         "provisioner again this much later (0: no wake queue, the minute's schedule only)")
    ap.add_argument("--quiet-s", type=float, default=2.0,
                    help="billed seconds of the quiet invocation that decides (once a minute: a pod and node "
                         "listing, the instances, one decision pass; 0.05 s on the local emulator, "
                         "tests/tests/suite/aws_scenarios.rs; 2 s allows for the real API round trips and a cold start)")
    ap.add_argument("--wake-s", type=float, default=0.3,
                    help="billed seconds of a woken invocation with no decision due (the provisioner's tick: "
                         "pending pods, the version markers, its lease, the next wake message; 0.05 s on the local "
                         "emulator, same test; 0.3 s allows for the real round trips to DynamoDB, SQS and the "
                         "cluster's API server: an estimate, not measured in an AWS account)")
    ap.add_argument("--quiet-getitems", type=float, default=8.0,
                    help="GetItems of a quiet invocation (measured: 8, same test, woken or deciding)")
    ap.add_argument("--quiet-writes", type=float, default=4.0,
                    help="writes of a quiet invocation: both leases taken and given back (measured: 2 PutItems + "
                         "2 DeleteItems, same test); the wake lease is one more per wake message")
    ap.add_argument("--busy-minutes-per-change", type=float, default=4.0,
                    help="minutes that tick all minute per node launched or removed (not with --always-on) (batch, "
                         "launch and registration ~2; a removal's drain ~2)")
    ap.add_argument("--no-gauges", action="store_true",
                    help="the module's publish_gauges = false: Karpenter's gauges (queue depth, each pool's usage, "
                         "limits and cost) are not published; the heartbeat and the event series stay")
    ap.add_argument("--disruption-mb", type=int, default=256)
    ap.add_argument("--disruption-s", type=float, default=55.0,
                    help="billed seconds per disruption invocation (55 if it ticks all minute like the provisioner)")
    ap.add_argument("--disruption-ticks", type=int, default=54)
    # Event-driven functions.
    ap.add_argument("--state-change-mb", type=int, default=128)
    ap.add_argument("--state-change-s", type=float, default=0.2, help="seconds per state-change invocation")
    ap.add_argument("--states-per-instance", type=int, default=5,
                    help="state-change events per instance lifetime (pending, running, shutting-down, terminated, + stopping or a repeat)")
    ap.add_argument("--account-instances-factor", type=float, default=2.0,
                    help="EC2 state changes of the whole account per change of ours (the rule cannot filter by cluster)")
    ap.add_argument("--interruption-mb", type=int, default=128)
    ap.add_argument("--interruption-s", type=float, default=1.0,
                    help="seconds per interruption invocation (records the batch's removals and taints their nodes; "
                         "the scheduled loops drain)")
    ap.add_argument("--interruption-events-per-node-month", type=float, default=0.5,
                    help="spot warnings + rebalance recommendations + scheduled changes per node per month")
    # DynamoDB: what one tick reads (Scan / GetItem sizes).
    ap.add_argument("--claim-item-kb", type=float, default=5.7,
                    help="size of one claim item (measured on the emulator: 60 pods, 60 launch options; see infra/README.md)")
    ap.add_argument("--state-overhead-kb", type=float, default=4.0,
                    help="the state table's other items (usage, batch, leases, unavailable marks)")
    ap.add_argument("--config-kb", type=float, default=4.0, help="the config table (NodePools, NodeClasses, settings)")
    ap.add_argument("--getitems-per-second", type=float, default=3.9,
                    help="GetItems per second of the always-on loops together (config#version and state#version "
                         "per tick, the batch record only while pods are pending, leases); measured: 3.9 in a quiet "
                         "invocation running both loops on the emulator (6.4 before one state read per tick; "
                         "tests/tests/suite/aws_scenarios.rs "
                         "the_provisioner_invocation_runs_the_disruption_loop_under_its_own_lease, --nocapture)")
    ap.add_argument("--view-rescans-per-hour", type=float, default=12.0,
                    help="state-table Scans per function per hour with nothing written (the state view's 5-min age bound)")
    ap.add_argument("--scans-per-state-write", type=float, default=2.0,
                    help="state-table Scans each claim/command write causes (each always-on function reads the view again once)")
    ap.add_argument("--claims-scan-per-tick", type=float, default=0.0,
                    help="full state-table Scans per tick: 0 since the state view (state#version); "
                         "1 models the earlier Scan per tick")
    ap.add_argument("--log-kb-per-invocation", type=float, default=1.5,
                    help="CloudWatch Logs per invocation (START/END/REPORT + a summary line)")
    ap.add_argument("--alarms", type=int, default=None,
                    help="alarm metrics (alarms.tf: 2 dead-letter, backlog, dropped, provisioner idle, "
                         "errors and throttles of each invoked function (3 by default, 4 with --separate-disruption), "
                         "2 table throttles of 2 metrics each): 15, or 17 with --separate-disruption")
    # CloudWatch custom metrics (the functions' EMF lines): billed per metric
    # (name × dimension values) and month, prorated by the hour in which it
    # received data.
    ap.add_argument("--nodepools", type=int, default=1)
    ap.add_argument("--pool-limits", type=int, default=1,
                    help="limited resources per NodePool (each publishes a karpenter_nodepools_limit series)")
    ap.add_argument("--event-metric-series", type=int, default=20,
                    help="counter/histogram series the launches, removals and interruptions publish "
                         "(created, registered, terminated, drained, … by pool, zone and capacity type)")
    ap.add_argument("--event-metric-hours", type=float, default=0.3,
                    help="fraction of the hours in which one such series receives data (608 launches a month is "
                         "0.83 an hour: a series of one pool is in about half the hours, one split by zone or "
                         "capacity type in a sixth to a quarter)")
    ap.add_argument("--emf-line-bytes", type=int, default=300,
                    help="one EMF line in the logs (a gauge's value, its dimensions and the metric declaration)")
    ap.add_argument("--json", action="store_true")
    return ap.parse_args()


def units(kb: float, unit_kb: float) -> int:
    return max(1, math.ceil(kb / unit_kb))


def compute(a: argparse.Namespace) -> dict:
    if a.alarms is None:
        a.alarms = 17 if a.separate_disruption else 15
    gb_s = LAMBDA_GB_S[a.architecture]
    rows = []

    def lam(name: str, invocations: float, seconds: float, mb: int, note: str):
        gbs = invocations * seconds * mb / 1024
        rows.append({"item": f"Lambda {name}", "quantity": f"{invocations:,.0f} × {seconds:g} s × {mb} MB = {gbs:,.0f} GB-s",
                     "usd": gbs * gb_s + invocations * LAMBDA_REQUEST, "note": note})
        return invocations

    changes = a.nodes * a.churn_per_day * 30.4  # nodes launched (and as many terminated) per month
    # Ending when quiet, only the busy minutes tick all minute.
    end_when_quiet = not a.always_on
    busy = min(MINUTES, changes * a.busy_minutes_per_change) if end_when_quiet else MINUTES
    quiet = MINUTES - busy
    # The wake queue: after each invocation another one, quiet_wake_s later.
    # In a quiet minute those are short; in a busy one they find the
    # provisioner's lease held and end at once. Where it is enabled the
    # module makes it only when ending when quiet.
    wake = a.quiet_wake_s > 0 and end_when_quiet
    wakes_per_quiet_minute = 60 / (a.quiet_wake_s + a.wake_s) if wake else 0.0
    woken_quiet = quiet * wakes_per_quiet_minute
    woken_busy = busy * 60 / a.quiet_wake_s if wake else 0.0
    inv = 0.0

    def scheduled(name: str, busy_s: float, mb: int, note: str, deciding: bool):
        nonlocal inv
        if end_when_quiet:
            inv += lam(f"{name}, busy minutes", busy, busy_s, mb, note + "; a minute with something in flight")
            if deciding:
                inv += lam(f"{name}, quiet minutes", quiet, a.quiet_s, mb,
                           "ends at its first quiet tick; the one a minute that decides")
        else:
            inv += lam(name, MINUTES, busy_s, mb, note)

    if a.separate_disruption:
        scheduled("provisioner", a.provisioner_s, a.provisioner_mb, "every minute, ticking ~1 s", False)
        scheduled("disruption", a.disruption_s, a.disruption_mb, "every minute", True)
    else:
        scheduled("provisioner", a.provisioner_s, a.provisioner_mb,
                  "every minute, ticking ~1 s; the disruption loop runs beside it", True)
    if wake:
        inv += lam("provisioner, woken", woken_quiet, a.wake_s, a.provisioner_mb,
                   f"the wake queue, {a.quiet_wake_s:g} s after each quiet invocation")
        inv += lam("provisioner, woken while busy", woken_busy, 0.05, a.provisioner_mb,
                   "finds the lease held and ends")
    # Containers that each keep their own state view.
    viewers = 2 if a.separate_disruption else 1
    sc = changes * a.states_per_instance * a.account_instances_factor
    inv += lam("state-change", sc, a.state_change_s, a.state_change_mb, "every EC2 state change in the account")
    ie = a.nodes * a.interruption_events_per_node_month
    inv += lam("interruption", ie, a.interruption_s, a.interruption_mb, "one invocation per event (batches of up to 10)")

    # DynamoDB reads, strongly consistent: 1 unit per 4 KB, rounded up per
    # request; a Scan is billed for every item it reads.
    state_kb = a.nodes * a.claim_item_kb + a.state_overhead_kb
    scan_units = units(state_kb, 4)
    if a.claims_scan_per_tick:
        ticks = MINUTES * (a.ticks_per_invocation + a.disruption_ticks)
        per_tick = units(a.config_kb, 4) + a.claims_scan_per_tick * scan_units + 1
        reads = ticks * per_tick
        rows.append({"item": "DynamoDB reads", "quantity": f"{ticks:,.0f} ticks × {per_tick:,.0f} RRU = {reads / 1e6:,.1f} M RRU",
                     "usd": reads * DDB_READ_UNIT,
                     "note": f"config + state Scan ({state_kb:,.0f} KB) + batch GetItem per tick"})
    else:
        quiet_invocations = quiet * (2 if a.separate_disruption else 1) + woken_quiet
        gets = a.getitems_per_second * busy * 60 + quiet_invocations * a.quiet_getitems + woken_busy
        state_writes = changes * 6 + a.nodes * a.interruption_events_per_node_month * 6
        scans = viewers * HOURS * a.view_rescans_per_hour + state_writes * a.scans_per_state_write * viewers / 2
        reads = gets + scans * scan_units
        rows.append({"item": "DynamoDB reads",
                     "quantity": f"{gets / 1e6:,.1f} M GetItem + {scans:,.0f} Scans × {scan_units} RRU = {reads / 1e6:,.1f} M RRU",
                     "usd": reads * DDB_READ_UNIT,
                     "note": f"version markers per tick, the batch record while pods pend, leases; the state view ({state_kb:,.0f} KB) again after a write or 5 min"})
    # Writes: per launched node ~ claim create (transaction, 2 items × claim size) + 4 updates;
    # lease and batch writes per invocation.
    claim_w = units(a.claim_item_kb, 1)
    writes = changes * (2 * (claim_w + 1) + 4 * claim_w + 2 * (claim_w + 1)) + 2 * busy * 3
    if end_when_quiet:
        writes += (quiet + woken_quiet) * a.quiet_writes + (woken_quiet + woken_busy)  # + the wake lease
    rows.append({"item": "DynamoDB writes", "quantity": f"{writes / 1e6:,.2f} M WRU", "usd": writes * DDB_WRITE_UNIT,
                 "note": "claims (create, launch, register, delete in transactions), leases, batch window"})
    sqs = ie * 4  # send, receive, delete, + a continuation
    # The event source mapping long-polls with 5 pollers at least, 20-s waits:
    # 15 (billed) ReceiveMessage calls a minute even when the queue is empty.
    sqs += 5 * 3 * MINUTES
    if wake:
        # The wake queue's mapping polls the same way; each wake is a send,
        # the receive that returns it and a delete.
        sqs += 5 * 3 * MINUTES + 3 * (woken_quiet + woken_busy)
    rows.append({"item": "SQS requests", "quantity": f"{sqs / 1e6:,.2f} M", "usd": sqs * SQS_REQUEST,
                 "note": "the event source mappings' long polls" + (" and the wake messages" if wake else "")})
    # The gauges (every series but the heartbeat) go out every 30 s while the
    # provisioner's loop runs: one EMF line each.
    # The provisioner's (queue depth; per pool five usages, each limit, the
    # cost) and the disruption loop's eligible nodes (empty, drifted,
    # underutilized), every decision.
    gauges = 0 if a.no_gauges else 1 + a.nodepools * (5 + a.pool_limits + 1) + 3
    # Every 30 s, across the invocations of a container (the provisioner's
    # memory); quiet invocations of the economy deployment without a wake
    # queue publish once each.
    gauge_lines = gauges * (2 * busy + (2 * quiet if wake else quiet))
    log_gb = (inv * a.log_kb_per_invocation * 1024 + gauge_lines * a.emf_line_bytes) / 1024**3
    rows.append({"item": "CloudWatch Logs", "quantity": f"{log_gb:,.2f} GB", "usd": log_gb * LOGS_INGEST_GB,
                 "note": "ingestion: invocation lines and the gauges' EMF lines"})
    # Published every 30 s by the provisioner's loop, so present every hour:
    # karpenter_scheduler_queue_depth, and per NodePool the usage of cpu,
    # memory, pods, ephemeral-storage and nodes, each limit and the cost;
    # the disruption loop's karpenter_voluntary_disruption_eligible_nodes
    # per reason; plus the ProvisionerTicks heartbeat (shared/src/handlers/provisioner.rs
    # publish_gauges, shared/src/runtime.rs).
    always = 1 + gauges
    series = always + a.event_metric_series * a.event_metric_hours
    rows.append({"item": "CloudWatch metrics", "quantity": f"{always} gauges (the heartbeat{'' if a.no_gauges else ' and Karpenter’s'}) + {a.event_metric_series} × {a.event_metric_hours:g} event series",
                 "usd": series * METRIC_MONTH,
                 "note": "Karpenter's metrics as EMF custom metrics, billed per series-hour with data"})
    rows.append({"item": "CloudWatch alarms", "quantity": f"{a.alarms}", "usd": a.alarms * ALARM_MONTH, "note": "dead letters, backlog, dropped, provisioner idle; errors and throttles per function and table"})
    total = sum(r["usd"] for r in rows)
    # The always-free tier, per account (shared with whatever else runs there):
    # Lambda 400,000 GB-s and 1 M requests, SQS 1 M requests a month,
    lambda_gbs = sum(float(r["quantity"].split("= ")[1].split(" GB-s")[0].replace(",", ""))
                     for r in rows if r["item"].startswith("Lambda"))
    # CloudWatch: 10 custom metrics, 10 alarm metrics and 5 GB of logs.
    free = (min(lambda_gbs, 400_000) * gb_s + min(inv, 1e6) * LAMBDA_REQUEST + min(sqs, 1e6) * SQS_REQUEST
            + min(series, 10) * METRIC_MONTH + min(a.alarms, 10) * ALARM_MONTH + min(log_gb, 5) * LOGS_INGEST_GB)
    karpenter = 2 * HOURS * (1 * FARGATE_VCPU_H + 1 * FARGATE_GB_H)
    return {"inputs": vars(a), "rows": rows, "total_usd": total, "karpenter_usd": karpenter,
            "total_with_free_tier_usd": total - free,
            "node_changes_per_month": changes}


def main() -> int:
    a = parse()
    r = compute(a)
    if a.json:
        print(json.dumps(r, indent=2))
        return 0
    print(f"nodewright, {a.nodes} nodes, {a.churn_per_day:.0%} replaced per day "
          f"({r['node_changes_per_month']:,.0f} launches/month), {a.architecture}, us-east-1 prices\n")
    print("| item | quantity / month | $ / month | note |")
    print("|---|---|---:|---|")
    for row in r["rows"]:
        print(f"| {row['item']} | {row['quantity']} | {row['usd']:.2f} | {row['note']} |")
    print(f"| **nodewright total** | | **{r['total_usd']:.2f}** | |")
    print(f"| nodewright, if the account's free tier is unused | | {r['total_with_free_tier_usd']:.2f} | Lambda 400,000 GB-s + 1 M requests, SQS 1 M requests, CloudWatch 10 metrics + 10 alarms + 5 GB logs |")
    print(f"| Karpenter, 2 replicas × (1 vCPU + 1 GiB) on Fargate | 2 × {HOURS} h | {r['karpenter_usd']:.2f} | the chart's requests |")
    return 0


if __name__ == "__main__":
    sys.exit(main())

#!/usr/bin/env python3
"""Offline checks of infra/ (no provider plugin needed): parse the Terraform
with python-hcl2 and assert the structure nodewright depends on, and match
the EventBridge rules' patterns against the functions' fixture events.

    python check_terraform.py [REPO_ROOT]

Prints one line per check and closes with "N passed, N failed, N skipped";
exits non-zero when a check fails.
"""

from __future__ import annotations

import glob
import json
import os
import re
import sys
import traceback

import hcl2

ROOT = os.path.abspath(sys.argv[1] if len(sys.argv) > 1 else os.path.join(os.path.dirname(__file__), "..", "..", ".."))
INFRA = os.path.join(ROOT, "infra")
MODULE = os.path.join(INFRA, "modules", "nodewright")
EXAMPLE = os.path.join(INFRA, "examples", "complete")

FUNCTIONS = {"provisioner", "state-change", "interruption", "disruption"}
SCHEDULED = {"provisioner", "disruption"}
ASYNCHRONOUS = {"provisioner", "state-change", "disruption"}
INTERRUPTION_RULES = {
    "spot-interruption": ("aws.ec2", "EC2 Spot Instance Interruption Warning"),
    "rebalance-recommendation": ("aws.ec2", "EC2 Instance Rebalance Recommendation"),
    "scheduled-change": ("aws.health", "AWS Health Event"),
    "capacity-reservation-interruption": ("aws.ec2", "EC2 Capacity Reservation Instance Interruption Warning"),
}


class Skip(Exception):
    pass


# ----------------------------------------------------------------- parsing
def clean(v):
    """python-hcl2 keeps string literals quoted ("\"x\"") and adds bookkeeping
    keys; strip both so the tree reads like the HCL."""
    if isinstance(v, dict):
        return {clean_key(k): clean(x) for k, x in v.items() if k not in ("__comments__", "__is_block__", "__inline_comments__")}
    if isinstance(v, list):
        return [clean(x) for x in v]
    if isinstance(v, str):
        return unquote(v)
    return v


def clean_key(k):
    return unquote(k) if isinstance(k, str) else k


def unquote(s: str) -> str:
    if len(s) >= 2 and s[0] == '"' and s[-1] == '"':
        return s[1:-1].replace('\\"', '"')
    return s


class Config:
    """All blocks of one Terraform directory."""

    def __init__(self, directory: str):
        self.directory = directory
        self.files = sorted(glob.glob(os.path.join(directory, "*.tf")))
        if not self.files:
            raise AssertionError(f"no .tf files in {directory}")
        self.resources: dict[tuple[str, str], dict] = {}
        self.data: dict[tuple[str, str], dict] = {}
        self.variables: dict[str, dict] = {}
        self.outputs: dict[str, dict] = {}
        self.locals: dict[str, object] = {}
        self.modules: dict[str, dict] = {}
        self.text = ""
        for path in self.files:
            with open(path, encoding="utf-8") as f:
                text = f.read()
            self.text += text
            try:
                tree = clean(hcl2.loads(text))
            except Exception as e:  # noqa: BLE001 - report the file
                raise AssertionError(f"{os.path.relpath(path, ROOT)} does not parse: {e}") from e
            for block in tree.get("resource", []):
                for rtype, named in block.items():
                    for name, body in named.items():
                        self.resources[(rtype, name)] = body
            for block in tree.get("data", []):
                for dtype, named in block.items():
                    for name, body in named.items():
                        self.data[(dtype, name)] = body
            for block in tree.get("variable", []):
                self.variables.update(block)
            for block in tree.get("output", []):
                self.outputs.update(block)
            for block in tree.get("locals", []):
                self.locals.update(block)
            for block in tree.get("module", []):
                self.modules.update(block)

    def resource(self, rtype: str, name: str) -> dict:
        r = self.resources.get((rtype, name))
        if r is None:
            raise AssertionError(f"resource {rtype}.{name} is missing")
        return r

    def of_type(self, rtype: str) -> dict[str, dict]:
        return {n: b for (t, n), b in self.resources.items() if t == rtype}


def block(body: dict, name: str) -> dict:
    """The single nested block `name` of a body."""
    v = body.get(name)
    if not v:
        raise AssertionError(f"block {name} is missing")
    return v[0] if isinstance(v, list) else v


def blocks(body: dict, name: str) -> list[dict]:
    v = body.get(name, [])
    return v if isinstance(v, list) else [v]


def expr(v) -> str:
    """An expression as written, without the ${ } around a bare reference."""
    if isinstance(v, str) and v.startswith("${") and v.endswith("}") and v.count("${") == 1:
        return v[2:-1]
    return v


def as_list(v) -> list:
    return v if isinstance(v, list) else [v]


# -------------------------------------------------------------- the checks
CHECKS = []


def check(fn):
    CHECKS.append(fn)
    return fn


_configs: dict[str, Config] = {}


def module() -> Config:
    if "module" not in _configs:
        _configs["module"] = Config(MODULE)
    return _configs["module"]


def example() -> Config:
    if "example" not in _configs:
        _configs["example"] = Config(EXAMPLE)
    return _configs["example"]


@check
def module_inputs_are_documented_typed_and_validated():
    m = module()
    assert m.variables, "the module has no variables"
    for name, v in m.variables.items():
        assert str(v.get("description", "")).strip(), f"variable {name} has no description"
        assert "type" in v, f"variable {name} has no type"
    for name in ["name", "cluster_name", "architecture", "artifacts_dir", "memory_size", "interruption_timeout",
                 "log_retention_in_days", "kms_key_arn", "interruption_batch_size", "interruption_max_concurrency"]:
        assert name in m.variables, f"variable {name} is missing"
        assert blocks(m.variables[name], "validation"), f"variable {name} has no validation"
    arch = m.variables["architecture"]
    assert arch.get("default") == "arm64", "architecture should default to arm64 (Graviton)"
    cond = block(arch, "validation")["condition"]
    assert "arm64" in cond and "x86_64" in cond, f"architecture validation does not name both: {cond}"
    for name, o in m.outputs.items():
        assert str(o.get("description", "")).strip(), f"output {name} has no description"
    for name in ["function_names", "functions_role_arn", "node_role_arn", "node_instance_profile_name",
                 "config_table_name", "state_table_name", "interruption_queue_url"]:
        assert name in m.outputs, f"output {name} is missing"


@check
def four_functions_on_provided_al2023_with_the_architecture_input():
    m = module()
    fns = m.locals.get("functions")
    assert isinstance(fns, dict) and set(fns) == FUNCTIONS, f"local.functions should be exactly {sorted(FUNCTIONS)}: {sorted(fns or {})}"
    f = m.resource("aws_lambda_function", "this")
    assert expr(f["for_each"]) == "local.functions", "aws_lambda_function.this must be for_each = local.functions"
    assert f["runtime"] == "provided.al2023", f"runtime {f['runtime']}"
    assert f["handler"] == "bootstrap"
    assert [expr(a) for a in f["architectures"]] == ["var.architecture"], f"architectures {f['architectures']}"
    assert "each.key}/bootstrap.zip" in f["filename"], f"filename {f['filename']} is not the cargo lambda zip"
    assert "filebase64sha256" in f["source_code_hash"], "source_code_hash must follow the zip"
    assert expr(f["timeout"]) == "each.value.timeout" and expr(f["memory_size"]) == "each.value.memory_size"
    assert expr(f["reserved_concurrent_executions"]) == "each.value.reserved_concurrency"
    assert fns["provisioner"]["timeout"] == 60 and fns["disruption"]["timeout"] == 60, "scheduled functions run 60 s"
    # One provisioner invocation ticks at a time (its lease); with the wake
    # queue others may start beside it (the schedule's one, the mapping's
    # two), find the lease held and end.
    assert expr(fns["provisioner"]["reserved_concurrency"]) == "local.wake ? 3 : 1", \
        f"provisioner reserved concurrency {fns['provisioner']['reserved_concurrency']}"
    assert fns["disruption"]["reserved_concurrency"] == 1, "one disruption invocation at a time"
    assert expr(fns["interruption"]["timeout"]) == "var.interruption_timeout"
    for name, spec in fns.items():
        assert (spec["asynchronous"] is True) == (name in ASYNCHRONOUS), f"{name}: asynchronous should be {name in ASYNCHRONOUS}"
    env = expr(block(f, "environment")["variables"])
    assert env == "local.environment", f"environment {env}"
    for key in ["NODEWRIGHT_CLUSTER_NAME", "NODEWRIGHT_TABLE_PREFIX", "NODEWRIGHT_DEFAULT_INSTANCE_PROFILE"]:
        assert key in m.locals["environment"], f"local.environment lacks {key}"
    assert expr(m.locals["environment"]["NODEWRIGHT_TABLE_PREFIX"]) == "var.name", "tables are <name>-config/-state"


@check
def every_function_has_a_role_and_a_log_group_with_retention():
    m = module()
    f = m.resource("aws_lambda_function", "this")
    assert expr(f["role"]) == "aws_iam_role.functions.arn", f"role {f['role']}"
    role = m.resource("aws_iam_role", "functions")
    trust = m.data[("aws_iam_policy_document", "functions_assume")]
    principals = block(block(trust, "statement"), "principals")
    assert principals["identifiers"] == ["lambda.amazonaws.com"], f"the functions' role trusts {principals['identifiers']}"
    assert "functions_assume" in role["assume_role_policy"]
    lg = m.resource("aws_cloudwatch_log_group", "functions")
    assert expr(lg["for_each"]) == "local.functions", "one log group per function"
    assert expr(lg["retention_in_days"]) == "var.log_retention_in_days"
    assert lg["name"] == "/aws/lambda/${var.name}-${each.key}", f"log group name {lg['name']}"
    log = block(f, "logging_config")
    assert expr(log["log_group"]) == "aws_cloudwatch_log_group.functions[each.key].name", f"logging_config.log_group {log['log_group']}"


@check
def every_function_has_its_trigger():
    m = module()
    # Both schedule expressions, the disruption one dropped while the
    # provisioner runs the disruption loop (disruption_in_provisioner, on by
    # default, which the provisioner learns from its environment).
    schedules = expr(m.locals["schedules"])
    found = re.fullmatch(r"\{for name, expression in \{(?P<map>[^}]*)\} : name => expression if (?P<cond>.*)\}", schedules)
    assert found, f"schedules {schedules}"
    entries = dict(e.split(" = ") for e in found["map"].split(", "))
    assert entries == {n: f"var.{n}_schedule" for n in SCHEDULED}, f"schedules for {entries}"
    assert found["cond"] == 'name != "disruption" || !var.disruption_in_provisioner', f"schedule filter {found['cond']}"
    inline = m.variables["disruption_in_provisioner"]
    assert expr(inline["type"]) == "bool" and inline["default"] is True, f"disruption_in_provisioner {inline}"
    assert expr(m.locals["environment"]["NODEWRIGHT_PROVISIONER_RUNS_DISRUPTION"]) == "tostring(var.disruption_in_provisioner)"
    # Invocations end when quiet by default (the wake queue brings the next
    # within quiet_wake_seconds); the gauges are published by default; both
    # reach the functions' environment.
    for var, env, default in [("end_invocations_when_quiet", "NODEWRIGHT_END_WHEN_QUIET", True),
                              ("publish_gauges", "NODEWRIGHT_GAUGES", True)]:
        v = m.variables[var]
        assert expr(v["type"]) == "bool" and v["default"] is default, f"{var} {v}"
        assert expr(m.locals["environment"][env]) == f"tostring(var.{var})", f"{env}"
    rule = m.resource("aws_cloudwatch_event_rule", "schedule")
    assert expr(rule["for_each"]) == "local.schedules" and "schedule_expression" in rule
    target = m.resource("aws_cloudwatch_event_target", "schedule")
    assert expr(target["arn"]) == "aws_lambda_function.this[each.key].arn"
    perm = m.resource("aws_lambda_permission", "schedule")
    assert perm["principal"] == "events.amazonaws.com" and "aws_cloudwatch_event_rule.schedule[each.key].arn" in perm["source_arn"]

    sc = m.resource("aws_cloudwatch_event_target", "state_change")
    assert expr(sc["arn"]) == 'aws_lambda_function.this["state-change"].arn', f"state-change target {sc['arn']}"
    perm = m.resource("aws_lambda_permission", "state_change")
    assert perm["principal"] == "events.amazonaws.com" and "aws_cloudwatch_event_rule.state_change.arn" in perm["source_arn"]

    # The wake queue exists when invocations end when quiet, and invokes
    # the provisioner one message at a time; the provisioner learns it and
    # the delay from its environment, and may send to it.
    assert expr(m.locals["wake"]) == "var.end_invocations_when_quiet && var.quiet_wake_seconds > 0", f"wake {m.locals['wake']}"
    assert m.variables["quiet_wake_seconds"]["default"] == 10
    wake_q = m.resource("aws_sqs_queue", "wake")
    assert expr(wake_q["count"]) == "local.wake ? 1 : 0"
    assert expr(wake_q["visibility_timeout_seconds"]) == "local.functions.provisioner.timeout"
    # Retention outlasts the longest delay the variable allows.
    assert expr(wake_q["message_retention_seconds"]) == "var.quiet_wake_seconds + 60", wake_q["message_retention_seconds"]
    wake_esm = m.resource("aws_lambda_event_source_mapping", "wake")
    assert expr(wake_esm["count"]) == "local.wake ? 1 : 0"
    assert expr(wake_esm["function_name"]) == 'aws_lambda_function.this["provisioner"].arn'
    assert expr(wake_esm["event_source_arn"]) == "aws_sqs_queue.wake[0].arn" and wake_esm["batch_size"] == 1
    assert block(wake_esm, "scaling_config")["maximum_concurrency"] == 2, "room for the mapping in the reserved 3"
    assert "aws_sqs_queue.wake[0].url" in expr(m.locals["environment"]["NODEWRIGHT_WAKE_QUEUE_URL"])
    assert "var.quiet_wake_seconds" in expr(m.locals["environment"]["NODEWRIGHT_QUIET_WAKE_SECONDS"])
    assert "aws_sqs_queue.wake[0].arn" in json.dumps(m.data[("aws_iam_policy_document", "functions")]), \
        "the functions' role may use the wake queue"

    esm = m.resource("aws_lambda_event_source_mapping", "interruption")
    assert expr(esm["function_name"]) == 'aws_lambda_function.this["interruption"].arn'
    assert expr(esm["event_source_arn"]) == "aws_sqs_queue.interruption.arn"
    assert esm["function_response_types"] == ["ReportBatchItemFailures"]
    assert expr(esm["batch_size"]) == "var.interruption_batch_size" and m.variables["interruption_batch_size"]["default"] == 10
    assert expr(block(esm, "scaling_config")["maximum_concurrency"]) == "var.interruption_max_concurrency"


@check
def every_rule_has_a_target():
    m = module()
    rules = m.of_type("aws_cloudwatch_event_rule")
    targets = m.of_type("aws_cloudwatch_event_target")
    assert set(rules) == {"schedule", "state_change", "interruption"}, f"rules {sorted(rules)}"
    for name, rule in rules.items():
        t = targets.get(name)
        assert t is not None, f"rule {name} has no aws_cloudwatch_event_target.{name}"
        ref = f"aws_cloudwatch_event_rule.{name}" + ("[each.key]" if "for_each" in rule else "") + ".name"
        assert expr(t["rule"]) == ref, f"target {name} points at {t['rule']}, not {ref}"
        assert rule.get("for_each") == t.get("for_each"), f"rule {name} and its target iterate differently"
        assert blocks(t, "dead_letter_config"), f"target {name} has no dead_letter_config"
    assert set(m.locals["interruption_rules"]) == set(INTERRUPTION_RULES), f"interruption rules {sorted(m.locals['interruption_rules'])}"
    assert expr(targets["interruption"]["arn"]) == "aws_sqs_queue.interruption.arn"


@check
def asynchronous_functions_have_an_on_failure_destination():
    m = module()
    assert "if f.asynchronous" in m.locals["asynchronous_functions"], "asynchronous_functions must filter on f.asynchronous"
    cfg = m.resource("aws_lambda_function_event_invoke_config", "this")
    assert expr(cfg["for_each"]) == "local.asynchronous_functions"
    dest = block(block(cfg, "destination_config"), "on_failure")["destination"]
    assert expr(dest) == "aws_sqs_queue.failed_invocations.arn", f"on_failure destination {dest}"


@check
def the_interruption_queue():
    m = module()
    q = m.resource("aws_sqs_queue", "interruption")
    assert m.locals["interruption_retention"] == 300, f"retention {m.locals['interruption_retention']}"
    assert expr(q["message_retention_seconds"]) == "local.interruption_retention"
    # AWS's guidance for an SQS event source: visibility >= 6 x the function timeout.
    assert expr(q["visibility_timeout_seconds"]) == "local.interruption_visibility"
    assert re.fullmatch(r"\$\{6 \* var\.interruption_timeout\}", expr(m.locals["interruption_visibility"]).strip()) \
        or expr(m.locals["interruption_visibility"]).strip() == "6 * var.interruption_timeout", \
        f"visibility {m.locals['interruption_visibility']}"
    fn = m.locals["functions"]["interruption"]
    assert expr(fn["timeout"]) == "var.interruption_timeout", f"interruption function timeout {fn['timeout']}"
    assert expr(q["sqs_managed_sse_enabled"]) == "local.sqs_managed_sse" and expr(q["kms_master_key_id"]) == "var.kms_key_arn"
    assert "var.kms_key_arn == null ? true : null" in m.locals["sqs_managed_sse"], "SSE must be on without a KMS key"
    redrive = q["redrive_policy"]
    assert "aws_sqs_queue.interruption_dlq.arn" in redrive and "maxReceiveCount" in redrive, f"redrive {redrive}"
    assert "var.interruption_max_receive_count" in redrive, f"redrive {redrive}"
    # A DLQ is reached only if maxReceiveCount x visibility < retention: the
    # defaults satisfy it, and a precondition refuses settings that do not.
    timeout = m.variables["interruption_timeout"]["default"]
    receives = m.variables["interruption_max_receive_count"]["default"]
    visibility = 6 * timeout
    assert receives * visibility < 300, f"defaults: {receives} x {visibility} s >= 300 s: the DLQ is never reached"
    # A failed message is received again after the visibility timeout: at
    # least once more inside a 2-minute notice, whatever the inputs allow.
    cond = block(m.variables["interruption_timeout"], "validation")["condition"]
    limit = max(int(n) for n in re.findall(r"<=\s*(\d+)", cond))
    assert 6 * limit <= 60, f"interruption_timeout may reach {limit} s: a retry {6 * limit} s later"
    pre = blocks(block(q, "lifecycle"), "precondition")
    conds = [expr(p["condition"]) for p in pre]
    assert any("var.interruption_max_receive_count * local.interruption_visibility < local.interruption_retention" in c
               for c in conds), f"no maxReceiveCount x visibility < retention precondition: {conds}"
    esm = m.resource("aws_lambda_event_source_mapping", "interruption")
    assert esm["function_response_types"] == ["ReportBatchItemFailures"], "failed items must go back, not the batch"
    for name, queue in m.of_type("aws_sqs_queue").items():
        assert expr(queue.get("sqs_managed_sse_enabled")) == "local.sqs_managed_sse", f"queue {name} is not encrypted"


def policy_statements(cfg: Config, name: str) -> list[dict]:
    doc = cfg.data.get(("aws_iam_policy_document", name))
    assert doc is not None, f"data.aws_iam_policy_document.{name} is missing"
    out = list(blocks(doc, "statement"))
    for dyn in blocks(doc, "dynamic"):
        for _, body in dyn.items():
            out.extend(blocks(body, "content"))
    return out


def conditions(stmt: dict) -> dict[str, tuple[str, list]]:
    return {c["variable"]: (c["test"], as_list(c["values"])) for c in blocks(stmt, "condition")}


@check
def the_queue_policy_lets_only_eventbridge_and_the_functions_send_and_denies_non_tls():
    m = module()
    assert expr(m.resource("aws_sqs_queue_policy", "interruption")["policy"]) == "data.aws_iam_policy_document.interruption_queue.json"
    stmts = {s["sid"]: s for s in policy_statements(m, "interruption_queue")}
    allow = [s for s in stmts.values() if s.get("effect", "Allow") == "Allow"]
    assert len(allow) == 1, f"one Allow statement expected, got {[s['sid'] for s in allow]}"
    a = allow[0]
    assert a["actions"] == ["sqs:SendMessage"]
    p = block(a, "principals")
    assert p["type"] == "Service" and p["identifiers"] == ["events.amazonaws.com"], f"Allow principals {p}"
    c = conditions(a)
    assert c.get("aws:SourceArn", ("", []))[0] == "ArnEquals" and "aws_cloudwatch_event_rule.interruption" in str(c["aws:SourceArn"][1]), \
        "EventBridge may send only from our interruption rules"
    deny_send = [s for s in stmts.values() if s.get("effect") == "Deny" and s["actions"] == ["sqs:SendMessage"]]
    assert len(deny_send) == 1, "a Deny of SendMessage to everyone else is missing"
    c = conditions(deny_send[0])
    assert c.get("aws:PrincipalServiceName") == ("StringNotEquals", ["events.amazonaws.com"]), f"deny conditions {c}"
    assert c.get("aws:PrincipalArn", ("", []))[0] == "ArnNotEquals" and "aws_iam_role.functions.arn" in str(c["aws:PrincipalArn"][1])
    for policy in ["interruption_queue", "failed_invocations", "interruption_dlq", "wake_queue"]:
        tls = [s for s in policy_statements(m, policy) if s.get("effect") == "Deny" and s["actions"] == ["sqs:*"]]
        assert tls and conditions(tls[0]).get("aws:SecureTransport") == ("Bool", ["false"]), f"{policy} does not deny non-TLS access"


@check
def the_two_tables():
    m = module()
    for name in ["config", "state"]:
        t = m.resource("aws_dynamodb_table", name)
        assert t["name"] == "${var.name}-" + name, f"table name {t['name']}"
        assert t["billing_mode"] == "PAY_PER_REQUEST", f"{name}: on-demand"
        assert t["hash_key"] == "pk" and "range_key" not in t, f"{name}: one partition key pk"
        attrs = blocks(t, "attribute")
        assert attrs == [{"name": "pk", "type": "S"}], f"{name}: attributes {attrs}"
        assert block(t, "point_in_time_recovery")["enabled"] is True, f"{name}: PITR"
        assert block(t, "server_side_encryption")["enabled"] is True, f"{name}: encryption"
    ttl = block(m.resource("aws_dynamodb_table", "state"), "ttl")
    assert ttl == {"attribute_name": "expires_at", "enabled": True}, f"state TTL {ttl}"
    assert not blocks(m.resource("aws_dynamodb_table", "config"), "ttl"), "config items never expire"


EC2_READ = re.compile(r"^ec2:(Describe|Get)")


# ------------------------------------------------- least privilege, proven
# The functions' AWS calls are the SDK operations in shared/src/aws (every
# SDK client lives there). Each is granted, and nothing else is, save the
# actions listed below with why.
SDK_SOURCES = os.path.join(ROOT, "shared", "src", "aws")
# Receiver field/variable name -> IAM service prefix.
SDK_CLIENTS = {"ec2": "ec2", "client": "dynamodb", "pricing": "pricing", "ssm": "ssm", "eks": "eks", "sqs": "sqs"}
SDK_CALL = re.compile(
    r"\b(" + "|".join(SDK_CLIENTS) + r")\s*\.\s*((?:describe|create|delete|terminate|run|get|put|update|scan|query|"
    r"transact|batch|send|receive|change)[a-z_]*)\(\)"
)
# Operations in the sources that only the operator's CLI runs (with the
# operator's credentials): never granted to the functions.
OPERATOR_ONLY = {
    "dynamodb:CreateTable": "DynamoStore::ensure_tables, `nodewright config init`",
    "dynamodb:DescribeTable": "DynamoStore::ensure_tables",
    "dynamodb:UpdateTimeToLive": "DynamoStore::ensure_tables",
}
# What an SDK call is authorised as besides its own action.
IMPLIED = {
    # EC2 authorises the instances, volumes and interfaces a fleet launches
    # as RunInstances, and its tag specifications as CreateTags.
    "ec2:CreateFleet": {"ec2:RunInstances", "ec2:CreateTags", "iam:PassRole"},
    "ec2:CreateLaunchTemplate": {"ec2:CreateTags"},
}
# Granted for the platform's calls made with the functions' role, not the code's.
PLATFORM = {
    "sqs:ReceiveMessage": "the interruption queue's event source mapping",
    "sqs:DeleteMessage": "the interruption queue's event source mapping",
    "sqs:GetQueueAttributes": "the interruption queue's event source mapping",
    "sqs:SendMessage": "Lambda's on-failure destination (failed asynchronous invocations); the code's wake messages too",
    "logs:CreateLogStream": "the functions' logs",
    "logs:PutLogEvents": "the functions' logs",
    "kms:Decrypt": "tables, queues and environment under a customer key (kms:ViaService)",
    "kms:GenerateDataKey": "tables and the on-failure queue under a customer key (kms:ViaService)",
    "ec2:CreateNetworkInterface": "Lambda's network interfaces in a VPC",
    "ec2:DeleteNetworkInterface": "Lambda's network interfaces in a VPC",
    "ec2:AssignPrivateIpAddresses": "Lambda's network interfaces in a VPC",
    "ec2:UnassignPrivateIpAddresses": "Lambda's network interfaces in a VPC",
    "ec2:DescribeNetworkInterfaces": "Lambda's network interfaces in a VPC",
}
TRANSACT_ITEMS = {"Put": "dynamodb:PutItem", "Update": "dynamodb:UpdateItem", "Delete": "dynamodb:DeleteItem",
                  "ConditionCheck": "dynamodb:ConditionCheckItem"}


def camel(op: str) -> str:
    return "".join(w.capitalize() for w in op.split("_"))


def sdk_actions() -> dict[str, set[str]]:
    """IAM action -> the source files that call it."""
    out: dict[str, set[str]] = {}
    sources = {os.path.relpath(path, ROOT): open(path, encoding="utf-8").read()
               for path in sorted(glob.glob(os.path.join(SDK_SOURCES, "**", "*.rs"), recursive=True))}
    transacts = False
    for rel, text in sources.items():
        for client, op in SDK_CALL.findall(text):
            service = SDK_CLIENTS[client]
            if service == "dynamodb" and op == "transact_write_items":
                transacts = True
                continue
            out.setdefault(f"{service}:{camel(op)}", set()).add(rel)
    if transacts:
        # A transaction is authorised item by item, as each item's own
        # action: the items built anywhere in the DynamoDB adapter (its
        # files build them apart from the one that sends them).
        for rel, text in sources.items():
            if "aws_sdk_dynamodb" not in text and "dynamo" not in os.path.basename(os.path.dirname(rel)):
                continue
            for kind, action in TRANSACT_ITEMS.items():
                if re.search(rf"\b{kind}::builder\(\)", text):
                    out.setdefault(action, set()).add(rel)
    return out


def granted_actions() -> set[str]:
    return {a for s in policy_statements(module(), "functions") if s.get("effect", "Allow") == "Allow"
            for a in as_list(s["actions"])}


@check
def the_grants_are_the_sdk_operations_the_code_calls():
    called = sdk_actions()
    assert {"ec2:CreateFleet", "ec2:TerminateInstances", "dynamodb:Scan", "dynamodb:UpdateItem"} <= set(called), \
        f"the source scan found too little: {sorted(called)}"
    needed = set(called) - set(OPERATOR_ONLY)
    for a in list(needed):
        needed |= IMPLIED.get(a, set())
    granted = granted_actions()
    missing = needed - granted
    assert not missing, f"called but not granted: {sorted(missing)} ({ {a: sorted(called.get(a, [])) for a in missing} })"
    extra = granted - needed - set(PLATFORM)
    assert not extra, f"granted but never called: {sorted(extra)}"
    operator = granted & set(OPERATOR_ONLY)
    assert not operator, f"operator-only calls granted to the functions: {sorted(operator)}"


@check
def the_source_scan_itself():
    # The scan above decides the least-privilege check; make sure it reads calls as written.
    text = "let a = self\n    .ec2\n    .describe_instances()\n; ec2.clone(); self.client.transact_write_items()"
    assert SDK_CALL.findall(text) == [("ec2", "describe_instances"), ("client", "transact_write_items")]
    assert camel("describe_instance_type_offerings") == "DescribeInstanceTypeOfferings"
EC2_CREATED = ("fleet/*", "instance/*", "volume/*", "network-interface/*", "launch-template/*", "spot-instances-request/*")
EC2_EXISTING = ("image/*", "snapshot/*", "security-group/*", "subnet/*", "capacity-reservation/*")
@check
def each_iam_statement_is_scoped():
    m = module()
    stmts = policy_statements(m, "functions")
    assert expr(m.resource("aws_iam_role_policy", "functions")["policy"]) == "data.aws_iam_policy_document.functions.json"
    seen = set()
    # Ownership is nodewright's own tag (shared/src/cloud/ownership.rs), valued
    # with the cluster's name; kubernetes.io/cluster/<name>=owned is worn by
    # managed node groups too and never scopes a create or a delete.
    assert m.locals["owner_tag"] == "nodewright.io/cluster", f"owner tag {m.locals['owner_tag']}"
    assert m.locals["nodepool_tag"] == "nodewright.io/nodepool", f"nodepool tag {m.locals['nodepool_tag']}"
    owned_key = "aws:RequestTag/${local.owner_tag}"
    resource_key = "aws:ResourceTag/${local.owner_tag}"
    owned = ("StringEquals", ["${var.cluster_name}"])
    allowed = set(sdk_actions()) | set(PLATFORM) | {a for i in IMPLIED.values() for a in i}
    for s in stmts:
        sid = s.get("sid", "?")
        assert s.get("effect", "Allow") == "Allow", f"{sid}: the role has only Allow statements"
        actions = as_list(s["actions"])
        resources = [str(r) for r in as_list(s["resources"])]
        c = conditions(s)
        for a in actions:
            assert "*" not in a, f"{sid}: wildcard action {a}"
            assert a in allowed, f"{sid}: {a} is not an action the functions need"
            seen.add(a)
        if "*" in resources:
            writes = [a for a in actions if not (EC2_READ.match(a) or a == "pricing:GetProducts")]
            assert not writes, f"{sid}: {writes} granted on *"
            if any(a.startswith("ec2:") for a in actions):
                assert c.get("aws:RequestedRegion", ("", []))[0] == "StringEquals", f"{sid}: EC2 reads not limited to the region"
        ec2_writes = [a for a in actions if a.startswith("ec2:") and not EC2_READ.match(a)]
        if ec2_writes:
            for r in resources:
                # A concat(...) of ARN lists: check each string in it.
                arns = re.findall(r'"([^"]*)"', r) if r.startswith("${concat(") else [r]
                assert arns, f"{sid}: EC2 write on {r}"
                for arn in arns:
                    assert arn.startswith("${local.ec2_arn_prefix}:"), f"{sid}: EC2 write on {arn}"
        if {"ec2:TerminateInstances", "ec2:DeleteLaunchTemplate"} & set(actions):
            assert c.get(resource_key) == owned, f"{sid}: delete not limited to our resources ({c})"
        if "ec2:CreateTags" in actions:
            assert c.get("ec2:CreateAction", ("", []))[0] == "StringEquals", f"{sid}: CreateTags outside create calls"
            assert set(c["ec2:CreateAction"][1]) <= {"RunInstances", "CreateFleet", "CreateLaunchTemplate"}
            assert c.get(owned_key) == owned, f"{sid}: tags on create without our request tag"
        if {"ec2:RunInstances", "ec2:CreateFleet", "ec2:CreateLaunchTemplate"} & set(actions):
            created = [r for r in resources if r.endswith(EC2_CREATED) and not r.endswith("launch-template/*")]
            templates = [r for r in resources if r.endswith("launch-template/*")]
            existing = [r for r in resources if r.endswith(EC2_EXISTING)]
            assert len(created) + len(templates) + len(existing) == len(resources), f"{sid}: unexpected resources {resources}"
            if created or "ec2:CreateLaunchTemplate" in actions:
                assert c.get(owned_key) == owned, f"{sid}: creates without our request tag"
                assert "aws:RequestTag/${local.nodepool_tag}" in c, f"{sid}: no nodepool request tag"
                # We never wear Karpenter's ownership set, so a create may not require it.
                assert not any("karpenter" in k or "eks:eks-cluster-name" in k for k in c), f"{sid}: Karpenter's tags required: {c}"
            elif templates:
                assert c.get(resource_key) == owned, f"{sid}: launches from templates that are not ours"
            else:
                assert not c or set(c) == {"aws:RequestedRegion"}, f"{sid}: existing-resource statement with conditions {c}"
        if "iam:PassRole" in actions:
            assert actions == ["iam:PassRole"] and resources == ["${aws_iam_role.node.arn}"], f"{sid}: PassRole on {resources}"
            assert c.get("iam:PassedToService") == ("StringEquals", ["ec2.${local.dns_suffix}"]), f"{sid}: PassRole not only to EC2"
        if any(a.startswith("ssm:") for a in actions):
            assert resources == ["arn:${local.partition}:ssm:${local.region}::parameter/aws/service/*"], f"{sid}: SSM reads on {resources}"
        if "eks:DescribeCluster" in actions:
            assert resources == ["${local.cluster_arn}"], f"{sid}: DescribeCluster on {resources}"
        if any(a.startswith("sqs:") for a in actions):
            if sid == "WakeQueue":
                # A dynamic statement: the queue exists only with local.wake.
                iam = open(os.path.join(ROOT, "infra", "modules", "nodewright", "iam.tf"), encoding="utf-8").read()
                assert resources == ["${statement.value}"] and \
                    "for_each = local.wake ? [aws_sqs_queue.wake[0].arn] : []" in iam, f"{sid}: SQS on {resources}"
            else:
                assert all(re.fullmatch(r"\$\{aws_sqs_queue\.\w+\.arn\}", r) for r in resources), f"{sid}: SQS on {resources}"
        if any(a.startswith("dynamodb:") for a in actions):
            assert set(resources) <= {"${aws_dynamodb_table.config.arn}", "${aws_dynamodb_table.state.arn}"}, f"{sid}: DynamoDB on {resources}"
            if "${aws_dynamodb_table.config.arn}" in resources:
                # `nodewright config apply` writes the configuration with the operator's credentials.
                assert set(actions) <= {"dynamodb:GetItem", "dynamodb:Scan"}, f"{sid}: the functions write the config table"
        if any(a.startswith("kms:") for a in actions):
            assert c.get("kms:ViaService", ("", []))[0] == "StringEquals", f"{sid}: KMS usable outside the services"
            assert all(v.startswith(("dynamodb.", "sqs.", "lambda.")) for v in c["kms:ViaService"][1]), f"{sid}: {c}"
    assert m.locals["cluster_arn"].endswith(":cluster/${var.cluster_name}"), f"cluster_arn {m.locals['cluster_arn']}"
    needed = {"ec2:CreateFleet", "ec2:CreateLaunchTemplate", "ec2:TerminateInstances", "iam:PassRole",
              "ssm:GetParameter", "pricing:GetProducts", "eks:DescribeCluster", "sqs:ReceiveMessage", "sqs:DeleteMessage",
              "sqs:SendMessage", "dynamodb:PutItem", "dynamodb:Scan", "logs:PutLogEvents"}
    assert needed <= seen, f"the functions' policy lacks {sorted(needed - seen)}"


@check
def no_ec2_write_is_granted_on_star_anywhere():
    for cfg in [module(), example()]:
        for (dtype, name), doc in cfg.data.items():
            if dtype != "aws_iam_policy_document":
                continue
            for s in policy_statements(cfg, name):
                if s.get("effect", "Allow") != "Allow":
                    continue
                writes = [a for a in as_list(s.get("actions", [])) if a.startswith("ec2:") and not EC2_READ.match(a)]
                if writes:
                    assert "*" not in as_list(s.get("resources", [])), f"{name}/{s.get('sid')}: {writes} on *"
    assert "ec2:*" not in module().text, "ec2:* appears in the module"


@check
def node_role_instance_profile_and_access_entries():
    m = module()
    trust = block(m.data[("aws_iam_policy_document", "node_assume")], "statement")
    assert block(trust, "principals")["identifiers"] == ["ec2.${local.dns_suffix}"], "the node role trusts EC2"
    assert expr(m.resource("aws_iam_instance_profile", "node")["role"]) == "aws_iam_role.node.name"
    policies = m.locals["node_policies"]
    assert "AmazonEKSWorkerNodePolicy" in str(policies) and "AmazonEKS_CNI_Policy" in str(policies)
    node = m.resource("aws_eks_access_entry", "node")
    assert node["type"] == "EC2_LINUX" and expr(node["principal_arn"]) == "aws_iam_role.node.arn"
    fn = m.resource("aws_eks_access_entry", "functions")
    assert fn["type"] == "STANDARD" and expr(fn["principal_arn"]) == "aws_iam_role.functions.arn"
    assert expr(fn["user_name"]) == "var.kubernetes_username" and m.variables["kubernetes_username"]["default"] == "nodewright"
    assert not m.of_type("aws_eks_access_policy_association"), "RBAC, not an access policy, grants the functions"
    assert expr(m.locals["environment"]["NODEWRIGHT_DEFAULT_INSTANCE_PROFILE"]) == "aws_iam_instance_profile.node.name"


@check
def rbac_is_applied_from_infra_rbac():
    path = os.path.join(INFRA, "rbac", "clusterrole.yaml")
    with open(path, encoding="utf-8") as f:
        text = f.read()
    assert "kind: ClusterRole\n" in text and "kind: ClusterRoleBinding" in text
    assert re.search(r"kind: User\n\s+name: nodewright", text), "the binding names the user nodewright"
    ex = example()
    rbac = ex.resource("kubernetes_manifest", "rbac")
    assert "local.rbac_documents" in rbac["for_each"], "kubernetes_manifest.rbac must come from local.rbac_documents"
    assert "/../../rbac/clusterrole.yaml" in ex.locals["rbac_documents"], "the example must read infra/rbac/clusterrole.yaml"
    mod = ex.modules.get("nodewright")
    assert mod and mod["source"] == "../../modules/nodewright", f"example module source {mod and mod['source']}"
    assert "target/lambda" in mod["artifacts_dir"], "the example deploys the cargo lambda zips"


@check
def vpc_config_for_private_endpoints():
    m = module()
    f = m.resource("aws_lambda_function", "this")
    dyn = [d for d in blocks(f, "dynamic") if "vpc_config" in d]
    assert dyn, "aws_lambda_function.this has no dynamic vpc_config"
    assert "local.in_vpc" in dyn[0]["vpc_config"]["for_each"]
    assert "length(var.subnet_ids) > 0" in m.locals["in_vpc"]
    sids = {s.get("sid") for s in policy_statements(m, "functions")}
    assert "VpcNetworkInterfaces" in sids, "no ENI permissions for functions in a VPC"


@check
def alarms_on_lost_messages_throttles_and_a_stopped_provisioner():
    m = module()
    dlq = m.resource("aws_cloudwatch_metric_alarm", "dead_letters")
    queues = m.locals["dead_letter_queues"]
    assert "aws_sqs_queue.interruption_dlq.name" in str(queues) and "aws_sqs_queue.failed_invocations.name" in str(queues)
    assert dlq["metric_name"] == "ApproximateNumberOfMessagesVisible" and dlq["namespace"] == "AWS/SQS"
    assert expr(dlq["alarm_actions"]) == "var.alarm_actions"
    assert dlq["period"] == 60 and dlq["threshold"] == 0
    err = m.resource("aws_cloudwatch_metric_alarm", "function_errors")
    invoked = expr(m.locals["invoked_functions"])
    assert "local.functions" in invoked and 'k == "disruption" && var.disruption_in_provisioner' in invoked, \
        f"every function something invokes, the disruption function unless the provisioner runs its loop: {invoked}"
    assert expr(err["for_each"]) == "local.invoked_functions", "one error alarm per invoked function"
    assert err["metric_name"] == "Errors" and err["namespace"] == "AWS/Lambda"
    thr = m.resource("aws_cloudwatch_metric_alarm", "function_throttles")
    assert expr(thr["for_each"]) == "local.invoked_functions", "one throttle alarm per invoked function"
    assert thr["metric_name"] == "Throttles" and thr["namespace"] == "AWS/Lambda" and thr["threshold"] == 0
    tables = m.resource("aws_cloudwatch_metric_alarm", "table_throttles")
    assert "aws_dynamodb_table.config.name" in str(m.locals["tables"]) and "aws_dynamodb_table.state.name" in str(m.locals["tables"])
    names = {q["metric"][0]["metric_name"] for q in blocks(tables, "metric_query") if blocks(q, "metric")}
    assert names == {"ReadThrottleEvents", "WriteThrottleEvents"}, f"table throttle metrics {names}"
    # The names the functions publish (shared/src/handlers/metrics.rs, EMF).
    dropped = m.resource("aws_cloudwatch_metric_alarm", "interruption_dropped")
    assert (dropped["namespace"], dropped["metric_name"]) == ("nodewright", "MessagesDropped")
    assert dropped["dimensions"] == {"Function": "interruption"} and dropped["threshold"] == 0
    backlog = m.resource("aws_cloudwatch_metric_alarm", "interruption_backlog")
    assert backlog["metric_name"] == "ApproximateAgeOfOldestMessage"
    assert "aws_sqs_queue.interruption.name" in str(backlog["dimensions"])
    assert backlog["threshold"] < 120, "a stuck interruption message must alarm inside its notice"
    idle = m.resource("aws_cloudwatch_metric_alarm", "provisioner_not_running")
    assert (idle["namespace"], idle["metric_name"]) == ("nodewright", "ProvisionerTicks")
    assert idle["dimensions"] == {"Function": "provisioner"}
    assert idle["treat_missing_data"] == "breaching", "no datapoint is what \"not running\" looks like"
    assert idle["period"] * idle["evaluation_periods"] == 180, "3 minutes without a tick"
    assert idle["comparison_operator"] == "LessThanThreshold" and idle["threshold"] == 1
    for name, a in m.of_type("aws_cloudwatch_metric_alarm").items():
        assert expr(a["alarm_actions"]) == "var.alarm_actions", f"alarm {name} notifies nobody"


def published_metrics() -> set[str]:
    """The metric names the functions publish (shared/src/handlers/metrics.rs)."""
    with open(os.path.join(ROOT, "shared", "src", "handlers", "metrics.rs"), encoding="utf-8") as f:
        text = f.read()
    return set(re.findall(r'pub const [A-Z_]+: &str =\s*"((?:karpenter|nodewright)_[a-z_]+)"', text))


@check
def the_dashboard_shows_metrics_the_functions_publish():
    m = module()
    d = m.resource("aws_cloudwatch_dashboard", "this")
    assert expr(d["count"]).startswith("var.dashboard"), "the dashboard can be turned off"
    assert "dashboard" in m.variables and "dashboard_name" in m.outputs
    with open(os.path.join(MODULE, "dashboard.tf"), encoding="utf-8") as f:
        text = f.read()
    named = set(re.findall(r"\b((?:karpenter|nodewright)_[a-z_]+)\b", text))
    published = published_metrics()
    assert len(published) >= 15, f"the parser of metrics.rs found only {sorted(published)}"
    unknown = named - published
    assert not unknown, f"the dashboard shows metrics nothing publishes: {sorted(unknown)}"
    for wanted in ["karpenter_nodepools_cost_total", "karpenter_scheduler_queue_depth", "karpenter_nodeclaims_created_total",
                   "karpenter_nodeclaims_disrupted_total", "karpenter_interruption_received_messages_total", "nodewright_errors_total"]:
        assert wanted in named, f"the dashboard lacks {wanted}"
    assert "var.cluster_name" in text, "series of this cluster only"


SKIP = re.compile(r"#\s*checkov:skip=([A-Z0-9_]+)(?::(.*))?")


@check
def every_checkov_skip_is_justified():
    n = 0
    for path in glob.glob(os.path.join(INFRA, "**", "*.tf"), recursive=True):
        with open(path, encoding="utf-8") as f:
            for i, line in enumerate(f, 1):
                for mt in SKIP.finditer(line):
                    n += 1
                    reason = (mt.group(2) or "").strip()
                    assert len(reason) >= 30, f"{os.path.relpath(path, ROOT)}:{i}: skip {mt.group(1)} without a real reason"
    assert n > 0, "no checkov skips found (the parser of this check is broken?)"


# ------------------------------------------------- event patterns × fixtures
def pattern_matches(pattern: dict, event: dict) -> bool:
    """EventBridge matching for the forms our rules use: every key of the
    pattern must be in the event; a list matches when the event's value (or
    one of its elements) equals one of the list's strings; a dict recurses."""
    for key, want in pattern.items():
        if key not in event:
            return False
        got = event[key]
        if isinstance(want, dict):
            if not isinstance(got, dict) or not pattern_matches(want, got):
                return False
        else:
            values = got if isinstance(got, list) else [got]
            if not any(v in want for v in values if isinstance(v, (str, int, float, bool))):
                return False
    return True


def rule_patterns() -> dict[str, dict]:
    m = module()
    out = {name: spec["pattern"] for name, spec in m.locals["interruption_rules"].items()}
    out["state-change"] = m.locals["state_change_pattern"]
    for name, r in m.of_type("aws_cloudwatch_event_rule").items():
        if "event_pattern" in r:
            assert "jsonencode(" in r["event_pattern"], f"rule {name}: event_pattern should be jsonencode(local …)"
    return out


def fixture_events(kind: str):
    """(file, EventBridge event) pairs: bare events, or SQS events whose
    Records[].body is an EventBridge event."""
    directory = os.path.join(ROOT, "functions", kind, "events")
    if not os.path.isdir(directory):
        raise Skip(f"functions/{kind}/events does not exist")
    out = []
    for path in sorted(glob.glob(os.path.join(directory, "*.json"))):
        rel = os.path.relpath(path, ROOT)
        with open(path, encoding="utf-8") as f:
            doc = json.load(f)
        if isinstance(doc, dict) and isinstance(doc.get("Records"), list):
            for i, rec in enumerate(doc["Records"]):
                try:
                    body = json.loads(rec.get("body", ""))
                except (TypeError, ValueError):
                    body = None
                out.append((f"{rel}#Records[{i}]", body if isinstance(body, dict) else None))
        else:
            out.append((rel, doc if isinstance(doc, dict) else None))
    if not out:
        raise Skip(f"functions/{kind}/events has no .json files")
    return out


def matching(patterns: dict[str, dict], event) -> list[str]:
    if event is None:
        return []
    return sorted(n for n, p in patterns.items() if pattern_matches(p, event))


@check
def the_state_change_rule_matches_the_state_change_fixtures():
    patterns = rule_patterns()
    events = fixture_events("state-change")
    for name, event in events:
        hits = matching(patterns, event)
        if event and event.get("detail-type") == "EC2 Instance State-change Notification":
            assert hits == ["state-change"], f"{name} is routed to {hits}, not to the state-change function alone"
        else:
            assert len(hits) <= 1, f"{name} matches several rules: {hits}"


@check
def the_interruption_rules_match_the_interruption_fixtures():
    patterns = rule_patterns()
    events = fixture_events("interruption")
    matched_rules = set()
    for name, event in events:
        hits = matching(patterns, event)
        assert len(hits) <= 1, f"{name} matches several rules (it would be delivered twice): {hits}"
        stem = os.path.basename(name.split("#")[0])[: -len(".json")]
        if stem in INTERRUPTION_RULES:
            assert hits == [stem], f"{name} should be routed by rule {stem}, is routed by {hits}"
        if hits and hits[0] in INTERRUPTION_RULES:
            source, detail_type = INTERRUPTION_RULES[hits[0]]
            assert event["source"] == source and event["detail-type"] == detail_type
        matched_rules.update(h for h in hits if h in INTERRUPTION_RULES)
    stems = {os.path.basename(n.split("#")[0])[: -len(".json")] for n, _ in events}
    for rule in INTERRUPTION_RULES:
        if rule in stems:
            assert rule in matched_rules, f"no fixture event matches rule {rule}"


@check
def scheduled_events_match_no_event_rule():
    patterns = rule_patterns()
    events = fixture_events("provisioner")
    for name, event in events:
        assert matching(patterns, event) == [], f"{name} (a schedule) would also be routed by {matching(patterns, event)}"


@check
def the_pattern_matcher_itself():
    # The matcher above decides the fixture checks; make sure it can fail.
    p = {"source": ["aws.health"], "detail-type": ["AWS Health Event"], "detail": {"service": ["EC2"]}}
    ok = {"source": "aws.health", "detail-type": "AWS Health Event", "detail": {"service": "EC2", "x": 1}}
    assert pattern_matches(p, ok)
    assert not pattern_matches(p, {**ok, "detail": {"service": "RDS"}})
    assert not pattern_matches(p, {k: v for k, v in ok.items() if k != "detail"})
    assert pattern_matches({"resources": ["a"]}, {"resources": ["b", "a"]})
    assert not pattern_matches({"source": ["aws.ec2"]}, {"source": "aws.ec2x"})


def main() -> int:
    passed = failed = skipped = 0
    for fn in CHECKS:
        name = fn.__name__
        try:
            fn()
        except Skip as s:
            skipped += 1
            print(f"skip  {name}: {s}")
        except AssertionError as e:
            failed += 1
            print(f"FAIL  {name}: {e}")
        except Exception:  # noqa: BLE001 - a crash is a failure with its traceback
            failed += 1
            print(f"FAIL  {name}: crashed")
            traceback.print_exc()
        else:
            passed += 1
            print(f"ok    {name}")
    print(f"infra: {passed} passed, {failed} failed, {skipped} skipped")
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())

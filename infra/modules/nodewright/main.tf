data "aws_partition" "current" {}
data "aws_region" "current" {}
data "aws_caller_identity" "current" {}

locals {
  partition  = data.aws_partition.current.partition
  region     = data.aws_region.current.name
  account_id = data.aws_caller_identity.current.account_id
  dns_suffix = data.aws_partition.current.dns_suffix

  cluster_arn = "arn:${local.partition}:eks:${local.region}:${local.account_id}:cluster/${var.cluster_name}"

  # The four functions. Keys are the function (and binary) names; each
  # zip is `<artifacts_dir>/<key>/bootstrap.zip`.
  functions = {
    # EventBridge schedule, every minute, and the wake queue: ticks about
    # every second until its deadline minus 5 s (or its first quiet tick),
    # holding the provisioner lease. One ticks at a time; with the wake
    # queue others may start beside it, find the lease held and end: room
    # for the schedule's one and the wake mapping's two, so none is
    # throttled (and the throttles alarm stays for real exhaustion).
    # With disruption_in_provisioner it runs the disruption loop too.
    provisioner = {
      description          = "Pending pods to batches, claims and launched, registered, bound nodes"
      memory_size          = var.memory_size.provisioner
      timeout              = 60
      reserved_concurrency = local.wake ? 3 : 1
      asynchronous         = true
      # A missed minute is covered by the next schedule: never retry or queue old ones.
      maximum_retry_attempts       = 0
      maximum_event_age_in_seconds = 60
    }
    # EventBridge rule on EC2 Instance State-change Notification.
    state-change = {
      description                  = "EC2 instance state changes to deleted nodes and released claims"
      memory_size                  = var.memory_size.state_change
      timeout                      = 30
      reserved_concurrency         = var.state_change_reserved_concurrency
      asynchronous                 = true
      maximum_retry_attempts       = 2
      maximum_event_age_in_seconds = 21600
    }
    # SQS event source mapping on the interruption queue.
    interruption = {
      description                  = "Spot interruptions, rebalance recommendations, scheduled changes and capacity-reservation interruptions to drained and replaced nodes"
      memory_size                  = var.memory_size.interruption
      timeout                      = var.interruption_timeout
      reserved_concurrency         = var.interruption_max_concurrency
      asynchronous                 = false
      maximum_retry_attempts       = null
      maximum_event_age_in_seconds = null
    }
    # EventBridge schedule, every minute (only when disruption_in_provisioner
    # is false): ticks inside the invocation like the provisioner, holding
    # the disruption lease. One at a time.
    disruption = {
      description                  = "Expiration, drift, emptiness and consolidation decisions"
      memory_size                  = var.memory_size.disruption
      timeout                      = 60
      reserved_concurrency         = 1
      asynchronous                 = true
      maximum_retry_attempts       = 0
      maximum_event_age_in_seconds = 60
    }
  }

  asynchronous_functions = { for k, f in local.functions : k => f if f.asynchronous }

  # The functions something invokes, which the error and throttle alarms
  # watch: with disruption_in_provisioner nothing schedules the disruption
  # function, and its two alarms would watch nothing for $0.20 a month.
  invoked_functions = { for k, f in local.functions : k => f if !(k == "disruption" && var.disruption_in_provisioner) }

  # What every function reads from its environment (shared/src/runtime.rs).
  environment = {
    NODEWRIGHT_CLUSTER_NAME             = var.cluster_name
    NODEWRIGHT_TABLE_PREFIX             = var.name
    NODEWRIGHT_DEFAULT_INSTANCE_PROFILE = aws_iam_instance_profile.node.name
    NODEWRIGHT_INTERRUPTION_QUEUE_URL   = aws_sqs_queue.interruption.url
    # Read by the provisioner only (shared/src/live.rs).
    NODEWRIGHT_PROVISIONER_RUNS_DISRUPTION = tostring(var.disruption_in_provisioner)
    # Read by the scheduled functions (shared/src/live.rs).
    NODEWRIGHT_END_WHEN_QUIET = tostring(var.end_invocations_when_quiet)
    NODEWRIGHT_GAUGES         = tostring(var.publish_gauges)
    # Read by the provisioner (where an invocation asks for the next) and
    # the interruption function (a removal started: invoke it at once).
    NODEWRIGHT_WAKE_QUEUE_URL     = local.wake ? aws_sqs_queue.wake[0].url : ""
    NODEWRIGHT_QUIET_WAKE_SECONDS = tostring(max(var.quiet_wake_seconds, 1))
    RUST_LOG                      = var.log_level
  }

  in_vpc = length(var.subnet_ids) > 0

  # The provisioner's wake queue (sqs.tf): with invocations that end when
  # quiet, it invokes the next one quiet_wake_seconds after.
  wake = var.end_invocations_when_quiet && var.quiet_wake_seconds > 0

  tags = merge(var.tags, { "app.kubernetes.io/name" = "nodewright", "nodewright/cluster" = var.cluster_name })
}

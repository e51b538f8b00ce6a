# One CloudWatch dashboard for the cluster: what the fleet costs, what is
# waiting, what was launched and removed and why, interruptions, errors.
# The functions publish their metrics as Embedded Metric Format lines in
# their logs (namespace `nodewright`, Karpenter's metric names and labels,
# plus a `cluster` dimension); each widget finds its series with a SEARCH
# over this cluster's, so new pools and reasons appear by themselves.

locals {
  # SEARCH over the metric `name` with the dimension set `dims` (besides
  # `cluster`), this cluster only.
  dashboard_search = {
    for k, m in {
      cost          = { name = "karpenter_nodepools_cost_total", dims = "nodepool", stat = "Maximum" }
      pending       = { name = "karpenter_scheduler_queue_depth", dims = "controller", stat = "Maximum" }
      launches      = { name = "karpenter_nodeclaims_created_total", dims = "reason,nodepool,min_values_relaxed", stat = "Sum" }
      removals      = { name = "karpenter_nodeclaims_disrupted_total", dims = "reason,nodepool,capacity_type", stat = "Sum" }
      terminated    = { name = "karpenter_nodeclaims_terminated_total", dims = "nodepool,capacity_type,zone", stat = "Sum" }
      interruptions = { name = "karpenter_interruption_received_messages_total", dims = "message_type", stat = "Sum" }
      dropped       = { name = "nodewright_interruption_dropped_messages_total", dims = "", stat = "Sum" }
      errors        = { name = "nodewright_errors_total", dims = "function", stat = "Sum" }
      usage         = { name = "karpenter_nodepools_usage", dims = "nodepool,resource_type", stat = "Maximum" }
      evictions     = { name = "karpenter_pods_eviction_requests_total", dims = "code", stat = "Sum" }
    } :
    k => "SEARCH('{nodewright,cluster${m.dims == "" ? "" : ","}${m.dims}} MetricName=\"${m.name}\" cluster=\"${var.cluster_name}\"', '${m.stat}', 60)"
  }

  dashboard_widgets = [
    { title = "Fleet cost ($/hour, at launch prices)", series = ["cost"], stacked = true },
    { title = "Pods waiting for capacity", series = ["pending"], stacked = false },
    { title = "Launches by reason", series = ["launches"], stacked = true },
    { title = "Removals started by reason", series = ["removals"], stacked = true },
    { title = "Interruption messages by type, and dropped", series = ["interruptions", "dropped"], stacked = false },
    { title = "Errors (ticks that failed)", series = ["errors"], stacked = false },
    { title = "Nodes terminated", series = ["terminated"], stacked = true },
    { title = "Evictions by answer (429: a PodDisruptionBudget said no)", series = ["evictions"], stacked = false },
  ]
}

resource "aws_cloudwatch_dashboard" "this" {
  count = var.dashboard ? 1 : 0

  dashboard_name = var.name
  dashboard_body = jsonencode({
    widgets = concat(
      [
        for i, w in local.dashboard_widgets : {
          type   = "metric"
          x      = (i % 2) * 12
          y      = floor(i / 2) * 6
          width  = 12
          height = 6
          properties = {
            title   = w.title
            region  = local.region
            view    = "timeSeries"
            stacked = w.stacked
            period  = 60
            metrics = [
              for j, s in w.series : [{ expression = local.dashboard_search[s], id = "e${j}" }]
            ]
          }
        }
      ],
      [
        {
          type   = "metric"
          x      = 0
          y      = ceil(length(local.dashboard_widgets) / 2) * 6
          width  = 12
          height = 6
          properties = {
            title  = "Pod startup (creation to Ready, seconds)"
            region = local.region
            view   = "timeSeries"
            period = 300
            metrics = [
              for p in ["p50", "p90", "p99"] : ["nodewright", "karpenter_pods_startup_duration_seconds", "cluster", var.cluster_name, { stat = p, label = p }]
            ]
          }
        },
        {
          type   = "metric"
          x      = 12
          y      = ceil(length(local.dashboard_widgets) / 2) * 6
          width  = 12
          height = 6
          properties = {
            title  = "Function errors (Lambda)"
            region = local.region
            view   = "timeSeries"
            period = 60
            stat   = "Sum"
            metrics = [
              for k, f in local.functions : ["AWS/Lambda", "Errors", "FunctionName", aws_lambda_function.this[k].function_name]
            ]
          }
        },
      ]
    )
  })
}

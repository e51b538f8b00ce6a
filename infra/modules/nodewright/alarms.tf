# Something was lost from the normal path, or is about to be: a message in
# a dead-letter queue, a message dropped unread or waiting too long, a
# function that returned errors or was throttled, a throttled table, and a
# provisioner that stopped running.

locals {
  dead_letter_queues = {
    interruption-dlq   = aws_sqs_queue.interruption_dlq.name
    failed-invocations = aws_sqs_queue.failed_invocations.name
  }

  tables = {
    config = aws_dynamodb_table.config.name
    state  = aws_dynamodb_table.state.name
  }
}

# A message in a dead-letter queue: an interruption message that failed
# every receive (the interruption DLQ), or a state change / scheduled
# invocation that failed every retry (failed-invocations). Redrive moves
# are not counted by NumberOfMessagesSent, so the alarm watches what the
# queue holds.
resource "aws_cloudwatch_metric_alarm" "dead_letters" {
  for_each = local.dead_letter_queues

  alarm_name          = "${var.name}-${each.key}-not-empty"
  alarm_description   = "Messages in ${each.value}: an event or invocation nodewright could not handle (read them, then redrive or purge)."
  namespace           = "AWS/SQS"
  metric_name         = "ApproximateNumberOfMessagesVisible"
  dimensions          = { QueueName = each.value }
  statistic           = "Maximum"
  period              = 60
  evaluation_periods  = 1
  comparison_operator = "GreaterThanThreshold"
  threshold           = 0
  treat_missing_data  = "notBreaching"
  alarm_actions       = var.alarm_actions
  ok_actions          = var.alarm_actions
  tags                = local.tags
}

# An interruption message that nobody consumes expires after the queue's
# 300-s retention without ever reaching the dead-letter queue (the event
# source mapping disabled, the function failing before it reports). Its age
# shows it first: a handled message is deleted within seconds, a failing
# one is received again every visibility timeout.
resource "aws_cloudwatch_metric_alarm" "interruption_backlog" {
  alarm_name          = "${var.name}-interruption-backlog"
  alarm_description   = "A message has waited over 90 s in ${aws_sqs_queue.interruption.name}: interruptions are not being handled (is the event source mapping enabled? see the interruption function's log)."
  namespace           = "AWS/SQS"
  metric_name         = "ApproximateAgeOfOldestMessage"
  dimensions          = { QueueName = aws_sqs_queue.interruption.name }
  statistic           = "Maximum"
  period              = 60
  evaluation_periods  = 1
  comparison_operator = "GreaterThanThreshold"
  threshold           = 90
  treat_missing_data  = "notBreaching"
  alarm_actions       = var.alarm_actions
  ok_actions          = var.alarm_actions
  tags                = local.tags
}

# A message whose body could never be read was deleted (MessagesDropped,
# published by the interruption function in Embedded Metric Format).
# Messages about other accounts' or clusters' instances are "ignored", not
# dropped, and do not count.
resource "aws_cloudwatch_metric_alarm" "interruption_dropped" {
  alarm_name          = "${var.name}-interruption-dropped"
  alarm_description   = "The interruption function dropped a message it could not read (its log names the message id and why)."
  namespace           = "nodewright"
  metric_name         = "MessagesDropped"
  dimensions          = { Function = "interruption" }
  statistic           = "Sum"
  period              = 300
  evaluation_periods  = 1
  comparison_operator = "GreaterThanThreshold"
  threshold           = 0
  treat_missing_data  = "notBreaching"
  alarm_actions       = var.alarm_actions
  ok_actions          = var.alarm_actions
  tags                = local.tags
}

# The provisioner publishes its ticks at the end of each invocation (one a
# minute). Three minutes without one: nothing provisions, and nothing is
# there to resume a removal should the disruption loop stop too.
resource "aws_cloudwatch_metric_alarm" "provisioner_not_running" {
  alarm_name          = "${var.name}-provisioner-not-running"
  alarm_description   = "${var.name}-provisioner has not completed an invocation with a tick for 3 minutes (see its log group and its schedule)."
  namespace           = "nodewright"
  metric_name         = "ProvisionerTicks"
  dimensions          = { Function = "provisioner" }
  statistic           = "Sum"
  period              = 60
  evaluation_periods  = 3
  datapoints_to_alarm = 3
  comparison_operator = "LessThanThreshold"
  threshold           = 1
  treat_missing_data  = "breaching"
  alarm_actions       = var.alarm_actions
  ok_actions          = var.alarm_actions
  tags                = local.tags
}

resource "aws_cloudwatch_metric_alarm" "function_errors" {
  for_each = local.invoked_functions

  alarm_name          = "${var.name}-${each.key}-errors"
  alarm_description   = "${var.name}-${each.key} returned errors in 3 of the last 5 minutes (see its log group)."
  namespace           = "AWS/Lambda"
  metric_name         = "Errors"
  dimensions          = { FunctionName = aws_lambda_function.this[each.key].function_name }
  statistic           = "Sum"
  period              = 60
  evaluation_periods  = 5
  datapoints_to_alarm = 3
  comparison_operator = "GreaterThanThreshold"
  threshold           = 0
  treat_missing_data  = "notBreaching"
  alarm_actions       = var.alarm_actions
  ok_actions          = var.alarm_actions
  tags                = local.tags
}

# A throttled invocation: the interruption function's reserved concurrency
# equals the event source mapping's maximum, so it should never be; the
# state-change function's caps a burst (Lambda retries it, later).
resource "aws_cloudwatch_metric_alarm" "function_throttles" {
  for_each = local.invoked_functions

  alarm_name          = "${var.name}-${each.key}-throttles"
  alarm_description   = "${var.name}-${each.key} was throttled (its reserved concurrency was exhausted): its events wait or are retried later."
  namespace           = "AWS/Lambda"
  metric_name         = "Throttles"
  dimensions          = { FunctionName = aws_lambda_function.this[each.key].function_name }
  statistic           = "Sum"
  period              = 300
  evaluation_periods  = 1
  comparison_operator = "GreaterThanThreshold"
  threshold           = 0
  treat_missing_data  = "notBreaching"
  alarm_actions       = var.alarm_actions
  ok_actions          = var.alarm_actions
  tags                = local.tags
}

# A throttled table (reads or writes): the functions retry, but a store
# that keeps refusing delays interruptions and launches.
resource "aws_cloudwatch_metric_alarm" "table_throttles" {
  for_each = local.tables

  alarm_name          = "${var.name}-${each.key}-table-throttles"
  alarm_description   = "DynamoDB throttled reads or writes of ${each.value} in the last 5 minutes."
  evaluation_periods  = 1
  comparison_operator = "GreaterThanThreshold"
  threshold           = 0
  treat_missing_data  = "notBreaching"
  alarm_actions       = var.alarm_actions
  ok_actions          = var.alarm_actions
  tags                = local.tags

  metric_query {
    id          = "throttles"
    expression  = "reads + writes"
    label       = "Throttle events"
    return_data = true
  }

  metric_query {
    id = "reads"
    metric {
      namespace   = "AWS/DynamoDB"
      metric_name = "ReadThrottleEvents"
      dimensions  = { TableName = each.value }
      stat        = "Sum"
      period      = 300
    }
  }

  metric_query {
    id = "writes"
    metric {
      namespace   = "AWS/DynamoDB"
      metric_name = "WriteThrottleEvents"
      dimensions  = { TableName = each.value }
      stat        = "Sum"
      period      = 300
    }
  }
}

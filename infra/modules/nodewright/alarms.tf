# Something was lost from the normal path: a message in a dead-letter
# queue, or a function that returned errors.

locals {
  dead_letter_queues = {
    interruption-dlq   = aws_sqs_queue.interruption_dlq.name
    failed-invocations = aws_sqs_queue.failed_invocations.name
  }
}

resource "aws_cloudwatch_metric_alarm" "dead_letters" {
  for_each = local.dead_letter_queues

  alarm_name          = "${var.name}-${each.key}-not-empty"
  alarm_description   = "Messages in ${each.value}: an event or invocation nodewright could not handle (read them, then redrive or purge)."
  namespace           = "AWS/SQS"
  metric_name         = "ApproximateNumberOfMessagesVisible"
  dimensions          = { QueueName = each.value }
  statistic           = "Maximum"
  period              = 300
  evaluation_periods  = 1
  comparison_operator = "GreaterThanThreshold"
  threshold           = 0
  treat_missing_data  = "notBreaching"
  alarm_actions       = var.alarm_actions
  ok_actions          = var.alarm_actions
  tags                = local.tags
}

resource "aws_cloudwatch_metric_alarm" "function_errors" {
  for_each = local.functions

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

# ---------------------------------------------------------------- schedules
locals {
  # With disruption_in_provisioner (the default) the provisioner's
  # invocation runs the disruption loop too, so only the provisioner is
  # scheduled: one always-on invocation a minute instead of two.
  schedules = { for name, expression in {
    provisioner = var.provisioner_schedule
    disruption  = var.disruption_schedule
  } : name => expression if name != "disruption" || !var.disruption_in_provisioner }

  # EC2 and AWS Health events the interruption function handles, each
  # delivered to the interruption queue. None can be filtered by cluster
  # (EventBridge events are account-wide): the function ignores instances
  # that are not ours. Patterns match what shared/src/interruption parses.
  interruption_rules = {
    spot-interruption = {
      description = "EC2 Spot Instance Interruption Warning (two minutes before reclaim)"
      pattern = {
        source        = ["aws.ec2"]
        "detail-type" = ["EC2 Spot Instance Interruption Warning"]
      }
    }
    rebalance-recommendation = {
      description = "EC2 Instance Rebalance Recommendation (elevated risk of interruption)"
      pattern = {
        source        = ["aws.ec2"]
        "detail-type" = ["EC2 Instance Rebalance Recommendation"]
      }
    }
    scheduled-change = {
      description = "AWS Health scheduled changes of EC2 instances (retirement, maintenance)"
      pattern = {
        source        = ["aws.health"]
        "detail-type" = ["AWS Health Event"]
        # Only these are acted on; anything else would be parsed and dropped
        # at the cost of an invocation.
        detail = {
          service           = ["EC2"]
          eventTypeCategory = ["scheduledChange"]
        }
      }
    }
    capacity-reservation-interruption = {
      description = "EC2 Capacity Reservation Instance Interruption Warning"
      pattern = {
        source        = ["aws.ec2"]
        "detail-type" = ["EC2 Capacity Reservation Instance Interruption Warning"]
      }
    }
  }

  state_change_pattern = {
    source        = ["aws.ec2"]
    "detail-type" = ["EC2 Instance State-change Notification"]
  }
}

resource "aws_cloudwatch_event_rule" "schedule" {
  for_each = local.schedules

  name                = "${var.name}-${each.key}"
  description         = "Invokes ${var.name}-${each.key} on a schedule"
  schedule_expression = each.value
  tags                = local.tags
}

resource "aws_cloudwatch_event_target" "schedule" {
  for_each = local.schedules

  rule      = aws_cloudwatch_event_rule.schedule[each.key].name
  target_id = "${var.name}-${each.key}"
  arn       = aws_lambda_function.this[each.key].arn

  retry_policy {
    # The next schedule supersedes a missed one.
    maximum_event_age_in_seconds = 60
    maximum_retry_attempts       = 0
  }

  dead_letter_config {
    arn = aws_sqs_queue.failed_invocations.arn
  }
}

resource "aws_lambda_permission" "schedule" {
  for_each = local.schedules

  statement_id  = "AllowEventBridgeSchedule"
  action        = "lambda:InvokeFunction"
  function_name = aws_lambda_function.this[each.key].function_name
  principal     = "events.amazonaws.com"
  source_arn    = aws_cloudwatch_event_rule.schedule[each.key].arn
}

# ------------------------------------------------ EC2 state change → function
resource "aws_cloudwatch_event_rule" "state_change" {
  name          = "${var.name}-state-change"
  description   = "EC2 Instance State-change Notification to ${var.name}-state-change"
  event_pattern = jsonencode(local.state_change_pattern)
  tags          = local.tags
}

resource "aws_cloudwatch_event_target" "state_change" {
  rule      = aws_cloudwatch_event_rule.state_change.name
  target_id = "${var.name}-state-change"
  arn       = aws_lambda_function.this["state-change"].arn

  retry_policy {
    maximum_event_age_in_seconds = 3600
    maximum_retry_attempts       = 10
  }

  dead_letter_config {
    arn = aws_sqs_queue.failed_invocations.arn
  }
}

resource "aws_lambda_permission" "state_change" {
  statement_id  = "AllowEventBridgeStateChange"
  action        = "lambda:InvokeFunction"
  function_name = aws_lambda_function.this["state-change"].function_name
  principal     = "events.amazonaws.com"
  source_arn    = aws_cloudwatch_event_rule.state_change.arn
}

# --------------------------------------------- interruption events → queue
resource "aws_cloudwatch_event_rule" "interruption" {
  for_each = local.interruption_rules

  name          = "${var.name}-${each.key}"
  description   = each.value.description
  event_pattern = jsonencode(each.value.pattern)
  tags          = local.tags
}

resource "aws_cloudwatch_event_target" "interruption" {
  for_each = local.interruption_rules

  rule      = aws_cloudwatch_event_rule.interruption[each.key].name
  target_id = "${var.name}-interruption-queue"
  arn       = aws_sqs_queue.interruption.arn

  retry_policy {
    # An interruption warning is worthless after its two minutes.
    maximum_event_age_in_seconds = 300
    maximum_retry_attempts       = 10
  }

  dead_letter_config {
    arn = aws_sqs_queue.failed_invocations.arn
  }
}

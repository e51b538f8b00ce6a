# The interruption queue (EventBridge → queue → interruption function), its
# dead-letter queue, and the queue that keeps failed asynchronous
# invocations and undeliverable EventBridge events.

locals {
  # SQS-managed SSE unless the user brings a KMS key.
  sqs_managed_sse = var.kms_key_arn == null ? true : null

  # Karpenter's value: an interruption warning is stale after five minutes.
  interruption_retention = 300
  # AWS's guidance for an SQS event source: at least 6 × the function's
  # timeout (room for the mapping's own retries of a throttled invoke). It
  # is also how long a failed message waits before its next receive: 30 s
  # by default, so a spot warning gets three more tries inside its notice.
  interruption_visibility = 6 * var.interruption_timeout
}

resource "aws_sqs_queue" "interruption" {
  name                       = "${var.name}-interruption"
  message_retention_seconds  = local.interruption_retention
  visibility_timeout_seconds = local.interruption_visibility
  sqs_managed_sse_enabled    = local.sqs_managed_sse
  kms_master_key_id          = var.kms_key_arn

  # A message that fails every receive moves to the dead-letter queue
  # (alarmed), never expires unseen.
  redrive_policy = jsonencode({
    deadLetterTargetArn = aws_sqs_queue.interruption_dlq.arn
    maxReceiveCount     = var.interruption_max_receive_count
  })

  tags = local.tags

  lifecycle {
    precondition {
      condition     = var.interruption_max_receive_count * local.interruption_visibility < local.interruption_retention
      error_message = "interruption_max_receive_count × the visibility timeout (6 × interruption_timeout) must be under the queue's 300-s retention: a message failing every receive would expire before reaching the dead-letter queue."
    }
  }
}

# The provisioner's wake queue: each provisioner invocation ends by sending
# one message delayed quiet_wake_seconds, whose event source mapping
# invokes the provisioner again (one waits at a time: the functions' wake
# lease). A wake is worth nothing once the minute's schedule has come, so
# little is kept: a message whose invocation failed expires before its
# visibility timeout brings it back (the failed invocation sent the next
# one), and there is no dead-letter queue to alarm on.
resource "aws_sqs_queue" "wake" {
  count = local.wake ? 1 : 0

  name = "${var.name}-wake"
  # Kept for its delay and a minute more: a longer quiet_wake_seconds must
  # not expire the message before it is delivered.
  message_retention_seconds = var.quiet_wake_seconds + 60
  # An event source needs at least the function's timeout.
  visibility_timeout_seconds = local.functions.provisioner.timeout
  sqs_managed_sse_enabled    = local.sqs_managed_sse
  kms_master_key_id          = var.kms_key_arn
  tags                       = local.tags
}

# Only the functions' role sends to the wake queue; nothing without TLS.
data "aws_iam_policy_document" "wake_queue" {
  count = local.wake ? 1 : 0

  statement {
    sid       = "OnlyTheFunctions"
    effect    = "Deny"
    actions   = ["sqs:SendMessage"]
    resources = [aws_sqs_queue.wake[0].arn]

    principals {
      type        = "*"
      identifiers = ["*"]
    }

    condition {
      test     = "ArnNotEquals"
      variable = "aws:PrincipalArn"
      values   = [aws_iam_role.functions.arn]
    }
  }

  statement {
    sid       = "DenyNonTLS"
    effect    = "Deny"
    actions   = ["sqs:*"]
    resources = [aws_sqs_queue.wake[0].arn]

    principals {
      type        = "*"
      identifiers = ["*"]
    }

    condition {
      test     = "Bool"
      variable = "aws:SecureTransport"
      values   = ["false"]
    }
  }
}

resource "aws_sqs_queue_policy" "wake" {
  count = local.wake ? 1 : 0

  queue_url = aws_sqs_queue.wake[0].id
  policy    = data.aws_iam_policy_document.wake_queue[0].json
}

resource "aws_sqs_queue" "interruption_dlq" {
  name                      = "${var.name}-interruption-dlq"
  message_retention_seconds = 1209600
  sqs_managed_sse_enabled   = local.sqs_managed_sse
  kms_master_key_id         = var.kms_key_arn
  tags                      = local.tags
}

resource "aws_sqs_queue_redrive_allow_policy" "interruption_dlq" {
  queue_url = aws_sqs_queue.interruption_dlq.id
  redrive_allow_policy = jsonencode({
    redrivePermission = "byQueue"
    sourceQueueArns   = [aws_sqs_queue.interruption.arn]
  })
}

resource "aws_sqs_queue" "failed_invocations" {
  name                      = "${var.name}-failed-invocations"
  message_retention_seconds = 1209600
  sqs_managed_sse_enabled   = local.sqs_managed_sse
  kms_master_key_id         = var.kms_key_arn
  tags                      = local.tags
}

# Only our EventBridge rules and the functions' role (delayed continuation
# messages) may send to the interruption queue; nothing without TLS.
data "aws_iam_policy_document" "interruption_queue" {
  statement {
    sid       = "EventBridgeRules"
    effect    = "Allow"
    actions   = ["sqs:SendMessage"]
    resources = [aws_sqs_queue.interruption.arn]

    principals {
      type        = "Service"
      identifiers = ["events.amazonaws.com"]
    }

    condition {
      test     = "ArnEquals"
      variable = "aws:SourceArn"
      values   = [for r in aws_cloudwatch_event_rule.interruption : r.arn]
    }
  }

  statement {
    sid       = "OnlyEventBridgeAndTheFunctions"
    effect    = "Deny"
    actions   = ["sqs:SendMessage"]
    resources = [aws_sqs_queue.interruption.arn]

    principals {
      type        = "*"
      identifiers = ["*"]
    }

    # Denied unless the caller is EventBridge or the functions' role (both
    # conditions must hold for the deny to apply).
    condition {
      test     = "StringNotEquals"
      variable = "aws:PrincipalServiceName"
      values   = ["events.amazonaws.com"]
    }

    condition {
      test     = "ArnNotEquals"
      variable = "aws:PrincipalArn"
      values   = [aws_iam_role.functions.arn]
    }
  }

  statement {
    sid       = "DenyNonTLS"
    effect    = "Deny"
    actions   = ["sqs:*"]
    resources = [aws_sqs_queue.interruption.arn]

    principals {
      type        = "*"
      identifiers = ["*"]
    }

    condition {
      test     = "Bool"
      variable = "aws:SecureTransport"
      values   = ["false"]
    }
  }
}

resource "aws_sqs_queue_policy" "interruption" {
  queue_url = aws_sqs_queue.interruption.id
  policy    = data.aws_iam_policy_document.interruption_queue.json
}

# EventBridge may put undeliverable events of our rules into the
# failed-invocations queue (the targets' dead_letter_config); Lambda writes
# failed asynchronous invocations with the functions' role.
data "aws_iam_policy_document" "failed_invocations" {
  statement {
    sid       = "EventBridgeDeadLetters"
    effect    = "Allow"
    actions   = ["sqs:SendMessage"]
    resources = [aws_sqs_queue.failed_invocations.arn]

    principals {
      type        = "Service"
      identifiers = ["events.amazonaws.com"]
    }

    condition {
      test     = "ArnEquals"
      variable = "aws:SourceArn"
      values = concat(
        [for r in aws_cloudwatch_event_rule.schedule : r.arn],
        [for r in aws_cloudwatch_event_rule.interruption : r.arn],
        [aws_cloudwatch_event_rule.state_change.arn],
      )
    }
  }

  statement {
    sid       = "DenyNonTLS"
    effect    = "Deny"
    actions   = ["sqs:*"]
    resources = [aws_sqs_queue.failed_invocations.arn]

    principals {
      type        = "*"
      identifiers = ["*"]
    }

    condition {
      test     = "Bool"
      variable = "aws:SecureTransport"
      values   = ["false"]
    }
  }
}

resource "aws_sqs_queue_policy" "failed_invocations" {
  queue_url = aws_sqs_queue.failed_invocations.id
  policy    = data.aws_iam_policy_document.failed_invocations.json
}

data "aws_iam_policy_document" "interruption_dlq" {
  statement {
    sid       = "DenyNonTLS"
    effect    = "Deny"
    actions   = ["sqs:*"]
    resources = [aws_sqs_queue.interruption_dlq.arn]

    principals {
      type        = "*"
      identifiers = ["*"]
    }

    condition {
      test     = "Bool"
      variable = "aws:SecureTransport"
      values   = ["false"]
    }
  }
}

resource "aws_sqs_queue_policy" "interruption_dlq" {
  queue_url = aws_sqs_queue.interruption_dlq.id
  policy    = data.aws_iam_policy_document.interruption_dlq.json
}

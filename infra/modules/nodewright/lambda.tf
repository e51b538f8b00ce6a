resource "aws_cloudwatch_log_group" "functions" {
  #checkov:skip=CKV_AWS_158:Encrypted with var.kms_key_arn when the user gives one; otherwise CloudWatch Logs' own encryption at rest (a customer key is opt-in, it costs per key and per request).
  #checkov:skip=CKV_AWS_338:Retention is var.log_retention_in_days (default 30 days): these are operational logs, a year of them would cost more than the controller itself.
  for_each = local.functions

  name              = "/aws/lambda/${var.name}-${each.key}"
  retention_in_days = var.log_retention_in_days
  kms_key_id        = var.kms_key_arn
  tags              = local.tags
}

resource "aws_lambda_function" "this" {
  #checkov:skip=CKV_AWS_116:Asynchronous failures go to the on-failure destination of aws_lambda_function_event_invoke_config.this (a superset of a DLQ); the SQS-triggered interruption function fails over through its queue's redrive policy instead.
  #checkov:skip=CKV_AWS_117:VPC placement is opt-in through var.subnet_ids (needed only for a private cluster endpoint); outside a VPC the functions need no NAT or VPC endpoints.
  #checkov:skip=CKV_AWS_173:The environment holds names and URLs, no secrets; encrypted with var.kms_key_arn when given, else with Lambda's AWS-managed key.
  #checkov:skip=CKV_AWS_272:Users build the binaries from source with cargo lambda; code signing is left to their pipeline.
  #checkov:skip=CKV_AWS_50:X-Ray would trace every tick of the always-running provisioner, which costs more than the function; tracing spans go to the JSON logs.
  for_each = local.functions

  function_name                  = "${var.name}-${each.key}"
  description                    = each.value.description
  role                           = aws_iam_role.functions.arn
  runtime                        = "provided.al2023"
  handler                        = "bootstrap"
  architectures                  = [var.architecture]
  filename                       = "${var.artifacts_dir}/${each.key}/bootstrap.zip"
  source_code_hash               = filebase64sha256("${var.artifacts_dir}/${each.key}/bootstrap.zip")
  memory_size                    = each.value.memory_size
  timeout                        = each.value.timeout
  reserved_concurrent_executions = each.value.reserved_concurrency
  kms_key_arn                    = var.kms_key_arn

  environment {
    variables = local.environment
  }

  logging_config {
    # The binaries print one JSON object per line themselves.
    log_format = "Text"
    log_group  = aws_cloudwatch_log_group.functions[each.key].name
  }

  dynamic "vpc_config" {
    for_each = local.in_vpc ? [1] : []
    content {
      subnet_ids         = var.subnet_ids
      security_group_ids = var.security_group_ids
    }
  }

  lifecycle {
    precondition {
      condition     = !local.in_vpc || length(var.security_group_ids) > 0
      error_message = "subnet_ids is set but security_group_ids is empty: functions in a VPC need at least one security group."
    }
  }

  tags = local.tags

  depends_on = [aws_iam_role_policy.functions]
}

# Where a failed asynchronous invocation (after its retries) is kept.
resource "aws_lambda_function_event_invoke_config" "this" {
  for_each = local.asynchronous_functions

  function_name                = aws_lambda_function.this[each.key].function_name
  maximum_retry_attempts       = each.value.maximum_retry_attempts
  maximum_event_age_in_seconds = each.value.maximum_event_age_in_seconds

  destination_config {
    on_failure {
      destination = aws_sqs_queue.failed_invocations.arn
    }
  }
}

# The interruption queue drives the interruption function; a message the
# function reports as failed (ReportBatchItemFailures) is received again.
# The wake queue invokes the provisioner, one message per invocation.
resource "aws_lambda_event_source_mapping" "wake" {
  count = local.wake ? 1 : 0

  event_source_arn = aws_sqs_queue.wake[0].arn
  function_name    = aws_lambda_function.this["provisioner"].arn
  batch_size       = 1

  scaling_config {
    # SQS mappings allow no fewer; the provisioner's reserved concurrency
    # (3) leaves room for these two and the schedule's invocation.
    maximum_concurrency = 2
  }
}

resource "aws_lambda_event_source_mapping" "interruption" {
  event_source_arn        = aws_sqs_queue.interruption.arn
  function_name           = aws_lambda_function.this["interruption"].arn
  batch_size              = var.interruption_batch_size
  function_response_types = ["ReportBatchItemFailures"]

  scaling_config {
    maximum_concurrency = var.interruption_max_concurrency
  }
}

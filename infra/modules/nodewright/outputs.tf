output "function_names" {
  description = "Lambda function names, by function (provisioner, state-change, interruption, disruption)."
  value       = { for k, f in aws_lambda_function.this : k => f.function_name }
}

output "function_arns" {
  description = "Lambda function ARNs, by function."
  value       = { for k, f in aws_lambda_function.this : k => f.arn }
}

output "functions_role_arn" {
  description = "ARN of the functions' IAM role (mapped to the Kubernetes user `nodewright`)."
  value       = aws_iam_role.functions.arn
}

output "node_role_arn" {
  description = "ARN of the IAM role of the nodes nodewright launches."
  value       = aws_iam_role.node.arn
}

output "node_role_name" {
  description = "Name of the node role (an EC2NodeClass's `spec.role`)."
  value       = aws_iam_role.node.name
}

output "node_instance_profile_name" {
  description = "Instance profile of the node role (an EC2NodeClass's `spec.instanceProfile`, and the functions' default)."
  value       = aws_iam_instance_profile.node.name
}

output "config_table_name" {
  description = "DynamoDB table of NodePools, NodeClasses and settings (`nodewright config apply` writes it)."
  value       = aws_dynamodb_table.config.name
}

output "state_table_name" {
  description = "DynamoDB table of claims, usage, the batch window, leases and unavailable offerings."
  value       = aws_dynamodb_table.state.name
}

output "table_prefix" {
  description = "The tables' prefix (NODEWRIGHT_TABLE_PREFIX, and the CLI's --table-prefix)."
  value       = var.name
}

output "interruption_queue_url" {
  description = "URL of the interruption queue."
  value       = aws_sqs_queue.interruption.url
}

output "interruption_queue_arn" {
  description = "ARN of the interruption queue."
  value       = aws_sqs_queue.interruption.arn
}

output "interruption_dlq_url" {
  description = "URL of the interruption queue's dead-letter queue."
  value       = aws_sqs_queue.interruption_dlq.url
}

output "failed_invocations_queue_url" {
  description = "URL of the queue holding failed asynchronous invocations and undeliverable EventBridge events."
  value       = aws_sqs_queue.failed_invocations.url
}

output "log_group_names" {
  description = "CloudWatch log groups, by function."
  value       = { for k, g in aws_cloudwatch_log_group.functions : k => g.name }
}

output "dashboard_name" {
  description = "The CloudWatch dashboard (null when `dashboard` is false)."
  value       = var.dashboard ? aws_cloudwatch_dashboard.this[0].dashboard_name : null
}

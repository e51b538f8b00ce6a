output "function_names" {
  description = "Lambda function names, by function."
  value       = module.nodewright.function_names
}

output "node_role_name" {
  description = "The node role: set it as `spec.role` of your EC2NodeClass."
  value       = module.nodewright.node_role_name
}

output "table_prefix" {
  description = "NODEWRIGHT_TABLE_PREFIX for the CLI (`nodewright config apply`)."
  value       = module.nodewright.table_prefix
}

output "interruption_queue_url" {
  description = "URL of the interruption queue."
  value       = module.nodewright.interruption_queue_url
}

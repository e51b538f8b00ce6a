variable "region" {
  description = "AWS region of the cluster."
  type        = string
}

variable "cluster_name" {
  description = "Name of the existing EKS cluster (authentication mode API or API_AND_CONFIG_MAP)."
  type        = string
}

variable "architecture" {
  description = "arm64 (cargo lambda build --arm64) or x86_64."
  type        = string
  default     = "arm64"
}

variable "subnet_ids" {
  description = "Private subnets for the functions when the cluster endpoint is private; empty otherwise."
  type        = list(string)
  default     = []
}

variable "security_group_ids" {
  description = "Security groups of the functions when subnet_ids is set."
  type        = list(string)
  default     = []
}

variable "alarm_email" {
  description = "Address subscribed to the alarms' SNS topic; null for none."
  type        = string
  default     = null
}

variable "apply_rbac" {
  description = "Apply infra/rbac/clusterrole.yaml through the kubernetes provider (needs cluster-admin for whoever runs terraform). False: apply it with kubectl."
  type        = bool
  default     = true
}

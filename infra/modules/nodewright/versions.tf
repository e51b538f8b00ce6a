terraform {
  # optional() object attributes need 1.3; cross-variable checks in
  # preconditions need 1.2. 1.5 is the oldest release still widely used.
  required_version = ">= 1.5"

  required_providers {
    aws = {
      source = "hashicorp/aws"
      # aws_eks_access_entry (5.33) and aws_lambda_function.logging_config (5.29).
      version = ">= 5.40"
    }
  }
}

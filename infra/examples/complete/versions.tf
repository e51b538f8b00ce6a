terraform {
  required_version = ">= 1.5"

  required_providers {
    aws = {
      source  = "hashicorp/aws"
      version = ">= 5.40"
    }
    kubernetes = {
      source = "hashicorp/kubernetes"
      # kubernetes_manifest without a separate CRD step.
      version = ">= 2.23"
    }
  }
}

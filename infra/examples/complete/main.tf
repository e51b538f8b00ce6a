# nodewright for an existing EKS cluster: the module, an SNS topic for its
# alarms, and the RBAC the functions' Kubernetes user needs.
#
#   cargo lambda build --profile lambda --arm64 --output-format zip \
#     -p provisioner -p state-change -p interruption -p disruption   # from the repository root
#   cd infra/examples/complete
#   terraform init && terraform apply -var region=eu-west-1 -var cluster_name=my-cluster

provider "aws" {
  region = var.region
}

data "aws_eks_cluster" "this" {
  name = var.cluster_name
}

data "aws_eks_cluster_auth" "this" {
  name = var.cluster_name
}

provider "kubernetes" {
  host                   = data.aws_eks_cluster.this.endpoint
  cluster_ca_certificate = base64decode(data.aws_eks_cluster.this.certificate_authority[0].data)
  token                  = data.aws_eks_cluster_auth.this.token
}

resource "aws_sns_topic" "alarms" {
  name              = "nodewright-${var.cluster_name}-alarms"
  kms_master_key_id = "alias/aws/sns"
}

resource "aws_sns_topic_subscription" "alarms" {
  count = var.alarm_email == null ? 0 : 1

  topic_arn = aws_sns_topic.alarms.arn
  protocol  = "email"
  endpoint  = var.alarm_email
}

module "nodewright" {
  source = "../../modules/nodewright"

  cluster_name       = var.cluster_name
  architecture       = var.architecture
  artifacts_dir      = "${path.root}/../../../target/lambda"
  subnet_ids         = var.subnet_ids
  security_group_ids = var.security_group_ids
  alarm_actions      = [aws_sns_topic.alarms.arn]

  tags = {
    cluster = var.cluster_name
  }
}

# The ClusterRole and ClusterRoleBinding of infra/rbac/clusterrole.yaml,
# read from that file so there is one source of truth.
locals {
  rbac_documents = [
    for doc in split("\n---\n", file("${path.root}/../../rbac/clusterrole.yaml")) :
    yamldecode(doc) if trimspace(doc) != ""
  ]
}

resource "kubernetes_manifest" "rbac" {
  for_each = var.apply_rbac ? { for d in local.rbac_documents : "${d.kind}/${d.metadata.name}" => d } : {}

  manifest = each.value
}

# Cluster access without aws-auth: nodes join through the node role's
# EC2_LINUX entry; the functions' role becomes the Kubernetes user that
# infra/rbac/clusterrole.yaml binds (no access policy: RBAC decides).

resource "aws_eks_access_entry" "node" {
  count = var.create_access_entries ? 1 : 0

  cluster_name  = var.cluster_name
  principal_arn = aws_iam_role.node.arn
  type          = "EC2_LINUX"
  tags          = local.tags
}

resource "aws_eks_access_entry" "functions" {
  count = var.create_access_entries ? 1 : 0

  cluster_name  = var.cluster_name
  principal_arn = aws_iam_role.functions.arn
  type          = "STANDARD"
  user_name     = var.kubernetes_username
  tags          = local.tags
}

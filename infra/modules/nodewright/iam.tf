# ------------------------------------------------------- functions' role
# One role for the four functions: what each statement allows is what the
# adapters in shared/src/aws call (tests/harness/infra/check_terraform.py
# compares the grants with the SDK operations in the sources), scoped as
# Karpenter's controller policy scopes them, but to nodewright's own
# ownership tag: `nodewright.io/cluster=<cluster>` (shared/src/cloud/ownership.rs).
# `kubernetes.io/cluster/<cluster>=owned` is cluster membership (managed
# node groups carry it too), never what lets the functions delete.

locals {
  owner_tag      = "nodewright.io/cluster"
  nodepool_tag   = "nodewright.io/nodepool"
  ec2_arn_prefix = "arn:${local.partition}:ec2:${local.region}"
}

data "aws_iam_policy_document" "functions_assume" {
  statement {
    actions = ["sts:AssumeRole"]

    principals {
      type        = "Service"
      identifiers = ["lambda.amazonaws.com"]
    }

    condition {
      test     = "StringEquals"
      variable = "aws:SourceAccount"
      values   = [local.account_id]
    }
  }
}

resource "aws_iam_role" "functions" {
  name               = "${var.name}-functions"
  description        = "nodewright's Lambda functions for EKS cluster ${var.cluster_name}"
  assume_role_policy = data.aws_iam_policy_document.functions_assume.json
  tags               = local.tags
}

data "aws_iam_policy_document" "functions" {
  #checkov:skip=CKV_AWS_356:Only the Describe*, pricing:GetProducts and network-interface reads that AWS cannot scope to a resource use "*"; each is limited to this region by condition where AWS supports it.
  #checkov:skip=CKV_AWS_111:Every write is scoped by resource ARN and by this cluster's tags (see each statement); the remaining "*" resources are read-only.

  # Reads of the catalog, networks, images, instances (and their status
  # checks) and prices. Describe
  # calls cannot be scoped to resources, only to the region.
  statement {
    sid    = "Describe"
    effect = "Allow"
    actions = [
      "ec2:DescribeCapacityReservations",
      "ec2:DescribeImages",
      "ec2:DescribeInstanceStatus",
      "ec2:DescribeInstanceTypeOfferings",
      "ec2:DescribeInstanceTypes",
      "ec2:DescribeInstances",
      "ec2:DescribeLaunchTemplates",
      "ec2:DescribeSecurityGroups",
      "ec2:DescribeSpotPriceHistory",
      "ec2:DescribeSubnets",
    ]
    resources = ["*"]

    condition {
      test     = "StringEquals"
      variable = "aws:RequestedRegion"
      values   = [local.region]
    }
  }

  # The Pricing API is global and has no resources.
  statement {
    sid       = "Pricing"
    effect    = "Allow"
    actions   = ["pricing:GetProducts"]
    resources = ["*"]
  }

  # EKS-optimised AMI ids: public parameters only.
  statement {
    sid       = "PublicAmiParameters"
    effect    = "Allow"
    actions   = ["ssm:GetParameter"]
    resources = ["arn:${local.partition}:ssm:${local.region}::parameter/aws/service/*"]
  }

  statement {
    sid       = "DescribeThisCluster"
    effect    = "Allow"
    actions   = ["eks:DescribeCluster"]
    resources = [local.cluster_arn]
  }

  # Launch: the existing resources a fleet or instance uses.
  statement {
    sid     = "LaunchWithExistingResources"
    effect  = "Allow"
    actions = ["ec2:RunInstances", "ec2:CreateFleet"]
    resources = [
      "${local.ec2_arn_prefix}::image/*",
      "${local.ec2_arn_prefix}::snapshot/*",
      "${local.ec2_arn_prefix}:*:security-group/*",
      "${local.ec2_arn_prefix}:*:subnet/*",
      "${local.ec2_arn_prefix}:*:capacity-reservation/*",
    ]
  }

  # Launch: only from our own launch templates. (CreateFleet authorises
  # RunInstances for the instances it launches: both are granted.)
  statement {
    sid       = "LaunchFromOwnedTemplates"
    effect    = "Allow"
    actions   = ["ec2:RunInstances", "ec2:CreateFleet"]
    resources = ["${local.ec2_arn_prefix}:*:launch-template/*"]

    condition {
      test     = "StringEquals"
      variable = "aws:ResourceTag/${local.owner_tag}"
      values   = [var.cluster_name]
    }

    condition {
      test     = "StringLike"
      variable = "aws:ResourceTag/${local.nodepool_tag}"
      values   = ["*"]
    }
  }

  # Create fleets, instances, volumes, interfaces and launch templates only
  # when the request carries our ownership tags.
  statement {
    sid     = "CreateOnlyWithOwnedTags"
    effect  = "Allow"
    actions = ["ec2:RunInstances", "ec2:CreateFleet", "ec2:CreateLaunchTemplate"]
    resources = [
      "${local.ec2_arn_prefix}:*:fleet/*",
      "${local.ec2_arn_prefix}:*:instance/*",
      "${local.ec2_arn_prefix}:*:volume/*",
      "${local.ec2_arn_prefix}:*:network-interface/*",
      "${local.ec2_arn_prefix}:*:launch-template/*",
      "${local.ec2_arn_prefix}:*:spot-instances-request/*",
    ]

    condition {
      test     = "StringEquals"
      variable = "aws:RequestTag/${local.owner_tag}"
      values   = [var.cluster_name]
    }

    condition {
      test     = "StringLike"
      variable = "aws:RequestTag/${local.nodepool_tag}"
      values   = ["*"]
    }
  }

  # Tags only as part of those create calls (tag specifications).
  statement {
    sid     = "TagOnCreate"
    effect  = "Allow"
    actions = ["ec2:CreateTags"]
    resources = [
      "${local.ec2_arn_prefix}:*:fleet/*",
      "${local.ec2_arn_prefix}:*:instance/*",
      "${local.ec2_arn_prefix}:*:volume/*",
      "${local.ec2_arn_prefix}:*:network-interface/*",
      "${local.ec2_arn_prefix}:*:launch-template/*",
      "${local.ec2_arn_prefix}:*:spot-instances-request/*",
    ]

    condition {
      test     = "StringEquals"
      variable = "ec2:CreateAction"
      values   = ["RunInstances", "CreateFleet", "CreateLaunchTemplate"]
    }

    condition {
      test     = "StringEquals"
      variable = "aws:RequestTag/${local.owner_tag}"
      values   = [var.cluster_name]
    }
  }

  # Terminate only what this cluster's nodewright owns: never a managed
  # node group's, a Karpenter's or another cluster's instance.
  statement {
    sid       = "TerminateOwned"
    effect    = "Allow"
    actions   = ["ec2:TerminateInstances"]
    resources = ["${local.ec2_arn_prefix}:*:instance/*"]

    condition {
      test     = "StringEquals"
      variable = "aws:ResourceTag/${local.owner_tag}"
      values   = [var.cluster_name]
    }

    condition {
      test     = "StringLike"
      variable = "aws:ResourceTag/${local.nodepool_tag}"
      values   = ["*"]
    }
  }

  # Delete only launch templates this cluster's nodewright made (those
  # nothing uses any more, after a grace age): never a node group's, a
  # Karpenter's or another cluster's. Scoped as Karpenter's controller
  # policy scopes it (resource tags), with our ownership tag.
  statement {
    sid       = "DeleteOwnedLaunchTemplates"
    effect    = "Allow"
    actions   = ["ec2:DeleteLaunchTemplate"]
    resources = ["${local.ec2_arn_prefix}:*:launch-template/*"]

    condition {
      test     = "StringEquals"
      variable = "aws:ResourceTag/${local.owner_tag}"
      values   = [var.cluster_name]
    }

    condition {
      test     = "StringLike"
      variable = "aws:ResourceTag/${local.nodepool_tag}"
      values   = ["*"]
    }
  }

  # Launch templates name the node role's instance profile.
  statement {
    sid       = "PassNodeRoleToEc2"
    effect    = "Allow"
    actions   = ["iam:PassRole"]
    resources = [aws_iam_role.node.arn]

    condition {
      test     = "StringEquals"
      variable = "iam:PassedToService"
      values   = ["ec2.${local.dns_suffix}"]
    }
  }

  # The interruption queue: what the event source mapping calls with the
  # function's role (the function itself makes no SQS call).
  statement {
    sid    = "InterruptionQueue"
    effect = "Allow"
    actions = [
      "sqs:DeleteMessage",
      "sqs:GetQueueAttributes",
      "sqs:ReceiveMessage",
    ]
    resources = [aws_sqs_queue.interruption.arn]
  }

  # The wake queue: the provisioner sends the next wake; its event source
  # mapping receives and deletes with the function's role.
  dynamic "statement" {
    for_each = local.wake ? [aws_sqs_queue.wake[0].arn] : []
    content {
      sid    = "WakeQueue"
      effect = "Allow"
      actions = [
        "sqs:DeleteMessage",
        "sqs:GetQueueAttributes",
        "sqs:ReceiveMessage",
        "sqs:SendMessage",
      ]
      resources = [statement.value]
    }
  }

  # Lambda's on-failure destination writes with the function's role.
  statement {
    sid       = "FailedInvocations"
    effect    = "Allow"
    actions   = ["sqs:SendMessage"]
    resources = [aws_sqs_queue.failed_invocations.arn]
  }

  # The configuration is written by `nodewright config apply` with the
  # operator's credentials: the functions only read it.
  statement {
    sid       = "ReadConfigTable"
    effect    = "Allow"
    actions   = ["dynamodb:GetItem", "dynamodb:Scan"]
    resources = [aws_dynamodb_table.config.arn]
  }

  # State items (TransactWriteItems is authorised per item as PutItem /
  # UpdateItem / DeleteItem; the store writes no ConditionCheck item).
  statement {
    sid    = "StateTable"
    effect = "Allow"
    actions = [
      "dynamodb:DeleteItem",
      "dynamodb:GetItem",
      "dynamodb:PutItem",
      "dynamodb:Scan",
      "dynamodb:UpdateItem",
    ]
    resources = [aws_dynamodb_table.state.arn]
  }

  statement {
    sid       = "Logs"
    effect    = "Allow"
    actions   = ["logs:CreateLogStream", "logs:PutLogEvents"]
    resources = [for g in aws_cloudwatch_log_group.functions : "${g.arn}:*"]
  }

  dynamic "statement" {
    for_each = var.kms_key_arn == null ? [] : [var.kms_key_arn]
    content {
      sid       = "CustomerKey"
      effect    = "Allow"
      actions   = ["kms:Decrypt", "kms:GenerateDataKey"]
      resources = [statement.value]

      # Only through the services that hold data under the key: the tables,
      # the queues (receive; the on-failure destination's send) and the
      # functions' environment.
      condition {
        test     = "StringEquals"
        variable = "kms:ViaService"
        values = [
          "dynamodb.${local.region}.${local.dns_suffix}",
          "sqs.${local.region}.${local.dns_suffix}",
          "lambda.${local.region}.${local.dns_suffix}",
        ]
      }
    }
  }

  # In a VPC, Lambda creates the functions' network interfaces with this
  # role (what AWSLambdaVPCAccessExecutionRole grants, scoped to the region
  # and to the given subnets and security groups).
  dynamic "statement" {
    for_each = local.in_vpc ? [1] : []
    content {
      sid     = "VpcNetworkInterfaces"
      effect  = "Allow"
      actions = ["ec2:CreateNetworkInterface"]
      resources = concat(
        ["${local.ec2_arn_prefix}:${local.account_id}:network-interface/*"],
        [for s in var.subnet_ids : "${local.ec2_arn_prefix}:${local.account_id}:subnet/${s}"],
        [for g in var.security_group_ids : "${local.ec2_arn_prefix}:${local.account_id}:security-group/${g}"],
      )
    }
  }

  dynamic "statement" {
    for_each = local.in_vpc ? [1] : []
    content {
      sid       = "VpcNetworkInterfaceLifecycle"
      effect    = "Allow"
      actions   = ["ec2:DeleteNetworkInterface", "ec2:AssignPrivateIpAddresses", "ec2:UnassignPrivateIpAddresses"]
      resources = ["${local.ec2_arn_prefix}:${local.account_id}:network-interface/*"]
    }
  }

  dynamic "statement" {
    for_each = local.in_vpc ? [1] : []
    content {
      sid       = "VpcDescribeNetworkInterfaces"
      effect    = "Allow"
      actions   = ["ec2:DescribeNetworkInterfaces"]
      resources = ["*"]

      condition {
        test     = "StringEquals"
        variable = "aws:RequestedRegion"
        values   = [local.region]
      }
    }
  }
}

resource "aws_iam_role_policy" "functions" {
  name   = "nodewright"
  role   = aws_iam_role.functions.id
  policy = data.aws_iam_policy_document.functions.json
}

# ------------------------------------------------------------- node role
data "aws_iam_policy_document" "node_assume" {
  statement {
    actions = ["sts:AssumeRole"]

    principals {
      type        = "Service"
      identifiers = ["ec2.${local.dns_suffix}"]
    }
  }
}

resource "aws_iam_role" "node" {
  name               = "${var.name}-node"
  description        = "Nodes that nodewright launches for EKS cluster ${var.cluster_name}"
  assume_role_policy = data.aws_iam_policy_document.node_assume.json
  tags               = local.tags
}

locals {
  # What EKS worker nodes need (the same set Karpenter's module attaches).
  node_policies = merge(
    {
      worker = "arn:${local.partition}:iam::aws:policy/AmazonEKSWorkerNodePolicy"
      cni    = "arn:${local.partition}:iam::aws:policy/AmazonEKS_CNI_Policy"
      ecr    = "arn:${local.partition}:iam::aws:policy/AmazonEC2ContainerRegistryPullOnly"
      ssm    = "arn:${local.partition}:iam::aws:policy/AmazonSSMManagedInstanceCore"
    },
    var.node_iam_role_additional_policies,
  )
}

resource "aws_iam_role_policy_attachment" "node" {
  for_each = local.node_policies

  role       = aws_iam_role.node.name
  policy_arn = each.value
}

resource "aws_iam_instance_profile" "node" {
  name = "${var.name}-node"
  role = aws_iam_role.node.name
  tags = local.tags
}

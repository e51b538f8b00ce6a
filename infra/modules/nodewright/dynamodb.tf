# The two tables of shared/docs/aws.md "State in DynamoDB": one string
# partition key `pk`, no sort key, a few hundred items at most (on-demand
# costs cents). Config items never expire; state items carry `expires_at`.

resource "aws_dynamodb_table" "config" {
  #checkov:skip=CKV_AWS_119:Encrypted at rest always; with var.kms_key_arn when given, else the AWS-managed key (a customer key is opt-in: it costs per key and per request).
  name                        = "${var.name}-config"
  billing_mode                = "PAY_PER_REQUEST"
  hash_key                    = "pk"
  deletion_protection_enabled = var.deletion_protection

  attribute {
    name = "pk"
    type = "S"
  }

  point_in_time_recovery {
    enabled = true
  }

  server_side_encryption {
    enabled     = true
    kms_key_arn = var.kms_key_arn
  }

  tags = local.tags
}

resource "aws_dynamodb_table" "state" {
  #checkov:skip=CKV_AWS_119:Encrypted at rest always; with var.kms_key_arn when given, else the AWS-managed key (a customer key is opt-in: it costs per key and per request).
  name                        = "${var.name}-state"
  billing_mode                = "PAY_PER_REQUEST"
  hash_key                    = "pk"
  deletion_protection_enabled = var.deletion_protection

  attribute {
    name = "pk"
    type = "S"
  }

  # Leases and unavailable-offering marks (epoch seconds). TTL deletion is
  # lazy; the code checks expiry itself.
  ttl {
    attribute_name = "expires_at"
    enabled        = true
  }

  point_in_time_recovery {
    enabled = true
  }

  server_side_encryption {
    enabled     = true
    kms_key_arn = var.kms_key_arn
  }

  tags = local.tags
}

variable "name" {
  description = "Prefix of every resource this module creates: functions `<name>-provisioner` …, tables `<name>-config` and `<name>-state`, queue `<name>-interruption`. Use a distinct name for each cluster in one account and region."
  type        = string
  default     = "nodewright"

  validation {
    # The longest derived name is `<name>-interruption-dlq` for SQS (80) and
    # `<name>-state-change` for Lambda and IAM (64); 32 leaves room for both.
    condition     = can(regex("^[a-z][a-z0-9-]{0,31}$", var.name))
    error_message = "name must be 1-32 characters of lowercase letters, digits and '-', starting with a letter."
  }
}

variable "cluster_name" {
  description = "Name of the existing EKS cluster the functions manage. Its authentication mode must include the access-entry API (`API` or `API_AND_CONFIG_MAP`) when `create_access_entries` is true."
  type        = string

  validation {
    condition     = can(regex("^[0-9A-Za-z][A-Za-z0-9_-]{0,99}$", var.cluster_name))
    error_message = "cluster_name must be a valid EKS cluster name (1-100 characters: letters, digits, '-' and '_', starting with a letter or digit)."
  }
}

variable "architecture" {
  description = "Instruction set of the function binaries: `arm64` (Graviton, about 20 % cheaper per GB-second) or `x86_64`. Must match the `cargo lambda build` target."
  type        = string
  default     = "arm64"

  validation {
    condition     = contains(["arm64", "x86_64"], var.architecture)
    error_message = "architecture must be \"arm64\" or \"x86_64\"."
  }
}

variable "artifacts_dir" {
  description = "Directory holding `<function>/bootstrap.zip` for each of the four functions, as `cargo lambda build --profile lambda --output-format zip` writes them (`target/lambda` in the repository)."
  type        = string

  validation {
    condition     = length(trimspace(var.artifacts_dir)) > 0
    error_message = "artifacts_dir must name the directory of the function zips (e.g. \"../../../target/lambda\")."
  }
}

variable "memory_size" {
  description = "Memory (MB) per function. Lambda gives CPU in proportion to memory; the defaults come from measured peak RSS (infra/README.md, Memory sizes) with headroom."
  type = object({
    provisioner  = optional(number, 256)
    state_change = optional(number, 128)
    interruption = optional(number, 128)
    disruption   = optional(number, 256)
  })
  default = {}

  validation {
    condition     = alltrue([for m in values(var.memory_size) : m >= 128 && m <= 10240 && floor(m) == m])
    error_message = "each memory_size must be a whole number of MB between 128 and 10240."
  }
}

variable "interruption_timeout" {
  description = "Timeout (seconds) of the interruption function. An invocation records its batch's removals and taints their nodes, then returns (the scheduled loops drain and replace), which takes about a second. The queue's visibility timeout is 6 × this (AWS's guidance for an SQS event source), which is how long a failed message waits before it is received again: at most 60 s, so a retry comes inside a 2-minute spot notice."
  type        = number
  default     = 5

  validation {
    condition     = var.interruption_timeout >= 3 && var.interruption_timeout <= 10 && floor(var.interruption_timeout) == var.interruption_timeout
    error_message = "interruption_timeout must be a whole number of seconds from 3 to 10 (the queue's visibility timeout is 6 × it, and a retry must come inside a 2-minute notice)."
  }
}

variable "interruption_batch_size" {
  description = "Messages per interruption invocation (the event source mapping's batch size). Karpenter receives 10 at a time."
  type        = number
  default     = 10

  validation {
    condition     = var.interruption_batch_size >= 1 && var.interruption_batch_size <= 10
    error_message = "interruption_batch_size must be between 1 and 10."
  }
}

variable "interruption_max_concurrency" {
  description = "Most interruption invocations at once (the event source mapping's maximum concurrency; also the function's reserved concurrency, so the mapping is never throttled)."
  type        = number
  default     = 5

  validation {
    condition     = var.interruption_max_concurrency >= 2 && var.interruption_max_concurrency <= 1000
    error_message = "interruption_max_concurrency must be between 2 and 1000 (the event source mapping's limits)."
  }
}

variable "interruption_max_receive_count" {
  description = "Receives of one interruption message before it moves to the dead-letter queue (where an alarm sees it). maxReceiveCount × the visibility timeout (6 × interruption_timeout) must stay under the queue's 300-s retention, or a failing message expires before it reaches the dead-letter queue."
  type        = number
  default     = 5

  validation {
    condition     = var.interruption_max_receive_count >= 1 && var.interruption_max_receive_count <= 10 && floor(var.interruption_max_receive_count) == var.interruption_max_receive_count
    error_message = "interruption_max_receive_count must be a whole number from 1 to 10."
  }
}

variable "state_change_reserved_concurrency" {
  description = "Reserved concurrency of the state-change function: caps the calls a burst of EC2 state changes makes to the Kubernetes API. Throttled events wait in Lambda's asynchronous queue and are retried, not lost."
  type        = number
  default     = 5

  validation {
    condition     = var.state_change_reserved_concurrency >= 1
    error_message = "state_change_reserved_concurrency must be at least 1."
  }
}

variable "provisioner_schedule" {
  description = "EventBridge schedule expression of the provisioner (it ticks about every second inside each invocation)."
  type        = string
  default     = "rate(1 minute)"

  validation {
    condition     = can(regex("^(rate|cron)\\(.+\\)$", var.provisioner_schedule))
    error_message = "provisioner_schedule must be an EventBridge rate(...) or cron(...) expression."
  }
}

variable "disruption_in_provisioner" {
  description = "Run the disruption loop inside the provisioner's invocation (each under its own lease) instead of scheduling the disruption function: one always-on invocation a minute instead of two, half the Lambda cost. Set false to give disruption its own schedule, memory size and logs."
  type        = bool
  default     = true
}

variable "end_invocations_when_quiet" {
  description = "End each scheduled invocation at its first quiet tick (nothing pending to launch, every node registered, no removal in progress) instead of ticking until its timeout, and let the wake queue invoke the provisioner again quiet_wake_seconds later. Lambda bills the seconds an invocation runs: about $1 a month of Lambda instead of $8 for 100 nodes (python3 infra/running-cost.py). The price: a pod that becomes pending while the cluster is quiet waits up to quiet_wake_seconds (10 s: Cluster Autoscaler's scan interval) for the next invocation instead of about a second; once something is in flight, the invocation ticks every second as usual. Set false for an invocation listening all minute (sub-second reaction from quiet, about $8 more a month)."
  type        = bool
  default     = true
}

variable "quiet_wake_seconds" {
  description = "With end_invocations_when_quiet: how long after an invocation ends its wake queue invokes the provisioner again (one SQS message delayed this long; at most one waits at a time). 0 makes no wake queue: the next invocation is the minute's schedule."
  type        = number
  default     = 10

  validation {
    condition     = var.quiet_wake_seconds == floor(var.quiet_wake_seconds) && var.quiet_wake_seconds >= 0 && var.quiet_wake_seconds <= 900
    error_message = "quiet_wake_seconds must be whole seconds from 0 (no wake queue) to 900 (SQS's longest message delay)."
  }
}

variable "publish_gauges" {
  description = "Publish Karpenter's gauges (karpenter_scheduler_queue_depth, each NodePool's usage, limits and cost, and karpenter_voluntary_disruption_eligible_nodes per reason) as CloudWatch metrics. Each is a custom metric billed by the month (11 for one NodePool with one limit, $3.30); the launch and removal counters and the provisioner's heartbeat are published either way."
  type        = bool
  default     = true
}

variable "disruption_schedule" {
  description = "EventBridge schedule expression of the disruption function (used when disruption_in_provisioner is false)."
  type        = string
  default     = "rate(1 minute)"

  validation {
    condition     = can(regex("^(rate|cron)\\(.+\\)$", var.disruption_schedule))
    error_message = "disruption_schedule must be an EventBridge rate(...) or cron(...) expression."
  }
}

variable "log_retention_in_days" {
  description = "Retention of the functions' CloudWatch log groups."
  type        = number
  default     = 30

  validation {
    condition     = contains([1, 3, 5, 7, 14, 30, 60, 90, 120, 150, 180, 365, 400, 545, 731, 1096, 1827, 2192, 2557, 2922, 3288, 3653], var.log_retention_in_days)
    error_message = "log_retention_in_days must be one of CloudWatch Logs' retention values (1, 3, 5, 7, 14, 30, 60, 90, 120, 150, 180, 365, 400, 545, 731, 1096, 1827, 2192, 2557, 2922, 3288, 3653)."
  }
}

variable "log_level" {
  description = "RUST_LOG of the functions (a tracing-subscriber filter)."
  type        = string
  default     = "info,kube_client=warn"
}

variable "kms_key_arn" {
  description = "Customer-managed KMS key for the log groups, the queues, the tables and the functions' environment. When null, each service's AWS-managed encryption is used. The key policy must allow CloudWatch Logs, SQS, DynamoDB, Lambda and EventBridge to use it."
  type        = string
  default     = null

  validation {
    condition     = var.kms_key_arn == null || can(regex("^arn:aws[a-zA-Z-]*:kms:", var.kms_key_arn))
    error_message = "kms_key_arn must be a KMS key ARN (arn:aws:kms:...) or null."
  }
}

variable "subnet_ids" {
  description = "Private subnets for the functions, for a cluster whose API endpoint is private. Empty: the functions run outside any VPC and reach the public endpoint. The subnets need a route to the EC2, SSM, DynamoDB, SQS, STS and EKS APIs (NAT or VPC endpoints)."
  type        = list(string)
  default     = []
}

variable "security_group_ids" {
  description = "Security groups of the functions when `subnet_ids` is set; the cluster's security group must accept HTTPS from them."
  type        = list(string)
  default     = []
}

variable "create_access_entries" {
  description = "Create the EKS access entries: the node role (EC2_LINUX) and the functions' role (STANDARD, mapped to the Kubernetes user `kubernetes_username`, with no access policy: infra/rbac/clusterrole.yaml grants what it may do)."
  type        = bool
  default     = true
}

variable "kubernetes_username" {
  description = "Kubernetes user the functions' role is mapped to; infra/rbac/clusterrole.yaml binds `nodewright`."
  type        = string
  default     = "nodewright"
}

variable "node_iam_role_additional_policies" {
  description = "Extra managed policies for the node role, by a key of your choice (e.g. { ebs = \"arn:aws:iam::aws:policy/service-role/AmazonEBSCSIDriverPolicy\" })."
  type        = map(string)
  default     = {}
}

variable "alarm_actions" {
  description = "ARNs (e.g. SNS topics) notified when an alarm fires: a dead-letter queue holds messages, an interruption message was dropped or waits too long, a function reports errors or is throttled, a table throttles, or the provisioner has not run for 3 minutes."
  type        = list(string)
  default     = []
}

variable "dashboard" {
  description = "Create the CloudWatch dashboard `<name>`: fleet cost, pending pods, launches, removals by reason, interruptions, errors (from the metrics the functions publish under Karpenter's names)."
  type        = bool
  default     = true
}

variable "deletion_protection" {
  description = "Deletion protection of the DynamoDB tables (the configuration and the state of in-flight nodes)."
  type        = bool
  default     = true
}

variable "tags" {
  description = "Tags for every resource this module creates."
  type        = map(string)
  default     = {}
}

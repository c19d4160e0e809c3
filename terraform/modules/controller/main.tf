# What the gpu-autoscaler controller needs in one region: the queue its interruption
# intake reads (fed by three EventBridge rules), the bucket holding pool state, and an
# instance profile with the controller's least-privilege policy (controller-policy.json,
# identical to deploy/iam/controller-policy.json for other tools).

data "aws_caller_identity" "this" {}
data "aws_region" "this" {}
data "aws_partition" "this" {}

locals {
  account   = data.aws_caller_identity.this.account_id
  region    = data.aws_region.this.name
  partition = data.aws_partition.this.partition
  bucket    = var.state_bucket != "" ? var.state_bucket : "${var.name}-state-${local.account}-${local.region}"
  tags      = merge(var.tags, { component = "gpu-autoscaler-controller" })
  # Known before the queue exists, so its policy can be part of it (see aws_sqs_queue.events).
  queue_arn = "arn:${local.partition}:sqs:${local.region}:${local.account}:${var.name}-events"

  # EventBridge detail types the intake understands (autoscaler/clouds/aws_events.py).
  rules = {
    spot-interruption = "EC2 Spot Instance Interruption Warning"
    rebalance         = "EC2 Instance Rebalance Recommendation"
    instance-state    = "EC2 Instance State-change Notification"
  }
}

# -- events -> queue ----------------------------------------------------------------------

resource "aws_sqs_queue" "events" {
  name                      = "${var.name}-events"
  message_retention_seconds = 3600 # a notice older than an hour is history, not news
  sqs_managed_sse_enabled   = true
  # Inline rather than an aws_sqs_queue_policy: the provider waits ~25 s for a queue's
  # attributes to settle after each change, so one resource waits once.
  policy = data.aws_iam_policy_document.queue.json
  tags   = local.tags
}

resource "aws_sqs_queue" "refused" {
  name                      = "${var.name}-refused"
  message_retention_seconds = 1209600
  sqs_managed_sse_enabled   = true
  tags                      = local.tags
}

resource "aws_cloudwatch_event_rule" "ec2" {
  for_each    = local.rules
  name        = "${var.name}-${each.key}"
  description = "${each.value} events to the gpu-autoscaler queue."
  event_pattern = jsonencode({
    source        = ["aws.ec2"]
    "detail-type" = [each.value]
  })
  tags = local.tags
}

resource "aws_cloudwatch_event_target" "queue" {
  for_each = aws_cloudwatch_event_rule.ec2
  rule     = each.value.name
  arn      = aws_sqs_queue.events.arn
}

# Only these three rules, in this account, may send: a notice makes the controller drain
# and replace a node, so nobody else (no other account, no other rule, no IAM user of
# this account: the policy names no AWS principal) can put one on the queue.
data "aws_iam_policy_document" "queue" {
  statement {
    sid       = "EventBridgeRulesOfThisAccountOnly"
    actions   = ["sqs:SendMessage"]
    resources = [local.queue_arn]

    principals {
      type        = "Service"
      identifiers = ["events.amazonaws.com"]
    }
    condition {
      test     = "ArnEquals"
      variable = "aws:SourceArn"
      values   = [for key, _ in local.rules : "arn:${local.partition}:events:${local.region}:${local.account}:rule/${var.name}-${key}"]
    }
    condition {
      test     = "StringEquals"
      variable = "aws:SourceAccount"
      values   = [local.account]
    }
  }
}

# -- pool state ---------------------------------------------------------------------------

# Terraform's S3 locking (use_lockfile, Terraform >= 1.10) writes <key>.tflock next to
# each state object with a conditional PutObject: no DynamoDB table.
resource "aws_s3_bucket" "state" {
  bucket = local.bucket
  tags   = local.tags
}

resource "aws_s3_bucket_versioning" "state" {
  bucket = aws_s3_bucket.state.id
  versioning_configuration {
    status = "Enabled" # an overwritten state can be recovered
  }
}

resource "aws_s3_bucket_server_side_encryption_configuration" "state" {
  bucket = aws_s3_bucket.state.id
  rule {
    apply_server_side_encryption_by_default {
      sse_algorithm = "AES256"
    }
  }
}

resource "aws_s3_bucket_public_access_block" "state" {
  bucket                  = aws_s3_bucket.state.id
  block_public_acls       = true
  block_public_policy     = true
  ignore_public_acls      = true
  restrict_public_buckets = true
}

# -- identity -----------------------------------------------------------------------------

# Why each action of controller-policy.json (JSON has no comments):
# - ec2:DescribeInstances, DescribeSpotPriceHistory, DescribeAvailabilityZones,
#   DescribeInstanceTypeOfferings: the service's reads (autoscaler/clouds/aws.py);
#   GetSpotPlacementScores too, when clouds.aws.spot_placement_scores is on.
# - ec2:DescribeImages, DescribeInstanceAttribute, DescribeInstanceTypes, DescribeTags,
#   DescribeVolumes, DescribeSpotInstanceRequests: the AWS provider's reads when it creates, refreshes and destroys pool
#   instances (aws-gpu-pool); found by running that path under moto's IAM enforcement
#   (tests/terraform/test_controller.py) and granting, one at a time, what was denied.
#   DescribeSubnets: the pool module's data.aws_subnet, when subnet_ids is set (not on
#   that path). Describe calls take no resource ARN in AWS: scoped to the region only.
# - ec2:RunInstances (+ CreateTags only as part of it): launches; a Deny refuses any
#   instance not requested with managed-by=gpu-autoscaler (aws-gpu-pool sets it). Not on
#   volumes: the provider may tag the root volume after the launch (root_block_device.tags),
#   so RunInstances carries no volume tags; that CreateTags is allowed on volumes only
#   when it sets managed-by=gpu-autoscaler (tagging a volume grants nothing: terminate
#   checks the instance's tag).
# - ec2:TerminateInstances: only instances tagged managed-by=gpu-autoscaler.
# - ec2:CancelSpotInstanceRequests: the provider cancels a spot node's one-time request
#   when it destroys the node (denied on that path otherwise). The request carries no tags,
#   so only the region scopes it; cancelling a request terminates nothing.
# - iam:PassRole: only roles named gpu-autoscaler-node-*, only to EC2 (node profiles).
# - sqs:ReceiveMessage, DeleteMessage on the events queue; SendMessage on the refused queue.
# - s3:ListBucket/GetObject/PutObject/DeleteObject under <state_prefix>/: pool state and its
#   <key>.tflock lock object.
# No pricing API: the service takes on-demand prices from its catalog, not from AWS.
# STS GetCallerIdentity needs no permission.
resource "aws_iam_policy" "controller" {
  name        = "${var.name}-controller"
  description = "gpu-autoscaler controller: only what it calls, instances scoped by managed-by=gpu-autoscaler."
  policy = templatefile("${path.module}/controller-policy.json", {
    partition       = local.partition
    region          = local.region
    account_id      = local.account
    queue_arn       = aws_sqs_queue.events.arn
    dead_letter_arn = aws_sqs_queue.refused.arn
    state_bucket    = aws_s3_bucket.state.bucket
    state_prefix    = var.state_prefix
  })
  tags = local.tags
}

resource "aws_iam_role" "controller" {
  name = "${var.name}-controller"
  assume_role_policy = jsonencode({
    Version = "2012-10-17"
    Statement = [{
      Effect    = "Allow"
      Action    = "sts:AssumeRole"
      Principal = { Service = "ec2.amazonaws.com" }
    }]
  })
  tags = local.tags
}

resource "aws_iam_role_policy_attachment" "controller" {
  role       = aws_iam_role.controller.name
  policy_arn = aws_iam_policy.controller.arn
}

resource "aws_iam_instance_profile" "controller" {
  name = "${var.name}-controller"
  role = aws_iam_role.controller.name
  tags = local.tags
}

# -- the controller itself (optional) -----------------------------------------------------

resource "aws_instance" "controller" {
  count = var.create_instance ? 1 : 0

  ami                  = var.instance_ami
  instance_type        = var.instance_type
  subnet_id            = var.subnet_id
  iam_instance_profile = aws_iam_instance_profile.controller.name

  metadata_options {
    http_tokens = "required"
  }

  # Deliberately not managed-by=gpu-autoscaler: the controller must not be able to
  # terminate itself.
  tags = merge(local.tags, { Name = "${var.name}-controller" })

  lifecycle {
    precondition {
      condition     = var.instance_ami != null
      error_message = "create_instance needs instance_ami."
    }
  }
}

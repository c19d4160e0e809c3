output "queue_url" {
  description = "The service's aws.queue_url: EventBridge puts interruption, rebalance and state-change events here."
  value       = aws_sqs_queue.events.url
}

output "dead_letter_url" {
  description = "The service's aws.dead_letter_url: refused messages are kept here for 14 days."
  value       = aws_sqs_queue.refused.url
}

output "state_bucket" {
  description = "The service's terraform.backend.bucket (locking: use_lockfile = true)."
  value       = aws_s3_bucket.state.bucket
}

output "instance_profile" {
  description = "Instance profile carrying the controller policy (attach to wherever the controller runs)."
  value       = aws_iam_instance_profile.controller.name
}

output "role_arn" {
  description = "Role carrying the controller policy."
  value       = aws_iam_role.controller.arn
}

output "policy_arn" {
  description = "The controller's managed policy."
  value       = aws_iam_policy.controller.arn
}

output "instance_id" {
  description = "The controller instance, or null without create_instance."
  value       = one(aws_instance.controller[*].id)
}

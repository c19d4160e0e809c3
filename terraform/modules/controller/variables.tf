variable "name" {
  description = "Prefix of every resource name (queue, rules, role, bucket unless state_bucket is set)."
  type        = string
  default     = "gpu-autoscaler"

  validation {
    condition     = can(regex("^[a-z][a-z0-9-]{0,30}$", var.name))
    error_message = "name must be lowercase letters, digits and dashes, starting with a letter (at most 31 characters)."
  }
}

variable "state_bucket" {
  description = "Name of the S3 bucket for pool state. Empty: <name>-state-<account id>-<region>."
  type        = string
  default     = ""
}

variable "state_prefix" {
  description = "Key prefix of pool state in the bucket (the service's terraform.backend.key_prefix)."
  type        = string
  default     = "gpu-autoscaler"

  validation {
    condition     = can(regex("^[a-zA-Z0-9][a-zA-Z0-9_.-]*$", var.state_prefix))
    error_message = "state_prefix must be one path segment of letters, digits, '_', '.', '-'."
  }
}

variable "create_instance" {
  description = "Also run the controller on an EC2 instance with the instance profile."
  type        = bool
  default     = false
}

variable "instance_ami" {
  description = "Image of the controller instance (only with create_instance)."
  type        = string
  default     = null
}

variable "instance_type" {
  description = "Instance type of the controller (only with create_instance)."
  type        = string
  default     = "t3.small"
}

variable "subnet_id" {
  description = "Subnet of the controller instance, or null for the default VPC."
  type        = string
  default     = null
}

variable "tags" {
  description = "Extra tags on every resource. Never `managed-by`: that tag marks what the controller may terminate."
  type        = map(string)
  default     = {}

  validation {
    condition     = !contains(keys(var.tags), "managed-by")
    error_message = "tags must not set managed-by: the controller's policy lets it terminate whatever carries managed-by=gpu-autoscaler."
  }
}

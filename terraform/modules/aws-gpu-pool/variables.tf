# Contract shared with alicloud-gpu-pool: the same variables and outputs, so the
# autoscaler writes one node map whatever the cloud.

variable "team" {
  description = "Team that owns the pool (tag `team`)."
  type        = string

  validation {
    condition     = can(regex("^[a-z][a-z0-9-]{0,38}$", var.team))
    error_message = "team must be lowercase letters, digits and dashes, starting with a letter (at most 39 characters)."
  }
}

variable "pool" {
  description = "Pool name within the team (tag `pool`)."
  type        = string

  validation {
    condition     = can(regex("^[a-z][a-z0-9-]{0,38}$", var.pool))
    error_message = "pool must be lowercase letters, digits and dashes, starting with a letter (at most 39 characters)."
  }
}

variable "region" {
  description = "Cloud region of the pool; every zone in `nodes` must belong to it."
  type        = string
}

variable "nodes" {
  description = "Instances of the pool, keyed by node name. Removing a key destroys exactly that node."
  type = map(object({
    instance_type = string
    market        = string # "spot" | "on-demand"
    zone          = string # "" = any zone of the region
    # Warm-pool nodes only: "running" | "stopped" (aws_ec2_instance_state). Absent or "":
    # an ordinary node, which gets no state resource.
    power = optional(string, "")
  }))
  default = {}

  validation {
    condition     = alltrue([for n in values(var.nodes) : contains(["spot", "on-demand"], n.market)])
    error_message = "Every node's market must be \"spot\" or \"on-demand\"."
  }
  validation {
    condition     = alltrue([for name in keys(var.nodes) : can(regex("^[a-z0-9][a-z0-9-]{0,62}$", name))])
    error_message = "Node names must be lowercase letters, digits and dashes (at most 63 characters): they become host names."
  }
  validation {
    condition     = alltrue([for n in values(var.nodes) : contains(["", "running", "stopped"], n.power)])
    error_message = "A node's power must be \"running\", \"stopped\" or empty."
  }
  validation {
    condition     = alltrue([for n in values(var.nodes) : length(trimspace(n.instance_type)) > 0])
    error_message = "Every node needs an instance_type."
  }
  validation {
    condition     = alltrue([for n in values(var.nodes) : n.zone == "" || startswith(n.zone, var.region)])
    error_message = "A node's zone must be empty (any) or a zone of var.region."
  }
}

variable "ami" {
  description = "Image of new nodes. Changing it affects new nodes only (see lifecycle in main.tf)."
  type        = string

  validation {
    condition     = can(regex("^ami-[0-9a-f]+$", var.ami))
    error_message = "ami must look like ami-0123abcd."
  }
}

variable "subnet_ids" {
  description = "Subnets to place nodes in; a node with a zone goes to a subnet of that zone. Empty: the default VPC."
  type        = list(string)
  default     = []
}

variable "security_group_ids" {
  description = "Security groups of every node. Empty: the subnet's VPC default group."
  type        = list(string)
  default     = []
}

variable "key_name" {
  description = "EC2 key pair for SSH, or null."
  type        = string
  default     = null
}

variable "iam_instance_profile" {
  description = "IAM instance profile name, or null."
  type        = string
  default     = null
}

variable "root_volume_gb" {
  description = "Root volume size in GiB (drivers, CUDA and container images need room)."
  type        = number
  default     = 100

  validation {
    condition     = var.root_volume_gb >= 8 && var.root_volume_gb <= 16384
    error_message = "root_volume_gb must be between 8 and 16384."
  }
}

variable "user_data" {
  description = "Cloud-init user data for new nodes (may hold join tokens: never printed)."
  type        = string
  default     = ""
  sensitive   = true
}

variable "spot_max_price" {
  description = "Highest $/h paid for a spot node, as a string; null = up to the on-demand price."
  type        = string
  default     = null

  validation {
    condition     = var.spot_max_price == null || can(tonumber(var.spot_max_price))
    error_message = "spot_max_price must be null or a number in $/h, e.g. \"1.20\"."
  }
}

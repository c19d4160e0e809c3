# Contract shared with aws-gpu-pool: the same variables and outputs, so the autoscaler
# writes one node map whatever the cloud. Alibaba Cloud names: subnet = vSwitch,
# ami = ECS image id, key_name = key pair, iam_instance_profile = RAM role.

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
    market        = string               # "spot" | "on-demand"
    zone          = string               # "" = any zone of the region
    power         = optional(string, "") # warm pools: not on Alibaba Cloud yet (see below)
  }))
  default = {}

  validation {
    condition     = alltrue([for n in values(var.nodes) : n.power == ""])
    error_message = "Warm pools (a node's power) are not supported on Alibaba Cloud yet."
  }

  validation {
    condition     = alltrue([for n in values(var.nodes) : contains(["spot", "on-demand"], n.market)])
    error_message = "Every node's market must be \"spot\" or \"on-demand\"."
  }
  validation {
    condition     = alltrue([for name in keys(var.nodes) : can(regex("^[a-z0-9][a-z0-9-]{0,62}$", name))])
    error_message = "Node names must be lowercase letters, digits and dashes (at most 63 characters): they become host names."
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
  description = "ECS image id of new nodes. Changing it affects new nodes only (see lifecycle in main.tf)."
  type        = string

  validation {
    condition     = length(trimspace(var.ami)) > 0
    error_message = "ami (the ECS image id) must not be empty."
  }
}

variable "subnet_ids" {
  description = "vSwitch ids; a node with a zone goes to a vSwitch of that zone (at least one is required on Alibaba Cloud)."
  type        = list(string)
  default     = []

  validation {
    condition     = length(var.subnet_ids) > 0
    error_message = "Alibaba Cloud ECS instances need a vSwitch: give at least one id in subnet_ids."
  }
}

variable "security_group_ids" {
  description = "Security groups of every node (at least one is required on Alibaba Cloud)."
  type        = list(string)
  default     = []

  validation {
    condition     = length(var.security_group_ids) > 0
    error_message = "Alibaba Cloud ECS instances need a security group: give at least one id in security_group_ids."
  }
}

variable "key_name" {
  description = "ECS key pair for SSH, or null."
  type        = string
  default     = null
}

variable "iam_instance_profile" {
  description = "RAM role attached to the instance, or null."
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
  description = "Highest price per hour for a preemptible node, as a string; null = follow the market (SpotAsPriceGo)."
  type        = string
  default     = null

  validation {
    condition     = var.spot_max_price == null || can(tonumber(var.spot_max_price))
    error_message = "spot_max_price must be null or a number in $/h, e.g. \"1.20\"."
  }
}

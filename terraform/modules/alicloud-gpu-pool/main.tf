locals {
  common_tags = {
    team         = var.team
    pool         = var.pool
    "managed-by" = "gpu-autoscaler"
  }
  vswitch_zone    = { for s in data.alicloud_vswitches.pool.vswitches : s.id => s.zone_id }
  vswitch_by_zone = { for id, zone in local.vswitch_zone : zone => id... }
  # A node without a zone gets a stable vSwitch from a hash of its name.
  node_vswitch = {
    for name, n in var.nodes : name => (
      n.zone == ""
      ? var.subnet_ids[parseint(substr(md5(name), 0, 6), 16) % length(var.subnet_ids)]
      : try(local.vswitch_by_zone[n.zone][0], null)
    )
  }
}

data "alicloud_vswitches" "pool" {
  ids = var.subnet_ids
}

resource "alicloud_instance" "node" {
  for_each = var.nodes

  instance_name        = each.key
  host_name            = each.key
  image_id             = var.ami
  instance_type        = each.value.instance_type
  vswitch_id           = local.node_vswitch[each.key]
  security_groups      = var.security_group_ids
  key_name             = var.key_name
  role_name            = var.iam_instance_profile
  user_data            = var.user_data == "" ? null : base64encode(var.user_data)
  instance_charge_type = "PostPaid"
  spot_strategy        = each.value.market == "spot" ? (var.spot_max_price == null ? "SpotAsPriceGo" : "SpotWithPriceLimit") : "NoSpot"
  spot_price_limit     = each.value.market == "spot" && var.spot_max_price != null ? tonumber(var.spot_max_price) : null

  system_disk_category = "cloud_essd"
  system_disk_size     = var.root_volume_gb

  tags = merge(local.common_tags, { node = each.key, Name = each.key })

  lifecycle {
    # Same rule as aws-gpu-pool: a new image reaches nodes through the engine's replacement.
    ignore_changes = [image_id, user_data]

    precondition {
      condition     = local.node_vswitch[each.key] != null
      error_message = "Node ${each.key} asks for zone ${each.value.zone}, but no vSwitch in var.subnet_ids is in that zone."
    }
  }
}

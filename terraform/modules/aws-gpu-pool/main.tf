locals {
  common_tags = {
    team         = var.team
    pool         = var.pool
    "managed-by" = "gpu-autoscaler"
  }
  # Subnet per zone; a node without a zone gets a stable subnet from a hash of its name,
  # so adding or removing other nodes never moves it.
  subnets_by_zone = { for id, s in data.aws_subnet.pool : s.availability_zone => id... }
  node_subnet = length(var.subnet_ids) == 0 ? { for name, n in var.nodes : name => null } : {
    for name, n in var.nodes : name => (
      n.zone == ""
      ? var.subnet_ids[parseint(substr(md5(name), 0, 6), 16) % length(var.subnet_ids)]
      : try(local.subnets_by_zone[n.zone][0], null)
    )
  }
}

data "aws_subnet" "pool" {
  for_each = toset(var.subnet_ids)
  id       = each.value
}

resource "aws_instance" "node" {
  for_each = var.nodes

  ami                    = var.ami
  instance_type          = each.value.instance_type
  subnet_id              = local.node_subnet[each.key]
  availability_zone      = length(var.subnet_ids) == 0 && each.value.zone != "" ? each.value.zone : null
  vpc_security_group_ids = length(var.security_group_ids) > 0 ? var.security_group_ids : null
  key_name               = var.key_name
  iam_instance_profile   = var.iam_instance_profile
  user_data              = var.user_data == "" ? null : var.user_data

  dynamic "instance_market_options" {
    for_each = each.value.market == "spot" ? [1] : []
    content {
      market_type = "spot"
      spot_options {
        spot_instance_type             = "one-time"
        instance_interruption_behavior = "terminate"
        max_price                      = var.spot_max_price
      }
    }
  }

  root_block_device {
    volume_size           = var.root_volume_gb
    volume_type           = "gp3"
    delete_on_termination = true
    tags                  = merge(local.common_tags, { node = each.key })
  }

  metadata_options {
    http_tokens = "required"
  }

  tags = merge(local.common_tags, { node = each.key, Name = each.key })

  lifecycle {
    # A new image or bootstrap script reaches running nodes through the engine's
    # replacement (max_node_age), never as a fleet-wide replace in one apply.
    ignore_changes = [ami, user_data, user_data_base64]

    precondition {
      condition     = local.node_subnet[each.key] != null || length(var.subnet_ids) == 0
      error_message = "Node ${each.key} asks for zone ${each.value.zone}, but no subnet in var.subnet_ids is in that zone."
    }
  }
}

# Warm-pool nodes (policy warm_pool, on-demand only: EC2 stops a spot instance only as a
# persistent request, which a destroy leaves behind to launch again): bootstrapped, then
# stopped until a launch starts them; a stopped instance bills its volumes only. Ordinary
# nodes get no resource here, so their plans are unchanged. Destroying this resource leaves
# the instance as it is: the instance itself goes with aws_instance.node.
resource "aws_ec2_instance_state" "power" {
  for_each = { for name, n in var.nodes : name => n if n.power != "" && n.market == "on-demand" }

  instance_id = aws_instance.node[each.key].id
  state       = each.value.power
}

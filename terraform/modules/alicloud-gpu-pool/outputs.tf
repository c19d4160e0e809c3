output "nodes" {
  description = "Per node: instance id, private IP, lifecycle (\"spot\" or \"on-demand\") and the image it was launched from."
  value = {
    for name, inst in alicloud_instance.node : name => {
      id         = inst.id
      private_ip = inst.private_ip
      lifecycle  = inst.spot_strategy == "NoSpot" ? "on-demand" : "spot"
      image      = inst.image_id
    }
  }
}

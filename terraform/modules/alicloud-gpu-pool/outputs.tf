output "nodes" {
  description = "Per node: instance id, private IP and lifecycle (\"spot\" or \"on-demand\")."
  value = {
    for name, inst in alicloud_instance.node : name => {
      id         = inst.id
      private_ip = inst.private_ip
      lifecycle  = inst.spot_strategy == "NoSpot" ? "on-demand" : "spot"
    }
  }
}

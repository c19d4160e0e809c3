output "nodes" {
  description = "Per node: instance id, private IP and lifecycle (\"spot\" or \"on-demand\")."
  value = {
    for name, inst in aws_instance.node : name => {
      id         = inst.id
      private_ip = inst.private_ip
      lifecycle  = inst.instance_lifecycle == "spot" ? "spot" : "on-demand"
    }
  }
}

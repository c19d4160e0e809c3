output "nodes" {
  description = "Per node: instance id, private IP, lifecycle (\"spot\" or \"on-demand\") and the image it was launched from."
  value = {
    for name, inst in aws_instance.node : name => {
      id         = inst.id
      private_ip = inst.private_ip
      lifecycle  = inst.instance_lifecycle == "spot" ? "spot" : "on-demand"
      image      = inst.ami
    }
  }
}

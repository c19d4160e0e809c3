"""Actuators: the only code that changes the world (Terraform, Ansible, drains)."""

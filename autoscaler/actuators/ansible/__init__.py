"""The Ansible actuator: bootstrap new nodes with playbooks/gpu-node.yml over SSH."""

from autoscaler.actuators.ansible.inventory import AddressResolver, build_inventory, pool_vars
from autoscaler.actuators.ansible.results import BootstrapRun, HostResult, HostStatus
from autoscaler.actuators.ansible.runner import (
    AnsibleActuator,
    AnsibleError,
    BootstrapCancelled,
    Bootstrapper,
    batch_part,
    ready_to_bootstrap,
)
from autoscaler.actuators.ansible.settings import AnsibleSettings

__all__ = [
    "AddressResolver",
    "AnsibleActuator",
    "AnsibleError",
    "AnsibleSettings",
    "BootstrapCancelled",
    "BootstrapRun",
    "Bootstrapper",
    "HostResult",
    "HostStatus",
    "batch_part",
    "build_inventory",
    "pool_vars",
    "ready_to_bootstrap",
]

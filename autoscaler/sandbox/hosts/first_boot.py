"""An instance's user_data, run once at its first boot, as cloud-init runs it on EC2.

The sandbox reads the user_data Terraform gave an instance (moto's DescribeInstanceAttribute
``userData``) and places it, with a oneshot unit, in the node's overlay before the first
boot. The unit runs a ``#!`` script once (before sshd, so Ansible finds its effects), logs
to ``/var/log/cloud-init-output.log`` like cloud-init, and leaves a marker so a reboot does
not run it again. Other formats (``#cloud-config``) are logged as not supported here. The
script runs inside the node only; nothing of it is templated or split into arguments.
"""

from __future__ import annotations

import base64
import binascii
from typing import Any

from autoscaler.sandbox.hosts.overlay import NodeFile

USER_DATA = "/var/lib/cloud/instance/user-data.txt"
DONE = "/var/lib/cloud/instance/boot-finished"
LOG = "/var/log/cloud-init-output.log"
UNIT = "gpu-autoscaler-user-data.service"
# What the sandbox's Terraform module gives every node: proof the chain ran end to end.
SANDBOX_USER_DATA = """#!/bin/sh
# gpu-autoscaler sandbox: user_data of the Terraform module, run once at first boot.
set -e
mkdir -p /etc/gpu-autoscaler
echo "first boot $(cat /proc/sys/kernel/random/boot_id)" > /etc/gpu-autoscaler/user-data-ran
"""

_UNIT = f"""[Unit]
Description=Run the instance's user_data once (what cloud-init does on a cloud instance)
ConditionPathExists={USER_DATA}
ConditionPathExists=!{DONE}
Before=ssh.service
After=local-fs.target

[Service]
Type=oneshot
ExecStart=/bin/sh -c 'if head -c2 {USER_DATA} | grep -q "#!"; then chmod 0700 {USER_DATA} && \
{USER_DATA}; else echo "user_data is not a #! script: not supported in the sandbox"; fi \
>> {LOG} 2>&1; touch {DONE}'
RemainAfterExit=yes

[Install]
WantedBy=multi-user.target
"""


def user_data_of(ec2: Any, instance_id: str) -> str:
    """The instance's user_data as text ('' when it has none)."""
    out = ec2.describe_instance_attribute(InstanceId=instance_id, Attribute="userData")
    value = (out.get("UserData") or {}).get("Value") or ""
    try:
        return base64.b64decode(value).decode(errors="replace")
    except (binascii.Error, ValueError):
        return ""


def node_files(user_data: str) -> list[NodeFile]:
    """Files that make the node run ``user_data`` at its first boot (none without one)."""
    if not user_data:
        return []
    return [
        NodeFile(USER_DATA, user_data, 0o600),
        NodeFile(f"/etc/systemd/system/{UNIT}", _UNIT),
        NodeFile(f"/etc/systemd/system/multi-user.target.wants/{UNIT}", f"../{UNIT}", link=True),
    ]

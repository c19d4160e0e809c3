"""``address_of(node)``: how Ansible and the drainers reach a node (DESIGN.md seam).

* ``terraform``: the address the executor recorded from the Terraform output (the
  instance's private IP, or whatever the module outputs, e.g. a jump-host alias).
* ``file``: a JSON map ``{"<node>": "<address>"}`` kept up to date by another tool. The
  sandbox writes one that points each moto instance at the SSH test host it created for
  it (never at the 172.31.x.x address moto invented).
"""

from __future__ import annotations

import json
import logging
import time
from collections.abc import Callable
from pathlib import Path

from autoscaler.model.node import Node
from autoscaler.service.config.models import AddressSettings

log = logging.getLogger(__name__)
AddressOf = Callable[[Node], str | None]


def read_address_file(path: Path) -> dict[str, str]:
    try:
        data = json.loads(Path(path).read_text())
    except FileNotFoundError:
        return {}
    except (OSError, ValueError) as exc:
        log.warning("address file %s unreadable: %s", path, exc)
        return {}
    if not isinstance(data, dict):
        return {}
    return {str(k): str(v) for k, v in data.items() if isinstance(v, str) and v}


class FileAddresses:
    """Resolve from a JSON map; wait up to ``wait_s`` for a node that is not there yet."""

    def __init__(self, path: Path, wait_s: float = 30.0, poll_s: float = 0.5,
                 sleep: Callable[[float], None] = time.sleep,
                 monotonic: Callable[[], float] = time.monotonic):
        self.path = Path(path)
        self.wait_s, self.poll_s = wait_s, poll_s
        self._sleep, self._monotonic = sleep, monotonic

    def __call__(self, node: Node) -> str | None:
        deadline = self._monotonic() + self.wait_s
        while True:
            address = read_address_file(self.path).get(node.name)
            if address is not None or self._monotonic() >= deadline:
                return address
            self._sleep(self.poll_s)


def terraform_address(node: Node) -> str | None:
    return node.address


def make_resolver(settings: AddressSettings) -> AddressOf:
    if settings.source == "file" and settings.file is not None:
        return FileAddresses(settings.file, settings.wait.total_seconds())
    return terraform_address

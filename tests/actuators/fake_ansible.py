"""``FakeAnsible``: the actuator's interface without SSH, for the executor's unit tests."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from pathlib import Path

from autoscaler.actuators.ansible.results import BootstrapRun, HostResult, HostStatus
from autoscaler.model.node import Node
from autoscaler.policy.models import TeamPolicy


class FakeAnsible:
    """Records every batch; every node succeeds unless told otherwise.

    ``outcomes[node] = HostResult(...)`` fixes one node's result; ``next_error`` is raised by
    the next call (then cleared), like a run that could not start at all.
    """

    def __init__(self) -> None:
        self.calls: list[list[str]] = []
        self.secret_names: list[list[str]] = []
        self.outcomes: dict[str, HostResult] = {}
        self.next_error: Exception | None = None

    def bootstrap(self, nodes: Sequence[Node], policies: Mapping[str, TeamPolicy], *,
                  secrets: Mapping[str, str] | None = None) -> BootstrapRun:
        self.calls.append([n.name for n in nodes])
        self.secret_names.append(sorted(secrets or {}))
        if self.next_error is not None:
            error, self.next_error = self.next_error, None
            raise error
        hosts = {n.name: self.outcomes.get(n.name, HostResult(n.name, HostStatus.OK, changed=1))
                 for n in nodes}
        return BootstrapRun(f"fake-{len(self.calls)}", Path("/nonexistent"), "successful", 0.0,
                            hosts)

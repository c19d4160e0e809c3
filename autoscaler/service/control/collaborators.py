"""What the tick needs of the collaborators it is given: small Protocols that the
service's real parts (service/wiring.py) and the tests' fakes both satisfy, and the
callables' shapes.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from datetime import datetime
from typing import Protocol

from autoscaler.actuators.terraform.rootmodule import BakedImage
from autoscaler.engine import Plan
from autoscaler.model.node import Node
from autoscaler.model.snapshot import CapacityError, ImageObservation, Snapshot
from autoscaler.model.snapshot_parts import Observed, PriceView
from autoscaler.policy.models import TeamPolicy
from autoscaler.service.control.reconciler import ReconcileReport
from autoscaler.service.executor.advance import AdvanceReport
from autoscaler.service.executor.operations import Operation


class ExecutorLike(Protocol):
    def submit(self, plan: Plan, plan_id: int | None = None) -> list[str]: ...

    def advance(self, snapshot: Snapshot | None = None) -> AdvanceReport: ...

    def running(self) -> list[Operation]: ...

    def wait(self, timeout: float) -> bool: ...

    def stop_bootstraps(self) -> None: ...


class ReconcilerLike(Protocol):
    def run(self, snapshot: Observed | None = None) -> ReconcileReport: ...


class SignalsLike(Protocol):
    def read(self, policies: Mapping[str, TeamPolicy], fleet_nodes: Sequence[Node],
             now: datetime) -> Observed: ...


class ImagesLike(Protocol):
    def observe(self, policies: Mapping[str, TeamPolicy]) -> Mapping[str, ImageObservation]: ...


class PricesLike(Protocol):
    def observe(self, policies: Mapping[str, TeamPolicy]) -> PriceView: ...

    def record_capacity_error(self, error: CapacityError) -> None: ...


# (fleet nodes, now) -> node -> the capacity request holding it (request_keeper.py)
HeldNodes = Callable[[Sequence[Node], datetime], Mapping[str, str]]
# The tick's policies -> pool key -> the BakedImage of each baked pool (base pools absent).
PreviewImages = Callable[[Mapping[str, TeamPolicy]], Mapping[str, BakedImage]]

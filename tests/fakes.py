"""Fakes of the actuators and the cloud, implementing the same Protocols as the real ones.

* :class:`FakeCloud`: ``CloudMarket`` instance truth (tags, states), plus notices;
* :class:`FakeTerraform`: the executor's ``Provisioner``: per-pool state over a FakeCloud,
  capacity errors, stray import before apply and refresh (an instance gone from the cloud
  is dropped from the state and recreated if still wanted), like the real workspace;
* :class:`FakeAnsible`: ``Bootstrapper`` with per-node failures; the tags of each run (and
  a mixed batch refused) as the real actuator's ``batch_part``;
* :class:`FakeDrainer`: the real drain phases (``PhasedDrainer``) over a fake scheduler
  (:class:`FakeScheduler`) with nodes, jobs and readiness.

Every fake records its calls in ``calls`` and raises ``next_error`` (once) when set.
"""

from __future__ import annotations

import itertools
from collections.abc import Collection, Iterable, Mapping, Sequence
from dataclasses import dataclass, field, replace
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

from autoscaler.actuators.ansible import (
    BootstrapCancelled,
    BootstrapRun,
    HostResult,
    HostStatus,
    batch_part,
)
from autoscaler.actuators.drain import DrainError, PhasedDrainer, Readiness, Work
from autoscaler.actuators.node_map import NodeMap, NodeSpec
from autoscaler.actuators.terraform import ApplyResult, NodeOutput
from autoscaler.actuators.terraform.provisioner import stray_key
from autoscaler.clouds.base import (
    LIVE_STATES,
    MANAGED_TAGS,
    CloudInstance,
    InstanceState,
    Interruption,
    SpotPrice,
    ZoneOffering,
)
from autoscaler.model.node import Node
from autoscaler.model.pool import PoolRef
from autoscaler.model.snapshot import CapacityError
from autoscaler.policy.models import Market, TeamPolicy

FAKE_NOW = datetime(2026, 11, 30, 12, 0, tzinfo=UTC)


class _Raises:
    next_error: BaseException | None = None

    def _maybe_raise(self) -> None:
        err, self.next_error = self.next_error, None
        if err is not None:
            raise err


# -- cloud ------------------------------------------------------------------------------

class FakeCloud(_Raises):
    cloud = "aws"

    def __init__(self, region: str = "us-east-1"):
        self.region = region
        self.instances: dict[str, CloudInstance] = {}
        self.notices: list[Interruption] = []
        self.calls: list[tuple[str, Any]] = []
        self._ids = itertools.count(1)

    def launch(self, ref: PoolRef, node: str, spec: NodeSpec) -> CloudInstance:
        seq = next(self._ids)
        tags = {**MANAGED_TAGS, "team": ref.team, "pool": ref.pool, "node": node, "Name": node}
        inst = CloudInstance(
            instance_id=f"i-{seq:017x}", node=node, team=ref.team, pool=ref.pool,
            instance_type=spec.instance_type, zone=spec.zone or f"{self.region}a",
            market=spec.market, state=InstanceState.RUNNING,
            private_ip=f"172.31.{seq // 250}.{seq % 250 + 1}", launched_at=FAKE_NOW, tags=tags)
        self.instances[inst.instance_id] = inst
        return inst

    def terminate(self, instance_id: str) -> None:
        """What a spot reclaim or an operator's console click does (tests only)."""
        inst = self.instances[instance_id]
        self.instances[instance_id] = replace(inst, state=InstanceState.TERMINATED)

    def power(self, instance_id: str, power: str) -> bool:
        """Stop or start an instance (a warm-pool node); True when its state changed."""
        inst = self.instances[instance_id]
        want = InstanceState.STOPPED if power == "stopped" else InstanceState.RUNNING
        if inst.state is want:
            return False
        self.instances[instance_id] = replace(inst, state=want)
        self.calls.append(("power", (instance_id, power)))
        return True

    def live(self) -> list[CloudInstance]:
        return [i for i in self.instances.values() if i.state in LIVE_STATES]

    def managed_instances(self, tags: Mapping[str, str] | None = None,
                          states: Iterable[InstanceState] | None = None) -> list[CloudInstance]:
        self.calls.append(("managed_instances", dict(tags or {})))
        self._maybe_raise()
        wanted = set(states) if states is not None else set(LIVE_STATES)
        want_tags = dict(tags or MANAGED_TAGS)
        return sorted((i for i in self.instances.values() if i.state in wanted
                       and all(i.tags.get(k) == v for k, v in want_tags.items())),
                      key=lambda i: i.instance_id)

    def interruptions(self) -> list[Interruption]:
        """Notices stay until cleared, like Alibaba's events of an instance being reclaimed."""
        self.calls.append(("interruptions", None))
        return list(self.notices)

    def spot_price_history(self, types: Iterable[str],
                           zones: Iterable[str] | None = None) -> list[SpotPrice]:
        return []

    def on_demand_prices(self, types: Iterable[str]) -> dict[str, float]:
        return {}

    def offerings(self, types: Iterable[str]) -> list[ZoneOffering]:
        return []


# -- terraform --------------------------------------------------------------------------

def _output(inst: CloudInstance, baked: str | None = None) -> NodeOutput:
    return NodeOutput(id=inst.instance_id, private_ip=inst.private_ip, lifecycle=inst.market.value,
                      image=baked, baked=baked is not None)


class FakeTerraform(_Raises):
    def __init__(self, cloud: FakeCloud):
        self.cloud = cloud
        self.state: dict[str, dict[str, NodeOutput]] = {}
        self.applied_maps: dict[str, NodeMap] = {}
        self.stale: set[str] = set()
        self.no_capacity: set[tuple[str, Market]] = set()
        self.calls: list[tuple[str, str, Any]] = []
        self.on_apply: Any = None  # called with (ref, nodes) before an apply does anything
        # node -> the baked image its instance is launched from (as the real provisioner
        # marks it: NodeOutput.baked); other nodes launch from an unknown base image.
        self.baked: dict[str, str] = {}

    def applied(self, ref: PoolRef) -> NodeMap | None:
        if ref.key in self.stale:
            return None
        return dict(self.applied_maps.get(ref.key, {}))

    def mark_stale(self, ref: PoolRef, nodes: Collection[str] | None = None) -> None:
        self.calls.append(("mark_stale", ref.key, None))
        self.stale.add(ref.key)

    def instances(self, ref: PoolRef) -> dict[str, NodeOutput]:
        self.calls.append(("instances", ref.key, None))
        return dict(self.state.get(ref.key, {}))

    def leftovers(self, ref: PoolRef, names: Iterable[str]) -> dict[str, list[str]]:
        wanted = set(names)
        self.calls.append(("leftovers", ref.key, sorted(wanted)))
        held = {out.id for out in self.state.get(ref.key, {}).values()}
        tags = {**MANAGED_TAGS, "team": ref.team, "pool": ref.pool}
        out: dict[str, list[str]] = {}
        for inst in self.cloud.managed_instances(tags=tags):
            if inst.node in wanted and inst.instance_id not in held:
                out.setdefault(inst.node, []).append(inst.instance_id)
        return out

    def apply(self, ref: PoolRef, nodes: NodeMap, *, destroy: Collection[str] = ()) -> ApplyResult:
        self.calls.append(("apply", ref.key, {"nodes": dict(nodes), "destroy": sorted(destroy)}))
        if self.on_apply is not None:
            self.on_apply(ref, nodes)
        self._maybe_raise()
        state = self.state.setdefault(ref.key, {})
        self._refresh(state)
        self._import_strays(ref, state, nodes, set(destroy))
        destroyed = [k for k in sorted(state) if k not in nodes]
        for key in destroyed:
            self.cloud.terminate(state.pop(key).id)
        created, failed, caps = [], {}, []
        for name, spec in sorted(nodes.items()):
            if name in state:
                continue
            if (spec.instance_type, spec.market) in self.no_capacity:
                failed[name] = f"creating EC2 Instance: InsufficientInstanceCapacity: no {spec.instance_type}"
                caps.append(CapacityError(cloud=ref.cloud, region=ref.region, market=spec.market,
                                          instance_type=spec.instance_type, zone=spec.zone or None,
                                          code="InsufficientInstanceCapacity", at=FAKE_NOW))
                continue
            state[name] = _output(self.cloud.launch(ref, name, spec), self.baked.get(name))
            created.append(name)
        for name, spec in sorted(nodes.items()):  # aws_ec2_instance_state: warm-pool nodes
            if spec.power and name in state:
                self.cloud.power(state[name].id, spec.power)
        ok = not failed
        self.applied_maps[ref.key] = dict(nodes) if ok else {n: nodes[n] for n in state if n in nodes}
        self.stale.discard(ref.key)
        return ApplyResult(pool=ref.key, ok=ok, nodes=dict(state), created=created,
                           destroyed=destroyed, failed=failed, capacity_errors=caps)

    def _refresh(self, state: dict[str, NodeOutput]) -> None:
        live = {i.instance_id for i in self.cloud.live()}
        for key in [k for k, out in state.items() if out.id not in live]:
            del state[key]

    def _import_strays(self, ref: PoolRef, state: dict[str, NodeOutput], nodes: NodeMap,
                       destroy: set[str]) -> None:
        held = {out.id for out in state.values()}
        tags = {**MANAGED_TAGS, "team": ref.team, "pool": ref.pool}
        for inst in self.cloud.managed_instances(tags=tags):
            if inst.instance_id in held:
                continue
            if inst.instance_id in destroy:
                state[stray_key(inst.node, inst.instance_id)] = _output(inst)
            elif inst.node and inst.node in nodes and inst.node not in state:
                state[inst.node] = _output(inst)


# -- ansible ----------------------------------------------------------------------------

@dataclass
class FakeAnsible(_Raises):
    """``fail[node] = (status, task, message)`` fails that node on every run; ``fail_once``
    only on its next run."""

    fail: dict[str, tuple[HostStatus, str, str]] = field(default_factory=dict)
    fail_once: dict[str, tuple[HostStatus, str, str]] = field(default_factory=dict)
    calls: list[list[str]] = field(default_factory=list)
    tags: list[str | None] = field(default_factory=list)  # per bootstrap run, as the real one's
    next_error: BaseException | None = None
    cancelled: bool = False
    # The periodic health check: its runs, and nodes whose check fails (as ``fail``).
    health_calls: list[list[str]] = field(default_factory=list)
    health_fail: dict[str, tuple[HostStatus, str, str]] = field(default_factory=dict)
    # Nodes it was told are gone (forget), in order; kept: those bootstrapped and not forgotten.
    forgotten: list[str] = field(default_factory=list)
    kept: set[str] = field(default_factory=set)

    def cancel(self) -> None:
        self.cancelled = True

    def forget(self, names: Iterable[str]) -> None:
        for name in names:
            self.forgotten.append(name)
            self.kept.discard(name)

    def forget_all_but(self, live: Iterable[str]) -> list[str]:
        gone = sorted(self.kept - set(live))
        self.forget(gone)
        return gone

    def health_check(self, nodes: Sequence[Node], policies: Mapping[str, TeamPolicy]) -> BootstrapRun:
        names = [n.name for n in nodes]
        self.health_calls.append(names)
        if self.cancelled:
            raise BootstrapCancelled("the fake Ansible is stopping")
        self._maybe_raise()
        hosts = {}
        for name in names:
            failure = self.health_fail.get(name)
            hosts[name] = (HostResult(name, HostStatus.OK, ok=9) if failure is None
                           else HostResult(name, failure[0], failure[1], failure[2]))
        status = "successful" if all(h.status is HostStatus.OK for h in hosts.values()) else "failed"
        return BootstrapRun(f"fake-health-{len(self.health_calls)}", Path("/nonexistent"), status,
                            0.01, hosts)

    def bootstrap(self, nodes: Sequence[Node], policies: Mapping[str, TeamPolicy], *,
                  secrets: Mapping[str, str] | None = None) -> BootstrapRun:
        names = [n.name for n in nodes]
        self.calls.append(names)
        self.kept.update(names)  # as ssh records their host keys
        self.tags.append(batch_part(nodes).tags)  # a mixed batch raises, as in the real one
        if self.cancelled:
            raise BootstrapCancelled("the fake Ansible is stopping")
        self._maybe_raise()
        hosts = {}
        for name in names:
            failure = self.fail_once.pop(name, None) or self.fail.get(name)
            if failure is None:
                hosts[name] = HostResult(name, HostStatus.OK, ok=12, changed=5)
            else:
                status, task, message = failure
                hosts[name] = HostResult(name, status, task, message)
        status = "successful" if all(h.status is HostStatus.OK for h in hosts.values()) else "failed"
        return BootstrapRun(f"fake-{len(self.calls)}", Path("/nonexistent"), status, 0.01, hosts,
                            self.tags[-1])


# -- scheduler --------------------------------------------------------------------------

class FakeScheduler(_Raises):
    """Nodes and their work as a scheduler sees them; ``known`` nodes can be drained,
    ``joined`` nodes are ready."""

    def __init__(self, kind: str = "slurm"):
        self.kind = kind
        self.known: set[str] = set()
        self.joined: set[str] = set()
        self.cordoned: set[str] = set()
        self.work: dict[str, list[Work]] = {}
        self.refuse: dict[str, int] = {}  # work id -> evictions to refuse
        self.calls: list[tuple[Any, ...]] = []
        self.offered: dict[str, float] = {}  # node -> the GPUs its Gres offers (else not counted)

    def join(self, node: str, gpus: float | None = None) -> None:
        self.known.add(node)
        self.joined.add(node)
        if gpus is not None:
            self.offered[node] = gpus

    def run(self, node: str, *ids: str, protected: bool = False) -> None:
        self.work.setdefault(node, []).extend(Work(i, protected) for i in ids)

    def finish(self, node: str) -> None:
        self.work.pop(node, None)

    def _call(self, *call: Any) -> None:
        self.calls.append(call)
        err, self.next_error = self.next_error, None
        if err is not None:
            raise DrainError(str(err)) if not isinstance(err, DrainError) else err

    def cordon(self, node: str, reason: str) -> bool:
        self._call("cordon", node, reason)
        if node not in self.known:
            return False
        self.cordoned.add(node)
        return True

    def workload(self, node: str) -> list[Work]:
        self._call("workload", node)
        return list(self.work.get(node, []))

    def nudge(self, node: str, work: Sequence[Work], *, force: bool) -> list[str]:
        self._call("nudge", node, [w.id for w in work], force)
        if self.kind != "kubernetes":
            return []
        refused = []
        for w in work:
            if self.refuse.get(w.id, 0) > 0:
                self.refuse[w.id] -= 1
                refused.append(f"{w.id}: TooManyRequests")
            else:
                self.work[node] = [x for x in self.work.get(node, []) if x.id != w.id]
        return refused

    def checkpoint(self, node: str, work: Sequence[Work], signal: str) -> None:
        self._call("checkpoint", node, [w.id for w in work], signal)

    def signal_jobs(self, node: str, job_ids: Sequence[str], signal: str) -> bool:
        self._call("signal", node, list(job_ids), signal)
        return self.kind == "slurm"

    def evacuate(self, node: str, work: Sequence[Work]) -> None:
        self._call("evacuate", node, [w.id for w in work])
        self.work.pop(node, None)

    def release_jobs(self, node: str, job_ids: Sequence[str]) -> dict[str, str]:
        self._call("release", node, list(job_ids))
        refused = {j: "TooManyRequests" for j in job_ids if self.refuse.get(j, 0) > 0}
        for j in refused:
            self.refuse[j] -= 1
        self.work[node] = [w for w in self.work.get(node, [])
                           if w.id not in job_ids or w.id in refused]
        return refused

    def uncordon(self, node: str) -> None:
        self._call("uncordon", node)
        self.cordoned.discard(node)

    def readiness(self, node: str) -> Readiness:
        self._call("readiness", node)
        if node in self.joined and node not in self.cordoned:
            return Readiness(True, "joined", self.offered.get(node))
        return Readiness(False, "not joined yet")

    def forget(self, node: str) -> None:
        self._call("forget", node)
        self.joined.discard(node)


class FakeDrainer(PhasedDrainer):
    """The real drain phases over a :class:`FakeScheduler`."""

    def __init__(self, kind: str = "slurm"):
        self.scheduler = FakeScheduler(kind)
        super().__init__(self.scheduler)

    @property
    def calls(self) -> list[tuple[Any, ...]]:
        return self.scheduler.calls

    @property
    def next_error(self) -> BaseException | None:
        return self.scheduler.next_error

    @next_error.setter
    def next_error(self, err: BaseException | None) -> None:
        self.scheduler.next_error = err

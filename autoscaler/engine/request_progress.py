"""The next step of one capacity request, from its condition and its nodes' states: pure.

* Accepted, no nodes yet: launch its placements (all of them at once: atomic means all).
* Accepted, every node READY: Provisioned, with the names and addresses.
* Accepted, a node failed: atomic -> roll back every other node and end Failed with the
  failed node's reason; best-effort -> Provisioned with what is READY once nothing is
  still on its way (Failed if nothing is).
* Accepted past ``valid_until``: Failed and rolled back (it may not wait longer).
* Provisioned past ``ttl``: Released through its own path: the ttl is the deadline, so
  the drain signals running jobs to checkpoint at once and gives them the pool's grace.
* Provisioned with a linked job (Slurm job, Kubernetes pod, job or label selector) that
  has ended: Released.
* Provisioned, no job ever seen on its nodes, ``booking`` passed, and the scheduler read
  every node this tick (positive evidence of disuse): BookingExpired, then Released.
* BookingExpired (a crash came between those two writes): the expiry resumes, Released.
* Released or Failed with nodes still up: those nodes leave (drain, or terminate a node
  that never became READY).
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from datetime import datetime
from typing import Literal

from autoscaler.model.lifecycle import FAILED_OR_ENDED, IN_FLIGHT, LEAVING, NodeState
from autoscaler.model.node import Node
from autoscaler.model.request_spec import Condition, RequestClass, RequestView
from autoscaler.policy.duration import format_duration

S = NodeState


@dataclass(frozen=True)
class RequestStep:
    kind: Literal["launch", "provisioned", "fail", "release", "ttl", "expire", "remove", "wait"]
    reason: str
    nodes: tuple[str, ...] = ()  # remove: the nodes to take away; provisioned: the ones held
    addresses: dict[str, str | None] = field(default_factory=dict)


def _remove(view: RequestView, nodes: Mapping[str, Node]) -> tuple[str, ...]:
    """The request's nodes that are still up and not already leaving. A PROVISIONING node
    waits: its apply is in flight, and it is removed (with the instance id the apply
    settled) on a later step, never racing the apply that creates it."""
    return tuple(sorted(n for n in view.nodes if n in nodes
                        and nodes[n].state not in FAILED_OR_ENDED | LEAVING | {S.PROVISIONING}))


def progress(view: RequestView, nodes: Mapping[str, Node], now: datetime,
             ended: frozenset[str] = frozenset(),
             unused: bool = False) -> RequestStep:
    """What to do for ``view`` now; ``nodes`` maps names to the store's nodes,
    ``ended`` holds the keys (``Link.key()``) of linked objects the scheduler reports
    finished, and
    ``unused`` is positive evidence (the scheduler read every node of it this tick) that
    no job runs on its nodes."""
    label = view.label()
    if view.condition in (Condition.RELEASED, Condition.FAILED):
        left = _remove(view, nodes)
        return (RequestStep("remove", f"{label} ended ({view.condition.value}): its nodes leave",
                            left) if left else RequestStep("wait", f"{label} has ended"))
    if view.condition is Condition.PROVISIONED:
        return _held(view, now, ended, unused)
    if view.condition is Condition.BOOKING_EXPIRED:  # a crash came before its Released
        return RequestStep("expire", f"{label} released: booking expired (resumed)")
    if view.condition is not Condition.ACCEPTED:
        return RequestStep("wait", f"{label} is {view.condition.value}")
    # Before the launch: nodes launched past valid_until are bought only to be rolled back.
    if view.spec.valid_until is not None and now > view.spec.valid_until:
        return RequestStep("fail", f"{label} failed: not met by valid_until "
                           f"{view.spec.valid_until:%Y-%m-%d %H:%M:%S}Z; rolled back",
                           _remove(view, nodes))
    if not view.nodes:
        return RequestStep("launch", f"{label}: launching its nodes")
    mine = {n: nodes.get(n) for n in view.nodes}
    failed = {n: node for n, node in mine.items() if node is None or node.state in FAILED_OR_ENDED}
    if failed:
        return _failed(view, mine, failed, nodes)
    if all(node is not None and node.state is S.READY for node in mine.values()):
        return RequestStep("provisioned", f"{label} provisioned: {', '.join(sorted(mine))} "
                           "ready", tuple(sorted(mine)),
                           {n: node.address for n, node in mine.items() if node is not None})
    return RequestStep("wait", f"{label}: nodes on their way")


def _failed(view: RequestView, mine: Mapping[str, Node | None], failed: Mapping[str, Node | None],
            nodes: Mapping[str, Node]) -> RequestStep:
    label = view.label()
    name, node = sorted(failed.items())[0]
    why = (f"{name} is gone" if node is None
           else f"{name} {node.progress.failure or f'{node.state.value}: {node.reason}'}")
    if view.spec.request_class is RequestClass.ATOMIC:
        others = [n for n, nd in mine.items() if n not in failed and nd is not None
                  and nd.state not in LEAVING]
        return RequestStep("fail", f"{label} failed: {why}; rolling back "
                           f"{len(others)} other node(s) (all or none)", _remove(view, nodes))
    if any(n is not None and n.state in IN_FLIGHT for n in mine.values()):
        return RequestStep("wait", f"{label}: {why}; waiting for the other nodes")
    ready = {n: node for n, node in mine.items() if node is not None and node.state is S.READY}
    if not ready:
        return RequestStep("fail", f"{label} failed: {why}; no node became ready")
    return RequestStep("provisioned", f"{label} provisioned best-effort: {len(ready)} of "
                       f"{len(mine)} nodes ({why})", tuple(sorted(ready)),
                       {n: node.address for n, node in ready.items()})


def _held(view: RequestView, now: datetime, ended: frozenset[str],
          unused: bool) -> RequestStep:
    label = view.label()
    if (unused and view.claimed_at is None and view.provisioned_at is not None
            and now >= view.provisioned_at + view.spec.booking):
        return RequestStep("expire", f"{label} released: booking expired, no job used its "
                           f"nodes within {format_duration(view.spec.booking)} of Provisioned")
    link = view.spec.link
    if link is not None and link.key() in ended:
        return RequestStep("release", f"{label} released: its linked {link.describe()} "
                           "has ended")
    if view.provisioned_at is not None and now >= view.provisioned_at + view.spec.ttl:
        return RequestStep("ttl", f"{label} released: ttl {format_duration(view.spec.ttl)} "
                           f"reached (provisioned at {view.provisioned_at:%H:%M:%S}); running "
                           "jobs get the pool's checkpoint signal now, then its grace")
    return RequestStep("wait", f"{label} holds its nodes")


__all__ = ["RequestStep", "progress"]

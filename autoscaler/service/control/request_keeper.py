"""Each tick, before the loop's own: move every live capacity request one step.

The decisions are the engine's (:func:`~autoscaler.engine.request_progress.progress`);
this module carries them out through the usual paths: new nodes are REQUESTED nodes in
the store (carrying ``meta.request``) that the executor provisions and bootstraps like
any other, and nodes that leave go as Drain / Terminate actions of a recorded plan that
the executor submits (drain, checkpoint signal and grace, then terminate). Conditions are
written before the side effect that follows them, and every write is fenced.
"""

from __future__ import annotations

import logging
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass, field
from datetime import datetime
from typing import Any, Literal

from autoscaler.catalog import Catalog
from autoscaler.engine.admission import booked
from autoscaler.engine.request_progress import RequestStep, progress
from autoscaler.engine.stale_image import held_for
from autoscaler.fleet.requests import RequestBook, held_nodes
from autoscaler.model.changes import Create
from autoscaler.model.lifecycle import NodeState
from autoscaler.model.node import Node
from autoscaler.model.plan import Action, Drain, Plan, Terminate
from autoscaler.model.progress import LaunchSpec, NodeProgress
from autoscaler.model.request_spec import FINAL, Condition, Link, RequestView
from autoscaler.model.snapshot import Snapshot
from autoscaler.policy.models import Market, TeamPolicy, find_pool, pool_key

log = logging.getLogger(__name__)
S = NodeState


@dataclass
class RequestKeeper:
    book: RequestBook
    policies: Callable[[], Mapping[str, TeamPolicy]]
    catalog: Catalog
    submit: Callable[[Plan, int | None], Any]  # the executor's submit
    clock: Callable[[], datetime]
    # linked objects -> the keys (Link.key()) of those that have ended (positive evidence
    # only): signals/request_links.py
    ended_links: Callable[[list[Link]], frozenset[str]] = lambda links: frozenset()
    # the last tick's snapshot: which request nodes run jobs (None: no evidence)
    observed: Callable[[], Snapshot | None] = lambda: None
    # request id -> why its launch waits, as last logged (a wait is logged when it starts)
    _waiting: dict[str, str] = field(default_factory=dict, init=False)

    def run(self) -> list[str]:
        """One step for every request that is not done; returns the steps' reasons."""
        store = self.book.store
        store.fence()  # a follower moves nothing
        now = self.clock()
        leaving: list[Action] = []
        lines = []
        # Ended ones too while a node of theirs is not TERMINATED: it may still have to
        # leave. Not the history: the ended and settled ones have no step left.
        views = self.book.unsettled()
        # A request that ended while its launch waited has no wait left to log.
        read = {v.id for v in views}
        self._waiting = {rid: why for rid, why in self._waiting.items() if rid in read}
        # The requests' own nodes, whatever their state: not every node the store ever held.
        nodes = {n.name: n for n in store.nodes(names={name for v in views for name in v.nodes},
                                                include_terminated=True)}
        linked = [v.spec.link for v in views
                  if v.condition is Condition.PROVISIONED and v.spec.link is not None]
        ended = self.ended_links(linked) if linked else frozenset()
        snapshot = self.observed()
        for view in views:
            unused = self._unused(view, snapshot, now)
            step = progress(view, nodes, now, ended, unused)
            if step.kind == "wait":
                continue
            if step.kind == "launch" and self._launch_held(view, snapshot):
                continue
            lines.append(step.reason)
            leaving += self._apply(view, step, nodes, now)
        if leaving:
            plan = Plan(decided_at=now, actions=leaving)
            self.submit(plan, store.record_plan(plan))
        for line in lines:
            log.info("%s", line)
        return lines

    def _launch_held(self, view: RequestView, snapshot: Snapshot | None) -> bool:
        """Whether the request's nodes wait: a pool it is placed in is a baked pool whose
        image the last tick saw stale, with ``when_stale: hold`` (engine/stale_image.py).
        The request stays Accepted (its ``valid_until`` still applies); the wait is logged
        when it starts."""
        why = self._held_why(view, snapshot)
        if why is None:
            self._waiting.pop(view.id, None)
            return False
        if self._waiting.get(view.id) != why:
            self._waiting[view.id] = why
            log.info("%s", why)
        return True

    def _held_why(self, view: RequestView, snapshot: Snapshot | None) -> str | None:
        if snapshot is None:
            return None
        live = self.policies()
        for placed in booked([view], live, self.catalog):
            team, _, name = placed.pool.partition("/")
            pool, obs = find_pool(live, team, name), snapshot.pools.get(placed.pool)
            held = held_for(pool, obs) if pool is not None and obs is not None else None
            if held is not None:
                return (f"{view.label()} waits: {placed.pool}: {held}; its nodes launch once "
                        f"`gpu-autoscaler image bake {placed.pool}` makes one")
        return None

    def _unused(self, view: RequestView, snapshot: Snapshot | None, now: datetime) -> bool:
        """Record a first job on the nodes as the claim; True only when the scheduler read
        every node of a Provisioned request and none runs or holds anything."""
        if view.condition is not Condition.PROVISIONED or snapshot is None:
            return False
        seen = [snapshot.nodes[n].scheduler if n in snapshot.nodes else None for n in view.nodes]
        if any(s is not None and (s.jobs or s.gpus_allocated > 0) for s in seen):
            if view.claimed_at is None:
                self.book.set_claimed(view.id, now)
            return False
        return bool(seen) and all(s is not None for s in seen)

    def _apply(self, view: RequestView, step: RequestStep, nodes: Mapping[str, Node],
               now: datetime) -> list[Action]:
        if step.kind == "launch":
            if not self._launch(view, now):
                self.book.set_condition(view.id, Condition.FAILED, now, (
                    f"{view.label()} failed: its team's policy no longer has a pool for it"))
        elif step.kind == "provisioned":
            self.book.set_condition(view.id, Condition.PROVISIONED, now, step.reason,
                                    nodes=step.addresses)
        elif step.kind == "expire":
            # Two writes: after a crash between them the step resumes from BookingExpired.
            if view.condition is not Condition.BOOKING_EXPIRED:
                view = self.book.set_condition(view.id, Condition.BOOKING_EXPIRED, now,
                                               step.reason)
            view = self.book.set_condition(view.id, Condition.RELEASED, now, step.reason)
            return _leave(view, progress(view, nodes, now).nodes, nodes, step.reason)
        elif step.kind in ("fail", "release", "ttl"):
            to = Condition.FAILED if step.kind == "fail" else Condition.RELEASED
            view = self.book.set_condition(view.id, to, now, step.reason)
            return _leave(view, progress(view, nodes, now).nodes, nodes, step.reason,
                          "ttl" if step.kind == "ttl" else "released")
        elif step.kind == "remove":
            return _leave(view, step.nodes, nodes, step.reason)
        return []

    def _launch(self, view: RequestView, now: datetime) -> bool:
        """Create the request's nodes; False when its team's policy has no pool for them
        any more (True while no policy is loaded yet: the first tick loads them)."""
        live = self.policies()
        if view.team not in live:
            return not live
        placements = booked([view], live, self.catalog)
        if len(placements) != len(view.spec.node_sets):
            return False  # all node sets or none
        total = sum(p.nodes for p in placements)
        creates: list[Create] = []
        for placed in placements:
            team, _, name = placed.pool.partition("/")
            pool = find_pool(live, team, name)
            if pool is None:
                continue
            for _ in range(placed.nodes):
                # cooldown=None: a capacity request's launch is not the pool scaling up, so
                # it must not hold back the pool's own scale-up (fleet/intents.py).
                launch = LaunchSpec(pool=placed.pool, instance_type=placed.instance_type,
                                    market=Market.ON_DEMAND, cooldown=None,
                                    reason=f"{view.label()}: node {len(creates) + 1} of {total}")
                creates.append(Create(team, name, pool.cloud.value, pool.region, launch,
                                      NodeProgress(cluster=pool.cluster.kind, request=view.id)))
        if not creates:
            return False
        # The nodes and the request's record of them in one transaction: a crash leaves
        # all of them recorded or none made. [] : the request moved on meanwhile (a DELETE).
        self.book.launch(view.id, creates, now)
        return True

def _leave(view: RequestView, names: tuple[str, ...], nodes: Mapping[str, Node],
           reason: str, trigger: Literal["released", "ttl"] = "released") -> list[Action]:
    """Drain the READY nodes (signal and grace as in any drain; at ttl the signal comes at
    once), terminate the rest."""
    out: list[Action] = []
    for name in names:
        node = nodes[name]
        key = pool_key(node.team, node.pool)
        if node.state is S.READY:
            out.append(Drain(pool=key, node=name, trigger=trigger, reason=reason))
        else:
            out.append(Terminate(pool=key, node=name, reason=reason))
    return out


def held_by_requests(book: RequestBook, fleet_nodes: Iterable[Node],
                     now: datetime) -> dict[str, str]:
    """Node -> the label of the capacity request holding it: the held part of the tick's
    Snapshot (``Snapshot.held``), which scale-down leaves alone."""
    views = book.unsettled()
    by_id = {v.id: v for v in views}
    held = {node: by_id[rid].label() for node, rid in held_nodes(
        [v for v in views if v.condition not in FINAL]).items()}
    # A DELETE may land between the keeper's run and this read: an ended request's
    # nodes stay held until the keeper drains them (drain_trigger released, with the
    # pool's checkpoint signal and grace), not this tick's idle scale-down.
    nodes = {n.name: n for n in fleet_nodes}
    for view in views:
        if view.condition in FINAL:
            for name in progress(view, nodes, now).nodes:
                held.setdefault(name, f"{view.label()} ended: the keeper drains it")
    return held


__all__ = ["RequestKeeper", "held_by_requests"]

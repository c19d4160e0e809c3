"""The ``/status`` document: fleet, last plan with reasons, policy errors, leader, data.

Built from the store (so a follower reports the same fleet as the leader) plus the loop's
own state. Only names, states, prices and reasons go in: nothing from the config file,
the environment or the actuators' logs, so no secret can reach it. The one free text from
outside, errors the actuators, clouds and schedulers returned (Terraform's diagnostics, a
failed drain, an action's outcome), passes through :func:`public_text` before it is kept or
shown: secrets are never in the config or user data (config/secret_scan.py) and Terraform
masks sensitive values, so this is a second line of defence for an error that quotes a
URL, a header or a ``key=value``.
"""

from __future__ import annotations

import re
from collections import Counter
from collections.abc import Iterable
from dataclasses import dataclass, field
from datetime import datetime
from typing import Any

from autoscaler.catalog import Catalog
from autoscaler.engine.pricing import low_spot_score
from autoscaler.fleet import queries
from autoscaler.fleet.operations import OperationLog
from autoscaler.fleet.store import FleetStore
from autoscaler.model.lifecycle import BILLABLE, NodeState
from autoscaler.model.node import Node
from autoscaler.model.plan import Action, target_of
from autoscaler.model.prices import PriceBook
from autoscaler.model.snapshot import NodeObservation, Snapshot
from autoscaler.policy.errors import PolicyError

RECENT_TRANSITIONS = 30
RECENT_OPERATIONS = 30
TEXT_LIMIT = 300  # characters of an error or finding kept for /status and /ui
# Bounded repeats only: the text is from outside, so no pattern may backtrack for long.
_SECRET_SHAPES = (
    (re.compile(r"(://[^/\s:@]{0,64}:)[^/\s@]{1,256}@"), r"\1***@"),  # a URL's user:password@
    (re.compile(r"(?i)\b(bearer|basic)[ \t]{1,4}[\w.~+/=-]{8,}"), r"\1 ***"),  # Authorization
    (re.compile(r"(?i)((?:password|passwd|secret|token|api[_-]?key|access[_-]?key|signature)"
                r"[\w-]{0,32}[\"']?[ \t]{0,4}[=:][ \t]{0,4}[\"']?)[^\s&\"',;]+"), r"\1***"),  # key=value
)


@dataclass(frozen=True)
class LoopState:
    """What /healthz and /status need from the loop (replaced whole after every tick)."""

    started_at: datetime
    interval_s: float
    dry_run: bool
    ticks: int = 0
    last_tick_at: datetime | None = None
    last_tick_monotonic: float | None = None
    last_duration_s: float | None = None
    last_ok_at: datetime | None = None
    last_error: str | None = None
    last_error_stage: str | None = None
    failed_in_a_row: int = 0  # ticks ending in an error since the last good one (/healthz)
    is_leader: bool = False
    last_plan_id: int | None = None
    missing_sources: tuple[str, ...] = ()
    data_missing: dict[str, str] = field(default_factory=dict)
    lost_frozen: dict[str, str] = field(default_factory=dict)  # pool -> why LOST is frozen
    pool_errors: dict[str, str] = field(default_factory=dict)  # pool -> the rule that raised
    previews: tuple[str, ...] = ()  # the last plan's per-pool preview lines
    activity: tuple[str, ...] = ()  # recent previews, applies, bootstraps (newest last)
    operations: tuple[str, ...] = ()  # side effects running in the executor's workers
    step_errors: dict[str, int] = field(default_factory=dict)  # caught in actuation, by component
    recent_errors: tuple[str, ...] = ()  # the last few of them (newest last)
    launch_backoffs: tuple[str, ...] = ()  # launches held after repeated failures (backoff.py)
    reconcile_findings: tuple[str, ...] = ()  # the last reconcile run's (what is true now)
    reconciled_at: datetime | None = None  # when the run that found them ran
    reconcile_error: str | None = None  # why the last run failed (its findings are older)
    forecasts: dict[str, dict[str, Any]] = field(default_factory=dict)  # pool -> forecast view


def public_text(text: str, limit: int | None = TEXT_LIMIT) -> str:
    """``text`` (an error from outside) for /status and /ui: secret-shaped parts masked,
    at most ``limit`` characters (None: all)."""
    for pattern, mask in _SECRET_SHAPES:
        text = pattern.sub(mask, text)
    return text[:limit]


def describe_action(action: Action) -> str:
    """What an action is about, in a few words (the reason says why)."""
    return f"{action.pool} {target_of(action)}".rstrip()


def _iso(value: datetime | None) -> str | None:
    return value.isoformat() if value is not None else None


def node_json(node: Node, hourly: float, seen: NodeObservation | None = None) -> dict[str, Any]:
    """The node's row; ``data_missing`` says why its metrics or its scheduler's view are
    not in the last snapshot (absent, stale, or reporting what its type cannot have)."""
    missing = {what: why for what, why in (("metrics", seen.metrics_missing),
                                            ("scheduler", seen.scheduler_missing)) if why} if seen else {}
    return {"name": node.name, "team": node.team, "pool": node.pool_key, "cloud": node.cloud,
            "region": node.region, "zone": node.zone, "instance_type": node.instance_type,
            "market": node.market.value, "state": node.state.value,
            "since": _iso(node.state_since), "instance_id": node.instance_id,
            "hourly_usd": round(hourly, 4), "reason": node.reason,
            "drain_trigger": node.drain_trigger, "data_missing": missing}


def plan_json(store: FleetStore, plan_id: int | None = None) -> dict[str, Any] | None:
    """The plan ``plan_id`` (the engine's last: a capacity request's own plan, recorded
    after it, must not hide its holds, placements and pools), else the newest plan (a
    follower, or the plan is no longer kept), with its reasons and what the executor did
    with each action."""
    recorded = queries.plan_by_id(store, plan_id) if plan_id is not None else None
    recorded = recorded or queries.latest_plan(store)
    if recorded is None:
        return None
    plan = recorded.plan
    statuses = [{"kind": a.kind, "pool": a.pool, "node": a.node, "status": a.status,
                 "detail": public_text(a.detail, None)}
                for a in store.actions(plan_id=recorded.id)]
    return {"id": recorded.id, "decided_at": _iso(plan.decided_at), "dry_run": recorded.dry_run,
            "changes": len(plan.changes()), "plan": plan.model_dump(mode="json"),
            "unserved": [f"{j.id}: {j.reason}" for j in plan.unserved],
            "placements": [c.reason for c in plan.placements],
            "action_status": statuses}


def recent_transitions(store: FleetStore, limit: int = RECENT_TRANSITIONS) -> list[dict[str, Any]]:
    return [{"node": t.node, "from": t.from_state.value if t.from_state is not None else None,
             "to": t.to_state.value, "at": _iso(t.at), "reason": t.reason}
            for t in queries.recent_transitions(store, limit)]


def recent_operations(store: FleetStore, limit: int = RECENT_OPERATIONS) -> list[dict[str, Any]]:
    """The operations journal's newest rows (fleet/operations.py): what ran, how it ended
    and how long it took; ``interrupted`` rows were cut short by a restart."""
    def seconds(start: datetime, end: datetime | None) -> float | None:
        return round((end - start).total_seconds(), 1) if end else None

    return [{"id": r.id, "kind": r.kind, "what": r.what, "outcome": r.outcome,
             "started_at": _iso(r.started_at), "finished_at": _iso(r.finished_at),
             "duration_s": seconds(r.started_at, r.finished_at), "detail": r.detail}
            for r in OperationLog(store).recent(limit)]


def fleet_json(nodes: Iterable[Node], catalog: Catalog, snapshot: Snapshot | None,
               now: datetime) -> dict[str, Any]:
    prices = PriceBook(catalog, snapshot or Snapshot(taken_at=now))
    rows: list[dict[str, Any]] = []
    pools: dict[str, dict[str, Any]] = {}
    for node in nodes:
        hourly = prices.node_hourly(node) if node.state in BILLABLE else 0.0
        rows.append(node_json(node, hourly, snapshot.nodes.get(node.name) if snapshot else None))
        pool = pools.setdefault(node.pool_key, {"nodes": 0, "hourly_usd": 0.0, "states": Counter(),
                                                "warm_hourly_usd": 0.0})
        pool["nodes"] += 1
        pool["hourly_usd"] = round(pool["hourly_usd"] + hourly, 4)
        if node.state is NodeState.WARM:  # stopped warm nodes: their volumes (in hourly_usd too)
            pool["warm_hourly_usd"] = round(pool["warm_hourly_usd"] + hourly, 4)
        pool["states"][node.state.value] += 1
    for pool in pools.values():
        pool["states"] = dict(sorted(pool["states"].items()))
    return {"nodes": rows, "pools": dict(sorted(pools.items())),
            "hourly_usd": round(sum(p["hourly_usd"] for p in pools.values()), 4),
            "warm_hourly_usd": round(sum(p["warm_hourly_usd"] for p in pools.values()), 4)}


def open_requests(store: FleetStore) -> list[dict[str, Any]]:
    """Capacity requests not yet final, for /status and /ui: names, conditions, reasons and
    deadlines only (never a token, an idempotency key or a link's target)."""
    from autoscaler.fleet.requests import RequestBook

    return [{"id": v.id, "team": v.team, "request": v.label(), "condition": v.condition.value,
             "reason": v.reason, "nodes": sorted(v.nodes), "updated_at": _iso(v.updated_at),
             "tier": (v.preview or {}).get("tier") or (v.spec.tier.value if v.spec.tier else None),
             "release_at": _iso(v.provisioned_at + v.spec.ttl) if v.provisioned_at else None}
            for v in RequestBook(store).list(include_final=False)]


def spot_scores_json(snapshot: Snapshot | None) -> list[dict[str, Any]]:
    """The last read's Spot placement scores (``clouds.aws.spot_placement_scores``), per
    zone and pool's set of types; ``low`` ones rank their zone after every other offer."""
    scores = sorted(snapshot.spot_scores if snapshot else [],
                    key=lambda s: (s.cloud, s.region, sorted(s.instance_types), s.zone))
    return [{"cloud": s.cloud, "region": s.region, "zone": s.zone,
             "instance_types": sorted(s.instance_types), "score": s.score,
             "low": low_spot_score(s.score)} for s in scores]


def loop_json(state: LoopState) -> dict[str, Any]:
    return {"started_at": _iso(state.started_at), "interval_s": state.interval_s,
            "dry_run": state.dry_run, "ticks": state.ticks,
            "last_tick_at": _iso(state.last_tick_at), "last_duration_s": state.last_duration_s,
            "last_ok_at": _iso(state.last_ok_at), "last_error": state.last_error,
            "last_error_stage": state.last_error_stage,
            "failed_in_a_row": state.failed_in_a_row, "previews": list(state.previews),
            "activity": list(state.activity), "operations": list(state.operations),
            "step_errors": dict(sorted(state.step_errors.items())),
            "recent_errors": list(state.recent_errors),
            "launch_backoffs": list(state.launch_backoffs),
            "reconcile_findings": list(state.reconcile_findings),
            "reconciled_at": _iso(state.reconciled_at), "reconcile_error": state.reconcile_error}


def build_status(store: FleetStore, state: LoopState, leader: dict[str, Any],
                 policy_errors: Iterable[PolicyError], catalog: Catalog,
                 snapshot: Snapshot | None, now: datetime) -> dict[str, Any]:
    return {
        "now": _iso(now),
        "loop": loop_json(state),
        "leader": leader,
        "fleet": fleet_json(store.nodes(), catalog, snapshot, now),
        "last_plan": plan_json(store, state.last_plan_id if state.is_leader else None),
        "transitions": recent_transitions(store),
        "operations": recent_operations(store),
        "policy_errors": [str(e) for e in policy_errors],
        "data_missing": dict(sorted(state.data_missing.items())),
        "sources_missing": list(state.missing_sources),
        "lost_frozen": dict(sorted(state.lost_frozen.items())),
        "pool_errors": dict(sorted(state.pool_errors.items())),
        "requests": open_requests(store),
        "forecasts": dict(state.forecasts),  # predictive pools (service/observe/forecasts.py)
        "spot_scores": spot_scores_json(snapshot),
    }

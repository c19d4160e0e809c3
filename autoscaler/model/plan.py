"""The engine's output: actions with reasons a person can read."""

from __future__ import annotations

from datetime import datetime
from typing import Annotated, Literal, NamedTuple

from pydantic import BaseModel, ConfigDict, Field

from autoscaler.model.snapshot import UnservedJob
from autoscaler.policy.models import Market


class _Action(BaseModel):
    model_config = ConfigDict(frozen=True, extra="forbid")

    pool: str = Field(description="Pool key 'team/pool'.")
    reason: str


class Launch(_Action):
    kind: Literal["launch"] = "launch"
    instance_type: str
    market: Market
    zone: str | None = None
    count: int = Field(ge=1)
    gpus_per_node: int
    hourly_usd: float = Field(description="Price of one node, $/h.")
    # return-to-spot: a spot node for a fallback on-demand node (``replaces``), drained once
    # this one is READY (engine/return_to_spot.py); consolidate-move: a cheaper node in
    # another pool of the placement group for a fragmented node (``replaces``), drained
    # once this one is READY (engine/scale_down/consolidate_group.py)
    # warm-pool: a node for the pool's warm pool (engine/warm_pool.py), stopped once
    # bootstrapped but for the start part; never capacity until a launch starts it
    trigger: Literal["pending", "utilization", "floor", "interruption", "return-to-spot",
                     "consolidate-move", "warm-pool"]
    replaces: list[str] = Field(
        default_factory=list, description="Interrupted nodes this launch stands in for."
    )
    fallback_from_spot: bool = Field(
        False, description="On-demand because spot was refused or the jobs waited max_wait: "
        "a candidate to move back to spot.")
    image: str | None = Field(
        None, description="warm-pool launches: the pool's bootstrap hash the node is warmed "
        "with (a warm node with another is stale and retired).")


# Launches promised to the jobs of the node they replace (make-before-break moves): while
# they boot, they are no room for other pending jobs.
MOVES = frozenset({"return-to-spot", "consolidate-move"})


class Drain(_Action):
    kind: Literal["drain"] = "drain"
    node: str
    trigger: Literal["idle", "consolidate", "over-quota", "preempted", "over-max", "unhealthy",
                     "pool-removed", "released", "ttl", "spot-returned"]
    # released/ttl: its capacity request ended; spot-returned: its spot replacement is READY


class CancelDrain(_Action):
    kind: Literal["cancel_drain"] = "cancel_drain"
    node: str


class Terminate(_Action):
    kind: Literal["terminate"] = "terminate"
    node: str


class Replace(_Action):
    """Drain ``node`` and launch ``instance_type`` in its place: one like it (unhealthy, past
    its maximum age) or a cheaper one its jobs fit on (consolidate)."""

    kind: Literal["replace"] = "replace"
    node: str
    instance_type: str
    market: Market
    zone: str | None = None
    trigger: Literal["unhealthy", "expired", "consolidate"]


class StartWarm(_Action):
    """Start ``node``, a stopped node of the pool's warm pool, for (part of) a launch: it
    runs the node-time bootstrap and is READY sooner than a cold node."""

    kind: Literal["start_warm"] = "start_warm"
    node: str
    instance_type: str
    market: Market
    gpus_per_node: int
    hourly_usd: float = Field(description="Price of the node once started, $/h.")


class Hold(_Action):
    """Nothing was done for ``what`` in this pool, and why (so nobody is surprised)."""

    kind: Literal["hold"] = "hold"
    what: Literal["scale-up", "scale-down", "all"]  # all: the pool's rules failed this tick


class ReportJob(_Action):
    """A job past its pool's max_job_runtime: reported; signalled with ``signal``; signalled,
    then requeued or evicted after the checkpoint grace with ``release``."""

    kind: Literal["report_job"] = "report_job"
    node: str
    job: str
    signal: bool = False
    release: bool = False
    started_at: datetime | None = Field(None, description="When this run of the job started "
                                        "(a requeued job starts a new run).")


Action = Annotated[
    Launch | Drain | CancelDrain | Terminate | Replace | Hold | ReportJob | StartWarm,
    Field(discriminator="kind"),
]


class Subject(NamedTuple):
    """What an action is about: its pool, and its node and trigger where its kind has them."""

    pool: str
    node: str | None
    trigger: str | None


def subject_of(action: Action) -> Subject:
    return Subject(action.pool, getattr(action, "node", None), getattr(action, "trigger", None))


def target_of(action: Action) -> str:
    """What an action is about, in a few words (its reason says why)."""
    if isinstance(action, Launch):
        zone = f" {action.zone}" if action.zone else ""
        return f"{action.count} x {action.instance_type} {action.market.value}{zone}"
    if isinstance(action, Replace):
        return f"{action.node} -> {action.instance_type} {action.market.value}"
    if isinstance(action, ReportJob):
        return f"job {action.job} on {action.node}"
    if isinstance(action, StartWarm):
        return f"{action.node} ({action.instance_type} {action.market.value}, warm)"
    if isinstance(action, Hold):
        return action.what
    return subject_of(action).node or ""


class PoolSummary(BaseModel):
    model_config = ConfigDict(frozen=True, extra="forbid")

    nodes: int = Field(description="Nodes serving or on their way (not leaving).")
    gpus: int
    hourly_usd: float
    floor: int
    util_mean: float | None = None
    pending_gpus: float = 0
    data_missing: str | None = None
    error: str | None = Field(None, description="A rule raised: nothing decided for the pool.")
    broken_held: int = Field(0, description="Broken nodes kept because too many look broken "
                             "fleet-wide (the unhealthy-replacement budget).")
    broken_waiting: int = Field(0, description=(
        "Broken nodes found on absence-shaped evidence (unusable, not listed, silent) that "
        "wait for the pool's max_draining_percent: replaced on later ticks, longest first."))


class PlacementChoice(BaseModel):
    """Where a pending job that several pools of a placement group could run was put."""

    model_config = ConfigDict(frozen=True, extra="forbid")

    job: str
    pool: str = Field(description="The pool chosen (team/pool).")
    listed_under: str = Field(description="The pool its partition or labels matched first.")
    compared: list[str] = Field(description="Each pool compared, with its offer or why none.")
    reason: str


class Plan(BaseModel):
    model_config = ConfigDict(frozen=True, extra="forbid")

    decided_at: datetime
    actions: list[Action] = Field(default_factory=list)
    pools: dict[str, PoolSummary] = Field(default_factory=dict)
    unserved: list[UnservedJob] = Field(
        default_factory=list, description="Pending jobs no pool's nodes could run: not bought for.")
    placements: list[PlacementChoice] = Field(
        default_factory=list, description="Pending jobs a placement group's pools compared for.")

    def changes(self) -> list[Action]:
        """Actions that change the fleet (everything but Hold and ReportJob)."""
        return [a for a in self.actions if not isinstance(a, Hold | ReportJob)]

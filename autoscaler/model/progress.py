"""What the service knows about a node beyond its state, typed: :class:`NodeProgress`
rides on every :class:`~autoscaler.model.node.Node`, and a write names what it changes
with a :class:`ProgressUpdate` (see ``model/changes.py``), checked when it is made.

* :class:`LaunchSpec`: one launch slot, the same record from the plan's intent to the
  store (``Create``) and to a replacement promised on the node it replaces;
* :class:`BootstrapProgress`: Ansible attempts, their back-off and the last error;
* :class:`HealthCheck`: the last periodic GPU health check of a READY node;
* :class:`DrainProgress`: where a drain stands between its re-runnable steps;
* :class:`InterruptionRecord`: the cloud's notice;
* :class:`LongJob`: a job past ``max_job_runtime``, reported once and signalled once; with
  ``lifetime.action: release``, requeued once after the checkpoint grace.

The store keeps the record in the node's JSON column and owns how it is serialised;
records written by an older version read with their unknown keys ignored.
"""

from __future__ import annotations

from datetime import datetime, timedelta
from enum import StrEnum
from typing import Any, Literal

from pydantic import BaseModel, ConfigDict, Field, field_validator, model_validator

from autoscaler.policy.models import Market

# What a change does to its pool's cooldown history: a scale-up launch ("up"), a
# scale-down drain ("down") or neither (replacements, repairs, capacity requests).
Cooldown = Literal["up", "down"] | None
LONG_JOBS_KEPT = 100  # per node; a node rarely runs that many jobs past the limit


class _Record(BaseModel):
    # extra="ignore": a record written by another version still reads.
    model_config = ConfigDict(frozen=True, extra="ignore")


class LaunchSpec(_Record):
    """One node to launch: a plan's launch slot, or a replacement promised for a node."""

    pool: str = Field(description="team/pool")
    instance_type: str
    market: Market
    zone: str | None = None
    reason: str
    action: int | None = Field(None, description="The recorded plan action that launches it.")
    index: int | None = Field(None, description="Its slot in that action.")
    cooldown: Cooldown = None
    trigger: str | None = None
    fallback_from_spot: bool = False
    image: str | None = Field(None, description="A warm-pool launch: the bootstrap hash the "
                              "node is warmed with (its refresh compares it with the pool's).")

    @model_validator(mode="before")
    @classmethod
    def _legacy_scale_up(cls, data: Any) -> Any:
        # Promises written before the cooldown field said "scale_up": true/false.
        if isinstance(data, dict) and "scale_up" in data and "cooldown" not in data:
            data = {**data, "cooldown": "up" if data["scale_up"] else None}
        return data

    @property
    def team_and_pool(self) -> tuple[str, str]:
        team, _, pool = self.pool.partition("/")
        return team, pool


class BootstrapProgress(_Record):
    """The node's Ansible attempts: each is counted as it begins, then succeeds, fails (and
    waits out its back-off) or, cancelled, is given back."""

    attempts: int = 0
    started_at: datetime | None = None
    ok_at: datetime | None = None
    next_at: datetime | None = None
    last_error: str | None = None

    def begun(self, now: datetime) -> BootstrapProgress:
        """One more attempt, starting ``now`` (its back-off is over)."""
        return self.model_copy(update={"attempts": self.attempts + 1, "started_at": now,
                                       "next_at": None})

    def given_back(self) -> BootstrapProgress:
        """The attempt was cancelled, not failed: it does not count."""
        return self.model_copy(update={"attempts": self.attempts - 1})

    def succeeded(self, now: datetime) -> BootstrapProgress:
        return self.model_copy(update={"ok_at": now, "last_error": None})

    def failed(self, error: str, *, retry_at: datetime) -> BootstrapProgress:
        """The attempt failed with ``error``; the next one not before ``retry_at``."""
        return self.model_copy(update={"last_error": error, "next_at": retry_at})


class HealthCheck(_Record):
    """The periodic GPU health check of a READY node (``health.check_interval``)."""

    checked_at: datetime | None = None  # the last attempt; the next is an interval later
    failed: str | None = None  # what the check found wrong; None: it passed
    last_error: str | None = None  # the attempt could not reach the node: no verdict


class DrainPhase(StrEnum):
    REQUESTED = "requested"
    CORDONED = "cordoned"
    SIGNALLING = "signalling"
    SIGNALLED = "signalled"
    REQUEUEING = "requeueing"
    REQUEUED = "requeued"


class DrainProgress(BaseModel):
    """Where one node's drain stands between its steps (``actuators/drain``)."""

    model_config = ConfigDict(frozen=True, extra="forbid")

    reason: str
    started_at: datetime
    deadline: datetime  # work still running then gets the checkpoint signal
    grace: timedelta  # between the signal and the requeue
    signal: str = "USR1"
    phase: DrainPhase = DrainPhase.REQUESTED
    signalled_at: datetime | None = None
    not_before: datetime | None = None  # the next step is not worth running earlier
    last_error: str | None = None

    def waiting_until(self, not_before: datetime | None) -> DrainProgress:
        """The next step is not run before ``not_before`` (``None``: at the next advance)."""
        return self.model_copy(update={"not_before": not_before})

    def at(self, phase: DrainPhase, **changes: object) -> DrainProgress:
        return self.model_copy(update={"phase": phase, "last_error": None, **changes})

    def not_after(self, now: datetime) -> DrainProgress:
        """Times written ahead of ``now`` (before a backward step of the wall clock, or by
        a controller whose clock ran ahead) moved back to count from ``now``: the wait and
        the grace keep their whole length, and nothing waits out the step on top."""
        latest = max(self.started_at, self.signalled_at or self.started_at)
        if latest <= now:
            return self
        back = latest - now
        return self.model_copy(update={
            "started_at": self.started_at - back, "deadline": self.deadline - back,
            "signalled_at": self.signalled_at - back if self.signalled_at else None,
            "not_before": None})

    def joined_by(self, newer: DrainProgress) -> DrainProgress:
        """``newer`` (an interruption's short drain) taking over a drain already running:
        what the running one did (its phase, its signal) is kept, the earlier deadline wins."""
        return newer.model_copy(update={"phase": self.phase, "signalled_at": self.signalled_at,
                                        "deadline": min(newer.deadline, self.deadline)})


class InterruptionRecord(_Record):
    kind: str
    at: datetime
    deadline: datetime | None = None
    source: str = ""


class LongJob(_Record):
    reported_at: datetime
    signal: bool = False  # the policy asks for a checkpoint signal
    release: bool = False  # ... and to requeue (evict) the job after the checkpoint grace
    started_at: datetime | None = None  # the run reported: a requeued job is a new run
    signalled_at: datetime | None = None  # the grace clock starts here
    released_at: datetime | None = None  # the requeue (eviction) was sent, or is being sent
    not_before: datetime | None = None  # a refused requeue is tried again then
    outcome: str | None = None  # what the last attempt came to

    def with_release(self) -> LongJob:
        """The policy now asks for the job to be released (requeued) after its signal."""
        return self.model_copy(update={"release": True})

    def signalling(self, now: datetime) -> LongJob:
        """Its checkpoint signal goes out ``now`` (written before it is sent)."""
        return self.model_copy(update={"signalled_at": now, "outcome": "sending"})

    def releasing(self, now: datetime, *, outcome: str) -> LongJob:
        """Its requeue (eviction) goes out ``now`` (written before it is sent)."""
        return self.model_copy(update={"released_at": now, "outcome": outcome})

    def release_refused(self, *, retry_at: datetime, outcome: str) -> LongJob:
        """The requeue was refused or failed: cleared, and tried again at ``retry_at``."""
        return self.model_copy(update={"released_at": None, "not_before": retry_at,
                                       "outcome": outcome})

    def with_outcome(self, outcome: str) -> LongJob:
        """What the last attempt (signal or requeue) came to."""
        return self.model_copy(update={"outcome": outcome})

    @property
    def owes_signal(self) -> bool:
        return (self.signal or self.release) and self.signalled_at is None

    def owes_release(self, now: datetime, grace: timedelta) -> bool:
        return (self.release and self.released_at is None and self.signalled_at is not None
                and now >= self.signalled_at + grace
                and (self.not_before is None or now >= self.not_before))


def _newest_long_jobs(jobs: dict[str, LongJob]) -> dict[str, LongJob]:
    return dict(sorted(jobs.items(), key=lambda kv: kv[1].reported_at)[-LONG_JOBS_KEPT:])


class WarmProgress(_Record):
    """A node launched for its pool's warm pool (policy ``warm_pool``): bootstrapped with
    all of gpu-node.yml but its start part (the join above all), then stopped until a launch
    starts it and runs the start part. Not capacity until then."""

    image: str = Field(description="The pool's warm hash it was warmed with "
                       "(actuators/bootstrap_hash.py: image-time settings, every role's files).")
    stopped_at: datetime | None = None  # WARM since: billed its volume only from here
    started_at: datetime | None = None  # a launch started it: an ordinary node from here
    started_for: str | None = None  # the launch's reason

    @property
    def in_pool(self) -> bool:
        """Still in the warm pool: not started yet."""
        return self.started_at is None

    def stopped(self, now: datetime) -> WarmProgress:
        return self.model_copy(update={"stopped_at": now})

    def started(self, now: datetime, why: str) -> WarmProgress:
        return self.model_copy(update={"started_at": now, "started_for": why})

    def start_refused(self) -> WarmProgress:
        """Back in the pool: the cloud refused the start."""
        return self.model_copy(update={"started_at": None, "started_for": None})


class NodeProgress(_Record):
    """Everything the executor keeps about one node beyond its columns."""

    cluster: str | None = None  # scheduler kind when the node was launched
    action: int | None = None  # the plan action and launch slot that created it
    index: int | None = None
    policy: str | None = None  # its pool's policy fingerprint then (the launch back-off)
    replacement: LaunchSpec | None = None  # a replacement promised for it
    drain: DrainProgress | None = None
    bootstrap: BootstrapProgress = BootstrapProgress()
    health: HealthCheck = HealthCheck()
    interruption: InterruptionRecord | None = None
    provision_failures: int = 0  # applies that failed without naming the node
    long_jobs: dict[str, LongJob] = {}
    adopted: str | None = None  # the instance id the reconciler adopted it from
    request: str | None = None  # the capacity request it was launched for
    # The baked image its instance was launched from: its bootstrap runs only the node-time
    # part of the playbook (--tags node). None: the full bootstrap.
    baked_image: str | None = None
    # "PROVISION_FAILED: <reason>": kept after the node is cleaned up, so whoever looks
    # later (a capacity request's keeper) still says why it failed.
    failure: str | None = None
    warm: WarmProgress | None = None  # launched for the warm pool

    @property
    def in_warm_pool(self) -> bool:
        """A warm-pool node not started yet: never capacity, never in decide()'s fleet."""
        return self.warm is not None and self.warm.in_pool

    _newest = field_validator("long_jobs")(_newest_long_jobs)


class ProgressUpdate(BaseModel):
    """Fields of a node's :class:`NodeProgress` to write: exactly the ones given (``None``
    clears one). Checked when it is made, so a misspelt or mistyped field fails at the
    writer, not when the record is read back."""

    model_config = ConfigDict(frozen=True, extra="forbid")

    cluster: str | None = None
    action: int | None = None
    index: int | None = None
    policy: str | None = None
    replacement: LaunchSpec | None = None
    drain: DrainProgress | None = None
    bootstrap: BootstrapProgress | None = None
    health: HealthCheck | None = None
    interruption: InterruptionRecord | None = None
    provision_failures: int | None = None
    long_jobs: dict[str, LongJob] | None = None
    adopted: str | None = None
    request: str | None = None
    baked_image: str | None = None
    failure: str | None = None
    warm: WarmProgress | None = None

    _newest = field_validator("long_jobs")(
        lambda jobs: None if jobs is None else _newest_long_jobs(jobs))

    def applied_to(self, progress: NodeProgress) -> NodeProgress:
        given = {name: getattr(self, name) for name in self.model_fields_set}
        cleared = {name: NodeProgress.model_fields[name].get_default(call_default_factory=True)
                   for name, value in given.items() if value is None}
        return progress.model_copy(update={**given, **cleared})

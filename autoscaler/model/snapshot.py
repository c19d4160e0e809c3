"""Everything the engine knows about the world at one instant.

Signals fill it (Prometheus, Slurm/Kubernetes, cloud prices); the simulator fills it from
a trace; ``gpu-autoscaler plan --snapshot`` reads it from JSON. Missing data is always
explicit (a reason string), never a zero: the engine must not scale down on absence of
evidence.
"""

from __future__ import annotations

from datetime import datetime
from typing import Annotated

from pydantic import BaseModel, ConfigDict, Field, model_validator
from pydantic.dataclasses import dataclass

from autoscaler.model.node import FleetView
from autoscaler.model.record import RECORD
from autoscaler.policy.models import Market


class _Model(BaseModel):
    model_config = ConfigDict(frozen=True, extra="forbid")


@dataclass(frozen=True, slots=True, kw_only=True, config=RECORD)
class GpuMetrics:
    """Per-node aggregates over the node's GPUs, computed by PromQL."""

    util_mean: float | None = Field(default=None, description="Mean GPU util %, over scale_up.window.")
    util_max_idle_window: float | None = Field(
        default=None, description="Max GPU util % over scale_down.idle_for (idle detection).")
    util_max: float | None = Field(default=None, description="Max of any GPU over scale_up.window.")
    mem_used_mib: float | None = None
    mem_free_mib: float | None = None
    temperature_max_c: float | None = None
    power_w: float | None = None
    xid_errors: int = Field(default=0, description="GPUs with an XID error over scale_up.window "
                            "(0 = none).")
    ecc_dbe_errors: int = Field(
        default=0, description="Uncorrectable (double-bit) ECC errors since the driver loaded, summed over "
        "the node's GPUs (DCGM_FI_DEV_ECC_DBE_VOL_TOTAL).")
    row_remap_failures: int = Field(
        default=0, description="GPUs whose memory row remapping failed (DCGM_FI_DEV_ROW_REMAP_FAILURE).")
    retired_pages_pending: int = Field(
        default=0,
        description="GPUs with a page retirement waiting for a reset (DCGM_FI_DEV_RETIRED_PENDING).")
    thermal_throttle: bool = False
    gpus_reporting: int = 0
    sample_age_s: float | None = None


# A placement group has a handful of pools; more is a hostile snapshot, not a fleet.
MAX_POOL_OPTIONS = 64


@dataclass(frozen=True, slots=True, kw_only=True, config=RECORD)
class RunningJob:
    id: str
    gpus: float = 0
    started_at: datetime | None = None
    name: str = ""
    ends_at: datetime | None = Field(
        default=None, description="When the scheduler expects it to end (its time limit), if known.")
    pools: list[Annotated[str, Field(max_length=200)]] | None = Field(
        default=None, max_length=MAX_POOL_OPTIONS,
        description="The pools (team/pool) of its node's placement group it may run in, by "
        "its node selectors and affinity (Kubernetes) or partition and constraint (Slurm): "
        "consolidation and the return to spot move it only to these. None: no narrowing "
        "known, any pool the pool-level rules allow. Entries outside the node's team and "
        "group are ignored.")


_NO_NEW_JOBS = frozenset({"down", "drained", "draining"})


@dataclass(frozen=True, slots=True, kw_only=True, config=RECORD)
class SchedulerNode:
    state: str = Field(
        default="unknown", description="idle | mixed | allocated | draining | drained | down | unknown")
    gpus_total: float = 0
    gpus_allocated: float = 0
    gpus_free: list[Annotated[float, Field(ge=0, le=1)]] | None = Field(
        default=None, max_length=64, description="The free share (0..1) of each GPU, when the scheduler "
        "places shares of a GPU and reports them per device (the simulator does). None: only the total is "
        "known, and the engine assumes whole GPUs are taken first, so three GPUs each 0.9 used "
        "read as one with 0.3 free.")
    jobs: list[RunningJob] = Field(default_factory=list)
    cordoned: bool = False
    ready: bool = True
    unusable: str | None = Field(
        default=None, max_length=300, description="Why the scheduler will not run jobs here although "
        "nobody of ours drained it, with its own words (Slurm 'NOT_RESPONDING', 'DOWN: "
        "Not responding', 'DRAIN by alice: bad gpu'; Kubernetes 'NotReady: KubeletNotReady'); "
        "None: usable, or unknown.")
    unusable_since: datetime | None = Field(
        default=None, description="When the scheduler says it became unusable (Slurm's reason time, "
        "the Ready condition's lastTransitionTime); None: not said.")

    @property
    def places_jobs(self) -> bool:
        """Whether the scheduler may start jobs here, by its node state."""
        return self.state not in _NO_NEW_JOBS


@dataclass(frozen=True, slots=True, kw_only=True, config=RECORD)
class NodeObservation:
    metrics: GpuMetrics | None = None
    metrics_missing: str | None = Field(default=None, description="Why metrics are absent or stale.")
    metrics_silent: bool = Field(
        default=False, description="The metrics are missing because no sample came (within the "
        "lookback, or a fresh one), not because what came was impossible or unread: with "
        "the rest of the fleet reporting, the node itself has gone silent.")
    scheduler: SchedulerNode | None = None
    scheduler_missing: str | None = Field(
        default=None, description="Why the scheduler's view of the node is absent: it reported the "
        "impossible (more GPUs than the node's type has, NaN, a negative count).")
    health_check_failed: str | None = None


class PoolOption(_Model):
    """One pool of the job's placement group that can run it, with the job's narrowing there
    (types and zones differ between regions and clouds)."""

    pool: str = Field(max_length=200, description="team/pool")
    zones: list[str] | None = None
    instance_types: list[str] | None = None


class PendingJob(_Model):
    id: str
    gpus: float = Field(gt=0, description="GPUs per node; below 1 means a share of one GPU.")
    nodes: int = Field(1, ge=1)
    reason: str = "Resources"
    submitted_at: datetime | None = None
    gpu_model: str | None = Field(None, description="Required GPU model, e.g. V100 or T4.")
    priority: int = Field(0, description="Kubernetes PriorityClass value: higher is placed first.")
    zones: list[str] | None = Field(
        None, description="Zones the job can run in (a bound volume, topology spread); None: any.")
    instance_types: list[str] | None = Field(
        None, description="Instance types the job can run on (an instance-type selector or "
        "affinity the GPU model cannot express); None: any of the pool's.")
    options: list[PoolOption] = Field(
        default_factory=list, max_length=MAX_POOL_OPTIONS,
        description="The pools of its placement group that can run it, the one it is listed "
        "under first; the engine launches in the cheapest (empty: only this pool).")


class PendingShape(_Model):
    """Pending jobs that ask for the same thing, counted: what a source that keeps its queue
    by shape (the simulator) reports instead of one PendingJob per job, so a backlog of
    thousands of jobs in a handful of shapes costs the engine its shapes. The fields mean
    what PendingJob's do; ``ids`` are the jobs' ids in sorted order (the order their parts
    are placed) and ``submitted_at`` the submit time of each."""

    gpus: float = Field(gt=0, description="GPUs per node; below 1 means a share of one GPU.")
    nodes: int = Field(1, ge=1)
    reason: str = "Resources"
    gpu_model: str | None = None
    priority: int = 0
    zones: list[str] | None = None
    instance_types: list[str] | None = None
    ids: list[str] = Field(min_length=1)
    submitted_at: list[datetime | None] = Field(min_length=1)

    @model_validator(mode="after")
    def _aligned(self) -> PendingShape:
        if len(self.submitted_at) != len(self.ids):
            raise ValueError("submitted_at needs one entry per id")
        if any(a > b for a, b in zip(self.ids, self.ids[1:], strict=False)):
            raise ValueError("ids must be in sorted order")
        return self

    @property
    def count(self) -> int:
        return len(self.ids)


class UnservedJob(_Model):
    """A pending job no pool's nodes could run: reported, never bought for."""

    id: str
    team: str | None = None
    reason: str = Field(description="Why no pool serves it, pool by pool.")
    constraint: str = Field(description="The first constraint that failed, e.g. a taint.")


class ClusterQuota(_Model):
    """A team's GPU limit as the cluster states it (Kubernetes ResourceQuota)."""

    max_gpus: int = Field(ge=0)
    source: str = Field(description="Where it comes from, e.g. 'ResourceQuota vision/gpus'.")


MAX_ON_PREM_GPUS = 64  # per node: more than any server holds, so a bigger count is noise


class OnPremNode(_Model):
    """A static on-prem node in service, as its scheduler reports it: what a pool with
    ``cluster.on_prem`` fills before it launches anything."""

    name: str = Field(max_length=128)
    gpus: int = Field(ge=0, le=MAX_ON_PREM_GPUS)
    allocated: float = Field(0, ge=0)
    gpus_free: list[Annotated[float, Field(ge=0, le=1)]] | None = Field(
        None, max_length=MAX_ON_PREM_GPUS, description="The free share (0..1) of each GPU, "
        "when the scheduler places shares of a GPU and reports them per device (the simulator "
        "does), as SchedulerNode.gpus_free. None: only the total is known, and whole GPUs "
        "are taken as used first.")
    gpu_model: str | None = Field(None, max_length=32)

    @model_validator(mode="after")
    def _within(self) -> OnPremNode:
        if self.allocated > self.gpus:
            raise ValueError(f"{self.name}: {self.allocated:g} GPUs allocated of {self.gpus}")
        if self.gpus_free is not None and len(self.gpus_free) != self.gpus:
            raise ValueError(f"{self.name}: {len(self.gpus_free)} GPUs' free shares for "
                             f"{self.gpus} GPUs")
        return self


class ImageObservation(_Model):
    """What the cloud says of a baked pool's image (``bootstrap.image: baked``): the
    bootstrap hash its image must carry and the newest available image having it."""

    hash: str = Field(pattern=r"^[0-9a-f]{1,64}$", description="The pool's bootstrap hash "
                      "(actuators/bootstrap_hash.py), the value of the image tag "
                      "gpu-autoscaler/bootstrap-hash.")
    image_id: str | None = Field(
        None, pattern=r"^[a-z]{1,8}-[0-9a-z]{1,64}$", description="The newest available "
        "image of the account tagged with the hash; None: no image has it (stale).")

    @property
    def stale(self) -> bool:
        return self.image_id is None


class PoolObservation(_Model):
    pending: list[PendingJob] = Field(default_factory=list)
    on_prem: list[OnPremNode] | None = Field(
        None, max_length=10_000, description="The pool's on-prem nodes that take jobs now "
        "(cluster.on_prem); None: not read (not configured, or the scheduler did not answer).")
    pending_shapes: list[PendingShape] = Field(
        default_factory=list, description="More pending jobs, counted by shape (the engine "
        "reads both; the simulator fills this one).")
    metrics_missing: str | None = None
    scheduler_missing: str | None = None
    image: ImageObservation | None = Field(
        None, description="A baked pool's image as the cloud lists it (stale: no image has "
        "its hash). None: a base pool, or not known (not read, or the read failed): the engine "
        "then decides as usual and the Terraform plan's own check guards when_stale: hold.")


class CapacityError(_Model):
    cloud: str
    region: str
    instance_type: str
    zone: str | None
    market: Market
    code: str
    at: datetime
    message: str = ""
    until: datetime | None = Field(
        None, description="Held until then instead of the pool's capacity_error_backoff "
        "(the service's launch backoff after repeated failures of the same cause).")


class Offering(_Model):
    """Observed market data for one (type, zone); absent fields fall back to the catalog."""

    cloud: str
    region: str
    instance_type: str
    zone: str | None = None
    spot_usd: float | None = None
    on_demand_usd: float | None = None
    in_stock: bool | None = None


class SpotScore(_Model):
    """How likely a spot request for a pool's instance types is to succeed in a zone now,
    1 (unlikely) to 10 (very likely): AWS's Spot placement score for one Availability Zone
    (``GetSpotPlacementScores``), asked for the pool's whole set of types, since AWS scores
    capacity-optimized requests over several types. A recommendation from the cloud, never
    a promise: it orders offers, it rules none out."""

    cloud: str = Field(max_length=32)
    region: str = Field(max_length=64)
    zone: str = Field(max_length=64)
    instance_types: list[Annotated[str, Field(max_length=64)]] = Field(min_length=1, max_length=64)
    score: int = Field(ge=1, le=10)


class ForecastFloor(_Model):
    """A pool's forecast demand ahead of now, held as a floor (predictive mode ``scale``).

    Computed outside decide() (autoscaler/forecast) and handed in as data."""

    gpus: float = Field(ge=0, le=10_000_000)
    reason: str = Field(description="Which forecast, model and accuracy set it.")


class Snapshot(_Model):
    taken_at: datetime
    nodes: dict[str, NodeObservation] = Field(default_factory=dict)
    pools: dict[str, PoolObservation] = Field(default_factory=dict)
    capacity_errors: list[CapacityError] = Field(default_factory=list)
    offerings: list[Offering] = Field(default_factory=list)
    spot_scores: list[SpotScore] = Field(
        default_factory=list, max_length=100_000,
        description="Spot placement scores per (pool's instance types, zone), where read.")
    missing: list[str] = Field(
        default_factory=list, description="Whole sources that could not be read this tick."
    )
    unserved: list[UnservedJob] = Field(default_factory=list)
    cluster_quotas: dict[str, ClusterQuota] = Field(
        default_factory=dict, description="Team -> GPU limit read from the cluster "
        "(pools with cluster.quota_from: resourcequota).")
    held: dict[str, str] = Field(
        default_factory=dict, description="Node -> the capacity request holding it (its "
        "label, e.g. 'request ci-4711 (team vision, atomic, 2 x 4 GPUs)'): not scaled down.")
    forecasts: dict[str, ForecastFloor] = Field(
        default_factory=dict, description="Pool -> forecast floor (predictive: mode scale).")


class DecisionInput(_Model):
    """The recorded engine input: what ``plan --snapshot FILE.json`` reads."""

    now: datetime
    fleet: FleetView = FleetView()
    snapshot: Snapshot

"""Pydantic models of a team policy file (``policies/<team>.yaml``).

Every default here is in the generated docs/reference/policy.md; the JSON Schema that
editors use is generated from these classes, so the two never disagree.
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from datetime import timedelta
from enum import StrEnum
from typing import Annotated, Literal

from pydantic import (
    AfterValidator,
    BaseModel,
    ConfigDict,
    Field,
    StringConstraints,
    field_validator,
    model_validator,
)

from autoscaler.policy.duration import Duration, at_least, between
from autoscaler.policy.syntax import (
    MAX_SLURM_NAMES,
    CronText,
    CudaVersion,
    DriverBranch,
    Labels,
    PartitionName,
    RegionName,
    Signal,
    SlurmName,
    SlurmUser,
    Taint,
    TimeZoneName,
    ZoneName,
)

API_VERSION = "gpu-autoscaler/v1"
NAME_PATTERN = r"^[a-z][a-z0-9-]{0,38}$"
# Team and pool names become Terraform map keys, Slurm node names and hostnames.
Name = Annotated[str, StringConstraints(pattern=NAME_PATTERN)]
Percent = Annotated[float, Field(ge=0, le=100)]
InstanceTypeName = Annotated[str, StringConstraints(pattern=r"^[a-z0-9][a-z0-9.-]{0,63}$")]
# Pool sizes are bounded so that sums and products of them stay ordinary numbers.
MAX_NODES = 10_000


class _Strict(BaseModel):
    # strict: a policy says what it means (no "5" -> 5, no 1 -> true); finite numbers only.
    # Enum fields stay lax so their YAML strings (``aws``, ``high``) are read as members.
    model_config = ConfigDict(extra="forbid", frozen=True, use_enum_values=False, strict=True,
                              allow_inf_nan=False)


class Priority(StrEnum):
    HIGH = "high"
    MEDIUM = "medium"
    LOW = "low"

    @property
    def rank(self) -> int:
        """0 is served first under contention."""
        return {"high": 0, "medium": 1, "low": 2}[self.value]


class Cloud(StrEnum):
    AWS = "aws"
    ALICLOUD = "alicloud"


class Market(StrEnum):
    ON_DEMAND = "on-demand"
    SPOT = "spot"


# Floors of the durations whose 0s was accepted and meant "none":
# * cooldowns: 1s, the shortest tick the service config allows (tick.interval). A shorter
#   cooldown never holds a tick back, so it would be no cooldown at all: a pool could scale
#   up again before the nodes it just launched boot. Cluster Autoscaler's shortest delay is
#   one loop too (--scale-down-delay-after-delete defaults to --scan-interval, 10s).
# * drain_timeout: 30s, the terminationGracePeriodSeconds Kubernetes gives every pod by
#   default; signalling jobs sooner makes a drain a kill (Cluster Autoscaler waits up to
#   --max-graceful-termination-sec, 600s by default). Consolidation and capacity-request
#   drains signal at once by design (ScaleDown.drain_wait), not through this value.
# * max_node_age: 1h. A node may take bootstrap.timeout (30m by default) to become READY,
#   then a drain; a shorter limit replaces nodes about as fast as they come up (0s replaced
#   one every tick). Karpenter's expireAfter defaults to 720h.
COOLDOWN = at_least(timedelta(seconds=1), "no tick is shorter (tick.interval), so a shorter "
                    "cooldown would hold nothing back")
DRAIN_TIMEOUT = at_least(timedelta(seconds=30), "Kubernetes gives every pod 30s to stop by "
                         "default; a shorter drain is a kill")
HEALTH_CHECK_INTERVAL = at_least(timedelta(minutes=1), "each check is an Ansible run over SSH "
                                 "on every READY node of the pool")
SCARCITY_WITHIN = between(timedelta(minutes=1), timedelta(hours=2), "a refusal counts for "
                          "longer than a tick, and the service keeps capacity errors for two hours")
MAX_NODE_AGE = at_least(timedelta(hours=1), "a node must outlive its boot (bootstrap.timeout) "
                        "and drain, or nodes are replaced as fast as they come up")

MAX_WAIT_BY_PRIORITY = {Priority.HIGH: timedelta(0), Priority.MEDIUM: timedelta(minutes=10),
                        Priority.LOW: timedelta(minutes=30)}


class Quota(_Strict):
    max_gpus: int | None = Field(None, ge=0, le=1_000_000,
                                 description="GPUs the team may hold at once.")
    max_hourly_usd: float | None = Field(None, ge=0, le=10_000_000,
                                         description="$/h the team may spend.")


class ReturnToSpot(_Strict):
    """Moving fallback on-demand nodes back to spot, make-before-break (docs/concepts/spot.md):
    the spot node boots first, then the on-demand node is drained with the
    checkpoint signal at once and its jobs restart from their checkpoint on spot."""

    after: Duration = Field(
        timedelta(hours=1), description="Minimum on-demand age of a fallback node before it "
        "moves: spot that just came back often goes again (interruptions come in bursts).")
    min_saving: float = Field(
        0.5, ge=0, le=1_000_000, description="Minimum $/h saved, after the one-off cost of "
        "the move (work redone since the last checkpoint, the replacement's boot) is spread "
        "over the node's on-demand age so far.")
    max_moves_per_hour: int = Field(4, ge=1, le=MAX_NODES,
                                    description="Moves the pool starts in any hour.")
    checkpoint_every: Duration | None = Field(
        None, description="How often the pool's jobs checkpoint. Unknown (default): the worst "
        "case, a job redoes all its work since it started.")
    evidence_window: Duration = Field(
        timedelta(minutes=10), description="How recent a granted spot launch of the (type, "
        "zone) must be to count as \"spot is back\" (with no refusal or interruption since).")
    probe: bool = Field(
        False, description="Without such evidence, launch the spot replacement anyway when "
        "its (type, zone) had no spot capacity error or interruption within "
        "capacity_error_backoff: the make-before-break launch is the probe. A refused launch "
        "is not billed, the on-demand node keeps serving, and the refusal backs the offering "
        "off, so probes are bounded by one per (type, zone) per back-off.")

    @field_validator("after", "evidence_window")
    @classmethod
    def _positive(cls, value: timedelta) -> timedelta:
        if value <= timedelta(0):
            raise ValueError("must be longer than 0s")
        return value

    @field_validator("checkpoint_every")
    @classmethod
    def _positive_or_unknown(cls, value: timedelta | None) -> timedelta | None:
        if value is not None and value <= timedelta(0):
            raise ValueError("must be longer than 0s (leave it out when unknown)")
        return value


class SpotScarcity(_Strict):
    """A spot outage under way, read from the pool's own refusals, and what the pool does
    while it lasts (capacity.spot_scarcity)."""

    zones: int = Field(ge=1, le=64, description="Zones of the pool with a spot launch refused "
                       "for want of capacity; at most the pool's zones when it lists them.")
    within: Annotated[Duration, SCARCITY_WITHIN] = Field(
        timedelta(minutes=30), description="How recent a refusal counts (1m to 2h: the "
        "service keeps capacity errors for two hours).")
    keep_idle: bool = Field(
        True, description="Idle spot nodes are kept and spot nodes are not consolidated: "
        "one removed now may not come back before the outage ends. On-demand nodes (a "
        "fallback's) go as usual, since on-demand can be bought back; replacements "
        "(unhealthy, expired, over max_nodes) go on.")
    headroom_gpus: int = Field(
        0, ge=0, le=100_000, description="scale_up.headroom_gpus while it lasts, if higher: "
        "spare GPUs for the jobs that arrive when the last zones go dry, bought as the pool "
        "buys (spot in a zone not refused, else as spot_fallback says).")


class Capacity(_Strict):
    on_demand_base: int = Field(0, ge=0, le=MAX_NODES, description="First N nodes of the pool are on-demand.")
    spot_percent: Percent = Field(70, description="Share of nodes above the base that are spot.")
    spot_fallback: Literal["on-demand", "none"] = Field(
        "on-demand", description="What to launch when no spot offering is available."
    )
    max_spot_price_ratio: float = Field(
        0.7, gt=0, le=1, description="Skip spot offerings priced above this share of on-demand."
    )
    capacity_error_backoff: Duration = Field(
        timedelta(minutes=15),
        description="How long a (type, zone, market) that failed with a capacity error is avoided.",
    )
    on_interruption: Literal["same", "on-demand"] = Field(
        "same", description="Market of the replacement for an interrupted spot node."
    )
    max_wait: Duration | None = Field(
        None, description="While spot is refused somewhere in the pool (a recent spot "
        "capacity error), a pending job that has waited this long is served on-demand "
        "(with spot_fallback: on-demand) instead of trying the next spot zone. Default by the "
        "team's priority: high 0s, medium 10m, low 30m. At most 1d.")

    max_spot_share_per_zone: float | None = Field(
        None, gt=0, le=1, description="Most of the pool's spot nodes (serving and on their way) "
        "one zone may hold, so one zone's outage takes at most this share of them; a zone may "
        "always hold one. A full zone's spot offers are skipped, as a refused one's are. Needs "
        "the pool's zones listed, at least 1/share of them. Off by default.")
    return_to_spot: ReturnToSpot | None = Field(
        None, description="Move fallback on-demand nodes back to spot when it returns. Off "
        "by default: a move restarts the node's jobs from their last checkpoint.")
    spot_scarcity: SpotScarcity | None = Field(
        None, description="Opt-in: while at least `zones` of the pool's zones refused a spot "
        "launch within `within`, keep idle nodes (keep_idle) and hold headroom_gpus spare, "
        "for the jobs that arrive if the outage spreads to the last zones. Off by default: "
        "the kept and spare nodes are billed.")

    @field_validator("max_wait")
    @classmethod
    def _max_wait_bounded(cls, value: timedelta | None) -> timedelta | None:
        if value is not None and value > timedelta(days=1):
            raise ValueError("max_wait is at most 1d: a longer wait is no fallback")
        return value

    def markets(self) -> list[Market]:
        """The markets the pool launches in."""
        out = [Market.SPOT] if self.spot_percent > 0 else []
        if self.on_demand_base > 0 or self.spot_percent < 100 or self.spot_fallback == "on-demand":
            out.append(Market.ON_DEMAND)
        return out

    def wait_limit(self, priority: Priority) -> timedelta:
        """max_wait, or the priority's default. The V100 spot trace's outages last 20 min at
        the median: low priority waits out most of one, high priority none."""
        if self.max_wait is not None:
            return self.max_wait
        return MAX_WAIT_BY_PRIORITY[priority]


class ScaleUp(_Strict):
    gpu_utilization_above: Percent = Field(
        80, description="Mean GPU utilization over window that adds nodes.")
    window: Duration = Field(timedelta(minutes=5), description="Averaging window of the utilization.")
    metric: Literal["gpu_util", "gr_engine_active"] = Field(
        "gpu_util",
        description="DCGM_FI_DEV_GPU_UTIL, or DCGM_FI_PROF_GR_ENGINE_ACTIVE (profiling metric).",
    )
    pending_jobs: bool = Field(True, description="Launch capacity for pending GPU jobs.")
    cooldown: Annotated[Duration, COOLDOWN] = Field(
        timedelta(minutes=3), description="Minimum time between utilization-driven scale-ups "
        "(at least 1s)."
    )
    max_step: int = Field(4, ge=1, le=MAX_NODES, description=(
        "Most nodes launched in one tick without demand evidence (GPU utilization, floors, "
        "headroom). Pending jobs and interrupted nodes' work are held back only by max_nodes."))
    headroom_gpus: int = Field(
        0, ge=0, le=100_000, description="Whole GPUs kept free for the next jobs, beyond what "
        "pending jobs take: a floor that launches the pool's smallest type when they are used "
        "and keeps idle nodes from scale-down (Cluster Autoscaler users run pause pods for this).")


class ScaleDown(_Strict):
    gpu_utilization_below: Percent = Field(10, description="Idle threshold, below scale_up's threshold.")
    idle_for: Duration = Field(
        timedelta(minutes=15), description="How long a node stays idle before a drain.")
    cooldown: Annotated[Duration, COOLDOWN] = Field(
        timedelta(minutes=10), description="No scale-down this soon after a scale-up or "
        "scale-down (at least 1s)."
    )
    drain_timeout: Annotated[Duration, DRAIN_TIMEOUT] = Field(
        timedelta(minutes=30), description="How long a drain lets jobs run before "
        "checkpoint_signal (at least 30s).")
    max_draining_percent: Percent = Field(
        20, description="Most of the pool draining at once (at least one node).")
    checkpoint_signal: Signal = Field(
        "USR1", description="Signal sent to jobs still running at drain_timeout before requeue."
    )
    checkpoint_grace: Duration = Field(
        timedelta(minutes=2), description="Time after checkpoint_signal until requeue.")
    consolidate_below: Percent | None = Field(
        None, description="Opt-in: a node with jobs but fewer than this percent of its GPUs "
        "allocated, no job started on it for idle_for, whose jobs all fit on the free GPUs of "
        "the pool's other nodes, is drained at once (checkpoint_signal, checkpoint_grace, "
        "requeue) so its jobs move there; if they fit nowhere else but on a cheaper instance "
        "type of the pool, the node is replaced by one of that type. One node per pool per "
        "tick. Off by default: it restarts running jobs from their last checkpoint.")

    def drain_wait(self, trigger: str | None) -> timedelta:
        """How long a drain lets jobs run before signalling them. A consolidation drains a
        node on purpose to move its jobs while there is room for them elsewhere: waiting
        drain_timeout for jobs that run for days would only let that room fill up. A
        capacity request's ttl is the deadline itself: its jobs are signalled at once."""
        return timedelta(0) if trigger in _MOVES else self.drain_timeout


# Drains that move jobs on purpose (to free GPUs elsewhere, to a spot node already READY) or
# meet a deadline (a capacity request's ttl): the checkpoint signal goes at once.
_MOVES = frozenset({"consolidate", "spot-returned", "ttl"})


class Lifetime(_Strict):
    max_node_age: Annotated[Duration, MAX_NODE_AGE] | None = Field(
        None, description="Nodes older than this are replaced (at least 1h). None: never.")
    max_job_runtime: Duration | None = Field(
        None, description="Jobs running longer are reported (audit long-job); see action.")
    signal_long_jobs: bool = Field(
        False, description="Also signal jobs past max_job_runtime to checkpoint, not only report."
    )
    action: Literal["report", "release"] = Field(
        "report", description="What happens to a job past max_job_runtime. report: reported "
        "(and signalled if signal_long_jobs). release: it gets scale_down.checkpoint_signal, "
        "then after scale_down.checkpoint_grace it is requeued (Slurm) or its pod evicted "
        "(Kubernetes), so its GPUs go back to the queue; it resumes from its checkpoint. "
        "Teams whose priority is in the service's engine.long_job_release_exempt are only "
        "reported.")


class Health(_Strict):
    max_gpu_temperature: float = Field(87, gt=0, le=150, description="Degrees C.")
    replace_on_xid: bool = Field(True, description="Replace a node whose GPU reports an XID error.")
    replace_on_thermal_throttle: bool = Field(
        False, description="Replace a node whose GPU is thermally throttled.")
    replace_on_failed_health_check: bool = Field(True, description="Replace a node whose health check fails.")
    replace_on_ecc: bool = Field(
        True, description="Replace a node whose GPU reports an uncorrectable (double-bit) ECC "
        "error, a failed row remapping or a page retirement pending (DCGM).")
    replace_when_unusable: bool = Field(
        True, description="Replace a READY node its scheduler calls unusable (Slurm DOWN, "
        "NOT_RESPONDING or a drain nobody of ours set; Kubernetes NotReady; fewer GPUs "
        "advertised than its type has) for longer than unready_grace.")
    unready_grace: Duration = Field(
        timedelta(minutes=10), description="How long the scheduler may call a READY node "
        "unusable before it is replaced (Cluster Autoscaler waits 10m for unready nodes too).")
    replace_when_silent: bool = Field(
        True, description="Replace a READY node whose GPU metrics stopped while the rest of "
        "the fleet reports (a GPU off the bus, a dead exporter or node) after silent_grace.")
    silent_grace: Duration = Field(
        timedelta(minutes=5), description="How long a READY node may send no GPU metrics "
        "while the rest of the fleet reports before it is replaced.")
    check_interval: Annotated[Duration, HEALTH_CHECK_INTERVAL] | None = Field(
        None, description="Run the bootstrap's GPU health check (playbooks/health-check.yml: "
        "nvidia-smi's GPU count and model, uncorrectable ECC errors, temperatures; DCGM's "
        "diagnostic where DCGM runs) on each READY node this often; a failed check replaces "
        "the node (replace_on_failed_health_check). Off when unset.")


class ScheduleEntry(_Strict):
    cron: CronText = Field(
        description="Standard 5-field cron, evaluated in UTC unless timezone is set.")
    min_nodes: int = Field(ge=0, le=MAX_NODES, description="The pool's floor while the entry is active.")
    duration: Duration = Field(description="How long the floor holds after the cron fires.")
    timezone: TimeZoneName = Field("UTC", description="Time zone the cron is read in.")


class Predictive(_Strict):
    """Capacity ahead of the forecast peak (docs/concepts/predictive.md)."""

    mode: Literal["off", "forecast-only", "scale"] = Field(
        "off", description="forecast-only: report the forecast; scale: also hold it as a floor.")
    quantile: float = Field(0.8, ge=0.5, le=0.99, description="Forecast quantile held as a floor.")
    lead: Duration | None = Field(
        None, description="How far ahead capacity is bought (default: the pool's measured "
        "boot-to-ready time).")
    min_history: Duration = Field(timedelta(days=7), description="History needed before the "
                                  "learned model is used (the hour-of-week baseline needs a day).")
    max_extra_gpus: int = Field(64, ge=0, le=1_000_000, description="Most GPUs the forecast "
                                "holds above the GPUs jobs request now.")


def percentile(quantile: float) -> str:
    """How reasons name a forecast quantile: 0.8 -> p80, 0.995 -> p99.5."""
    return f"p{quantile * 100:.10g}"


class WarmPool(_Strict):
    """Stopped, bootstrapped instances a launch starts before it launches cold ones
    (docs/integrations/terraform-ansible.md, Warm pools). The service runs them on AWS with
    on-demand warm nodes (service/config/warm_pools.py); `gpu-autoscaler simulate` models
    the rest."""

    size: int | Literal["forecast"] = Field(
        description="Warm nodes kept: a number, or forecast: the peak of the pool's "
        "forecast over the next hour at warm_pool.quantile (its predictive model, so "
        "predictive.mode must be forecast-only or scale) minus the GPUs running or on their "
        "way, in nodes of the pool's smallest type; always at most max.")
    max: int = Field(ge=1, le=MAX_NODES, description="Most warm nodes kept at once.")
    # A stopped node costs its volume only, so the warm pool can stand ready for a tail the
    # floor (predictive.quantile, running GPUs) would pay full price to hold; at the
    # floor's quantile it would keep nothing (docs/integrations/terraform-ansible.md, Sizing).
    quantile: float = Field(0.99, ge=0.5, le=0.999, description="size: forecast: the "
                            "forecast quantile warm nodes stand ready for (above "
                            "predictive.quantile: warm nodes cost only their volumes).")

    @field_validator("size", mode="before")
    @classmethod
    def _size_bounded(cls, value: object) -> object:
        # One message for both spellings (the union would report each member's own).
        number = isinstance(value, int) and not isinstance(value, bool) and 0 <= value <= MAX_NODES
        if value != "forecast" and not number:
            raise ValueError(f"size is a number of warm nodes (0 to {MAX_NODES}) or forecast, "
                             f"not {value!r}")
        return value

    @model_validator(mode="after")
    def _size_within_max(self) -> WarmPool:
        if isinstance(self.size, int) and self.size > self.max:
            raise ValueError(f"size ({self.size}) is above max ({self.max}): max is the most "
                             "warm nodes kept")
        return self


class MpsSettings(_Strict):
    active_thread_percentage: Percent = Field(100, description="Default share of SMs per MPS client.")
    pinned_device_mem_limit_mib: int | None = Field(
        None, ge=1, le=10_000_000, description="Per-GPU pinned memory limit.")
    # Volta and later serve at most 48 MPS clients per GPU.
    replicas: int = Field(4, ge=2, le=48, description="Kubernetes: clients per GPU the device "
                          "plugin advertises as nvidia.com/gpu.shared.")


# A fully qualified image reference: registry host (with a dot or a port, or localhost, as
# the docker CLI tells a host from a name), path, then a tag, a digest or both. containerd
# pulls nothing else, and an implicit :latest would make a baked image's content unknown.
_IMAGE_REF = re.compile(
    r"^(?:localhost|[A-Za-z0-9-]+(?:\.[A-Za-z0-9-]+)+|[A-Za-z0-9-]+(?=:[0-9]))(?::[0-9]{1,5})?/[a-z0-9]+(?:(?:[._]|__|-+)[a-z0-9]+)*(?:/[a-z0-9]+(?:(?:[._]|__|-+)[a-z0-9]+)*)*"
    r"(?::[A-Za-z0-9_][A-Za-z0-9_.-]{0,127})?(?:@sha256:[0-9a-f]{64})?$")
MAX_PREPULL = 20


def _image_ref(value: str) -> str:
    last = value.rsplit("/", 1)[-1]
    if len(value) > 512 or not _IMAGE_REF.match(value) or (":" not in last and "@" not in last):
        raise ValueError(
            f"{value[:100]!r} is not a fully qualified image reference with a tag or digest, "
            "e.g. nvcr.io/nvidia/pytorch:24.05-py3 or docker.io/library/python@sha256:<64 hex>")
    return value


ImageRef = Annotated[str, AfterValidator(_image_ref)]


class Bootstrap(_Strict):
    driver: DriverBranch = Field("550", description="NVIDIA driver branch.")
    cuda: CudaVersion = Field("12.4", description="CUDA toolkit version, major.minor.")
    sharing: Literal["none", "mig", "mps", "time-slicing"] = Field("none", description="How jobs share GPUs.")
    mig_profiles: list[str] = Field(default_factory=list, description="e.g. ['3g.20gb', '3g.20gb']")
    mps: MpsSettings = MpsSettings()
    time_slicing_replicas: int = Field(4, ge=2, le=64, description="time-slicing: replicas offered per GPU.")
    container_runtime: Literal["containerd", "docker"] = Field(
        "containerd", description="Nodes' container runtime.")
    prepull: list[ImageRef] = Field(
        default_factory=list, max_length=MAX_PREPULL, description="Container images pulled "
        "into containerd (namespace k8s.io) by the image-time part of the playbook: a baked "
        "image carries them, so a node launched from it starts its first containers without "
        "a pull; a node from the base image pulls them while it bootstraps. Fully qualified, "
        "with a tag or digest; the registry must allow anonymous pulls (a bake passes no "
        "secret). Part of the bootstrap hash: a change makes the image stale. containerd "
        "only.")
    dcgm_diag_level: int = Field(1, ge=1, le=3, description="dcgmi diag -r level.")
    timeout: Duration = Field(timedelta(minutes=30), description="Time limit of a node's bootstrap.")
    image: Literal["base", "baked"] = Field(
        "base", description="base: new nodes launch from the region's base image. baked "
        "(aws only): the pool's Terraform root module launches new nodes from the newest "
        "image of the account tagged with the pool's bootstrap hash (base image, driver, CUDA, "
        "container runtime, pre-pulls, cluster.kind, the image-time roles), see when_stale; a "
        "node launched from that image runs only the node-time part of the playbook (--tags "
        "node), one launched from the base image (stale) the whole of it. `gpu-autoscaler "
        "image bake TEAM/POOL` makes the image (docs/integrations/terraform-ansible.md).")
    images_kept: int = Field(3, ge=1, le=100, description="baked: how many of the images "
                             "the pool's bakes made are kept; after a good bake the older "
                             "ones are deregistered (with their snapshots).")
    when_stale: Literal["full", "hold"] = Field(
        "full", description="baked, and no image has the pool's bootstrap hash (a setting "
        "changed since the last bake): full launches from the base image; hold launches "
        "nothing (the engine turns the pool's launches into a Hold when the cloud lists no "
        "such image, and the Terraform plan refuses one that would launch a node); removals "
        "still apply, until an image exists.")

    @model_validator(mode="after")
    def _prepull_runtime(self) -> Bootstrap:
        if self.prepull and self.container_runtime != "containerd":
            raise ValueError("prepull pulls into containerd; with container_runtime: docker "
                             "leave prepull empty")
        if len(set(self.prepull)) != len(self.prepull):
            raise ValueError("prepull lists an image twice")
        return self


START_WITHIN = at_least(timedelta(seconds=30), "Slurm starts a job that fits within a few "
                        "scheduling passes; shorter would burst jobs it was about to start")
SlurmHostlist = Annotated[str, StringConstraints(
    pattern=r"^[A-Za-z0-9][A-Za-z0-9._,\[\]-]{0,511}$")]


class OnPrem(_Strict):
    """The cluster's static (on-premises) Slurm nodes, whose free GPUs are used before any
    cloud launch. Exactly one of ``partition`` and ``nodes``."""

    partition: PartitionName | None = Field(
        None, description="A partition holding only the on-prem nodes, e.g. onprem (their "
        "free GPUs are counted whatever other partitions they are in).")
    nodes: SlurmHostlist | None = Field(None, description="The on-prem nodes as a Slurm "
                                        "hostlist, e.g. gpu[01-04].")
    burst_after: Duration = Field(
        timedelta(0), description="Burst-only: a pending job that does not fit on-prem is "
        "bought a cloud node only once it has waited this long (0: at once).")
    start_within: Annotated[Duration, START_WITHIN] = Field(
        timedelta(minutes=5), description="A job that fits on-prem's free GPUs but is still "
        "pending after this is taken as not fitting there (something other than GPUs keeps "
        "it off: memory, a constraint, a reservation).")

    @model_validator(mode="after")
    def _one_of(self) -> OnPrem:
        if (self.partition is None) == (self.nodes is None):
            raise ValueError("on_prem needs exactly one of partition and nodes")
        return self

    def label(self) -> str:
        """How decisions name it: the hostlist, or the partition."""
        return self.nodes if self.nodes is not None else f"partition {self.partition}"


class Cluster(_Strict):
    kind: Literal["slurm", "kubernetes", "none"] = Field("none", description="The scheduler the "
                                                         "nodes join (a baked image carries its packages).")
    partition: PartitionName = Field("gpu", description="Slurm: the partition the pool serves.")
    accounts: list[SlurmName] = Field(
        default_factory=list, max_length=MAX_SLURM_NAMES, description="Slurm: the accounts "
        "whose pending jobs this pool serves (compared without case, as Slurm does); empty: "
        "any. Pools of one partition split its jobs by accounts, qos and users.")
    qos: list[SlurmName] = Field(
        default_factory=list, max_length=MAX_SLURM_NAMES, description="Slurm: the QOS whose "
        "pending jobs this pool serves (compared without case); empty: any.")
    users: list[SlurmUser] = Field(
        default_factory=list, max_length=MAX_SLURM_NAMES, description="Slurm: the users whose "
        "pending jobs this pool serves; empty: any.")
    on_prem: OnPrem | None = Field(
        None, description="Slurm: the static on-prem nodes whose free GPUs jobs use before "
        "this pool launches anything (hybrid burst).")
    labels: Labels = Field(default_factory=dict)
    taints: list[Taint] = Field(
        default_factory=list, description="Kubernetes: taints the pool's nodes register with, "
        "'key=value:Effect' (NoSchedule, PreferNoSchedule, NoExecute); pending pods must "
        "tolerate them to count as demand.")
    quota_from: Literal["policy", "resourcequota"] = Field(
        "policy", description="Kubernetes: 'resourcequota' also caps the team's max_gpus at the "
        "nvidia.com/gpu hard limit of its namespaces' ResourceQuotas (the smaller one applies).")

    def taint_triples(self) -> list[tuple[str, str, str]]:
        """(key, value, effect) of each taint; value '' when the taint has none."""
        out = []
        for taint in self.taints:
            head, _, effect = taint.rpartition(":")
            key, _, value = head.partition("=")
            out.append((key, value, effect))
        return out


class Pool(_Strict):
    name: Name = Field(description="Unique in the team; team + pool at most 52 characters.")
    cloud: Annotated[Cloud, Field(strict=False, description="The pool's cloud.")]
    region: RegionName = Field(description="A region the catalog knows for the cloud.")
    zones: list[ZoneName] = Field(default_factory=list,
                                  description="Empty: any zone of the region.")
    instance_types: list[InstanceTypeName] = Field(
        min_length=1, description="Catalog types; the cheapest $/GPU-h that fits wins.")
    capacity: Capacity = Capacity()
    min_nodes: int = Field(0, ge=0, le=MAX_NODES, description="Floor of the pool's size.")
    max_nodes: int = Field(ge=0, le=MAX_NODES, description="Most nodes of the pool; at least min_nodes.")
    scale_up: ScaleUp = ScaleUp()
    scale_down: ScaleDown = ScaleDown()
    lifetime: Lifetime = Lifetime()
    health: Health = Health()
    schedule: list[ScheduleEntry] = Field(default_factory=list)
    bootstrap: Bootstrap = Bootstrap()
    cluster: Cluster = Cluster()
    predictive: Predictive = Predictive()
    warm_pool: WarmPool | None = Field(
        None, description="Keep up to max bootstrapped instances stopped (paying for their "
        "volumes only); a launch starts them before it launches cold nodes. Off by default. "
        "The service runs them on AWS for pools that launch on-demand nodes and refuses "
        "the rest (Alibaba Cloud, spot-only pools); `gpu-autoscaler simulate` models all.")
    placement_group: Name | None = Field(
        None, description="Pools of the team with the same placement group serve the same work: "
        "each pending job goes to the group's pool that can run it (GPU model and count, "
        "region, constraints, max_nodes) at the lowest expected $/GPU-h, counting spot "
        "prices, recent refusals and interruption notices. A job that fits no other pool "
        "stays where its partition or labels put it.")
    pin_region: bool = Field(
        False, description="Jobs matched to this pool never spill to a pool of its placement "
        "group in another region (data that may not leave the region).")


class TeamPolicy(_Strict):
    apiVersion: Literal["gpu-autoscaler/v1"] = Field(
        "gpu-autoscaler/v1", description="Policy format version.")
    team: Name = Field(description="Unique across files; becomes Terraform keys and hostnames.")
    priority: Annotated[Priority, Field(
        strict=False, description="Order under a global cap.")] = Priority.MEDIUM
    quota: Quota = Quota()
    pools: list[Pool] = Field(min_length=1)
    placement_groups: dict[Name, list[Name]] = Field(
        default_factory=dict, description="Placement groups as lists of pool names, the same "
        "as placement_group on each pool (a pool is in at most one group).")
    forbid_clouds: list[Annotated[Cloud, Field(strict=False)]] = Field(
        default_factory=list, description="Clouds none of the team's work may run on: a pool "
        "on one of them is refused when the policy loads.")

    def group_of(self, pool: str) -> str | None:
        """The placement group of the pool named ``pool`` (None: it is decided alone)."""
        for group, names in self.placement_groups.items():
            if pool in names:
                return group
        return next((p.placement_group for p in self.pools if p.name == pool), None)

    def group_mates(self, pool: str) -> list[str]:
        """The other pools of ``pool``'s placement group ([] when it is decided alone)."""
        group = self.group_of(pool)
        if group is None:
            return []
        return [p.name for p in self.pools if p.name != pool and self.group_of(p.name) == group]

    def pool(self, name: str) -> Pool:
        for pool in self.pools:
            if pool.name == name:
                return pool
        raise KeyError(f"team {self.team} has no pool {name!r}")


def find_pool(policies: Mapping[str, TeamPolicy], team: str, pool: str) -> Pool | None:
    """The pool's policy, or None when its team or pool is not (or no longer) defined."""
    policy = policies.get(team)
    if policy is None:
        return None
    return next((p for p in policy.pools if p.name == pool), None)


def pool_key(team: str, pool: str) -> str:
    """The one spelling of a pool's identity, used in snapshots, plans and the store."""
    return f"{team}/{pool}"

"""Settings of the executor and the reconciler (the ``executor:`` section of the config)."""

from __future__ import annotations

from datetime import timedelta
from typing import Literal

from pydantic import BaseModel, ConfigDict, Field

from autoscaler.model.lifecycle import StateLimits
from autoscaler.policy.duration import Duration


class ExecutorSettings(BaseModel):
    model_config = ConfigDict(frozen=True, extra="forbid")

    # -- operations ---------------------------------------------------------------------
    operations: Literal["workers", "inline"] = Field(
        "workers", description="Run applies, Ansible batches and drain steps on bounded "
        "workers so a tick never waits for them (the service), or inside advance() (tests, "
        "step-by-step debugging).")
    bootstrap_parallelism: int = Field(4, ge=1, description="Ansible batches run at once.")
    drain_parallelism: int = Field(8, ge=1, description="Drain steps run at once.")
    notice_interval: Duration = Field(
        timedelta(seconds=2), description="How often the spot-notice loop reads the queues "
        "(a notice's drain starts within about this long, whatever else runs).")
    notice_read_budget: Duration = Field(
        timedelta(seconds=2), description="How long one pass of the notice loop may read one "
        "queue (receive, check, record, delete: 10 messages at a time) before it acts on what "
        "it found; a flood of junk is deleted as it is read, and what is left waits for the "
        "next pass.")
    # -- provisioning -------------------------------------------------------------------
    apply_parallelism: int = Field(
        4, ge=1, description="Pools applied at once (each pool has its own state and lock).")
    advance_budget: Duration = Field(
        timedelta(minutes=10),
        description="advance() starts no new pool apply after this long; the rest waits for "
        "the next tick (each apply is bounded by the Terraform command timeout).")
    provision_attempts: int = Field(
        3, ge=1, description="Applies that may fail without naming the node (lock, provider) "
        "before the node goes to PROVISION_FAILED. A state lock held by another run does not "
        "count: the PROVISIONING timeout bounds that wait.")
    # -- bootstrap and readiness --------------------------------------------------------
    bootstrap_retries: int = Field(2, ge=0, description="Ansible runs after the first that fails.")
    bootstrap_retry_backoff: Duration = Field(
        timedelta(seconds=30), description="Wait before an Ansible retry.")
    bootstrap_batch_size: int = Field(50, ge=1, description="Nodes per ansible-runner run.")
    ready_wait_timeout: Duration = Field(
        timedelta(minutes=10), description="After a successful bootstrap, the longest wait for "
        "the scheduler to see the node with all its type's GPUs (and their metrics) before "
        "BOOTSTRAP_FAILED; the wait too while the pool has no READY node to measure. Once it "
        "has, the wait is 4 x the slowest of its last 5 nodes (bootstrap done -> READY), "
        "between ready_wait_floor and this.")
    ready_wait_floor: Duration = Field(
        timedelta(minutes=2), description="The least wait after a bootstrap, however fast the "
        "pool's earlier nodes were seen.")
    ready_requires_metrics: bool = Field(
        True, description="READY also needs the node's GPU metrics in the tick's snapshot "
        "(when advance() is given one).")
    # -- drains -------------------------------------------------------------------------
    checkpoint_signal: str = Field(
        "USR1", description="Signal for nodes without a policy (a pool's scale_down."
        "checkpoint_signal wins).")
    checkpoint_grace: Duration = Field(timedelta(minutes=2), description="For nodes without a policy.")
    drain_timeout: Duration = Field(
        timedelta(minutes=30), description="For nodes whose pool has no policy any more.")
    checkpoint_scope: Literal["batch", "full"] = Field(
        "batch", description="Slurm: signal the batch shell (scancel --batch) or every step "
        "as well (--full).")
    drain_stuck_margin: Duration = Field(
        timedelta(minutes=5), description="A drain still running this long after its timeout "
        "plus grace is forced to DRAINED by the reconciler if its jobs were signalled (or the "
        "scheduler lists the node empty); otherwise it stays DRAINING, reported drain-stuck.")
    # -- interruptions ------------------------------------------------------------------
    interruption_drain_deadline: Duration = Field(
        timedelta(0), description="An interrupted node's jobs get this long (never past the "
        "cloud's notice) before they are signalled to checkpoint. 0: the checkpoint signal "
        "goes first (a 2-minute notice is too short to wait for jobs to end).")
    interruption_checkpoint_grace: Duration = Field(
        timedelta(seconds=30), description="Then this long before they are requeued.")
    on_rebalance: Literal["interrupt", "drain", "ignore"] = Field(
        "interrupt", description="An 'Instance Rebalance Recommendation': treat the node as "
        "interrupted (drain now, replacement launched), drain it normally, or only record it. "
        "It is advice, so either move waits while max_draining_percent of the pool's nodes "
        "are leaving (an interruption warning never waits).")
    # -- reconciliation -----------------------------------------------------------------
    unknown_instances: Literal["report", "adopt", "destroy"] = Field(
        "report", description="A tagged instance the store does not know: only report it, "
        "adopt it as a node of its pool, or destroy it through Terraform.")
    lost_after_misses: int = Field(
        2, ge=1, description="Reconciler runs in a row that must miss a node's instance in "
        "the cloud before the node is LOST (one empty answer is not proof).")
    lost_freeze_percent: int = Field(
        45, ge=0, le=100, description="A cloud answer that lacks more than this share of a "
        "pool's known instances (and more than lost_freeze_count of them) is not believed: "
        "no node of the pool is marked LOST while it lasts (Cluster Autoscaler's "
        "max-total-unready-percentage). 100 turns the freeze off, and the whole-answer one "
        "(an answer lacking more than max(1, 10%) of its region's instances, or empty).")
    lost_freeze_count: int = Field(
        1, ge=0, description="Missing instances a pool may have in one answer before "
        "lost_freeze_percent applies (CA's ok-total-unready-count, 3 there).")
    max_removals_per_tick: int = Field(
        10, ge=1, description="Fleet-wide: nodes the reconciler may mark LOST plus unknown "
        "instances it may destroy in one run; the rest wait for the next run.")
    cloud_list_interval: Duration = Field(
        timedelta(0), description="How often the reconciler lists each region's instances to "
        "find lost nodes and unknown instances (0: every tick). Listing costs a paginated "
        "describe of the whole fleet; at 1,000 nodes a longer interval (Karpenter's garbage "
        "collection lists every 2 min) keeps it out of most ticks. Runs in between compare "
        "nothing, so a LOST mark takes its misses x this interval.")
    state_check_interval: Duration = Field(
        timedelta(minutes=5), description="How often each pool's Terraform state is compared "
        "with the store (reads the state: ~1 s per pool, on a worker, not in the tick).")

    @property
    def state_limits(self) -> StateLimits:
        """What the lifecycle's ``state_limit`` needs from these settings."""
        return StateLimits(
            bootstrap_retries=self.bootstrap_retries,
            bootstrap_retry_backoff=self.bootstrap_retry_backoff,
            ready_wait_timeout=self.ready_wait_timeout,
            drain_timeout=self.drain_timeout,
            checkpoint_grace=self.checkpoint_grace,
            drain_stuck_margin=self.drain_stuck_margin,
            interruption_drain_deadline=self.interruption_drain_deadline,
            interruption_checkpoint_grace=self.interruption_checkpoint_grace)

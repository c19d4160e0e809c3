"""The reconciler: store vs each pool's Terraform state vs the cloud vs the scheduler.

Run every tick before the engine decides (it is the loop's safety net; scaling never
waits for it: it does one paginated describe per cloud region, reads a pool's Terraform
state only every ``state_check_interval``, and never drains or waits for anything):

* **interruptions** (when given an :class:`InterruptionIntake`): notices -> INTERRUPTED
  before the engine looks at the fleet, so it launches the replacement this very tick;
* **promised replacements** a crash interrupted are created (before the engine counts
  the pool, or it would launch a second node for the same gap);
* **timeouts**: a node past its ``model/lifecycle.py`` :func:`state_limit` moves on as its
  TIMEOUTS entry says (REQUESTED or PROVISIONING -> PROVISION_FAILED, BOOTSTRAPPING ->
  BOOTSTRAP_FAILED, INTERRUPTED -> TERMINATING, TERMINATING -> LOST). The limit includes
  what the executor itself retries and waits (bootstrap retries and ready wait,
  ``drain_timeout`` + ``checkpoint_grace``), so this only catches what got stuck. A stuck
  drain is forced to DRAINED (which the engine then terminates) only on evidence: its
  progress shows the jobs were signalled (SIGNALLED, REQUEUEING, REQUEUED), or this tick's
  scheduler view lists the node with no work. Otherwise it stays DRAINING and each run
  reports ``drain-stuck`` ("drain stuck for X: phase P, scheduler S; not forced"): time
  alone is absence of evidence (a scheduler unreachable for hours never cordoned the node
  nor signalled its jobs);
* **cloud**: a node whose instance the cloud no longer lists (``lost_after_misses`` runs
  in a row) becomes LOST; its key leaves the pool's map, the next apply drops it from
  the state and the executor moves it to TERMINATED. Never on absence of evidence
  (:mod:`autoscaler.service.control.lost_guard`): an answer that lacks a large share of a pool,
  or more than max(1, 10%) of its region, or lists nothing, freezes LOST marking for it
  (``frozen``, alerted), a node the scheduler reports busy or does not list is kept, and
  LOST marks plus destroys are capped fleet-wide per run. A tagged instance the store does
  not know is reported and, per ``unknown_instances``, adopted (a BOOTSTRAPPING node of
  its pool under its ``node`` tag; the next apply imports it into the pool's state) or
  destroyed through Terraform (imported under a spare key and removed by the same
  apply): nothing but Terraform ever terminates an instance;
* **Terraform state**: keys the state holds that the store does not want, or wanted
  nodes the state lost, mark the pool stale so the executor applies it again. Given the
  executor's runner, a pool's check is an operation (kind ``state``) under the pool's apply
  key: it never runs while the pool is applied (the state is in flux then, and the apply
  reads it anyway) and never in the tick (a ``terraform state pull`` per shard costs
  seconds on a loaded machine); what it finds is in the next run's report;
* **scheduler** (given the tick's snapshot): READY nodes the scheduler reports down are
  reported.
"""

from __future__ import annotations

import logging
import threading
from collections.abc import Callable, Iterable, Mapping
from datetime import datetime, timedelta

from pydantic import BaseModel, Field

from autoscaler.actuators.node_map import desired_maps
from autoscaler.actuators.terraform.bake import ROLE_TAG
from autoscaler.clouds.base import CloudInstance, CloudMarket
from autoscaler.fleet.store import FleetStore
from autoscaler.model.changes import Adopt, Move
from autoscaler.model.lifecycle import (
    GONE,
    INSTANCE_PENDING,
    INSTANCE_STATES,
    REMOVING,
    TIMEOUTS,
    NodeState,
    state_limit,
)
from autoscaler.model.node import Node
from autoscaler.model.pool import PoolRef
from autoscaler.model.progress import DrainPhase, NodeProgress
from autoscaler.model.snapshot_parts import Observed
from autoscaler.policy.duration import format_duration
from autoscaler.policy.models import TeamPolicy, find_pool
from autoscaler.service.control.interruptions import InterruptionIntake, InterruptionReport
from autoscaler.service.control.lost_guard import (
    busy_reason,
    counted,
    frozen_answer,
    frozen_pools,
    scheduler_view,
    strays_kept,
)
from autoscaler.service.executor.advance import AdvanceReport, Change
from autoscaler.service.executor.collaborators import Provisioner
from autoscaler.service.executor.operations import Runner
from autoscaler.service.executor.provision import apply_key
from autoscaler.service.executor.settings import ExecutorSettings

log = logging.getLogger(__name__)
S = NodeState
# An adopted node's age drives max_node_age replacement and the scale-down order, so a
# launch time from the cloud is believed only within these bounds (clocks skew a little).
OLDEST_LAUNCH = timedelta(days=5 * 365)
LAUNCH_SKEW = timedelta(minutes=5)
# Drain phases that show the jobs got their checkpoint signal: past the limit, such a drain
# may be forced to DRAINED (what still runs has had its signal, and its grace).
SIGNALLED_PHASES = {DrainPhase.SIGNALLED: "sent SIG{signal} at {at} but not requeued",
                    DrainPhase.REQUEUEING: "sent SIG{signal} at {at}; their requeue was started",
                    DrainPhase.REQUEUED: "sent SIG{signal} at {at} and requeued"}


class Finding(BaseModel):
    kind: str  # unknown-instance, bake-builder, adopted, destroying, lost, missing, timeout,
    # drain-stuck, state-only, state-missing, scheduler-down
    detail: str
    node: str | None = None
    instance_id: str | None = None
    pool: str | None = None


class ReconcileReport(BaseModel):
    at: datetime
    findings: list[Finding] = Field(default_factory=list)
    changes: list[Change] = Field(default_factory=list)
    interruptions: dict[str, list[str]] = Field(default_factory=dict)
    errors: list[str] = Field(default_factory=list)
    frozen: dict[str, str] = Field(default_factory=dict)  # pool -> why LOST marking is frozen

    def of(self, kind: str) -> list[Finding]:
        return [f for f in self.findings if f.kind == kind]


class Reconciler:
    def __init__(self, store: FleetStore, provisioner: Provisioner,
                 clouds: Callable[[str, str], CloudMarket], settings: ExecutorSettings,
                 clock: Callable[[], datetime], *,
                 policies: Callable[[], Mapping[str, TeamPolicy]] = dict,
                 interruptions: InterruptionIntake | None = None,
                 repair: Callable[[], AdvanceReport] | None = None,
                 runner: Runner | None = None,
                 monotonic: Callable[[], float] | None = None):
        """``monotonic``: the clock that measures how long a node stays in a state once
        seen (time.monotonic in the service); None: ``clock``'s, as tests drive it."""
        self.store, self.provisioner, self.clouds = store, provisioner, clouds
        self.monotonic = monotonic or (lambda: clock().timestamp())
        # (node, state, since) -> (its age on the wall clock when first seen, monotonic then)
        self._in_state: dict[tuple[str, str, datetime], tuple[timedelta, float]] = {}
        self.settings, self.clock, self.policies = settings, clock, policies
        self.interruptions = interruptions
        self.repair = repair  # the executor's: promised replacements a crash left uncreated
        self._misses: dict[str, int] = {}
        self._state_checked: dict[str, datetime] = {}
        self._listed: dict[tuple[str, str], datetime] = {}  # (cloud, region) -> last listing
        self._removals = 0  # LOST marks and destroys in this run (max_removals_per_tick)
        self._snapshot: Observed | None = None
        self.runner = runner  # None: state checks run inline, in the run that finds them due
        self._late: list[ReconcileReport] = []  # what state checks on workers found
        self._late_lock = threading.Lock()

    def run(self, snapshot: Observed | None = None) -> ReconcileReport:
        report = ReconcileReport(at=self.clock())
        self._removals, self._snapshot = 0, snapshot
        policies = self.policies()
        if self.interruptions is not None:
            report.interruptions = _interruptions(self.interruptions.poll(), report)
        self._repair(report)
        self._timeouts(policies, report)
        nodes = self.store.nodes()
        # A node that left by another path (a spot notice, a scale-down) is never listed
        # again nor marked LOST: its count would stay for the life of the process.
        counted = {n.name for n in nodes if n.instance_id and n.state not in GONE}
        self._misses = {k: v for k, v in self._misses.items() if k in counted}
        for cloud, region in sorted(_regions(nodes, policies)):
            last = self._listed.get((cloud, region))
            if last is not None and report.at - last < self.settings.cloud_list_interval:
                continue  # listed recently: compared again at the interval, never on old data
            try:
                instances = self.clouds(cloud, region).managed_instances()
            except Exception as exc:  # no cloud answer, no conclusions about this region
                report.errors.append(f"{cloud}/{region}: cannot list instances: {exc}")
                continue
            self._listed[(cloud, region)] = report.at
            here = [n for n in nodes if (n.cloud, n.region) == (cloud, region)]
            self._compare(cloud, region, here, instances, policies, report)
        # Collected before this run starts new checks: a check's findings are always in the
        # next run's report, however fast the worker ran it.
        self._collect_state_checks(report)
        self._check_states(self.store.nodes(), report)
        if snapshot is not None:
            self._check_scheduler(self.store.nodes(states=[S.READY]), snapshot, report)
        return report

    # -- helpers ----------------------------------------------------------------------------
    def _move(self, node: Node, to: NodeState, reason: str, report: ReconcileReport) -> bool:
        try:
            self.store.apply([Move(node.name, to, reason)], self.clock())
        except Exception as exc:  # moved by someone else meanwhile: next run looks again
            report.errors.append(f"{node.name}: not moved to {to}: {exc}")
            return False
        report.changes.append(Change(node=node.name, to=to, reason=reason))
        log.warning("%s -> %s: %s", node.name, to, reason)
        return True

    def _find(self, report: ReconcileReport, kind: str, detail: str, **where: str | None) -> None:
        report.findings.append(Finding(kind=kind, detail=detail, **where))
        log.info("reconcile %s: %s", kind, detail)

    def _repair(self, report: ReconcileReport) -> None:
        """Replacements a crash left promised but not created: before the engine decides,
        or it would count the pool short and launch twice."""
        if self.repair is None:
            return
        repaired = self.repair()
        for name in repaired.created:
            self._find(report, "replacement-created", f"{name} created for a replacement "
                       "promised before a restart", node=name)
        report.errors += repaired.errors

    # -- timeouts -----------------------------------------------------------------------------
    def _timeouts(self, policies: Mapping[str, TeamPolicy], report: ReconcileReport) -> None:
        now, limits = self.clock(), self.settings.state_limits
        seen, self._in_state = self._in_state, {}
        for node in self.store.nodes(states=list(TIMEOUTS)):
            timeout = TIMEOUTS[node.state]
            limit = state_limit(node.state, find_pool(policies, node.team, node.pool), limits)
            stuck = self._stuck_for(node, now, seen)
            if limit is None or stuck <= limit:
                continue
            cause: str | None = timeout.why
            if node.state is S.DRAINING:
                cause = self._drain_forced(node, stuck, limit, now, report)
                if cause is None:
                    continue
            why = (f"{node.state} for {format_duration(stuck)}, over {format_duration(limit)}: "
                   f"{cause}")
            if self._move(node, timeout.then, why, report):
                self._find(report, "timeout", why, node=node.name, pool=node.pool_key)

    def _stuck_for(self, node: Node, now: datetime,
                   seen: dict[tuple[str, str, datetime], tuple[timedelta, float]]) -> timedelta:
        """How long ``node`` has been in its state: its age on the wall clock when this
        process first saw it so, plus what the monotonic clock measured since. A step of the
        wall clock after that (NTP, a resumed VM) does not age it: a +1 h step failed
        bootstraps mid-run and forced drains inside their grace."""
        key = (node.name, node.state.value, node.state_since)
        wall = now - node.state_since
        first = seen.get(key) or (wall, self.monotonic())
        self._in_state[key] = first
        return min(wall, first[0] + timedelta(seconds=self.monotonic() - first[1]))

    def _drain_forced(self, node: Node, stuck: timedelta, limit: timedelta, now: datetime,
                      report: ReconcileReport) -> str | None:
        """Why a drain past its limit may be forced to DRAINED (the engine then terminates
        the node), or None: kept DRAINING and reported, one line, each run."""
        drain = node.progress.drain
        seen, says = scheduler_view(node, self._snapshot)
        phase = f"phase {drain.phase}" if drain is not None else "no drain progress recorded"
        if drain is not None and drain.phase in SIGNALLED_PHASES:
            # The limit assumes the signal went out at the drain's deadline. One sent later
            # (the executor or the scheduler was away) still owes the jobs their whole
            # checkpoint grace, counted from the signal.
            left = (drain.signalled_at + drain.grace - now if drain.signalled_at is not None
                    else timedelta(0))
            if left <= timedelta(0):
                at = (f"{drain.signalled_at:%Y-%m-%d %H:%M:%S}" if drain.signalled_at
                      else "an unrecorded time")
                done = SIGNALLED_PHASES[drain.phase].format(signal=drain.signal, at=at)
                return f"the drain reached {drain.phase}: its jobs were {done}; the scheduler {says}"
            if seen != "empty":
                log.info("%s: DRAINING past its limit, but its jobs were signalled at %s: "
                         "%s of their checkpoint grace left", node.name,
                         f"{drain.signalled_at:%H:%M:%S}", format_duration(left))
                return None
        if seen == "empty":
            return f"the scheduler {says} (drain at {phase}): nothing left to drain"
        error = f" (last error: {drain.last_error[:120]})" if drain is not None and drain.last_error else ""
        text = (f"drain stuck for {format_duration(stuck)} (limit {format_duration(limit)}): "
                f"{phase}{error}, scheduler {says}; not forced")
        report.findings.append(Finding(kind="drain-stuck", detail=text, node=node.name,
                                       pool=node.pool_key))
        log.warning("%s: %s", node.name, text)
        return None

    # -- cloud ----------------------------------------------------------------------------------
    def _compare(self, cloud: str, region: str, nodes: list[Node], instances: list[CloudInstance],
                 policies: Mapping[str, TeamPolicy], report: ReconcileReport) -> None:
        live = {i.instance_id: i for i in instances}
        known = {n.instance_id for n in nodes if n.instance_id}
        awaiting = {n.name for n in nodes if n.state in INSTANCE_PENDING and not n.instance_id}
        unknown = [i for i in instances if i.instance_id not in known and i.node not in awaiting]
        self._unknown(cloud, region, self._builders(unknown, report), policies, report, nodes)
        whole = frozen_answer(nodes, set(live), f"{cloud}/{region}", self.settings)
        frozen = {} if whole is not None else frozen_pools(nodes, set(live), self.settings)
        if whole is not None:  # one line; each pool with a missing instance is alerted
            self._find(report, "lost-frozen", whole)
            log.warning("reconcile: LOST marking frozen for %s/%s: %s", cloud, region, whole)
            for node in counted(nodes):
                if node.instance_id not in live:
                    report.frozen.setdefault(node.pool_key, whole)
        for pool, why in frozen.items():
            report.frozen[pool] = why
            self._find(report, "lost-frozen", why, pool=pool)
            log.warning("reconcile: LOST marking frozen for %s: %s", pool, why)
        for node in nodes:
            if not node.instance_id or node.state in GONE:
                continue
            if node.instance_id in live:
                self._misses.pop(node.name, None)
            elif whole is None and node.pool_key not in frozen:  # an answer not believed
                # counts for nothing
                self._missing(node, f"{cloud}/{region}", report)

    def _missing(self, node: Node, where: str, report: ReconcileReport) -> None:
        misses = self._misses.get(node.name, 0) + 1
        self._misses[node.name] = misses
        detail = f"instance {node.instance_id} of {node.name} is not in {where}"
        ids = {"node": node.name, "instance_id": node.instance_id, "pool": node.pool_key}
        if misses < self.settings.lost_after_misses:
            self._find(report, "missing", f"{detail} ({misses} time(s))", **ids)
            return
        busy = busy_reason(node, self._snapshot)
        if busy is not None:
            self._find(report, "lost-refused", f"{detail}, but it is not marked LOST: {busy}",
                       **ids)
            return
        if not self._spend(report, f"{node.name} not marked LOST yet"):
            return
        if self._move(node, S.LOST, f"{detail} (terminated or gone)", report):
            self._misses.pop(node.name, None)
            self._find(report, "lost", detail, **ids)

    def _spend(self, report: ReconcileReport, what: str) -> bool:
        """One removal from the fleet-wide per-run cap; False (reported) when it is used up."""
        cap = self.settings.max_removals_per_tick
        if self._removals >= cap:
            self._find(report, "removal-capped", f"{what}: max_removals_per_tick ({cap}) "
                       "reached this run; the rest waits for the next run")
            return False
        self._removals += 1
        return True

    def _builders(self, instances: list[CloudInstance],
                  report: ReconcileReport) -> list[CloudInstance]:
        """Reports the builders of image bakes and returns the other instances: a builder
        belongs to its bake's own Terraform state, which destroys it when the bake ends;
        adopting or destroying it here would break a bake under way."""
        others = []
        for inst in instances:
            if inst.tags.get(ROLE_TAG) != "builder":
                others.append(inst)
                continue
            pool = f"{inst.team}/{inst.pool}"
            self._find(report, "bake-builder", f"{inst.instance_id} is the builder of an image "
                       f"bake of {pool} (launched {inst.launched_at}); its bake destroys it. "
                       f"If no bake runs, `gpu-autoscaler image bake {pool}` finishes it",
                       instance_id=inst.instance_id, node=inst.node, pool=pool)
        return others

    def _unknown(self, cloud: str, region: str, instances: list[CloudInstance],
                 policies: Mapping[str, TeamPolicy], report: ReconcileReport,
                 nodes: list[Node]) -> None:
        doomed: dict[PoolRef, list[str]] = {}
        kept = strays_kept(nodes, instances, self.settings)
        for inst in instances:
            where = {"instance_id": inst.instance_id, "node": inst.node,
                     "pool": f"{inst.team}/{inst.pool}" if inst.team and inst.pool else None}
            self._find(report, "unknown-instance",
                       f"{inst.instance_id} ({inst.instance_type}, node tag {inst.node!r}) carries "
                       f"our managed-by tag but no node in the store has it", **where)
            mode = self.settings.unknown_instances
            if mode == "report":
                continue
            if not (inst.team and inst.pool):
                self._find(report, "unknown-instance", f"cannot {mode} {inst.instance_id}: no "
                           "team/pool tags", **where)
                continue
            ref = PoolRef(inst.team, inst.pool, cloud, region)
            if mode == "adopt":
                self._adopt(inst, ref, policies, report)
            elif ref.key in kept:
                self._find(report, "destroy-frozen", f"{inst.instance_id} not destroyed: "
                           f"{kept[ref.key]}", **where)
            elif self._spend(report, f"{inst.instance_id} not destroyed yet"):
                doomed.setdefault(ref, []).append(inst.instance_id)
        for ref, ids in doomed.items():
            self._destroy(ref, ids, report)

    def _adopt(self, inst: CloudInstance, ref: PoolRef, policies: Mapping[str, TeamPolicy],
               report: ReconcileReport) -> None:
        pool = find_pool(policies, ref.team, ref.pool)
        name = inst.node
        why = ("its pool has no policy" if pool is None else "it has no node tag" if not name
               else f"the name {name} is taken" if self.store.get(name) is not None else None)
        if why is not None or pool is None or name is None:
            self._find(report, "unknown-instance", f"cannot adopt {inst.instance_id}: {why}",
                        instance_id=inst.instance_id, pool=ref.key)
            return
        now = self.clock()
        created_at, odd = adopted_created_at(inst.launched_at, now)
        node = Node(name=name, team=ref.team, pool=ref.pool, cloud=ref.cloud, region=ref.region,
                    zone=inst.zone, instance_type=inst.instance_type, market=inst.market,
                    state=S.BOOTSTRAPPING, state_since=now, created_at=created_at,
                    instance_id=inst.instance_id, address=inst.private_ip,
                    progress=NodeProgress(cluster=pool.cluster.kind, adopted=inst.instance_id))
        self.store.apply([Adopt(node, f"adopted {inst.instance_id} found in the cloud")], now)
        self.provisioner.mark_stale(ref, [name])  # the next apply imports it into the state
        ignored = f"; its launch time {odd}, so its age counts from now" if odd else ""
        self._find(report, "adopted", f"{inst.instance_id} adopted as {name} (BOOTSTRAPPING)"
                   f"{ignored}", node=name, instance_id=inst.instance_id, pool=ref.key)

    def _destroy(self, ref: PoolRef, ids: list[str], report: ReconcileReport) -> None:
        nodes = self.store.nodes(pool=ref.key)
        # The map as it stands, minus nodes not yet handed to Terraform by the executor.
        keep = desired_maps(n for n in nodes if n.state is not S.REQUESTED).get(ref.key, {})
        try:
            self.store.fence()  # a deposed leader never destroys
            result = self.provisioner.apply(ref, keep, destroy=ids)
        except Exception as exc:
            report.errors.append(f"pool {ref.key}: could not destroy {ids}: {exc}")
            return
        for instance_id in ids:
            self._find(report, "destroying", f"{instance_id} destroyed through terraform apply of "
                       f"{ref.key} ({'ok' if result.ok else 'failed: ' + '; '.join(result.errors)})",
                       instance_id=instance_id, pool=ref.key)

    # -- terraform state ----------------------------------------------------------------------
    def _check_states(self, nodes: list[Node], report: ReconcileReport) -> None:
        now = self.clock()
        refs = {n.pool_key: PoolRef(n.team, n.pool, n.cloud, n.region) for n in nodes}
        for key, ref in sorted(refs.items()):
            last = self._state_checked.get(key)
            if last is not None and timedelta(0) <= now - last < self.settings.state_check_interval:
                continue
            if self.runner is None:
                if self._check_state(ref, report):
                    self._state_checked[key] = now
                continue

            def work(_: AdvanceReport, ref: PoolRef = ref) -> None:
                found = ReconcileReport(at=self.clock())  # errors too: counted once, there
                self._check_state(ref, found)
                with self._late_lock:
                    self._late.append(found)

            if self.runner.start("state", [apply_key(key)], f"terraform state check {key}",
                                 work, AdvanceReport(started_at=now)):
                self._state_checked[key] = now  # a failed read is tried after the interval

    def _check_state(self, ref: PoolRef, report: ReconcileReport) -> bool:
        """Compare the pool's Terraform state with the store's nodes as they are now (the
        caller holds the pool's apply key, or runs inline); False when it cannot be read."""
        try:
            held = self.provisioner.instances(ref)
        except Exception as exc:
            report.errors.append(f"pool {ref.key}: cannot read its Terraform state: {exc}")
            return False
        nodes = self.store.nodes(pool=ref.key)
        wanted = set(desired_maps(nodes).get(ref.key, {}))
        self._compare_state(ref, nodes, set(held), wanted, report)
        return True

    def _collect_state_checks(self, report: ReconcileReport) -> None:
        """Findings of state checks that ran on a worker since the last run."""
        with self._late_lock:
            late, self._late = self._late, []
        for found in late:
            report.findings += found.findings
            report.errors += found.errors

    def _compare_state(self, ref: PoolRef, nodes: list[Node], held: set[str], wanted: set[str],
                       report: ReconcileReport) -> None:
        states = {n.name: n.state for n in nodes}
        # A key with no row at all is not the store's to remove (a restored store): the
        # cloud check reports or adopts its instance, and the pool's apply waits for that.
        unknown = sorted(k for k in held - wanted if k not in states)
        extra = sorted(k for k in held - wanted if k in states and states[k] not in REMOVING)
        for key in unknown:
            self._find(report, "state-unknown", f"the state of {ref.key} holds {key}, which the "
                       "store has no row for: the pool is not applied until it is adopted",
                       node=key, pool=ref.key)
        missing = sorted(k for k in wanted - held
                         if states.get(k) in INSTANCE_STATES - INSTANCE_PENDING)
        for key in extra:
            self._find(report, "state-only", f"the state of {ref.key} holds {key}, which the store "
                       "does not want: applying the pool again", node=key, pool=ref.key)
        for key in missing:
            self._find(report, "state-missing", f"{key} should have an instance but the state of "
                       f"{ref.key} has none: applying the pool again", node=key, pool=ref.key)
        if extra or missing:
            self.provisioner.mark_stale(ref, [*extra, *missing])

    # -- scheduler -----------------------------------------------------------------------------
    def _check_scheduler(self, nodes: Iterable[Node], snapshot: Observed,
                         report: ReconcileReport) -> None:
        for node in nodes:
            obs = snapshot.nodes.get(node.name)
            sched = obs.scheduler if obs is not None else None
            if sched is not None and (sched.state == "down" or not sched.ready):
                self._find(report, "scheduler-down", f"{node.name} is READY but its scheduler "
                           f"reports it {sched.state}", node=node.name, pool=node.pool_key)




def adopted_created_at(launched_at: object, now: datetime) -> tuple[datetime, str | None]:
    """The creation time an adopted node gets, and why the cloud's launch time was not
    believed (None: it was). Outside the bounds it would make the node ancient (replaced at
    once) or from the future (never aged out); ``now`` errs toward keeping the node."""
    if launched_at is None:
        return now, None
    if not isinstance(launched_at, datetime) or launched_at.utcoffset() is None:
        return now, f"{str(launched_at)[:40]!r} is not a time with a timezone"
    if not now - OLDEST_LAUNCH <= launched_at <= now + LAUNCH_SKEW:
        return now, (f"{launched_at.isoformat()} is not within {OLDEST_LAUNCH.days} days before "
                     f"now and {int(LAUNCH_SKEW.total_seconds() // 60)} min after")
    return launched_at, None


def _regions(nodes: Iterable[Node], policies: Mapping[str, TeamPolicy]) -> set[tuple[str, str]]:
    out = {(n.cloud, n.region) for n in nodes}
    for policy in policies.values():
        out |= {(p.cloud.value, p.region) for p in policy.pools}
    return out


def _interruptions(result: InterruptionReport, report: ReconcileReport) -> dict[str, list[str]]:
    report.errors += result.errors
    return {"interrupted": result.interrupted, "drained": result.drained,
            "ignored": result.ignored, "held": result.held, "unknown": result.unknown,
            "rejected": [f"{reason}: {n}" for reason, n in sorted(result.rejected.items())]}


__all__ = ["Finding", "ReconcileReport", "Reconciler"]

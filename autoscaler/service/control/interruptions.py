"""Spot interruption notices -> INTERRUPTED nodes, recorded before the notice is acked.

Sources: AWS EventBridge events on an SQS queue ("EC2 Spot Instance Interruption
Warning", "EC2 Instance Rebalance Recommendation"; ``clouds/aws_events.py``), read with
``receive()`` and deleted with ``ack()`` only after the store has the node's new state,
so a crash in between redelivers the notice (applying it twice changes nothing); Alibaba
Cloud's preemption events and ``Recycling`` locks, polled (``clouds/alicloud.py``).

A notice is mapped to its node by instance id. A serving, draining or bootstrapping node
becomes INTERRUPTED with the notice and a short drain (``interruption_drain_deadline``,
never past the cloud's deadline minus the checkpoint grace) in its meta; the executor
drains it at once and terminates it, and the engine launches the replacement (on-demand
when the pool's ``capacity.on_interruption`` says so; the executor flags the node
``replacement_requested`` when it submits that launch). A rebalance recommendation is
handled per ``on_rebalance``: like an interruption (default), as a normal drain, or only
recorded.

The service reads the queues in :class:`NoticeLoop`, its own job every few seconds, and
starts the drain there (checkpoint signal first), so a notice never waits for a tick
or for a long apply or bootstrap; a notice that races a move the tick makes to the same
node is applied again to the node as it is now, never dropped.

A queue is read one receive (at most 10 messages) at a time: each batch's notices are
recorded and the batch acked before the next receive, until the queue is empty, the pass
has made ``MAX_RECEIVES`` receives or ``notice_read_budget`` is spent. A refused message
(malformed or forged) is deleted by the source as it is read, and a notice is obeyed only
for a node the store has in the notice's cloud and region; everything else is counted in
``InterruptionReport.rejected`` by reason and logged once. So a notice behind N others is
applied within ceil((N + 1) / (10 R)) passes, R being the receives a pass makes: 100, or
fewer when the budget runs out first (see docs/integrations/aws.md).
"""

from __future__ import annotations

import contextlib
import logging
import threading
import time
from collections import Counter
from collections.abc import Callable, Generator, Iterable, Mapping, Sequence
from dataclasses import dataclass, field, replace
from datetime import datetime
from typing import Protocol

from autoscaler.clouds.aws_events import Received, dedupe, excerpt
from autoscaler.clouds.base import CloudMarket, Interruption, InterruptionKind
from autoscaler.fleet.store import ConcurrentUpdateError, FleetStore
from autoscaler.model.changes import Move, NodeFields
from autoscaler.model.lifecycle import INTERRUPTIBLE, SETTLED, NodeState
from autoscaler.model.node import Node
from autoscaler.model.progress import InterruptionRecord, NodeProgress, ProgressUpdate
from autoscaler.policy.models import Pool, TeamPolicy, find_pool
from autoscaler.service.executor.advance import AdvanceReport, new_drain
from autoscaler.service.executor.drain import interruption_progress
from autoscaler.service.executor.settings import ExecutorSettings
from autoscaler.service.observe.metrics import ServiceMetrics

log = logging.getLogger(__name__)
S = NodeState


# Receives one pass makes on one queue at most (10 messages each), whatever the budget.
MAX_RECEIVES = 100


class InterruptionSource(Protocol):
    def batches(self) -> Generator[list[Received], None, None]:
        """What the source has, one batch at a time; the caller may stop early."""
        ...

    def ack(self, receipts: list[str]) -> None: ...


class PollingSource:
    """A cloud whose notices are state, not messages (Alibaba): one batch, nothing to ack.
    Its notices are about its own region (stamped here, checked against the store)."""

    def __init__(self, cloud: CloudMarket):
        self.cloud = cloud

    def batches(self) -> Generator[list[Received], None, None]:
        yield [Received(replace(i, cloud=self.cloud.cloud, region=self.cloud.region), "")
               for i in self.cloud.interruptions()]

    def ack(self, receipts: list[str]) -> None:
        return None


def sources_for(clouds: Iterable[CloudMarket]) -> list[InterruptionSource]:
    """The SQS queue of an AWS adapter that has one; polling for the others."""
    out: list[InterruptionSource] = []
    for cloud in clouds:
        queue_of = getattr(cloud, "interruption_queue", None)
        if callable(queue_of):
            queue = queue_of()
            if queue is not None:
                out.append(queue)
        else:
            out.append(PollingSource(cloud))
    return out


@dataclass
class InterruptionReport:
    interrupted: list[str] = field(default_factory=list)
    drained: list[str] = field(default_factory=list)  # rebalance handled as a normal drain
    ignored: list[str] = field(default_factory=list)  # duplicates, nodes already leaving
    # Rebalance recommendations only recorded: the pool had max_draining_percent leaving.
    held: list[str] = field(default_factory=list)
    unknown: list[str] = field(default_factory=list)  # instance ids the store does not know
    errors: list[str] = field(default_factory=list)
    rejected: Counter[str] = field(default_factory=Counter)  # reason (metrics.NOTICE_REJECTIONS) -> count
    unfinished: list[str] = field(default_factory=list)  # sources left for the next pass


class InterruptionIntake:
    def __init__(self, store: FleetStore, sources: Sequence[InterruptionSource],
                 settings: ExecutorSettings, clock: Callable[[], datetime],
                 policies: Callable[[], Mapping[str, TeamPolicy]] = dict, *,
                 max_receives: int = MAX_RECEIVES, timer: Callable[[], float] = time.monotonic):
        self.store, self.sources, self.settings = store, list(sources), settings
        self.clock, self.policies = clock, policies
        self.max_receives, self.timer = max_receives, timer
        self._rebalanced: Counter[str] = Counter()  # pool -> nodes moved this pass for one

    def poll(self) -> InterruptionReport:
        report = InterruptionReport()
        self._rebalanced.clear()
        for source in self.sources:
            self.store.fence()  # a deposed leader would hide the notices from the new one
            try:
                self._read(source, report)
            except Exception as exc:  # one queue's trouble must not hide the others' notices
                report.errors.append(f"{type(source).__name__}: {excerpt(str(exc), 300)}")
        return report

    def _read(self, source: InterruptionSource, report: InterruptionReport) -> None:
        """Batch by batch, each recorded then acked, within the pass's budget."""
        ends = self.timer() + self.settings.notice_read_budget.total_seconds()
        by_instance: dict[str, Node] | None = None
        with contextlib.closing(source.batches()) as batches:
            for n, batch in enumerate(batches, 1):
                report.rejected.update(r.rejected for r in batch if r.rejected)
                # SQS may deliver a notice more than once, even within one receive.
                notices = dedupe(r.interruption for r in batch if r.interruption is not None)
                if notices and by_instance is None:
                    by_instance = {i.instance_id: i for i in self.store.nodes() if i.instance_id}
                for notice in notices:
                    self._handle(notice, by_instance or {}, report)
                source.ack([r.receipt for r in batch if r.receipt])
                if n >= self.max_receives or self.timer() >= ends:
                    report.unfinished.append(type(source).__name__)
                    return

    def _handle(self, notice: Interruption, by_instance: Mapping[str, Node],
                report: InterruptionReport) -> None:
        try:
            self._handle_once(notice, by_instance, report)
        except ConcurrentUpdateError:
            # The tick moved the node between our read and our write (a drain it planned):
            # the notice still applies to the node as it is now, and must not be lost.
            fresh = {n.instance_id: n for n in self.store.nodes() if n.instance_id}
            try:
                self._handle_once(notice, fresh, report)
            except ConcurrentUpdateError as exc:
                report.errors.append(f"{notice.instance_id}: {exc}")

    def _handle_once(self, notice: Interruption, by_instance: Mapping[str, Node],
                     report: InterruptionReport) -> None:
        node = by_instance.get(notice.instance_id)
        if node is None:
            report.unknown.append(notice.instance_id)
            report.rejected["unknown-instance"] += 1
            log.info("interruption notice for %s, which is not one of our nodes", notice.instance_id)
            return
        if (node.cloud, node.region) != (notice.cloud, notice.region):
            # Our instance id, named from elsewhere: a copied id, not the cloud's notice.
            report.rejected["wrong-region"] += 1
            log.warning("refused interruption notice for %s (%s): it names %s %s, the node is "
                        "in %s %s", notice.instance_id, node.name, excerpt(notice.cloud, 20),
                        excerpt(notice.region, 40), node.cloud, node.region)
            return
        action = "interrupt"
        if notice.kind is InterruptionKind.REBALANCE:
            action = self.settings.on_rebalance
        now = self.clock()
        detail = f"{notice.kind.value} notice for {notice.instance_id} from {notice.source or 'the cloud'}"
        self.store.audit("interruption", detail, now, pool=node.pool_key, node=node.name)
        if action == "ignore" or node.state in SETTLED or node.state not in INTERRUPTIBLE:
            report.ignored.append(node.name)
            return
        if notice.kind is InterruptionKind.REBALANCE and self._over_budget(node, by_instance):
            report.held.append(node.name)
            return
        if action == "drain":
            self._drain(node, detail, report)
            return
        record = InterruptionRecord(kind=notice.kind.value, at=notice.at,
                                    deadline=notice.deadline, source=notice.source)
        drain = interruption_progress(self.settings, self._pool(node), record, now)

        def joined(current: NodeProgress) -> ProgressUpdate:
            # Read in the transition's own transaction: what a running drain already did
            # (its phase, its signal) is kept, not overwritten by a copy read earlier.
            running = current.drain
            return ProgressUpdate(interruption=record,
                                  drain=drain if running is None else running.joined_by(drain))

        self._move(Move(node.name, S.INTERRUPTED, detail, progress=joined), report.interrupted,
                   report)

    def _over_budget(self, node: Node, by_instance: Mapping[str, Node]) -> bool:
        """A rebalance recommendation is advice, not a reclaim: it moves a node only while
        the pool has fewer than max_draining_percent of its nodes leaving (at least one), as
        the engine's scale-down does. A burst of them (10 in a pool of 10) would otherwise
        drain the whole pool at once; a node the cloud does reclaim gets its 2-minute
        interruption warning, which is never held."""
        pool = self._pool(node)
        percent = pool.scale_down.max_draining_percent if pool is not None else 20
        mine = [n for n in by_instance.values() if n.pool_key == node.pool_key
                and n.state in (S.READY, S.DRAINING, S.INTERRUPTED)]
        leaving = sum(1 for n in mine if n.state is not S.READY) + self._rebalanced[node.pool_key]
        allowed = max(1, len(mine) * percent // 100)
        if leaving < allowed:
            self._rebalanced[node.pool_key] += 1
            return False
        log.warning("rebalance recommendation for %s only recorded: %d of %d node(s) of %s "
                    "already leaving, max_draining_percent %d allows %d", node.name, leaving,
                    len(mine), node.pool_key, percent, allowed)
        return True

    def _drain(self, node: Node, detail: str, report: InterruptionReport) -> None:
        if node.state is not S.READY:
            report.ignored.append(node.name)
            return
        progress = new_drain(self.settings, self._pool(node), detail, self.clock())
        # Not a scale-down: the pool's cooldown is left alone (no cooldown on the move).
        self._move(Move(node.name, S.DRAINING, detail, NodeFields(drain_trigger="rebalance"),
                        ProgressUpdate(drain=progress)), report.drained, report)

    def _move(self, move: Move, into: list[str], report: InterruptionReport) -> None:
        try:
            self.store.apply([move], self.clock())
        except ConcurrentUpdateError:
            raise  # handled again on the node as it is now
        except Exception as exc:  # e.g. an illegal move; the notice is still acked
            report.errors.append(f"{move.node}: {exc}")
            return
        into.append(move.node)
        log.warning("%s -> %s: %s", move.node, move.to, move.reason)

    def _pool(self, node: Node) -> Pool | None:
        return find_pool(self.policies(), node.team, node.pool)


class NoticeLoop:
    """The fast spot-notice path, a scheduler job of its own every ``notice_interval``
    (DESIGN.md "Deciding never waits for doing"): notices -> INTERRUPTED (or DRAINING for
    a rebalance handled as a drain) -> the first drain step at once on this thread (the
    checkpoint signal goes first), whatever apply or bootstrap the workers are running.
    The tick decides the replacement next time it runs. Only the leader acts."""

    def __init__(self, intake: InterruptionIntake, drain_now: Callable[[list[str]], AdvanceReport],
                 is_leader: Callable[[], bool],
                 on_errors: Callable[[Mapping[str, int], Sequence[str]], None],
                 metrics: ServiceMetrics | None = None):
        self.intake, self.drain_now, self.is_leader = intake, drain_now, is_leader
        self.on_errors, self.metrics = on_errors, metrics
        self._lock = threading.Lock()

    def run_once(self) -> InterruptionReport:
        """One pass (what the job runs); never raises."""
        with self._lock:
            report = InterruptionReport()
            try:
                if not self.is_leader():
                    return report
                report = self.intake.poll()
                started = report.interrupted + report.drained
                if started:
                    drained = self.drain_now(started)
                    report.errors += drained.errors
            except Exception as exc:  # the next pass reads the queues again
                log.exception("spot-notice pass failed")
                report.errors.append(f"{type(exc).__name__}: {exc}")
            if report.errors:
                self.on_errors({"interruptions": len(report.errors)}, report.errors)
            if self.metrics is not None:
                self.metrics.count_rejected_notices(report.rejected)
            return report

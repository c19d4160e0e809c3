"""Side effects as tracked operations: the tick hands them over and returns.

An operation is one pool's Terraform apply (key ``apply:<pool>``), one Ansible batch
(``boot:<node>`` for each node of the batch) or one node's drain step (``drain:<node>``).
A key is held while its operation runs, so nothing starts a second apply of a pool, a
second bootstrap of a node or two drain steps of one node at once; what the next advance
finds busy is simply left for later (the store already says what it waits for: nodes of
an applying pool are PROVISIONING, written before the apply started).

Two runners share one interface:

* :class:`Inline` runs the operation at once on the caller's thread (the executor's unit
  tests, the crash harness, the simulator: one advance does everything, as before);
* :class:`WorkerPools` runs it on a bounded thread pool per kind (the service), and the
  operation's report is collected by the next ``advance()``.

With a journal attached (:class:`autoscaler.fleet.operations.OperationLog`, which the
Executor does) every operation is also a row of its own, written before it is handed
over and closed when it ends, so a restart knows which ones a crash cut short.

Nothing is kept here that a restart needs: every operation writes its progress to the
store before its side effect (PROVISIONING before an apply, the bootstrap attempt before
Ansible, the drain phase before its scheduler command), so after a crash the next
advance starts the same operation again from the store and the side effect is safe to
repeat (applies import what the state lost, roles are idempotent, drain steps re-run).
"""

from __future__ import annotations

import logging
import threading
from collections.abc import Callable, Iterator, Sequence
from concurrent.futures import ThreadPoolExecutor
from contextlib import contextmanager
from dataclasses import dataclass
from datetime import datetime
from typing import Literal

from autoscaler.fleet.operations import DONE, FAILED, OperationLog
from autoscaler.service.executor.advance import AdvanceReport

log = logging.getLogger("autoscaler.service.executor")
Kind = Literal["apply", "bootstrap", "drain", "state"]
Work = Callable[[AdvanceReport], None]  # fills its own report


@dataclass(frozen=True)
class Operation:
    """One running side effect, as /status shows it."""

    kind: Kind
    keys: tuple[str, ...]
    started_at: datetime
    what: str
    row: int | None = None  # its journal row, when one is attached


def _started(journal: OperationLog | None, kind: Kind, keys: Sequence[str], what: str,
             at: datetime) -> int | None:
    """The operation's journal row; None without a journal or when it cannot be written
    (a deposed leader's write is refused: the operation's own fence refuses its side
    effect and reports it, as without a journal)."""
    if journal is None:
        return None
    try:
        return journal.started(kind, keys, what, at)
    except Exception as exc:
        log.warning("%s %s: no journal row: %s", kind, what, exc)
        return None


class _Keys:
    """The busy keys and the running operations, behind one lock."""

    def __init__(self, clock: Callable[[], datetime]):
        self.clock = clock
        self._lock = threading.Condition()
        self._held: dict[str, Operation] = {}

    def take(self, kind: Kind, keys: Sequence[str], what: str,
             journal: OperationLog | None = None) -> Operation | None:
        with self._lock:
            if any(k in self._held for k in keys):
                return None
            now = self.clock()
            row = _started(journal, kind, keys, what, now)
            op = Operation(kind, tuple(keys), now, what, row)
            self._held.update(dict.fromkeys(keys, op))
            return op

    def close(self, op: Operation, journal: OperationLog | None, error: str | None) -> None:
        """The operation's row closed (done, or failed with ``error``), its keys freed."""
        try:
            if journal is not None and op.row is not None:
                journal.finished(op.row, self.clock(), FAILED if error else DONE, error or "")
        except Exception:  # the journal is bookkeeping: never keep the keys for it
            log.exception("closing the journal row of %s %s", op.kind, op.what)
        finally:
            self.give_back(op)

    def give_back(self, op: Operation) -> None:
        with self._lock:
            for key in op.keys:
                self._held.pop(key, None)
            self._lock.notify_all()

    def busy(self, key: str) -> bool:
        with self._lock:
            return key in self._held

    def running(self) -> list[Operation]:
        with self._lock:
            return sorted(set(self._held.values()), key=lambda o: (o.started_at, o.keys))

    def wait(self, timeout: float) -> bool:
        with self._lock:
            return self._lock.wait_for(lambda: not self._held, timeout)


class Inline:
    """Operations run at once on the caller's thread, into the caller's report."""

    def __init__(self, clock: Callable[[], datetime]):
        self._keys = _Keys(clock)
        self.journal: OperationLog | None = None

    def start(self, kind: Kind, keys: Sequence[str], what: str, work: Work,
              report: AdvanceReport) -> bool:
        """Run ``work`` unless one of ``keys`` is busy (then False, nothing started)."""
        op = self._keys.take(kind, keys, what, self.journal)
        if op is None:
            return False
        try:
            work(report)
        except Exception as exc:
            self._keys.close(op, self.journal, f"{type(exc).__name__}: {exc}")
            raise
        # A BaseException (the process dying) leaves the row open, as a SIGKILL does.
        self._keys.close(op, self.journal, None)
        return True

    def busy(self, key: str) -> bool:
        return self._keys.busy(key)

    @contextmanager
    def claim(self, keys: Sequence[str]) -> Iterator[bool]:
        """Hold ``keys`` on the caller's thread (the spot-notice path); yields False when
        one is busy (the caller then skips)."""
        op = self._keys.take("drain", keys, "claimed")
        try:
            yield op is not None
        finally:
            if op is not None:
                self._keys.give_back(op)

    def collect(self, into: AdvanceReport) -> None:
        """Merge the reports of operations finished since the last call."""
        return None

    def running(self) -> list[Operation]:
        return self._keys.running()

    def wait(self, timeout: float) -> bool:
        """Until nothing runs (tests, shutdown); False on timeout."""
        return True

    def close(self) -> None:
        return None


Runner = Inline  # the interface; WorkerPools is the service's


class WorkerPools(Inline):
    """A bounded thread pool per kind; each operation fills a report of its own, which
    the next ``collect()`` merges into that advance's report."""

    def __init__(self, clock: Callable[[], datetime], sizes: dict[Kind, int]):
        super().__init__(clock)
        self.clock = clock
        self._pools = {kind: ThreadPoolExecutor(max_workers=n, thread_name_prefix=kind)
                       for kind, n in sizes.items()}
        self._done: list[AdvanceReport] = []
        self._done_lock = threading.Lock()
        # Told "<what> finished" and the operation's report after each operation: the
        # service starts the next tick sooner when its nodes have a next step.
        self.on_done: Callable[[str, AdvanceReport], None] | None = None

    def start(self, kind: Kind, keys: Sequence[str], what: str, work: Work,
              report: AdvanceReport) -> bool:
        op = self._keys.take(kind, keys, what, self.journal)
        if op is None:
            return False
        try:
            self._pools[kind].submit(self._run, op, work)
        except RuntimeError:  # shut down: nothing started, the store still says what is owed
            self._keys.close(op, self.journal, "not started: the worker pools are shut down")
            return False
        return True

    def _run(self, op: Operation, work: Work) -> None:
        report = AdvanceReport(started_at=self.clock())
        error: str | None = None
        try:
            work(report)
        except Exception as exc:  # the store says what is owed; the next advance retries
            log.exception("%s %s failed", op.kind, op.what)
            error = f"{type(exc).__name__}: {exc}"
            report.error(op.kind, f"{op.what}: {error}")
        except BaseException:  # the process is dying: the row stays open, as on a SIGKILL
            self._keys.give_back(op)
            raise
        self._keys.close(op, self.journal, error)
        with self._done_lock:
            self._done.append(report)
        if self.on_done is not None:
            try:
                self.on_done(f"{op.what} {'failed' if error else 'finished'}", report)
            except Exception:  # the next regular tick collects it anyway
                log.exception("could not report the end of %s %s", op.kind, op.what)

    def collect(self, into: AdvanceReport) -> None:
        with self._done_lock:
            done, self._done = self._done, []
        for report in done:
            into.absorb(report)

    def wait(self, timeout: float) -> bool:
        return self._keys.wait(timeout)

    def close(self) -> None:
        for pool in self._pools.values():
            pool.shutdown(wait=False, cancel_futures=True)

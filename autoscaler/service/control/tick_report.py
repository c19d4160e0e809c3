"""What one tick reports: each stage's time (``run_stage`` times a stage and turns its
exception into the :class:`TickError` that ends the tick), and what the executor's advance
did, in lines. ``ServiceLoop.tick()`` fills a :class:`TickReport`; the service logs a slow
tick's stages and the benchmarks print them.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Iterator, Mapping
from contextlib import contextmanager
from dataclasses import dataclass, field
from datetime import datetime
from typing import TypeVar

from autoscaler.engine import Plan
from autoscaler.service.control.reconciler import ReconcileReport
from autoscaler.service.executor.advance import AdvanceReport

T = TypeVar("T")


def advance_lines(advance: AdvanceReport) -> list[str]:
    """What an executor report did, in a few lines (applies, bootstraps, errors)."""
    lines = []
    for a in advance.applies:
        done = [f"created {', '.join(a.created)}" if a.created else "",
                f"destroyed {', '.join(a.destroyed)}" if a.destroyed else "",
                f"failed {', '.join(a.failed)}" if a.failed else ""]
        what = "; ".join(d for d in done if d) or "no change"
        lines.append(f"terraform apply {a.pool}: {what} ({a.seconds:.0f}s)")
    if advance.bootstrapped:
        lines.append(f"ansible bootstrapped {', '.join(advance.bootstrapped)}")
    for node, why in advance.bootstrap_failed.items():
        lines.append(f"ansible failed on {node}: {why.splitlines()[0][:160]}")
    return lines


class TickError(Exception):
    def __init__(self, stage: str, cause: BaseException):
        super().__init__(f"{stage}: {type(cause).__name__}: {cause}")
        self.stage = stage
        self.cause = cause


@dataclass(frozen=True)
class StageTime:
    """What one stage of a tick took: wall seconds and the tick thread's CPU seconds (the
    difference is waiting: the database, the cloud, other threads, the machine's load)."""

    seconds: float = 0.0
    cpu_seconds: float = 0.0

    def __add__(self, other: StageTime) -> StageTime:
        return StageTime(self.seconds + other.seconds, self.cpu_seconds + other.cpu_seconds)


def describe_stages(stages: Mapping[str, StageTime]) -> str:
    """``reconcile 20.1s (cpu 0.4s), submit 8.0s (cpu 6.1s), ...``, slowest first."""
    return ", ".join(f"{name} {t.seconds:.1f}s (cpu {t.cpu_seconds:.1f}s)" for name, t in
                     sorted(stages.items(), key=lambda kv: -kv[1].seconds))


@dataclass
class TickReport:
    started_at: datetime
    leader: bool = False
    plan_id: int | None = None
    plan: Plan | None = None
    created: list[str] = field(default_factory=list)
    advance: AdvanceReport | None = None
    reconcile: ReconcileReport | None = None
    stopped_early: bool = False
    error: TickError | None = None
    stages: dict[str, StageTime] = field(default_factory=dict)  # in the order they ran

    @contextmanager
    def timed(self, stage: str) -> Iterator[None]:
        """Add what the block takes to ``stages[stage]`` (also when it raises)."""
        wall, cpu = time.monotonic(), time.thread_time()
        try:
            yield
        finally:
            took = StageTime(time.monotonic() - wall, time.thread_time() - cpu)
            self.stages[stage] = self.stages.get(stage, StageTime()) + took


def run_stage(report: TickReport, stage: str, fn: Callable[[], T], timed_as: str | None = None) -> T:
    """Run ``fn`` timed into ``report.stages`` (as ``timed_as``, else ``stage``); an
    exception becomes a :class:`TickError` of ``stage`` (the tick_errors label)."""
    with report.timed(timed_as or stage):
        try:
            return fn()
        except Exception as exc:
            raise TickError(stage, exc) from exc

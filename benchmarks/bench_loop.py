"""Deciding never waits for doing: the loop's cadence and reactions during a long bootstrap.

On the sandbox, every component real (moto + Terraform, Slurm, SSH test hosts,
ansible-runner, the service as ``build_service`` wires it; ``tests/service/async_scenario.py``):
one pool's bootstrap is slowed by a pause task (10 min by default), and meanwhile

* a = p99 of the intervals between consecutive decided plans while it runs (target <= 2 x
  the configured tick);
* b = seconds from a spot notice sent to moto SQS for a READY node of another pool until
  the node is INTERRUPTED and draining in Slurm (target <= 5), its job signalled;
* c = ticks from a pending job for a third pool until the plan that launches for it
  (target <= 1);

and, on the fakes (``tests/service/failing_pool.py``: executor inline, 30 s ticks):

* d = launches into a pool whose bootstrap always fails over 30 simulated minutes, next to
  what the backoff rule allows (5 min doubling to 30 min: 3).

Needs root, Slurm and Terraform for a-c (otherwise they print as "nan" and only d is run).

Last line: tick_interval_p99_s=<a> notice_to_draining_s=<b> pending_to_requested_ticks=<c>
           launches_failing_pool_30m=<d>
"""

from __future__ import annotations

import argparse
import math
import shutil
import sys
import tempfile
import time
from datetime import UTC, datetime
from pathlib import Path

# The benchmark drives the e2e rig in tests/: run from anywhere, import it from the repo.
sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from autoscaler.sandbox.stack.local import privileged
from tests.service.async_scenario import TICK_S, AsyncScenario
from tests.service.failing_pool import allowed_launches, drive, failing_rig


def p99(values: list[float]) -> float:
    if not values:
        return math.nan
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, math.ceil(0.99 * len(ordered)) - 1)]


def sandbox_part(root: Path, pause_s: int, watch_s: float) -> tuple[float, float, float]:
    sc = AsyncScenario(root, pause_s)
    try:
        sc.start()
        fast = sc.fast_ready_with_job()
        slow = sc.slow_bootstrap_running()
        window, watch_until = datetime.now(UTC), time.monotonic() + watch_s
        sc.pending_job_for_third()
        sc.spot_notice(fast)
        while time.monotonic() < watch_until:  # the ticks keep coming while it bootstraps
            sc.look_while_slow(slow)
            if not sc.measured.slow_still_bootstrapping:
                break
            time.sleep(5)
        intervals = sorted(sc.tick_intervals(window))
        m = sc.measured
        median = intervals[len(intervals) // 2] if intervals else math.nan
        print(f"sandbox: {len(intervals)} tick intervals while the slow pool bootstrapped "
              f"(tick {TICK_S:g}s): median {median:.2f}s, max {max(intervals, default=math.nan):.2f}s; "
              f"still bootstrapping at the end: {m.slow_still_bootstrapping}; notice->draining "
              f"{m.notice_to_draining_s}s (checkpoint signal received: {m.checkpointed}); "
              f"pending->requested {m.pending_to_requested_ticks} tick(s); /status age "
              f"{m.status_age_s}s")
        return (p99(intervals), m.notice_to_draining_s or math.nan,
                float(m.pending_to_requested_ticks or math.nan))
    finally:
        sc.stop()


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--pause", type=int, default=600, help="bootstrap pause of the slow pool, s")
    ap.add_argument("--watch", type=float, default=120, help="seconds of ticks watched during it")
    ap.add_argument("--skip-sandbox", action="store_true")
    args = ap.parse_args()
    root = Path(tempfile.mkdtemp(prefix="bench-loop-"))
    try:
        a = b = c = math.nan
        if not args.skip_sandbox and privileged() and shutil.which("terraform"):
            a, b, c = sandbox_part(root / "sandbox", args.pause, args.watch)
        else:
            print("sandbox part skipped (needs root, Slurm, Terraform)")
        rig = failing_rig(root / "failing")
        try:
            d, holds = drive(rig, 30)
        finally:
            rig.store.close()
        print(f"always-failing bootstrap: {d} launches in 30 simulated minutes "
              f"(the rule allows {allowed_launches(30)}); last hold: {holds[-1] if holds else '-'}")
        print(f"targets: a <= {2 * TICK_S:g}, b <= 5, c <= 1, d <= {allowed_launches(30)}")
        print(f"tick_interval_p99_s={a:.2f} notice_to_draining_s={b:.2f} "
              f"pending_to_requested_ticks={c:g} launches_failing_pool_30m={d}")
    finally:
        shutil.rmtree(root, ignore_errors=True)


if __name__ == "__main__":
    main()

"""The service keeps deciding and reacting while a long bootstrap runs (sandbox, every
component real; see ``async_scenario.py``): a 3-minute bootstrap of one pool, meanwhile a
spot notice on moto SQS drains a READY node of another pool within 5 s (checkpoint signal
received by its Slurm job), a pending job for a third pool gets a REQUESTED node within
one tick, ticks keep their cadence and /status stays current."""

from __future__ import annotations

import shutil
import tempfile
import time
from collections.abc import Iterator
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import pytest

from autoscaler.sandbox.stack.local import privileged
from tests.actuators.terraform_fixtures import needs_terraform
from tests.service.async_scenario import TICK_S, AsyncScenario

pytestmark = [
    pytest.mark.slow, needs_terraform, pytest.mark.timeout(1500),
    pytest.mark.skipif(not privileged(), reason="needs root, network namespaces and Slurm"),
]
PAUSE_S = 180


@pytest.fixture
def scenario() -> Iterator[AsyncScenario]:
    # A short root: slurmstepd's socket path under the spool dir must stay < 108 chars.
    root = Path(tempfile.mkdtemp(prefix="gas-async-"))
    sc = AsyncScenario(root, PAUSE_S)
    try:
        yield sc.start()
    finally:
        sc.stop()
        shutil.rmtree(root, ignore_errors=True)


def test_notice_and_scale_up_do_not_wait_for_a_long_bootstrap(
        scenario: AsyncScenario, capsys: pytest.CaptureFixture[Any]) -> None:
    fast = scenario.fast_ready_with_job()
    slow = scenario.slow_bootstrap_running()
    window = datetime.now(UTC)
    scenario.pending_job_for_third()
    scenario.spot_notice(fast)
    time.sleep(6 * TICK_S)  # ticks keep coming while the bootstrap runs
    scenario.look_while_slow(slow)
    m = scenario.measured
    intervals = scenario.tick_intervals(window)
    with capsys.disabled():
        print(f"\nasync sandbox: notice->draining {m.notice_to_draining_s}s, pending->requested "
              f"{m.pending_to_requested_ticks} tick(s), tick intervals {intervals}, "
              f"/status age {m.status_age_s}s")
    assert m.slow_still_bootstrapping, "the slow bootstrap ended before the checks: not a test"
    assert m.notice_to_draining_s is not None and m.notice_to_draining_s <= 5
    assert m.checkpointed
    assert m.pending_to_requested_ticks == 1
    assert len(intervals) >= 5 and max(intervals) <= 2 * TICK_S  # a plan every tick, on time
    assert m.status_age_s is not None and m.status_age_s <= 3 * TICK_S

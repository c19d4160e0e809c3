"""Running checks: rows in order, a check that raises or overruns its deadline is a fail
row that says so (never a traceback), a skip is not a failure; a config that does not load
is one row and every other check is skipped."""

from __future__ import annotations

import subprocess
import sys
import threading
import time
from pathlib import Path

import pytest

from autoscaler.service.doctor import CHECKS, diagnose
from autoscaler.service.doctor.report import (
    Check,
    Result,
    Status,
    fail,
    ok,
    passed,
    run_checks,
    skip,
    warn,
)


def test_rows_keep_the_order_of_the_checks_and_a_raise_is_a_fail_row() -> None:
    def boom(_: object) -> list[Result]:
        raise RuntimeError("the API said no")

    checks = [Check("a", lambda _: [ok("a", "fine")]), Check("b", boom),
              Check("c", lambda _: [skip("c", "no Slurm pool"), ok("c 2", "fine")])]
    rows = run_checks(checks, None)
    assert [(r.name, r.status) for r in rows] == [
        ("a", Status.OK), ("b", Status.FAIL), ("c", Status.SKIP), ("c 2", Status.OK)]
    assert rows[1].reason == "unexpected RuntimeError: the API said no"
    assert not passed(rows)
    assert passed([rows[0], rows[2]])  # a skip is not a failure
    assert passed([rows[0], warn("d", "root logins")])  # nor is a warning


def test_a_check_past_its_deadline_is_a_fail_row_and_the_others_still_answer() -> None:
    release = threading.Event()

    def stuck(_: object) -> list[Result]:
        release.wait(30)
        return [ok("stuck", "late")]

    started = time.monotonic()
    try:
        rows = run_checks([Check("stuck", stuck, timeout_s=0.5),
                           Check("quick", lambda _: [fail("quick", "refused")])], None)
    finally:
        release.set()
    assert time.monotonic() - started < 5
    assert rows[0] == Result("stuck", Status.FAIL, "no answer within 0.5s", 0.5)
    assert (rows[1].status, rows[1].reason) == (Status.FAIL, "refused")


# A check whose I/O never ends (bounded per read only, against a server that trickles).
NEVER_ENDS = """
import threading
from autoscaler.service.doctor.report import Check, ok, run_checks
rows = run_checks([Check("stuck", lambda _: threading.Event().wait() or [], timeout_s=0.5),
                   Check("quick", lambda _: [ok("quick", "fine")])], None)
print([r.status.value for r in rows])
"""


@pytest.mark.timeout(60)
def test_a_check_that_never_ends_does_not_keep_the_command_from_exiting() -> None:
    proc = subprocess.Popen([sys.executable, "-c", NEVER_ENDS], stdout=subprocess.PIPE,
                            stderr=subprocess.STDOUT, text=True, cwd=Path(__file__).parents[3])
    try:
        out, _ = proc.communicate(timeout=20)
    finally:
        if proc.poll() is None:  # still there: stopped by its PID
            proc.kill()
            proc.wait(timeout=10)
    assert (proc.returncode, out.strip()) == (0, "['fail', 'ok']")


def test_a_config_that_does_not_load_is_one_row_and_the_rest_is_skipped(tmp_path: Path) -> None:
    path = tmp_path / "service.yaml"
    path.write_text("policies_dir: p\ntick: {intervall: 5s}\n")
    rows = diagnose(path)
    assert rows[0].name == "config" and rows[0].status is Status.FAIL
    assert f"{path}:2" in rows[0].reason and "intervall" in rows[0].reason
    assert [r.name for r in rows[1:]] == [c.name for c in CHECKS]
    assert {r.status for r in rows[1:]} == {Status.SKIP}


def test_only_names_known_checks(tmp_path: Path) -> None:
    with pytest.raises(ValueError, match="no check named bogus"):
        diagnose(tmp_path / "service.yaml", ["bogus"])

"""Hostile and malformed input files against the real CLI and the hot reload.

Every case of tests/hostile_files.py (team policies, the service config, recorded
snapshots, traces) is run three ways:

* through the ``gpu-autoscaler`` command that reads it, as a subprocess: handled means
  exit status 1, ``<file>:<line>`` in the output and no traceback;
* through the function behind that command, in this process, timed: ``max_validate_s`` is
  the slowest of these (what a file costs to refuse, without interpreter start-up);
* policy cases also through ``PolicyReloader.refresh()`` (the running service's reload),
  timed: handled means the team keeps its last good policy and the error names the file.

The largest file that is parsed at all (just under the 32 KiB cap, worst-case YAML) is timed
too, since a 1 MB file is refused before parsing.

Then every running surface's cases (``benchmarks/hostile_<surface>.py``, each starting the
real thing and stopping it): the HTTP API (slow clients, framing, strict bodies, sessions),
the spot-notice loop on moto's SQS (poison, forged and genuine notices), the Kubernetes
reader against the project's API server (impossible GPU counts), the CLI, forecaster
and alert generator, and the preflight (``doctor``) facing junk answers and bad configs. Last line:
``hostile_cases=<n> handled=<m> tracebacks=<t> max_validate_s=<s>
healthz_p99_under_slow_clients_ms=<h>``.

    PYTHONPATH=$PWD python3 benchmarks/bench_hostile.py [--jobs 2]
"""

from __future__ import annotations

import argparse
import logging
import os
import re
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))

from autoscaler.catalog import default_catalog  # noqa: E402
from autoscaler.engine.snapshot_file import SnapshotFileError, parse_decision_input  # noqa: E402
from autoscaler.policy import load_dir  # noqa: E402
from autoscaler.policy.untrusted import MAX_BYTES  # noqa: E402
from autoscaler.service.config.load import ConfigError, load_config  # noqa: E402
from autoscaler.service.config.reload import PolicyReloader  # noqa: E402
from autoscaler.traces import TraceError, load_pod_list  # noqa: E402
from benchmarks import (  # noqa: E402
    hostile_cli,
    hostile_doctor,
    hostile_http,
    hostile_kubernetes,
    hostile_notices,
)
from benchmarks.hostile_outcome import Outcome  # noqa: E402
from tests.hostile_files import GOOD_POLICY, Case, all_cases, command, place  # noqa: E402

SURFACES = (hostile_http, hostile_notices, hostile_kubernetes, hostile_cli, hostile_doctor)

CATALOG = default_catalog()
CLI_TIMEOUT_S = 120


def run_cli(case: Case, path: Path) -> tuple[bool, bool, float]:
    """(handled, traceback seen, wall seconds) for the case through the real CLI."""
    argv = [sys.executable, "-m", "autoscaler.cli", *command(case, path, REPO / "policies")]
    env = {**os.environ, "PYTHONPATH": str(REPO), "COLUMNS": "400"}
    started = time.monotonic()
    proc = subprocess.run(argv, capture_output=True, text=True, timeout=CLI_TIMEOUT_S, env=env,
                          errors="replace", check=False)
    seconds = time.monotonic() - started
    out = " ".join((proc.stdout + proc.stderr).split())
    traceback = "Traceback" in out
    where = re.search(re.escape(str(path)) + r":(\d+)", out)
    line_ok = where is not None and (case.line is None or int(where.group(1)) == case.line)
    return proc.returncode == 1 and line_ok and not traceback, traceback, seconds


def _refusal(case: Case, path: Path) -> Callable[[], bool]:
    """The in-process function behind the case's command; True when it refused the file."""
    def policy() -> bool:
        return bool(load_dir(path.parent, CATALOG)[1])

    def config() -> bool:
        try:
            load_config(path)
        except ConfigError:
            return True
        return False

    def snapshot() -> bool:
        try:
            parse_decision_input(str(path), path.read_bytes())
        except SnapshotFileError:
            return True
        return False

    def trace() -> bool:
        try:
            load_pod_list(path, 0, 1)
        except TraceError:
            return True
        return False

    return {"policy": policy, "config": config, "snapshot": snapshot, "trace": trace}[case.kind]


CPU: list[float] = []  # CPU seconds of every timed call (wall time includes machine load)


def timed(fn: Callable[[], Any]) -> tuple[Any, float]:
    started, cpu = time.perf_counter(), time.process_time()
    result = fn()
    CPU.append(time.process_time() - cpu)
    return result, time.perf_counter() - started


def reload_case(case: Case, workdir: Path) -> tuple[bool, float]:
    """The case written over a good team file of a running reloader."""
    folder = workdir / f"reload-{case.name}"
    folder.mkdir()
    path = folder / "vision.yaml"
    path.write_text(GOOD_POLICY)
    (folder / "search.yaml").write_text(GOOD_POLICY.replace("team: vision", "team: search"))
    reloader = PolicyReloader(folder, CATALOG)
    reloader.refresh()
    good = reloader.policies
    path.write_bytes(case.data)
    stat = path.stat()
    os.utime(path, ns=(stat.st_atime_ns, stat.st_mtime_ns + 1_000_000_000))
    result, seconds = timed(reloader.refresh)
    kept = reloader.policies == good and any(e.file == str(path) for e in result.errors)
    return kept, seconds


def largest_parsed(workdir: Path) -> float:
    """Seconds to refuse the slowest file still under the size cap: dense flow YAML."""
    folder = workdir / "largest"
    folder.mkdir()
    body = GOOD_POLICY + "x: ["
    body += "[1, 2], " * ((MAX_BYTES - len(body) - 4) // 8) + "]\n"
    (folder / "team.yaml").write_text(body)
    (errors), seconds = timed(lambda: load_dir(folder, CATALOG)[1])
    if not errors:
        raise SystemExit("the largest file was accepted; it has an unknown key")
    print(f"largest parsed file: {len(body)} bytes refused in {seconds:.2f}s "
          f"({CPU[-1]:.2f} CPU-s)")
    return seconds


def main() -> None:
    # The reload logs every refused file; the table below says the same once.
    logging.getLogger("autoscaler").setLevel(logging.CRITICAL)
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--jobs", type=int, default=2, help="CLI cases run at once")
    args = parser.parse_args()
    cases = all_cases()
    with tempfile.TemporaryDirectory(prefix="bench-hostile-") as tmp:
        workdir = Path(tmp)
        paths = [place(c, workdir) for c in cases]
        with ThreadPoolExecutor(max_workers=max(1, args.jobs)) as pool:
            cli = list(pool.map(run_cli, cases, paths))
        inproc = [timed(_refusal(c, p)) for c, p in zip(cases, paths, strict=True)]
        reloads = [(c, *reload_case(c, workdir)) for c in cases if c.kind == "policy"]
        biggest = largest_parsed(workdir)
    print(f"{'case':34} {'cli':>5} {'cli_s':>6} {'refused':>8} {'in_s':>7}")
    for case, (ok, _, cli_s), (refused, in_s) in zip(cases, cli, inproc, strict=True):
        print(f"{case.kind + '/' + case.name:34} {'ok' if ok else 'FAIL':>5} {cli_s:6.2f} "
              f"{'yes' if refused else 'NO':>8} {in_s:7.3f}")
    kept = sum(1 for _, ok, _ in reloads if ok)
    print(f"reload: {kept}/{len(reloads)} hostile policy files kept only their team on its last "
          f"good policy; slowest refresh {max(s for _, _, s in reloads):.3f}s")
    handled = sum(1 for (ok, _, _), (refused, _) in zip(cli, inproc, strict=True) if ok and refused)
    tracebacks = sum(1 for _, tb, _ in cli if tb)
    max_validate = max([s for _, s in inproc] + [s for _, _, s in reloads] + [biggest])
    print(f"cli wall time incl. interpreter start: max {max(s for _, _, s in cli):.2f}s "
          f"(machine load included)")
    outcomes: list[Outcome] = [o for surface in SURFACES for o in surface.run()]
    for o in outcomes:
        print(f"{o.surface + '/' + o.case:34} {'ok' if o.handled else 'FAIL':>5} {o.seconds:6.2f}"
              f"{'  traceback' if o.traceback else ''}")
    healthz_ms = hostile_http.healthz_p99_under_slow_clients_ms()
    print(f"/healthz p99 with 300 half-open and 10 trickling clients: {healthz_ms:.0f} ms")
    total = len(cases) + len(reloads) + len(outcomes)
    handled += kept + sum(o.handled for o in outcomes)
    tracebacks += sum(o.traceback for o in outcomes)
    print(f"hostile_cases={total} handled={handled} tracebacks={tracebacks} "
          f"max_validate_s={max_validate:.3f} healthz_p99_under_slow_clients_ms={healthz_ms:.0f}")


if __name__ == "__main__":
    main()

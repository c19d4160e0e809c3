"""Hostile arguments and answers against the real command line (surfaces cli, forecast,
alerts), each case a ``python3 -m autoscaler.cli`` subprocess.

* cli: every hostile answer of tests/hostile_answers.py (HTML, bytes, 500 pages, wrong
  shape, NaN, 9 MiB and 200k-deep JSON, escape codes, a redirect) from a real server on
  127.0.0.1 to every command that talks to the API, the bad arguments and URLs, and
  hypothesis-generated ``--timeout``/``--poll`` values and request ids. Handled: exit 1, one
  ``error:`` line, no traceback.
* forecast: ``forecast backtest`` of traces with a sample at t = 3e11 s (a clock jump) or
  at -3e11 s, pods created or deleted then. Handled: a backtest result (exit 0), no
  traceback, within the case's time limit (before: MemoryError, or minutes of binning).
* alerts: ``dashboards alerts --set`` with NaN, inf, -1, 0-length windows and PromQL text.
  Handled: exit 1, one line, no traceback.

    PYTHONPATH=$PWD python3 benchmarks/hostile_cli.py
"""

from __future__ import annotations

import math
import os
import subprocess
import sys
import tempfile
import time
import warnings
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))

from hypothesis import strategies as st  # noqa: E402
from hypothesis.errors import NonInteractiveExampleWarning  # noqa: E402

from benchmarks.hostile_outcome import Outcome  # noqa: E402
from tests.hostile_answers import (  # noqa: E402
    BAD_ARGUMENTS,
    BAD_URLS,
    COMMANDS,
    HOSTILE,
    REQUEST_ID,
    TOKEN,
    TOKEN_ENV,
    AnswerServer,
    one_line_refusal,
    with_server,
)

CASE_TIMEOUT_S = 120
GENERATED = 6  # hypothesis-drawn values per generated kind
JUMP = 3e11
ALERT_SETTINGS = ["quota_fraction=nan", "stuck_ratio=inf", "tick_errors=-1", "interruptions=1e400",
                  "stuck_for=5m) or vector(1", "ecc_window=0m", "tick_window=10m]) > 0 or up[5m",
                  "thermal_for={{ $value }}", "bogus=1"]


def cli(argv: list[str]) -> tuple[int | None, str, float]:
    env = {**os.environ, "PYTHONPATH": str(REPO), "COLUMNS": "400", TOKEN_ENV: TOKEN}
    started = time.monotonic()
    try:
        proc = subprocess.run([sys.executable, "-m", "autoscaler.cli", *argv], capture_output=True,
                              text=True, errors="replace", env=env, timeout=CASE_TIMEOUT_S,
                              check=False)
    except subprocess.TimeoutExpired as exc:
        out = (exc.stdout or b"").decode(errors="replace") if isinstance(exc.stdout, bytes) else ""
        return None, out + "timed out", time.monotonic() - started
    return proc.returncode, proc.stdout + proc.stderr, time.monotonic() - started


def refused(surface: str, case: str, argv: list[str]) -> Outcome:
    code, out, seconds = cli(argv)
    return Outcome(surface, case, one_line_refusal(code, out), "Traceback" in out, seconds)


def _drawn(strategy: st.SearchStrategy[str], n: int) -> list[str]:
    """``n`` distinct values of ``strategy`` (hypothesis draws them; no test runner)."""
    out: list[str] = []
    warnings.simplefilter("ignore", NonInteractiveExampleWarning)  # drawn outside a test, on purpose
    for _ in range(50 * n):
        value = strategy.example()
        if value not in out and not value.startswith("-") and "\x00" not in value:
            out.append(value)
        if len(out) == n:
            break
    return out


def _in_range(text: str, low: float, high: float) -> bool:
    try:
        value = float(text)
    except ValueError:
        return False
    return math.isfinite(value) and low <= value <= high


def cli_cases(server: AnswerServer) -> list[Outcome]:
    outcomes = []
    for answer, reply in HOSTILE.items():
        server.reply = reply
        for command, argv in COMMANDS.items():
            outcomes.append(refused("cli", f"{command}/{answer}", with_server(argv, server.url)))
    for case, argv in BAD_ARGUMENTS.items():
        outcomes.append(refused("cli", f"argument/{case}", with_server(argv, server.url)))
    for url in BAD_URLS:
        outcomes.append(refused("cli", f"url/{url!r}", ["request", "list", "--url", url,
                                                         "--token-env", TOKEN_ENV]))
    numbers = st.one_of(st.floats().map(repr), st.text(max_size=10))
    for text in [t for t in _drawn(numbers, 3 * GENERATED) if not _in_range(t, 0.1, 3600)][:GENERATED]:
        argv = ["request", "wait", REQUEST_ID, f"--timeout={text}", f"--poll={text}"]
        outcomes.append(refused("cli", f"generated-wait/{text!r}", with_server(argv, server.url)))
    for rid in [r for r in _drawn(st.text(min_size=1, max_size=20), 2 * GENERATED)
                if r != REQUEST_ID][:GENERATED]:
        argv = with_server(["request", "release", rid], server.url)
        outcomes.append(refused("cli", f"generated-id/{rid!r}", argv))
    return outcomes


def forecast_cases(workdir: Path) -> list[Outcome]:
    day = 86400
    wave = [f"{50 if (t // 3600) % 24 < 12 else 0},{1000 + t},c0" for t in range(0, 4 * day, 300)]
    traces = {"duty-sample-at-3e11": [f"50,{JUMP:.0f},c1"],
              "duty-sample-at-minus-3e11": [f"50,{-JUMP:.0f},c1"],
              "duty-both-jumps": [f"50,{JUMP:.0f},c1", f"50,{-JUMP:.0f},c2"]}
    pods = ["name,num_gpu,gpu_milli,gpu_spec,qos,pod_phase,creation_time,deletion_time,scheduled_time"]
    pods += [f"d{d}-{i},1,1000,,LS,Running,{d * day + 28800},{d * day + 43200},{d * day + 28800}"
             for d in range(4) for i in range(4)]
    outcomes = []
    for case, extra in traces.items():
        path = workdir / f"{case}.csv"
        path.write_text("\n".join(["value,timestamp_anon,container_ip", *wave, *extra]) + "\n")
        outcomes.append(_backtest(case, path))
    for case, row in {"pods-created-at-3e11": f"jump,1,1000,,LS,Running,{JUMP:.0f},{JUMP + 600:.0f},"
                      f"{JUMP:.0f}",
                      "pods-deleted-at-3e11": f"forever,1,1000,,LS,Running,{day},{JUMP:.0f},{day}"}.items():
        path = workdir / f"{case}.csv"
        path.write_text("\n".join([*pods, row]) + "\n")
        outcomes.append(_backtest(case, path))
    return outcomes


def _backtest(case: str, path: Path) -> Outcome:
    code, out, seconds = cli(["forecast", "backtest", "--trace", str(path)])
    handled = code == 0 and "chosen=" in out and "Traceback" not in out
    return Outcome("forecast", case, handled, "Traceback" in out, seconds)


def alert_cases() -> list[Outcome]:
    return [refused("alerts", f"set/{s!r}", ["dashboards", "alerts", "--set", s])
            for s in ALERT_SETTINGS]


def run() -> list[Outcome]:
    server = AnswerServer().start()
    try:
        outcomes = cli_cases(server)
    finally:
        server.stop()
    with tempfile.TemporaryDirectory(prefix="hostile-cli-") as tmp:
        outcomes += forecast_cases(Path(tmp))
    return outcomes + alert_cases()


def main() -> None:
    outcomes = run()
    for o in outcomes:
        print(f"{o.surface:9} {o.case[:70]:72} {'ok' if o.handled else 'FAIL':>4} "
              f"{'TRACEBACK' if o.traceback else '':9} {o.seconds:6.2f}s")
    print(f"cases={len(outcomes)} handled={sum(o.handled for o in outcomes)} "
          f"tracebacks={sum(o.traceback for o in outcomes)}")


if __name__ == "__main__":
    main()

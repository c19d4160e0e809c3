"""Shared test configuration. Fixtures that start real services live next to their tests.

The suite runs in parallel (pytest-xdist, ``--dist loadfile``: a module stays on one
worker, so a module-scoped sandbox is started once; the packages in ``SHARED_PACKAGES``
stay on one worker as a whole, for their package-scoped fixture). Modules are handed out
in the order collected here: the slow ones first, end-to-end scenarios before the rest, so
that the longest module never starts last and leaves one worker running alone
(docs/internals/testing.md).
"""

from __future__ import annotations

import gc
import json
import os
import resource
import time
from typing import Any

import pytest

# Packages whose modules share a package-scoped fixture: the dashboards' scenario run (a
# service, Prometheus and Chromium through five phases, ~1.5 min) serves the PromQL and
# the Chromium checks once, not once per worker.
SHARED_PACKAGES = ("tests/dashboards/",)

# xdist workers start with COLUMNS=80 and LINES=24 in their environment, a serial run has
# neither; rich fixes a console's width from COLUMNS when the console is built (the CLI's,
# on first import), so tables the CLI tests read would be cut at 80 columns.
if "PYTEST_XDIST_WORKER" in os.environ:
    for name in ("COLUMNS", "LINES"):
        os.environ.pop(name, None)


def _module_rank(item: pytest.Item) -> int:
    if item.get_closest_marker("slow") is None:
        return 2
    return 0 if item.nodeid.startswith("tests/e2e/") else 1


def pytest_collection_modifyitems(items: list[pytest.Item]) -> None:
    # Stable: tests keep their order inside a module, modules their order inside a rank.
    rank: dict[str, int] = {}
    for item in items:
        module = item.nodeid.split("::", 1)[0]
        rank[module] = min(rank.get(module, 2), _module_rank(item))
    items.sort(key=lambda item: rank[item.nodeid.split("::", 1)[0]])


def pytest_xdist_make_scheduler(config: pytest.Config, log: Any) -> Any:
    from xdist.scheduler import LoadFileScheduling

    class ByModuleOrSharedPackage(LoadFileScheduling):  # type: ignore[misc]
        def _split_scope(self, nodeid: str) -> str:
            shared = [p for p in SHARED_PACKAGES if nodeid.startswith(p)]
            return shared[0] if shared else str(super()._split_scope(nodeid))

    return ByModuleOrSharedPackage(config, log)


# -- CPU and wall time per module ------------------------------------------------------------
# CI is CPU-bound on its two cores, so a module's CPU, not its wall time, is what it costs
# the budget. Counted per test (setup, call, teardown) as this process's CPU plus that of
# every child it has reaped: the services, hosts and commands a test starts and stops.
# Each worker's modules are also timed on the wall clock, so the end of a run shows
# whether a long module started late and left one worker running alone.
MODULE_CPU: dict[str, float] = {}
MODULE_SPAN: dict[str, list[float]] = {}  # module -> [first test began, last test ended]
WORKER_SPANS: dict[str, dict[str, list[float]]] = {}  # the controller's: worker -> MODULE_SPAN
STARTED = time.time()


def _cpu_now() -> float:
    me, children = resource.getrusage(resource.RUSAGE_SELF), resource.getrusage(resource.RUSAGE_CHILDREN)
    return me.ru_utime + me.ru_stime + children.ru_utime + children.ru_stime


@pytest.hookimpl(hookwrapper=True)
def pytest_runtest_protocol(item: pytest.Item, nextitem: pytest.Item | None) -> Any:
    before, began = _cpu_now(), time.time()
    yield
    module = item.nodeid.split("::", 1)[0]
    MODULE_CPU[module] = MODULE_CPU.get(module, 0.0) + _cpu_now() - before
    MODULE_SPAN.setdefault(module, [began, began])[1] = time.time()


@pytest.hookimpl(wrapper=True)
def pytest_runtest_call(item: pytest.Item) -> Any:
    """No automatic garbage collection while an ``exhausts_stack`` test runs. Such a test
    drives a parser (the SDK's, the json module's, YAML's) to the recursion limit, and a
    collection that starts there runs whatever finalizers earlier tests left pending with no
    stack left: each fails with RecursionError, an unraisable exception pytest fails the
    test on (it failed CI once in ~50 runs, on a test that passes alone). The garbage is
    collected after the test, at a normal depth."""
    if item.get_closest_marker("exhausts_stack") is None or not gc.isenabled():
        return (yield)
    gc.disable()
    try:
        return (yield)
    finally:
        gc.enable()


def pytest_sessionfinish(session: pytest.Session) -> None:
    workeroutput = getattr(session.config, "workeroutput", None)
    if workeroutput is not None:  # an xdist worker: the controller adds it up
        workeroutput["module_cpu"] = json.dumps(MODULE_CPU)
        workeroutput["module_span"] = json.dumps(MODULE_SPAN)


def pytest_testnodedown(node: Any, error: Any) -> None:
    for module, seconds in json.loads(node.workeroutput.get("module_cpu", "{}")).items():
        MODULE_CPU[module] = MODULE_CPU.get(module, 0.0) + seconds
    WORKER_SPANS[node.gateway.id] = json.loads(node.workeroutput.get("module_span", "{}"))


def pytest_terminal_summary(terminalreporter: Any) -> None:
    if not MODULE_CPU:
        return
    total = sum(MODULE_CPU.values())
    terminalreporter.write_sep("=", f"CPU per module (s; {total:.0f} s in all, the 20 largest)")
    for module, seconds in sorted(MODULE_CPU.items(), key=lambda kv: -kv[1])[:20]:
        terminalreporter.write_line(f"{seconds:8.1f}  {module}")
    if not WORKER_SPANS:
        return
    terminalreporter.write_sep("=", "when each worker finished (s after the start), and its last 3 modules")
    for worker, spans in sorted(WORKER_SPANS.items()):
        last = sorted(spans.items(), key=lambda kv: kv[1][1])[-3:]
        end = last[-1][1][1] - STARTED if last else 0.0
        tail = ", ".join(f"{m} {b - STARTED:.0f}-{e - STARTED:.0f}" for m, (b, e) in last)
        terminalreporter.write_line(f"{worker} {end:6.0f}  {tail}")

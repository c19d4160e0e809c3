"""Hostile numbers from a Kubernetes cluster (issue 30, class 4): the real reader against
the project's API server, through SignalReader and decide().

Each case changes one thing in a sane cluster (a node's allocatable GPUs, MIG slices, a
pod's request, a ResourceQuota, a node's utilization) and is handled when the reading
refuses it where it belongs (the node's data missing with the reason, the pod unserved,
the quota left out), the source stays readable, and every other pool's plan is the plan of
the sane cluster. Hypothesis-generated quantities (a bounded count) go the same way.
``seconds`` is the wall time from the change to the reading that shows it, plus decide().

    PYTHONPATH=$PWD python3 benchmarks/hostile_kubernetes.py
"""

from __future__ import annotations

import logging
import sys
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))

from hypothesis import HealthCheck, given, settings  # noqa: E402

from autoscaler.engine import decide  # noqa: E402
from autoscaler.model.plan import Plan  # noqa: E402
from autoscaler.model.snapshot_parts import Observed, assemble  # noqa: E402
from autoscaler.sandbox.fakes.kube import FakeKube  # noqa: E402
from autoscaler.schedulers.kubernetes.client import KubernetesConfig  # noqa: E402
from autoscaler.schedulers.kubernetes.objects import GPU, MIG_PREFIX, quantity  # noqa: E402
from autoscaler.signals.config import SignalsConfig  # noqa: E402
from autoscaler.signals.kube_fit import POOL_LABEL, TEAM_LABEL  # noqa: E402
from autoscaler.signals.kubernetes import KubernetesReader  # noqa: E402
from autoscaler.signals.reader import SignalReader  # noqa: E402
from benchmarks.hostile_outcome import Outcome  # noqa: E402
from tests.builders import NOW, fleet  # noqa: E402
from tests.signals.test_kubernetes_hostile import (  # noqa: E402
    BAD,
    CATALOG,
    FLEET,
    HOSTILE,
    POLICIES,
    QUANTITY,
    UtilMetrics,
    labels,
)

SURFACE = "kubernetes"
WAIT_S = 10.0
GENERATED = 20


class Tracebacks(logging.Handler):
    """Counts log records that carry a traceback (input must never produce one)."""

    def __init__(self) -> None:
        super().__init__(logging.DEBUG)
        self.count = 0

    def emit(self, record: logging.LogRecord) -> None:
        if record.exc_info or "Traceback" in record.getMessage():
            self.count += 1


class Bench:
    def __init__(self, kube: FakeKube):
        cfg = KubernetesConfig(host=kube.url, timeout="3s")
        self.kube, self.metrics = kube, UtilMetrics()
        self.reader = SignalReader(SignalsConfig(scheduler=["kubernetes"], kubernetes=cfg), CATALOG,
                                   prometheus=self.metrics, kubernetes=KubernetesReader(cfg))
        self.sane: Plan | None = None

    def tick(self) -> tuple[Observed, Plan]:
        observed = self.reader.read(POLICIES, FLEET, NOW)
        return observed, decide(POLICIES, fleet(*FLEET), assemble(observed), NOW, catalog=CATALOG)

    def until(self, shown: Callable[[Observed], bool]) -> tuple[Observed, Plan] | None:
        deadline = time.monotonic() + WAIT_S
        while time.monotonic() < deadline:
            observed, plan = self.tick()
            if shown(observed):
                return observed, plan
            time.sleep(0.05)
        return None

    def others_unchanged(self, plan: Plan, own: set[str]) -> bool:
        assert self.sane is not None
        return ([a for a in plan.actions if a.pool not in own]
                == [a for a in self.sane.actions if a.pool not in own])


def populate(kube: FakeKube) -> None:
    for node in FLEET:
        if node.pool == "mig":
            kube.add_node(node.name, labels=labels(node), resources={f"{MIG_PREFIX}3g.40gb": 16})
        else:
            kube.add_node(node.name, gpus=CATALOG.get("aws", node.instance_type).gpus, labels=labels(node))
    kube.add_pod("serve", "vision", node="vision-v100-1", gpus=2)
    for i in range(2):
        kube.add_pod(f"train-{i}", "vision", gpus=4, node_selector={TEAM_LABEL: "vision", POOL_LABEL: "v100"})
        kube.add_pod(f"infer-{i}", "search", gpus=1, node_selector={TEAM_LABEL: "search", POOL_LABEL: "a10"})


def set_gpus(kube: FakeKube, node: str, resource: str, value: str) -> None:
    def change(obj: dict[str, Any]) -> None:
        for part in ("capacity", "allocatable"):
            obj["status"][part][resource] = value
    kube.store.touch("nodes", node, change)


def node_missing(name: str) -> Callable[[Observed], bool]:
    return lambda o: bool(o.nodes[name].scheduler_missing) and o.missing == []


def run_case(bench: Bench, logs: Tracebacks, case: str, act: Callable[[], None],
             shown: Callable[[Observed], bool], own: set[str], undo: Callable[[], None]) -> Outcome:
    before = logs.count
    started = time.monotonic()
    handled = False
    try:
        act()
        got = bench.until(shown)
        handled = got is not None and bench.others_unchanged(got[1], own) and all(
            s.error is None for s in got[1].pools.values())
    except Exception:  # a case that breaks the bench is a case not handled
        logging.getLogger(__name__).exception("case %s", case)
    seconds = time.monotonic() - started
    undo()
    bench.until(lambda o: not o.unserved and all(
        not n.scheduler_missing and not (n.metrics_missing or "").startswith("the metrics")
        for n in o.nodes.values()))
    return Outcome(SURFACE, case, handled, logs.count > before, round(seconds, 4))


def cases(bench: Bench) -> list[tuple[str, Callable[[], None], Callable[[Observed], bool], set[str],
                                      Callable[[], None]]]:
    kube = bench.kube
    out: list[Any] = []
    for value in HOSTILE:
        out.append((f"node-gpus-{value}", lambda v=value: set_gpus(kube, BAD, GPU, v), node_missing(BAD),
                    {"search/t4"}, lambda: set_gpus(kube, BAD, GPU, "1")))
    out.append(("mig-slices-2000", lambda: set_gpus(kube, "vision-mig-1", f"{MIG_PREFIX}3g.40gb", "2000"),
                node_missing("vision-mig-1"), {"vision/mig"},
                lambda: set_gpus(kube, "vision-mig-1", f"{MIG_PREFIX}3g.40gb", "16")))
    for i, value in enumerate(["1e9", "nan", "inf", "1e999999E"]):
        def add(i: int = i, value: str = value) -> None:
            kube.add_pod(f"odd-{i}", "search", resources={GPU: value},
                         node_selector={TEAM_LABEL: "search", POOL_LABEL: "a10"})
        out.append((f"pod-request-{value}", add,
                    lambda o, i=i: f"search/odd-{i}" in {j.id for j in o.unserved}, {"search/a10"},
                    lambda i=i: kube.delete_pod(f"search/odd-{i}")))
    out.append(("running-pod-nan", lambda: kube.add_pod("odd-run", "search", node="search-a10-1",
                                                        resources={GPU: "nan"}),
                node_missing("search-a10-1"), {"search/a10"}, lambda: kube.delete_pod("search/odd-run")))
    for util in (500.0, -5.0, float("nan")):
        out.append((f"util-{util:g}", lambda u=util: bench.metrics.util.__setitem__("vision-v100-1", u),
                    lambda o: "util_mean" in (o.nodes["vision-v100-1"].metrics_missing or ""),
                    {"vision/v100"}, lambda: bench.metrics.util.pop("vision-v100-1", None)))
    return out


def generated(bench: Bench, logs: Tracebacks) -> list[Outcome]:
    """Hypothesis-generated allocatable quantities on the hostile node, a bounded count."""
    out: list[Outcome] = []

    @settings(max_examples=GENERATED, deadline=None, database=None,
              suppress_health_check=list(HealthCheck))
    @given(value=QUANTITY)
    def one(value: str) -> None:
        amount = quantity(value)  # g4dn.xlarge has 1 GPU: anything else is refused

        def believable(o: Observed) -> bool:
            seen = o.nodes[BAD]
            if o.missing or (seen.scheduler is None) == (0 <= amount <= 1):
                return False
            return seen.scheduler is None or seen.scheduler.gpus_total == amount
        out.append(run_case(bench, logs, f"generated-{value[:40]!r}",
                            lambda: set_gpus(bench.kube, BAD, GPU, value), believable, {"search/t4"},
                            lambda: set_gpus(bench.kube, BAD, GPU, "1")))

    one()
    return out


def run() -> list[Outcome]:
    logs = Tracebacks()
    root = logging.getLogger()
    root.addHandler(logs)
    try:
        with FakeKube() as kube:
            populate(kube)
            bench = Bench(kube)
            try:
                bench.sane = bench.tick()[1]
                outcomes = [run_case(bench, logs, *case) for case in cases(bench)]
                return outcomes + generated(bench, logs)
            finally:
                bench.reader.close()
    finally:
        root.removeHandler(logs)


def main() -> None:
    logging.basicConfig(level=logging.ERROR)
    outcomes = run()
    for o in outcomes:
        print(f"{o.surface} {o.case}: handled={o.handled} traceback={o.traceback} seconds={o.seconds}")
    print(f"cases={len(outcomes)} handled={sum(o.handled for o in outcomes)} "
          f"tracebacks={sum(o.traceback for o in outcomes)}")


if __name__ == "__main__":
    main()

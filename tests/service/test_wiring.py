"""How build_service wires the parts it makes itself (the other tests inject most of them)."""

from __future__ import annotations

from pathlib import Path

from autoscaler.actuators.drain.base import PhasedDrainer
from autoscaler.actuators.drain.kubernetes import KubernetesOps
from autoscaler.service.config.models import ServiceConfig
from autoscaler.service.executor import Executor
from autoscaler.service.wiring import build_service
from autoscaler.signals.kubernetes import KubernetesReader
from tests.service.service_fakes import write_policy


def test_the_kubernetes_drainer_reads_booting_nodes_from_the_signal_readers_watch_cache(
        tmp_path: Path) -> None:
    """One watch cache of nodes per service: promote's readiness check reads the signal
    reader's instead of listing every node each tick (issue 36, 1,000 nodes)."""
    write_policy(tmp_path / "policies", "vision", name="gpu", max_nodes=5)
    config = ServiceConfig.model_validate({
        "policies_dir": tmp_path / "policies",
        "store": {"url": f"sqlite:///{tmp_path / 'fleet.db'}"},
        "signals": {"kubernetes": {"host": "http://127.0.0.1:9", "timeout": "1s"}},
    })
    service = build_service(config)
    try:
        executor, reader = service.loop.executor, getattr(service.loop.signals, "kubernetes", None)
        assert isinstance(executor, Executor) and isinstance(reader, KubernetesReader)
        drainer = executor.drainers["kubernetes"]
        assert isinstance(drainer, PhasedDrainer) and isinstance(drainer.ops, KubernetesOps)
        assert drainer.ops.cached == reader.node_records
        assert reader.node_records() is None  # nothing listed: the drainer asks the API
    finally:
        service.close()

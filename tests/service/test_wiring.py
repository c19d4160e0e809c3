"""How build_service wires the parts it makes itself (the other tests inject most of them)."""

from __future__ import annotations

from datetime import timedelta
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


def test_the_retentions_reach_the_loop_and_have_a_floor(tmp_path: Path) -> None:
    import pytest
    from pydantic import ValidationError

    write_policy(tmp_path / "policies", "vision", name="gpu", max_nodes=5)
    base = {"policies_dir": tmp_path / "policies"}
    with pytest.raises(ValidationError, match=r"store\.plan_retention must be at least 1h"):
        ServiceConfig.model_validate({**base, "store": {"plan_retention": "30m"}})
    with pytest.raises(ValidationError, match=r"store\.audit_retention must be at least 1d"):
        ServiceConfig.model_validate({**base, "store": {"audit_retention": "12h"}})
    assert ServiceConfig.model_validate(base).store.audit_retention == timedelta(days=90)
    config = ServiceConfig.model_validate({**base, "store": {
        "url": f"sqlite:///{tmp_path / 'fleet.db'}", "plan_retention": "2d",
        "audit_retention": "30d"}})
    service = build_service(config, dry_run=True)
    try:
        assert service.loop.plan_retention == timedelta(days=2)
        assert service.loop.audit_retention == timedelta(days=30)
    finally:
        service.close()

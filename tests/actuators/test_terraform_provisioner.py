"""TerraformProvisioner's records of what it did for status keep only the last ones."""

from __future__ import annotations

from pathlib import Path

import pytest

from autoscaler.actuators.terraform import StateLockedError
from autoscaler.actuators.terraform.provisioner import KEPT
from tests.fakes import FakeCloud
from tests.service.executor.test_executor_terraform import (
    REF,
    SPEC,
    FakeWorkspace,
    Monotonic,
    locked,
    provisioner,
)


def test_imports_and_unlocks_kept_are_the_last_ones(tmp_path: Path) -> None:
    """A stray import or a stale lock is rare, but the service lives for months."""
    cloud = FakeCloud()
    ws = FakeWorkspace(tmp_path / "ws", {})
    mono = Monotonic()
    prov = provisioner(tmp_path, cloud, ws, monotonic=mono)
    for i in range(KEPT + 50):
        lost = cloud.launch(REF, f"vision-gpu-{i}", SPEC)  # an apply died before saving it
        lock = f"{i:08x}-aaaa-bbbb-cccc-0123456789ab"
        ws.apply_errors = [locked("2026-11-30 08:00:00 +0000 UTC", lock)]
        with pytest.raises(StateLockedError):
            prov.apply(REF, {f"vision-gpu-{i}": SPEC})  # seen for the first time: it waits
        mono.now += 3600
        ws.apply_errors = [locked("2026-11-30 08:00:00 +0000 UTC", lock)]
        assert prov.apply(REF, {f"vision-gpu-{i}": SPEC}).ok
        cloud.terminate(lost.instance_id)
    assert len(prov.unlocked) == KEPT and prov.unlocked[-1] == ("vision/gpu", lock)
    assert len(prov.imported) == KEPT and prov.imported[-1][2] == lost.instance_id

"""Policy checks of the Kubernetes cluster section and of MIG against the GPU's geometry."""

from __future__ import annotations

from pathlib import Path

import pytest

from autoscaler.catalog import default_catalog
from autoscaler.catalog.mig import layout_problems
from autoscaler.policy import load_file

CATALOG = default_catalog()
BASE = """\
apiVersion: gpu-autoscaler/v1
team: vision
pools:
  - name: train
    cloud: aws
    region: us-east-1
    instance_types: [{types}]
    max_nodes: 4
{extra}"""


def problems(tmp_path: Path, types: str, extra: str) -> list[tuple[str, str]]:
    path = tmp_path / "vision.yaml"
    path.write_text(BASE.format(types=types, extra=extra))
    _, errors = load_file(path, CATALOG)
    return [(e.path, e.message) for e in errors]


@pytest.mark.parametrize(("types", "extra"), [
    ("p4d.24xlarge", "    bootstrap: {sharing: mig, mig_profiles: [3g.20gb, 3g.20gb]}\n"),
    ("p4d.24xlarge", "    bootstrap: {sharing: mig, mig_profiles: [4g.20gb, 2g.10gb, 1g.5gb]}\n"),
    ("p4de.24xlarge, p5.48xlarge", "    bootstrap: {sharing: mig, mig_profiles: "
     "[1g.10gb, 1g.10gb, 1g.10gb, 1g.10gb, 1g.10gb, 1g.10gb, 1g.10gb]}\n"),
    ("p3.2xlarge", "    cluster: {kind: kubernetes, taints: ['dedicated=ml:NoSchedule', "
     "'nvidia.com/gpu:NoExecute'], quota_from: resourcequota}\n"),
])
def test_valid(tmp_path: Path, types: str, extra: str) -> None:
    assert problems(tmp_path, types, extra) == []


@pytest.mark.parametrize(("types", "extra", "path", "needle"), [
    ("p3.8xlarge", "    bootstrap: {sharing: mig, mig_profiles: [3g.20gb]}\n",
     "pools[0].instance_types[0]", "sharing: mig on p3.8xlarge: V100 16GB has no MIG"),
    ("p4d.24xlarge", "    bootstrap: {sharing: mig, mig_profiles: [3g.40gb]}\n",
     "pools[0].instance_types[0]", "has no MIG profile 3g.40gb (it has 1g.5gb, 2g.10gb"),
    ("p5.48xlarge", "    bootstrap: {sharing: mig, mig_profiles: [4g.40gb, 4g.40gb]}\n",
     "pools[0].instance_types[0]", "4g.40gb fits at most 1 time(s)"),
    ("p4d.24xlarge", "    bootstrap: {sharing: mig, mig_profiles: [4g.20gb, 3g.20gb, 1g.5gb]}\n",
     "pools[0].instance_types[0]", "uses 8/7 compute and 9/8 memory slices"),
    ("p3.2xlarge", "    cluster: {kind: kubernetes, taints: ['dedicated=ml']}\n",
     "pools[0].cluster.taints[0]", "does not match"),
    ("p3.2xlarge", "    cluster: {kind: kubernetes, taints: ['a=$(x):NoSchedule']}\n",
     "pools[0].cluster.taints[0]", "does not match"),
    ("p3.2xlarge", "    cluster: {kind: slurm, quota_from: resourcequota}\n",
     "pools[0].cluster.quota_from", "needs cluster.kind: kubernetes"),
])
def test_refused(tmp_path: Path, types: str, extra: str, path: str, needle: str) -> None:
    got = problems(tmp_path, types, extra)
    assert {p for p, _ in got} == {path}
    assert any(needle in message for _, message in got), got


def test_geometry_tables() -> None:
    """NVIDIA's MIG user guide: the all-one-profile layouts that fill a GPU are valid."""
    for model, memory, full in (("A100", 40, {"1g.5gb": 7, "2g.10gb": 3, "3g.20gb": 2,
                                              "4g.20gb": 1, "7g.40gb": 1}),
                                ("H100", 80, {"1g.10gb": 7, "1g.20gb": 4, "2g.20gb": 3,
                                              "3g.40gb": 2, "4g.40gb": 1, "7g.80gb": 1})):
        for profile, count in full.items():
            assert layout_problems(model, memory, [profile] * count) == []
            assert layout_problems(model, memory, [profile] * (count + 1)) != []
    assert CATALOG.get("alicloud", "ecs.gn7e-c16g1.32xlarge").mig["3g.40gb"].max == 2

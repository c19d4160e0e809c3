"""``gpu-autoscaler image``: what it refuses, before any Terraform or SSH, and why (the bake
itself: tests/e2e/test_baked_image_e2e.py)."""

from __future__ import annotations

from pathlib import Path

import pytest
from typer.testing import CliRunner

from autoscaler.cli import app

POLICY = """\
apiVersion: gpu-autoscaler/v1
team: vision
pools:
  - name: base
    cloud: aws
    region: us-east-1
    instance_types: [g4dn.xlarge]
    max_nodes: 2
    cluster: {kind: slurm, partition: gpu}
  - name: baked
    cloud: aws
    region: us-west-2
    instance_types: [g4dn.xlarge]
    max_nodes: 2
    bootstrap: {image: baked}
    cluster: {kind: slurm, partition: gpu}
"""


@pytest.fixture
def config(tmp_path: Path) -> Path:
    (tmp_path / "policies").mkdir()
    (tmp_path / "policies" / "vision.yaml").write_text(POLICY)
    path = tmp_path / "service.yaml"
    # Terraform inputs for us-east-1 only: the baked pool's region has none.
    path.write_text(f"policies_dir: {tmp_path / 'policies'}\n"
                    f"terraform: {{workdir: {tmp_path / 'tf'}, regions: "
                    "{aws/us-east-1: {ami: ami-0123abcd}}}\n")
    return path


@pytest.mark.parametrize(("argv", "error"), [
    (["bake", "vision"], "'vision' is not TEAM/POOL"),
    (["bake", "vision/gpu"], "no pool vision/gpu in "),
    (["bake", "vision/base"], "pool vision/base has bootstrap.image: base; set bootstrap.image: "
                              "baked"),
    (["bake", "vision/baked", "--instance-type", "p5.48xlarge"],
     "--instance-type p5.48xlarge is not one of the pool's types (g4dn.xlarge)"),
    (["bake", "vision/baked"], "no Terraform inputs for aws/us-west-2 (terraform.regions)"),
    (["list", "vision/base"], "pool vision/base has bootstrap.image: base"),
    (["list", "vision/baked"], "no Terraform inputs for aws/us-west-2"),
])
def test_refused_with_one_error_line_and_nothing_run(config: Path, argv: list[str],
                                                    error: str) -> None:
    result = CliRunner().invoke(app, ["image", *argv, "--config", str(config)],
                                env={"COLUMNS": "300"})
    assert result.exit_code == 1, result.output
    assert error in " ".join(result.output.split()), result.output
    assert not (config.parent / "tf").exists()  # no workspace made, no Terraform run

"""Warm pools run on AWS only: the service refuses to start with one on Alibaba Cloud, and a
reload that adds one there keeps the team on its last good policy; on AWS both go through."""

from __future__ import annotations

from pathlib import Path

from typer.testing import CliRunner

from autoscaler.catalog import default_catalog
from autoscaler.cli import app
from autoscaler.service.config.reload import PolicyReloader
from tests.service.config.test_config import write
from tests.service.service_fakes import write_policy

WARM = {"size": 1, "max": 2}


def test_the_service_refuses_to_start_and_names_the_pool(tmp_path: Path) -> None:
    path = write(tmp_path, f"policies_dir: policies\nstore: {{url: 'sqlite:///{tmp_path}/fleet.db'}}\n")
    write_policy(tmp_path / "policies", "vision", name="train", warm_pool=WARM,
                 cloud="alicloud", region="cn-hangzhou", instance_types=["ecs.gn6i-c4g1.xlarge"])
    write_policy(tmp_path / "policies", "search", name="infer", warm_pool=WARM)
    result = CliRunner().invoke(app, ["run", "--once", "--dry-run", "--config", str(path)])
    lines = [line for line in result.output.splitlines() if line.strip()]
    assert result.exit_code == 1 and len(lines) == 1, result.output
    assert "vision/train" in lines[0] and "search/infer" not in lines[0]
    assert "warm pools run on AWS only so far" in lines[0]
    assert not (tmp_path / "fleet.db").exists()  # refused before the store opens


def test_a_reload_that_adds_a_warm_pool_keeps_the_last_good_policy(tmp_path: Path) -> None:
    pdir = tmp_path / "policies"
    write_policy(pdir, "vision", name="train", max_nodes=4)
    reloader = PolicyReloader(pdir, default_catalog())
    reloader.refresh()
    write_policy(pdir, "vision", name="train", max_nodes=6, warm_pool=WARM, cloud="alicloud",
                 region="cn-hangzhou", instance_types=["ecs.gn6i-c4g1.xlarge"])
    reloader.reread()
    result = reloader.refresh()
    assert reloader.policies["vision"].pools[0].max_nodes == 4 and not result.changed
    assert [(e.path, "vision/train" in e.message, "AWS only" in e.message)
            for e in result.errors] == [("pools[0].warm_pool", True, True)]
    write_policy(pdir, "vision", name="train", max_nodes=6, warm_pool=WARM)  # on AWS: taken
    reloader.reread()
    result = reloader.refresh()
    assert result.changed and not result.errors
    assert reloader.policies["vision"].pools[0].warm_pool is not None


def test_a_warm_pool_whose_nodes_would_be_spot_is_refused_with_what_to_change(tmp_path: Path) -> None:
    path = write(tmp_path, f"policies_dir: policies\nstore: {{url: 'sqlite:///{tmp_path}/fleet.db'}}\n")
    write_policy(tmp_path / "policies", "vision", name="train", warm_pool=WARM,
                 capacity={"on_demand_base": 0, "spot_percent": 100, "spot_fallback": "none"})
    result = CliRunner().invoke(app, ["run", "--once", "--dry-run", "--config", str(path)])
    assert result.exit_code == 1, result.output
    assert "vision/train" in result.output and "persistent" in result.output
    assert "spot_fallback: on-demand" in result.output

"""``gpu-autoscaler plan --settings`` / ``apply`` with real Terraform against moto.

One pool, two engine launches: plan (Markdown preview, saved plan), apply (exactly that
plan), plan again (unchanged: no Terraform run). A fake secret in the environment and in
the user data must appear in no output and no Terraform log.
"""

from __future__ import annotations

import json
from collections.abc import Iterator
from pathlib import Path

import pytest
from ruamel.yaml import YAML
from typer.testing import CliRunner

from autoscaler.cli import app
from autoscaler.sandbox.services.moto_server import MotoSandbox, running_instances
from tests.actuators.terraform_fixtures import (  # noqa: F401 (fixture)
    FAKE_SECRET,
    moto,
    needs_terraform,
    sandbox_settings,
)

pytestmark = [pytest.mark.slow, needs_terraform]

POLICY = """\
apiVersion: gpu-autoscaler/v1
team: vision
pools:
  - name: v100
    cloud: aws
    region: us-east-1
    instance_types: [g4dn.xlarge]
    capacity: {on_demand_base: 1, spot_percent: 50}
    min_nodes: 2
    max_nodes: 4
"""
SNAPSHOT = {"now": "2026-11-30T12:00:00Z", "fleet": {"nodes": []},
            "snapshot": {"taken_at": "2026-11-30T12:00:00Z"}}
ENV_SECRET = "env-secret-7d2b90e1"


@pytest.fixture(scope="module")
def files(moto: MotoSandbox, tmp_path_factory: pytest.TempPathFactory) -> Iterator[dict[str, Path]]:  # noqa: F811
    root = tmp_path_factory.mktemp("cli")
    (root / "policies").mkdir()
    (root / "policies" / "vision.yaml").write_text(POLICY)
    (root / "snapshot.json").write_text(json.dumps(SNAPSHOT))
    settings = sandbox_settings(moto, root / "tf")
    yaml = YAML()
    with (root / "settings.yaml").open("w") as fh:
        yaml.dump({"terraform": json.loads(settings.model_dump_json())}, fh)
    yield {"root": root, "settings": root / "settings.yaml", "tf": root / "tf"}


def run(args: list[str]) -> tuple[int, str]:
    env = {"AWS_SECRET_ACCESS_KEY": ENV_SECRET, "GPU_NODE_JOIN_TOKEN": ENV_SECRET}
    result = CliRunner().invoke(app, args, env=env)
    return result.exit_code, result.output


def assert_no_secret(text: str) -> None:
    assert FAKE_SECRET not in text and ENV_SECRET not in text


def base_args(files: dict[str, Path]) -> list[str]:
    return ["--snapshot", str(files["root"] / "snapshot.json"),
            "--policies", str(files["root"] / "policies")]


class TestPlanThenApply:
    def test_plan_markdown_previews_terraform_changes_and_cost(
            self, files: dict[str, Path]) -> None:
        code, out = run(["plan", *base_args(files), "--settings", str(files["settings"]),
                         "--markdown"])
        assert code == 0, out
        assert "| `vision/v100` | terraform plan saved | 2 create |" in out
        assert "$0.00/h | $0.71/h | **+$0.71/h**" in out  # 0.526 on-demand + 0.184 spot
        assert "- **create** `vision-v100-new1`: g4dn.xlarge on-demand" in out
        assert "- **create** `vision-v100-new2`: g4dn.xlarge spot" in out
        assert "min_nodes is 2; pool has 0" in out  # the engine's reason
        assert (files["tf"] / "vision" / "v100" / "plan" / "pending.tfplan").exists()
        assert_no_secret(out)

    def test_apply_runs_exactly_the_saved_plan(self, files: dict[str, Path],
                                               moto: MotoSandbox) -> None:  # noqa: F811
        code, out = run(["apply", "--settings", str(files["settings"])])
        assert code == 0, out
        assert "vision/v100: applied" in out and "created 2" in out
        nodes = {t["Value"] for i in running_instances(moto.client(), pool="v100")
                 for t in i["Tags"] if t["Key"] == "node"}
        assert nodes == {"vision-v100-new1", "vision-v100-new2"}
        assert_no_secret(out)
        code, out = run(["apply", "--settings", str(files["settings"])])
        assert code == 0 and "nothing to apply" in out

    def test_plan_again_is_unchanged_and_runs_no_terraform(self, files: dict[str, Path]) -> None:
        logs = files["tf"] / "vision" / "v100" / "logs"
        before = {p.name: p.stat().st_mtime_ns for p in logs.iterdir()}
        code, out = run(["plan", *base_args(files), "--settings", str(files["settings"]),
                         "--json"])
        assert code == 0, out
        [pool] = json.loads(out)["pools"]
        assert pool["status"] == "unchanged" and pool["changes"] == []
        assert {p.name: p.stat().st_mtime_ns for p in logs.iterdir()} == before
        assert_no_secret(out)

    def test_no_secret_in_any_terraform_log(self, files: dict[str, Path]) -> None:
        logs = list((files["tf"] / "vision" / "v100" / "logs").glob("*.log"))
        assert {p.name for p in logs} >= {"plan.log", "apply.log"}
        for log in logs:
            assert_no_secret(log.read_text())


def test_engine_only_plan_without_settings_runs_no_terraform(tmp_path: Path) -> None:
    (tmp_path / "policies").mkdir()
    (tmp_path / "policies" / "vision.yaml").write_text(POLICY)
    (tmp_path / "snapshot.json").write_text(json.dumps(SNAPSHOT))
    code, out = run(["plan", "--snapshot", str(tmp_path / "snapshot.json"),
                     "--policies", str(tmp_path / "policies"), "--json"])
    assert code == 0, out
    payload = json.loads(out)
    assert payload["pools"] is None
    assert [a["kind"] for a in payload["plan"]["actions"]] == ["launch", "launch"]


def test_live_plan_from_a_service_config_records_nothing(
        moto: MotoSandbox, tmp_path: Path) -> None:  # noqa: F811
    (tmp_path / "policies").mkdir()
    (tmp_path / "policies" / "vision.yaml").write_text(POLICY)
    store = f"sqlite:///{tmp_path / 'fleet.db'}"
    settings = json.loads(sandbox_settings(moto, tmp_path / "tf").model_dump_json())
    # A config file refuses a literal secret in user_data (the fixture's is for the previews).
    settings["regions"]["aws/us-east-1"]["user_data"] = "#!/bin/sh\necho booted\n"
    config = {"policies_dir": str(tmp_path / "policies"), "store": {"url": store},
              "clouds": {"market_prices": False, "aws": {"endpoint_url": moto.endpoint}},
              "terraform": settings}
    with (tmp_path / "config.yaml").open("w") as fh:
        YAML().dump(config, fh)
    code, out = run(["plan", "--config", str(tmp_path / "config.yaml"), "--markdown",
                     "--save-input", str(tmp_path / "input.json")])
    assert code == 0, out
    assert "| `vision/v100` | terraform plan saved | 2 create |" in out
    assert "min_nodes is 2; pool has 0" in out
    assert_no_secret(out)
    # The live reading replays: the same decision from the saved input.
    code, replay = run(["plan", "--snapshot", str(tmp_path / "input.json"),
                        "--policies", str(tmp_path / "policies"), "--json"])
    assert code == 0, replay
    kinds = [a["kind"] for a in json.loads(replay)["plan"]["actions"]]
    assert kinds.count("launch") == 2, kinds
    from autoscaler.fleet.store import FleetStore
    from autoscaler.fleet.tables import LeaseRow, PlanRow

    fleet = FleetStore(store)
    try:
        with fleet.session() as s:
            assert s.query(PlanRow).count() == 0 and s.query(LeaseRow).count() == 0
    finally:
        fleet.close()


def test_plan_needs_exactly_one_input() -> None:
    code, out = run(["plan"])
    assert code == 1 and "exactly one of --snapshot" in out

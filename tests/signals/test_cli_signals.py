"""``gpu-autoscaler signals --config``: table and JSON from a real Prometheus and Slurm; the
JSON feeds ``gpu-autoscaler plan --snapshot``."""

from __future__ import annotations

import json
import shutil
from collections.abc import Iterator
from pathlib import Path

import pytest
from typer.testing import CliRunner

from autoscaler.cli import app
from autoscaler.model.snapshot import DecisionInput
from autoscaler.sandbox.hosts.procs import wait_until
from autoscaler.sandbox.services.prometheus import PrometheusServer
from autoscaler.sandbox.services.slurm import SlurmCluster, SlurmNodeSpec
from tests.signals.history import History, tick_end

pytestmark = [
    pytest.mark.slow,
    pytest.mark.skipif(shutil.which("prometheus") is None or shutil.which("slurmctld") is None,
                       reason="prometheus and slurm needed"),
]

POLICY = """\
apiVersion: gpu-autoscaler/v1
team: vision
priority: high
pools:
  - name: train
    cloud: aws
    region: us-east-1
    instance_types: [p3.2xlarge, p3.8xlarge]
    max_nodes: 4
    scale_up: {window: 5m}
    scale_down: {idle_for: 15m, gpu_utilization_below: 10}
    cluster: {kind: slurm, partition: gpu}
"""


@pytest.fixture(scope="module")
def stack(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Path]:
    work = tmp_path_factory.mktemp("cli-signals")
    h = History(tick_end(offset_s=30))
    h.gpu("vision-train-1", 0, lambda k: 2)  # idle
    h.gpu("vision-train-2", 0, lambda k: 95)  # busy
    h.backfill(work / "data")
    nodes = [SlurmNodeSpec("vision-train-1", gpus=1, gpu_type="v100"),
             SlurmNodeSpec("vision-train-2", gpus=1, gpu_type="v100")]
    with PrometheusServer(work / "prom", data_dir=work / "data") as prom, \
            SlurmCluster(work / "slurm", nodes) as slurm:
        busy = slurm.submit("sleep 600", gpus=1, nodelist="vision-train-2")
        slurm.wait_job_state(busy, {"RUNNING"}, timeout=60)
        # Waits for vision-train-2's GPU, so vision-train-1 stays idle.
        waiting = slurm.submit("sleep 600", gpus=1, gpu_type="v100", nodelist="vision-train-2")
        wait_until(lambda: slurm.run(["squeue", "-h", "-j", waiting, "-o", "%r"]).stdout.strip()
                   in ("Resources", "Priority"), 30, "the job to wait for resources")
        (work / "policies").mkdir()
        (work / "policies" / "vision.yaml").write_text(POLICY)
        config = work / "signals.yaml"
        config.write_text(
            "policies_dir: policies\n"
            "signals:\n"
            f"  prometheus: {{url: '{prom.url}', stale_after: 10m, timeout: 3s}}\n"
            "  scheduler: slurm\n"
            f"  slurm: {{env: {{SLURM_CONF: '{slurm.slurm_conf}'}}, timeout: 10s}}\n")
        yield config
        slurm.run(["scancel", "--user=root"])


def test_table(stack: Path) -> None:
    result = CliRunner().invoke(app, ["signals", "--config", str(stack)], env={"COLUMNS": "200"})
    assert result.exit_code == 0, result.output
    row = next(line for line in result.output.splitlines() if "vision/train" in line)
    cells = [c.strip() for c in row.strip("│ ").split("│")]
    # pool, nodes, mean util, idle nodes, pending GPUs, data
    assert cells == ["vision/train", "2", "48%", "1", "1", "ok"]
    assert "prometheus: ok: 2 nodes" in result.output
    assert "slurm: ok: 2 nodes via squeue/sinfo --json" in result.output


def test_json_feeds_plan(stack: Path, tmp_path: Path) -> None:
    result = CliRunner().invoke(app, ["signals", "--config", str(stack), "--json"])
    assert result.exit_code == 0, result.output
    data = DecisionInput.model_validate_json(result.output)
    assert data.fleet.nodes == []  # never invented from what the sources report
    snap = data.snapshot
    assert snap.missing == []
    assert [j.gpus for j in snap.pools["vision/train"].pending] == [1]
    one = snap.nodes["vision-train-1"]
    assert one.metrics is not None and one.metrics.util_mean == pytest.approx(2)
    assert one.scheduler is not None and one.scheduler.state == "idle"
    saved = tmp_path / "input.json"
    saved.write_text(result.output)
    plan = CliRunner().invoke(app, ["plan", "--snapshot", str(saved), "--policies",
                                    str(stack.parent / "policies"), "--json"])
    assert plan.exit_code == 0, plan.output
    out = json.loads(plan.output)
    actions = out.get("plan", out)["actions"]  # {"plan": ..., "previews": ...} or a bare plan
    assert any(a["kind"] == "launch" for a in actions)  # the pending V100 job needs a node


def test_bad_config_is_reported(tmp_path: Path) -> None:
    bad = tmp_path / "bad.yaml"
    bad.write_text("policies_dir: p\nsignals: {prometheus: {url: x, passwd: 1}}\n")
    result = CliRunner().invoke(app, ["signals", "--config", str(bad)])
    assert result.exit_code == 1
    assert "signals.prometheus.passwd" in result.output


def test_print_rules(tmp_path: Path) -> None:
    (tmp_path / "p").mkdir()
    (tmp_path / "p" / "vision.yaml").write_text(POLICY)
    cfg = tmp_path / "signals.yaml"
    cfg.write_text("policies_dir: p\nsignals: {prometheus: {url: 'http://p:9090', "
                   "node_label: hostname}}\n")
    result = CliRunner().invoke(app, ["signals", "--config", str(cfg), "--print-rules"])
    assert result.exit_code == 0, result.output
    # The policy's 5m scale-up window and 15m idle window become recorded series.
    assert "record: gpu_autoscaler:node_gpu_util:avg_over_5m" in result.output
    assert "record: gpu_autoscaler:node_gpu_util:max_over_15m" in result.output
    assert "by (hostname)" in result.output

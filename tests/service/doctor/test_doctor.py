"""``gpu-autoscaler doctor`` against the sandbox: healthy once (every row ok, exit 0), then
each dependency broken in turn and restored, the break named in its row and exit 1.

One sandbox for the module (moto, the DCGM exporter, Prometheus), a real Slurm cluster
and the project's Kubernetes API server; the healthy config adds an S3 Terraform backend
on moto and a spot-notice queue whose policy lets EventBridge send. Breaks run in-process
(``diagnose``) with only the checks they concern plus their neighbours; the healthy run and
one broken run also go through the command line in a subprocess (exit status, table).
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import pytest
from ruamel.yaml import YAML

from autoscaler.fleet.store import FleetStore
from autoscaler.model.changes import Create, Move
from autoscaler.model.lifecycle import NodeState
from autoscaler.model.progress import LaunchSpec
from autoscaler.policy.models import Market
from autoscaler.sandbox.fakes.kube import FakeKube
from autoscaler.sandbox.hosts.procs import wait_until
from autoscaler.sandbox.services.moto_server import SANDBOX_ENV
from autoscaler.sandbox.stack.local import SandboxStack, StackOptions, privileged
from autoscaler.service.doctor import CHECKS, Result, Status, diagnose
from tests.actuators.terraform_fixtures import needs_terraform

pytestmark = [
    pytest.mark.slow, needs_terraform, pytest.mark.timeout(600),
    pytest.mark.skipif(not privileged(), reason="needs root for Slurm (munged, slurmctld)"),
]
REPO = Path(__file__).resolve().parents[3]
BUCKET = "doctor-state"
POLICY = """\
apiVersion: gpu-autoscaler/v1
team: doc
priority: high
pools:
  - name: train
    cloud: aws
    region: us-east-1
    zones: [us-east-1a, us-east-1b]
    instance_types: [p3.2xlarge, p3.8xlarge, p3.16xlarge]
    capacity: {on_demand_base: 0, spot_percent: 50}
    max_nodes: 2
    cluster: {kind: slurm, partition: train}
  - name: serve
    cloud: aws
    region: us-east-1
    instance_types: [g4dn.xlarge]
    max_nodes: 2
    cluster: {kind: kubernetes}
"""
EVENTS_POLICY = json.dumps({"Version": "2012-10-17", "Statement": [{
    "Effect": "Allow", "Principal": {"Service": "events.amazonaws.com"},
    "Action": "sqs:SendMessage", "Resource": "*"}]})


@dataclass
class World:
    root: Path
    stack: SandboxStack
    slurm: Any
    kube: FakeKube
    healthy: dict[str, Any]
    timings: dict[str, float]

    def config(self, name: str, change: Callable[[dict[str, Any]], None] | None = None) -> Path:
        data = json.loads(json.dumps(self.healthy))
        if change is not None:
            change(data)
        path = self.root / f"{name}.yaml"
        YAML(typ="safe").dump(data, path)
        return path

    def run(self, case: str, path: Path, only: tuple[str, ...] = ()) -> dict[str, Result]:
        started = time.monotonic()
        rows = diagnose(path, only)
        self.timings[case] = round(time.monotonic() - started, 1)
        return {r.name: r for r in rows}


@pytest.fixture(scope="module")
def world(tmp_path_factory: pytest.TempPathFactory) -> Iterator[World]:
    from autoscaler.sandbox.services.slurm import SlurmCluster, SlurmNodeSpec

    root = tmp_path_factory.mktemp("doctor")
    (root / "policies").mkdir()
    (root / "policies" / "doc.yaml").write_text(POLICY)
    with pytest.MonkeyPatch.context() as mp:
        for key, value in SANDBOX_ENV.items():
            mp.setenv(key, value)
        stack = SandboxStack(root / "sandbox", StackOptions(policies_dir=root / "policies",
                                                            privileged=False))
        # A static node beside the partition's Nodeset for the pool's dynamic ones.
        slurm = SlurmCluster(root / "slurm", [SlurmNodeSpec("doc-train-1", partition="train")],
                             dynamic_partitions=["train"], max_nodes=4)
        kube = FakeKube()
        try:
            stack.start()
            slurm.start()
            kube.start()
            yield World(root, stack, slurm, kube, _healthy(stack, slurm, kube), {})
        finally:
            kube.stop()
            slurm.stop()
            stack.stop()


def _healthy(stack: SandboxStack, slurm: Any, kube: FakeKube) -> dict[str, Any]:
    """The sandbox's own service.yaml, with Slurm, Kubernetes, an S3 backend and a queue."""
    assert stack.moto is not None
    data: dict[str, Any] = YAML(typ="safe").load(stack.config_file.read_text())
    stack.moto.client("s3").create_bucket(Bucket=BUCKET)
    queue = stack.moto.client("sqs").create_queue(
        QueueName="doctor-notices", Attributes={"Policy": EVENTS_POLICY})["QueueUrl"]
    data["signals"].update(scheduler=["slurm", "kubernetes"], slurm={"env": slurm.env()},
                           kubernetes={"host": kube.url, "timeout": "5s"})
    data["clouds"]["aws"]["sqs_queue_urls"] = {"us-east-1": queue}
    data["clouds"]["aws"]["spot_placement_scores"] = True  # the sandbox's moto answers them
    data["terraform"]["backend"] = {"kind": "s3", "bucket": BUCKET, "region": "us-east-1",
                                    "endpoint": stack.moto.endpoint}
    return data


def failed(rows: dict[str, Result]) -> dict[str, str]:
    return {name: r.reason for name, r in rows.items() if r.status is Status.FAIL}


def cli(path: Path, *args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, "-m", "autoscaler.cli", "doctor", "--config", str(path),
                           *args], capture_output=True, text=True, timeout=240, cwd=REPO,
                          env={**os.environ, **SANDBOX_ENV, "PYTHONPATH": str(REPO)})


def test_healthy_sandbox_passes_every_check_through_the_command_line(world: World) -> None:
    started = time.monotonic()
    out = cli(world.config("healthy"), "--json")
    world.timings["healthy (subprocess)"] = round(time.monotonic() - started, 1)
    assert out.returncode == 0, out.stdout + out.stderr
    answer = json.loads(out.stdout)
    rows = {r["name"]: r for r in answer["rows"]}
    assert answer["ok"] is True
    # The one row that is not ok: the sandbox's test hosts take root logins over SSH.
    assert {n: (r["status"], r["reason"]) for n, r in rows.items() if r["status"] != "ok"} == {
        "ssh user": ("warn", "ansible.ssh_user is root (the default): nodes must allow root logins "
                             "over SSH; set the image's own user (admin on Debian, ubuntu, "
                             "ec2-user), which the plays use with sudo")}
    for check in ("config", "policies", "store", *(c.name for c in CHECKS)):
        assert any(name.startswith(check) for name in rows), check  # a row for every check
    assert "state lock taken and released" in rows["terraform backend aws/us-east-1"]["reason"]
    assert "allowed (DryRun)" in rows["ec2 launch us-east-1"]["reason"]
    assert "allowed (DryRun)" in rows["ec2 terminate us-east-1"]["reason"]
    assert rows["spot scores us-east-1"]["reason"] == (
        "get_spot_placement_scores of p3.16xlarge, p3.2xlarge, p3.8xlarge allowed (DryRun)")
    assert "EventBridge may send" in rows["sqs us-east-1"]["reason"]
    assert "partition(s) train present" in rows["slurm"]["reason"]
    assert "dynamic nodes can join" in rows["slurm"]["reason"]
    assert "SelfSubjectAccessReview" in rows["kubernetes"]["reason"]  # said, not hidden
    assert "testing" not in out.stdout  # the sandbox's credentials are never printed


def test_broken_prometheus_is_named(world: World) -> None:
    world.stack.stop_prometheus()
    try:
        rows = world.run("prometheus stopped", world.config("healthy"), ("prometheus",))
    finally:
        world.stack.start_prometheus()
    assert failed(rows) == {"prometheus": rows["prometheus"].reason}
    assert "unreachable" in rows["prometheus"].reason


def test_stopped_slurmctld_is_named(world: World) -> None:
    world.slurm.stop_controller()
    try:
        rows = world.run("slurmctld stopped", world.config("healthy"), ("slurm", "kubernetes"))
    finally:
        world.slurm.start_controller()
    assert set(failed(rows)) == {"slurm"}
    assert "scontrol ping" in rows["slurm"].reason


def test_terraform_breaks_are_named(world: World) -> None:
    empty_mirror = world.root / "empty-mirror"
    empty_mirror.mkdir()
    cases: list[tuple[str, Callable[[dict[str, Any]], None], str, str]] = [
        ("provider missing", lambda d: d["terraform"].update(plugin_mirror=str(empty_mirror)),
         "terraform backend aws/us-east-1", "not in the plugin mirror"),
        ("state bucket missing",
         lambda d: d["terraform"]["backend"].update(bucket="no-such-bucket"),
         "terraform backend aws/us-east-1", "s3://no-such-bucket"),
        ("terraform binary missing",
         lambda d: d["terraform"].update(terraform_bin="/nonexistent/terraform"),
         "terraform", "/nonexistent/terraform not found"),
    ]
    for case, change, row, words in cases:
        rows = world.run(case, world.config(case.replace(" ", "-"), change),
                         ("terraform", "terraform backend"))
        assert set(failed(rows)) == {row}, (case, failed(rows))
        assert words in rows[row].reason, (case, rows[row].reason)


def test_cloud_breaks_are_named(world: World, monkeypatch: pytest.MonkeyPatch) -> None:
    only = ("aws credentials", "ec2", "sqs")
    queue = world.healthy["clouds"]["aws"]["sqs_queue_urls"]["us-east-1"]
    rows = world.run("sqs queue missing", world.config("no-queue", lambda d: d["clouds"]["aws"][
        "sqs_queue_urls"].update({"us-east-1": queue.replace("doctor-notices", "nope")})), only)
    assert set(failed(rows)) == {"sqs us-east-1"}
    assert "nope" in rows["sqs us-east-1"].reason

    rows = world.run("aws endpoint wrong", world.config("bad-endpoint", lambda d: d["clouds"][
        "aws"].update(endpoint_url="http://127.0.0.1:9")), only)
    assert set(failed(rows)) == {"aws credentials", "ec2 launch us-east-1",
                                 "ec2 terminate us-east-1", "sqs us-east-1"}
    assert "cannot reach http://127.0.0.1:9" in rows["aws credentials"].reason

    for key in ("AWS_ACCESS_KEY_ID", "AWS_SECRET_ACCESS_KEY", "AWS_SESSION_TOKEN"):
        monkeypatch.delenv(key)
    monkeypatch.setenv("AWS_SHARED_CREDENTIALS_FILE", str(world.root / "no-credentials"))
    monkeypatch.setenv("AWS_CONFIG_FILE", str(world.root / "no-config"))
    rows = world.run("aws credentials missing", world.config("healthy"), ("aws credentials",))
    assert set(failed(rows)) == {"aws credentials"}
    assert "no AWS credentials" in rows["aws credentials"].reason


def test_config_breaks_are_named(world: World) -> None:
    prices = world.root / "prices.yaml"
    prices.write_text("prices: {aws: {g4dn.xlarge: {on_demand: null}}}\n")
    rows = world.run("price removed", world.config("no-price", lambda d: d.update(
        prices_file=str(prices))), ("prices",))
    assert set(failed(rows)) == {"prices"}
    assert "doc/serve g4dn.xlarge" in rows["prices"].reason

    rows = world.run("http open without token", world.config("open-http", lambda d: d[
        "http"].update(listen="0.0.0.0:9464")), ("secrets",))
    assert set(failed(rows)) == {"secrets"}
    assert "not loopback, and no token" in rows["secrets"].reason

    bad = world.root / "bad-policies"
    bad.mkdir()
    (bad / "doc.yaml").write_text(POLICY.replace("max_nodes: 2\n    cluster: {kind: slurm",
                                                 "max_nodez: 2\n    cluster: {kind: slurm"))
    rows = world.run("policy error", world.config("bad-policy", lambda d: d.update(
        policies_dir=str(bad))), ("secrets",))
    assert set(failed(rows)) == {"policies"}
    assert "bad-policies/doc.yaml:5:5: pools[0].max_nodes" in rows["policies"].reason

    rows = world.run("kubernetes unreachable", world.config("bad-kube", lambda d: d["signals"][
        "kubernetes"].update(host="http://127.0.0.1:9")), ("kubernetes",))
    assert set(failed(rows)) == {"kubernetes"}
    assert "127.0.0.1:9" in rows["kubernetes"].reason


def test_ready_nodes_of_the_store_need_their_dcgm_series(world: World) -> None:
    """A READY node in the store without exporter series fails the Prometheus row by name;
    once its exporter serves it (and Prometheus scraped it), the row passes."""
    store = FleetStore(world.healthy["store"]["url"])
    try:
        now = datetime.now(UTC)
        [node] = store.apply([Create("doc", "train", "aws", "us-east-1", LaunchSpec(
            pool="doc/train", instance_type="p3.2xlarge", market=Market.ON_DEMAND,
            reason="doctor test"))], now)
        for state in (NodeState.PROVISIONING, NodeState.BOOTSTRAPPING, NodeState.READY):
            store.apply([Move(node.name, state, "doctor test")], now)
    finally:
        store.close()
    path = world.config("healthy")
    rows = world.run("ready node without series", path, ("prometheus",))
    assert set(failed(rows)) == {"prometheus"}
    assert f"1 of 1 ready node(s) without DCGM series: {node.name}" in rows["prometheus"].reason
    assert world.stack.prometheus is not None
    world.stack.exporter.call("add", node=node.name, gpus=1)
    try:
        world.stack.prometheus.wait_for_series(f'DCGM_FI_DEV_GPU_UTIL{{Hostname="{node.name}"}}')
        rows = world.run("ready node with series", path, ("prometheus",))
        assert rows["prometheus"].status is Status.OK, rows["prometheus"].reason
        assert "all 1 ready node(s) have recent DCGM series" in rows["prometheus"].reason
        assert rows["prometheus windows"].status is Status.OK, rows["prometheus windows"].reason
        assert "(job dcgm, every 1s)" in rows["prometheus windows"].reason
        # Scraped every 3m, the policy's default 5m window holds one sample at most.
        world.stack.options.scrape_interval = "3m"
        world.stack.start_prometheus()

        def windows_fail() -> bool:
            rows.update(world.run("windows under two scrapes", path, ("prometheus",)))
            return rows["prometheus windows"].status is Status.FAIL

        wait_until(windows_fail, 30, "the windows row to see the 3m scrape")
        reason = rows["prometheus windows"].reason
        assert reason.startswith("2 window(s) shorter than two scrapes of job dcgm (every 3m): "
                                 "doc/train scale_up.window 5m, doc/serve scale_up.window 5m. "), reason
        assert "Make it at least 6m" in reason
    finally:
        world.stack.exporter.call("remove", node=node.name)
        if world.stack.options.scrape_interval != "1s":
            world.stack.options.scrape_interval = "1s"
            world.stack.start_prometheus()


def test_a_broken_run_through_the_command_line_exits_1_and_names_it(world: World) -> None:
    path = world.config("open-http-cli", lambda d: d["http"].update(listen="0.0.0.0:9464"))
    out = cli(path, "--only", "secrets", "--only", "prices")
    assert out.returncode == 1, out.stderr
    assert "doctor: 1 failed" in out.stdout
    [line] = [line for line in out.stdout.splitlines() if "│ secrets" in line]
    assert "fail" in line and "0.0.0.0:9464, not loopback" in line
    assert [line for line in out.stdout.splitlines() if "│ prices" in line and "│ ok" in line]
    print(f"\ndoctor timings (s): {world.timings}")

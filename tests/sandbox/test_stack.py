"""The sandbox stack: moto instances become DCGM targets (and, as root, booted test hosts in
network namespaces that run their user_data at first boot), ``sandbox up/down`` stop exactly
what they started, even after a crash."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import urllib.request
from collections.abc import Iterator
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import pytest

from autoscaler.actuators.terraform.bake import BUILDER_TAG, ROLE_TAG
from autoscaler.actuators.terraform.rootmodule import HASH_TAG
from autoscaler.sandbox.fakes.nvidia_smi import LOADED_FLAG
from autoscaler.sandbox.hosts import first_boot, netns
from autoscaler.sandbox.hosts.first_boot import SANDBOX_USER_DATA
from autoscaler.sandbox.hosts.procs import wait_until
from autoscaler.sandbox.services.moto_server import MOTO_AMI, sandbox_client
from autoscaler.sandbox.services.spot_notices import queue_key
from autoscaler.sandbox.stack.baked_images import PER_INSTANCE
from autoscaler.sandbox.stack.config import prometheus_section
from autoscaler.sandbox.stack.local import SandboxStack, StackOptions, mig_layouts, privileged
from autoscaler.sandbox.stack.state import alive, read_state
from autoscaler.sandbox.stack.targets import Followed
from autoscaler.service.config.addresses import read_address_file
from autoscaler.service.config.load import load_config
from autoscaler.signals.config import PrometheusConfig
from tests.builders import make_policy

pytestmark = pytest.mark.slow
REPO = Path(__file__).resolve().parents[2]
DEMO_POLICIES = REPO / "examples" / "demo" / "policies"


@pytest.fixture(scope="module")
def stack(tmp_path_factory) -> Iterator[SandboxStack]:
    st = SandboxStack(tmp_path_factory.mktemp("sandbox"), StackOptions(
        policies_dir=DEMO_POLICIES, util=42.0))
    with st:
        yield st


def launch(stack: SandboxStack, node: str, itype: str = "p3.2xlarge", pool: str = "v100",
           image: str = MOTO_AMI, extra_tags: dict[str, str] | None = None) -> str:
    tags = [{"Key": "managed-by", "Value": "gpu-autoscaler"}, {"Key": "node", "Value": node},
            {"Key": "team", "Value": "demo"}, {"Key": "pool", "Value": pool},
            *({"Key": k, "Value": v} for k, v in (extra_tags or {}).items())]
    out = stack.ec2().run_instances(ImageId=image, InstanceType=itype, MinCount=1, MaxCount=1,
                                    UserData=SANDBOX_USER_DATA,
                                    TagSpecifications=[{"ResourceType": "instance", "Tags": tags}])
    return str(out["Instances"][0]["InstanceId"])


def test_instances_become_targets_and_hosts_and_go_away_again(stack):
    iid = launch(stack, "demo-v100-1")
    stack.prometheus.wait_for_series('DCGM_FI_DEV_GPU_UTIL{Hostname="demo-v100-1"}', timeout=60)
    value = stack.prometheus.query('DCGM_FI_DEV_GPU_UTIL{Hostname="demo-v100-1"}')[0]["value"][1]
    assert value == "42"
    stack.set_load(97)
    wait_until(lambda: stack.prometheus.query(
        'DCGM_FI_DEV_GPU_UTIL{Hostname="demo-v100-1"}')[0]["value"][1] == "97", 30, "new load")
    if stack.privileged:
        wait_until(lambda: "demo-v100-1" in read_address_file(stack.address_file), 60, "address")
        address = read_address_file(stack.address_file)["demo-v100-1"]
        assert address.startswith("169.254.77."), "never moto's 172.31.x.x address"
        host = stack.follower.followed["demo-v100-1"].host
        query = ["nvidia-smi", "--query-gpu=name", "--format=csv,noheader"]
        # A fresh node: its (fake) driver loads only after a boot with nouveau blacklisted.
        assert host.run("demo-v100-1", query, check=False).returncode == 9
        host.run("demo-v100-1", ["sh", "-c", f"mkdir -p $(dirname {LOADED_FLAG}) && touch {LOADED_FLAG}"])
        assert host.run("demo-v100-1", query).stdout.strip() == "Tesla V100-SXM2-16GB"
        assert host.run("demo-v100-1", ["hostname"]).stdout.strip() == "demo-v100-1"
        assert host.run("demo-v100-1", ["cat", "/proc/1/comm"]).stdout.strip() == "systemd"
        # The instance's user_data ran once at first boot, as cloud-init runs it.
        ran = host.read_file("demo-v100-1", "/etc/gpu-autoscaler/user-data-ran")
        assert ran.startswith("first boot ")
        namespace = host.hosts["demo-v100-1"].slot.netns
        assert namespace in read_state(stack.dir).namespaces
    stack.ec2().terminate_instances(InstanceIds=[iid])
    if stack.privileged:
        # A node of a sharing: mig pool boots with its GPUs in MIG mode, the pool's layout.
        stack.follower.mig_layouts[("demo", "slices")] = ("3g.20gb", "3g.20gb")
        mig_iid = launch(stack, "demo-slices-1", "p4d.24xlarge", pool="slices")
        wait_until(lambda: "demo-slices-1" in read_address_file(stack.address_file), 60, "address")
        host = stack.follower.followed["demo-slices-1"].host
        host.run("demo-slices-1", ["sh", "-c", f"mkdir -p $(dirname {LOADED_FLAG}) && touch {LOADED_FLAG}"])
        listed = host.run("demo-slices-1", ["nvidia-smi", "-L"]).stdout
        assert listed.count("MIG 3g.20gb") == 16 and listed.count("GPU ") == 8, listed
        stack.ec2().terminate_instances(InstanceIds=[mig_iid])
        wait_until(lambda: "demo-slices-1" not in stack.follower.followed, 30, "MIG node gone")
    # The follower forgets the node first and rewrites its files after: wait for all three.
    wait_until(lambda: "demo-v100-1" not in stack.follower.followed
               and json.loads(stack.file_sd.read_text()) == []
               and read_address_file(stack.address_file) == {}, 30, "instance forgotten")
    if stack.privileged:
        assert not (netns.NETNS_DIR / namespace).exists()


def followed(stack: SandboxStack) -> dict[str, Followed]:
    if stack.follower is None:
        raise RuntimeError("the stack follows no instances")
    return stack.follower.followed


def booted(stack: SandboxStack, node: str) -> Any:
    wait_until(lambda: node in read_address_file(stack.address_file), 90, f"{node}'s host")
    return followed(stack)[node].host


def test_a_builders_disk_becomes_the_baked_images_layer_its_nodes_boot_with(
        stack: SandboxStack) -> None:
    """The bake's builder (the image-time part written on it), its image, its destroy: the
    layer holds what the play wrote and nothing of the instance's own; a node launched from
    the image boots with it, loads its driver at first boot and runs its own user_data."""
    if not stack.privileged:
        pytest.skip("booted hosts need root")
    ec2, hash_, builder = stack.ec2(), "0123abcd", "demo-v100-builder-20261204"
    iid = launch(stack, builder, extra_tags={ROLE_TAG: "builder", HASH_TAG: hash_})
    host = booted(stack, builder)
    host.write_file(builder, "/etc/modprobe.d/blacklist-nouveau.conf", "blacklist nouveau\n")
    host.write_file(builder, "/opt/baked/tool", "#!/bin/sh\necho baked\n", 0o755)
    placed = followed(stack)[builder].placed
    assert "/etc/hostname" in placed and first_boot.USER_DATA in placed
    image = ec2.create_image(InstanceId=iid, Name=f"{builder}-image", TagSpecifications=[
        {"ResourceType": "image", "Tags": [{"Key": HASH_TAG, "Value": hash_},
                                           {"Key": BUILDER_TAG, "Value": iid}]}])["ImageId"]
    ec2.terminate_instances(InstanceIds=[iid])
    layer = stack.images_dir / hash_
    wait_until(lambda: builder not in followed(stack), 60, "the builder gone")
    assert layer.is_dir() and (layer / "etc/modprobe.d/blacklist-nouveau.conf").is_file()
    assert (layer / "opt/baked/tool").stat().st_mode & 0o777 == 0o755
    for own in [*placed, *PER_INSTANCE]:
        assert not list(layer.glob(own.lstrip("/"))), own
    assert [p.name for p in stack.images_dir.iterdir()] == [hash_]  # no half copy left

    node = "demo-v100-7"
    nid = launch(stack, node, image=image)
    host = booted(stack, node)
    assert followed(stack)[node].layer == layer
    assert host.run(node, ["/opt/baked/tool"]).stdout.strip() == "baked"
    # The blacklist came with the image: the fake driver loaded at the node's first boot.
    assert host.run(node, ["test", "-e", LOADED_FLAG], check=False).returncode == 0
    assert host.run(node, ["hostname"]).stdout.strip() == node
    boot_id = host.read_file(node, "/proc/sys/kernel/random/boot_id").strip()
    ran = host.read_file(node, "/etc/gpu-autoscaler/user-data-ran")
    assert ran.strip() == f"first boot {boot_id}"  # its own user_data, not the builder's run
    ec2.terminate_instances(InstanceIds=[nid])
    wait_until(lambda: node not in followed(stack), 30, "the node gone")


def test_the_mig_layout_of_each_sharing_mig_pool() -> None:
    mig = {"sharing": "mig", "mig_profiles": ["3g.20gb", "3g.20gb"]}
    pools = [{"name": n, "cloud": "aws", "region": "us-east-1", "max_nodes": 2,
              "instance_types": ["p4d.24xlarge"], "bootstrap": b}
             for n, b in (("slices", mig), ("whole", {}), ("shared", {"sharing": "mps"}))]
    policy = make_policy(team="vision", pools=pools)
    assert mig_layouts({policy.team: policy}) == {("vision", "slices"): ("3g.20gb", "3g.20gb")}


def test_the_service_config_it_writes_is_valid_and_points_at_it(stack):
    cfg = load_config(stack.config_file)
    assert cfg.signals.prometheus.url == stack.prometheus.url
    assert cfg.clouds.aws.endpoint_url == stack.moto.endpoint == cfg.terraform.aws_endpoint
    assert cfg.addresses.file == stack.address_file and not cfg.clouds.market_prices
    env = (stack.dir / "env").read_text()
    assert "AWS_ACCESS_KEY_ID=testing" in env and oct((stack.dir / "env").stat().st_mode)[-3:] == "600"
    if stack.slurm is not None:
        assert cfg.signals.scheduler == ["slurm"] and cfg.signals.slurm.registration == "dynamic"
        conf = stack.slurm.slurm_conf.read_text()  # dynamic nodes: no name declared
        assert "NodeName=" not in conf and "MaxNodeCount=" in conf and "TreeWidth=65533" in conf
        assert "Nodeset=gpu_cloud Feature=partition-gpu" in conf
        assert "PartitionName=gpu Nodes=gpu_cloud " in conf
        assert stack.slurm.node_names() == []
        assert "GAS_SANDBOX_MUNGE_KEY_B64" in env and "cluster_join_munge_key_b64" in \
            cfg.ansible.secret_env


def test_prometheus_can_be_taken_away_and_brought_back(stack):
    stack.stop_prometheus()
    with pytest.raises(OSError):
        stack.prometheus.query("up")
    stack.start_prometheus()
    assert stack.prometheus.ready()


def test_a_large_fleet_is_scraped_slower_and_read_through_the_recording_rules(stack):
    """What bench_scale's 1,000 nodes use: the rules the service would print load in the
    stack's Prometheus, and the service config reads them."""
    stack.options.recording_rules, stack.options.scrape_interval = True, "15s"
    try:
        stack.stop_prometheus()
        stack.start_prometheus()
        config = json.loads(stack.prometheus.config_path.read_text())
        assert config["global"]["scrape_interval"] == "15s"
        with urllib.request.urlopen(f"{stack.prometheus.url}/api/v1/rules", timeout=10) as r:
            groups = json.load(r)["data"]["groups"]
        rules = [rule for g in groups for rule in g["rules"]]
        assert rules and {rule["health"] for rule in rules} <= {"ok", "unknown"}
        assert {g["interval"] for g in groups} == {15}
        section = prometheus_section(stack.options, stack.prometheus.url)
        read = PrometheusConfig(**section)
        assert read.recording_rules and read.rules_interval.total_seconds() == 15
    finally:
        stack.options.recording_rules, stack.options.scrape_interval = False, "1s"
        stack.stop_prometheus()
        stack.start_prometheus()


def cli(*args: str, timeout: float = 240) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, "-m", "autoscaler.cli", "sandbox", *args],
                          capture_output=True, text=True, timeout=timeout, cwd=REPO)


def test_up_down_status_and_cleanup_after_a_crash(tmp_path):
    """As root the crashed sandbox also leaves a booted host (container, namespace, overlay):
    down removes them."""
    d = tmp_path / "sbx"
    mode = [] if privileged() else ["--unprivileged"]
    up = cli("up", "--dir", str(d), "--policies", str(DEMO_POLICIES), *mode)
    assert up.returncode == 0, up.stdout + up.stderr
    assert "gpu-autoscaler run --config" in up.stdout
    state = read_state(d)
    procs = [state.supervisor, *state.children]
    assert state.status == "ready" and all(alive(p) for p in procs) and len(procs) >= 3
    assert cli("status", "--dir", str(d)).returncode == 0
    again = cli("up", "--dir", str(d), *mode)
    assert again.returncode == 1 and "already running" in again.stderr
    check_market_commands(d, state.endpoints["moto"])
    check_interrupt(d, state.endpoints)
    namespaces: list[str] = []
    if privileged():
        ec2 = sandbox_client("ec2", state.endpoints["moto"], "us-east-1")
        tags = [{"Key": "managed-by", "Value": "gpu-autoscaler"}, {"Key": "node", "Value": "demo-v100-1"}]
        ec2.run_instances(ImageId=MOTO_AMI, InstanceType="p3.2xlarge", MinCount=1, MaxCount=1,
                          TagSpecifications=[{"ResourceType": "instance", "Tags": tags}])
        wait_until(lambda: read_state(d).namespaces, 90, "the booted host's namespace")
        namespaces = read_state(d).namespaces
        assert list(d.glob("hosts/*/upper")), "the host boots through its overlay"
        procs = [read_state(d).supervisor, *read_state(d).children]
    # A crash of the supervisor leaves its children running: down still stops them by PID.
    os.kill(state.supervisor.pid, signal.SIGKILL)
    wait_until(lambda: not alive(state.supervisor), 10, "supervisor gone")
    assert any(alive(p) for p in procs)
    down = cli("down", "--dir", str(d))
    assert down.returncode == 0, down.stdout + down.stderr
    assert not any(alive(p) for p in procs)
    assert all(not (netns.NETNS_DIR / n).exists() for n in namespaces)
    assert list(d.glob("hosts/*/upper")) == []  # the overlays went with their containers
    assert read_state(d).status == "stopped"
    assert cli("status", "--dir", str(d)).returncode == 3
    gone = cli("fault", "list", "--dir", str(d))
    assert gone.returncode == 1 and "no running sandbox" in gone.stderr


def check_interrupt(d: Path, endpoints: dict[str, str]) -> None:
    """`sandbox interrupt` puts the notice EC2 would send on the queue the service's config
    names, and reclaims the instance when the warning runs out."""

    from autoscaler.clouds.aws_events import Trust, parse_event
    from autoscaler.clouds.base import InterruptionKind
    from autoscaler.service.config.load import load_config

    queue = endpoints[queue_key("us-east-1")]
    config = load_config(d / "service.yaml")
    assert config.clouds.aws.sqs_queue_urls == {"us-east-1": queue}
    ec2, sqs = (sandbox_client(s, endpoints["moto"], "us-east-1") for s in ("ec2", "sqs"))

    def launch(node: str, spot: bool) -> str:
        # Tagged with a node name only: the sandbox boots just the service's instances.
        extra = {"InstanceMarketOptions": {"MarketType": "spot"}} if spot else {}
        out = ec2.run_instances(ImageId=MOTO_AMI, InstanceType="p3.2xlarge", MinCount=1, MaxCount=1,
                                TagSpecifications=[{"ResourceType": "instance", "Tags": [
                                    {"Key": "node", "Value": node}]}], **extra)
        return str(out["Instances"][0]["InstanceId"])

    def received() -> list:
        messages = sqs.receive_message(QueueUrl=queue, MaxNumberOfMessages=10).get("Messages", [])
        trust = Trust(account="123456789012", regions=frozenset({"us-east-1"}))
        return [parse_event(m["Body"], trust, datetime.now(UTC)) for m in messages]

    def state_of(instance: str) -> str:
        return ec2.describe_instances(InstanceIds=[instance])["Reservations"][0]["Instances"][0][
            "State"]["Name"]

    spot, on_demand = launch("e2e-spot-1", True), launch("e2e-od-1", False)
    advised = cli("interrupt", "e2e-spot-1", "--rebalance", "--dir", str(d))
    assert advised.returncode == 0, advised.stdout + advised.stderr
    [advice] = received()
    assert (advice.instance_id, advice.kind) == (spot, InterruptionKind.REBALANCE)
    assert state_of(spot) == "running"
    warned = cli("interrupt", spot, "--reclaim-after", "1s", "--dir", str(d))
    assert warned.returncode == 0, warned.stdout + warned.stderr
    assert "reclaimed" in warned.stdout
    [warning] = received()
    assert (warning.instance_id, warning.kind) == (spot, InterruptionKind.INTERRUPTION)
    assert state_of(spot) in ("shutting-down", "terminated")
    refused = cli("interrupt", "e2e-od-1", "--dir", str(d))
    assert refused.returncode == 1 and "on-demand" in refused.stderr, refused.stderr
    gone = cli("interrupt", "e2e-spot-1", "--dir", str(d))
    assert gone.returncode == 1 and "no running instances" in gone.stderr, gone.stderr
    assert received() == []
    ec2.terminate_instances(InstanceIds=[on_demand])


def check_market_commands(d: Path, endpoint: str) -> None:
    """`sandbox fault|scores` change what the running moto answers, from the next call on
    (tests/cli/test_sandbox_market.py checks what they refuse)."""
    from botocore.exceptions import ClientError

    ec2 = sandbox_client("ec2", endpoint, "us-east-1")

    def launch(market: str) -> str:
        extra = {"InstanceMarketOptions": {"MarketType": "spot"}} if market == "spot" else {}
        try:  # untagged: the sandbox follows (boots) only the service's instances
            out = ec2.run_instances(ImageId=MOTO_AMI, InstanceType="p3.2xlarge", MinCount=1,
                                    MaxCount=1, Placement={"AvailabilityZone": "us-east-1a"},
                                    **extra)
        except ClientError as exc:
            return str(exc.response["Error"]["Code"])
        ec2.terminate_instances(InstanceIds=[out["Instances"][0]["InstanceId"]])
        return "launched"

    added = cli("fault", "add", "--type", "p3.2xlarge", "--zone", "us-east-1a", "--market",
                "spot", "--dir", str(d))
    assert added.returncode == 0, added.stdout + added.stderr
    assert "InsufficientInstanceCapacity" in added.stdout and "us-east-1a" in added.stdout
    assert (launch("spot"), launch("on-demand")) == ("InsufficientInstanceCapacity", "launched")
    limit = cli("fault", "add", "--zone", "us-east-1a", "--market", "on-demand", "--code",
                "VcpuLimitExceeded", "--dir", str(d))
    assert limit.returncode == 0, limit.stderr
    assert launch("on-demand") == "VcpuLimitExceeded"
    assert cli("fault", "clear", "--dir", str(d)).returncode == 0
    assert (launch("spot"), launch("on-demand")) == ("launched", "launched")

    zone_id = {z["ZoneName"]: z["ZoneId"]
               for z in ec2.describe_availability_zones()["AvailabilityZones"]}

    def scores(*types: str) -> dict[str, int]:
        answer = ec2.get_spot_placement_scores(InstanceTypes=list(types), TargetCapacity=1,
                                               RegionNames=["us-east-1"],
                                               SingleAvailabilityZone=True)
        return {r["AvailabilityZoneId"]: r["Score"] for r in answer["SpotPlacementScores"]}

    put = cli("scores", "set", "us-east-1", "us-east-1a=9", "us-east-1b=2", "--types",
              "p3.8xlarge,p3.2xlarge", "--dir", str(d))
    assert put.returncode == 0, put.stdout + put.stderr
    # The answer is EC2's: by zone id, and only for exactly the set of types the rule names.
    assert scores("p3.2xlarge", "p3.8xlarge") == {zone_id["us-east-1a"]: 9, zone_id["us-east-1b"]: 2}
    assert scores("p3.2xlarge") == {}
    assert cli("scores", "clear", "--dir", str(d)).returncode == 0
    assert scores("p3.2xlarge", "p3.8xlarge") == {}

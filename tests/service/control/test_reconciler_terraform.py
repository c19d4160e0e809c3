"""The reconciler on real parts: an instance the store does not know, found by the real AWS
reader in moto, is destroyed or adopted through real Terraform (AWS provider); a node stuck
in BOOTSTRAPPING past its state limit is failed and its instance destroyed through it; so
is one stuck in PROVISIONING behind a hung apply, whose instance the apply creates after
the node was given up on.

The stray is launched behind the service's back with the tags of the pool's own nodes (a
copy of the service with another store, a state lost in a restore): the reader finds it by
those tags as it would in an account. ``destroy`` removes exactly it, through an apply of
the pool's root module, and leaves the pool's node running; ``adopt`` takes it into the
store under its ``node`` tag and into Terraform's state by import, so the next apply keeps
it instead of launching another (``terraform output`` lists it under its key). The same with fakes: tests/service/control/test_reconciler.py.

The pool runs with two nodes per Terraform shard (actuators/terraform/shards.py), so the
nodes, the stray and the adopted instance live in four workspaces of their own: every step
also proves its guarantee across shards.
"""

from __future__ import annotations

import contextlib
import json
import os
import signal
import subprocess
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any

import pytest

from autoscaler.actuators.terraform import shards
from autoscaler.model.lifecycle import NodeState
from autoscaler.model.node import Node
from autoscaler.sandbox.hosts.procs import child_pids, wait_until
from autoscaler.sandbox.services.moto_server import MOTO_AMI, MotoSandbox, running_instances
from autoscaler.service.executor import ExecutorSettings
from tests.actuators.terraform_fixtures import moto, needs_terraform, sandbox_settings  # noqa: F401
from tests.builders import NOW
from tests.service.crash_harness import Faults, Scenario
from tests.service.terraform_world import POOL, make_world, policy

pytestmark = [pytest.mark.slow, needs_terraform]
S = NodeState


def live(moto: MotoSandbox) -> dict[str, str]:  # noqa: F811
    """The pool's running instances in moto: instance id -> node tag."""
    return {i["InstanceId"]: {t["Key"]: t["Value"] for t in i.get("Tags", [])}.get("node", "")
            for i in running_instances(moto.client(), pool=POOL)}


def stray(moto: MotoSandbox, like: str, node: str) -> str:  # noqa: F811
    """An instance launched outside the service with the tags of instance ``like`` (one of
    the pool's own) but node tag ``node``, as another copy of the service would launch it:
    with the module's IMDSv2 and root volume, so that adopting it changes nothing but the
    state (an update in place, e.g. of the volume, would wait 30-40 s on the provider's
    waiters)."""
    ec2 = moto.client()
    [reservation] = ec2.describe_instances(InstanceIds=[like])["Reservations"]
    [instance] = reservation["Instances"]
    tags: dict[str, Any] = {t["Key"]: t["Value"] for t in instance["Tags"]}
    tags.update(node=node, Name=node)
    volume_tags = {k: v for k, v in tags.items() if k != "Name"}
    [root] = [m for m in instance["BlockDeviceMappings"] if m["DeviceName"] == instance["RootDeviceName"]]
    [volume] = ec2.describe_volumes(VolumeIds=[root["Ebs"]["VolumeId"]])["Volumes"]
    launched = ec2.run_instances(
        ImageId=MOTO_AMI, InstanceType="g4dn.xlarge", MinCount=1, MaxCount=1,
        MetadataOptions={"HttpTokens": "required"},
        BlockDeviceMappings=[{"DeviceName": root["DeviceName"], "Ebs": {
            "VolumeSize": volume["Size"], "VolumeType": volume["VolumeType"], "DeleteOnTermination": True}}],
        TagSpecifications=[{"ResourceType": kind, "Tags": [{"Key": k, "Value": v} for k, v in t.items()]}
                           for kind, t in (("instance", tags), ("volume", volume_tags))])
    return str(launched["Instances"][0]["InstanceId"])


def one_ready_node(moto: MotoSandbox, tmp_path: Path, unknown: str) -> tuple[Scenario, str]:  # noqa: F811
    world = make_world(f"sqlite:///{tmp_path / 'fleet.db'}",
                       sandbox_settings(moto, tmp_path / "tf", shard_size=2), moto.endpoint, nodes=1)
    world.settings = ExecutorSettings(lost_after_misses=2, unknown_instances=unknown)  # type: ignore[arg-type]
    scn = Scenario(world, Faults(), NOW)
    scn.run_until(lambda: list(scn.states().values()) == [S.READY], max_ticks=20)
    [instance] = live(moto)
    return scn, instance


def shard_nodes(where: Path) -> dict[str, Any]:
    done = subprocess.run(["terraform", "output", "-json", "nodes"], cwd=where, text=True,
                          capture_output=True, timeout=120, check=True,
                          env={**os.environ, "TF_CLI_CONFIG_FILE": str(where / "terraformrc")})
    return dict(json.loads(done.stdout or "{}"))


def terraform_nodes(workdir: Path) -> dict[str, str]:
    """The pool's Terraform states, every shard's read with ``terraform output`` (side by
    side: each is a terraform start of ~0.6 s): node key -> instance id."""
    pool_dir = workdir / "vision" / POOL
    wheres = [shards.directory(pool_dir, shard) for shard in shards.existing(pool_dir)]
    out: dict[str, str] = {}
    with ThreadPoolExecutor(max_workers=4) as pool:
        for found in pool.map(shard_nodes, wheres):
            assert not set(found) & set(out), f"a node in two shards: {found} {out}"
            out.update({name: node["id"] for name, node in found.items()})
    return out


def terraform_applies() -> list[int]:
    """This process's running ``terraform apply`` commands and their providers."""
    out: list[int] = []
    todo = child_pids(os.getpid())
    while todo:
        pid = todo.pop()
        try:
            argv = Path(f"/proc/{pid}/cmdline").read_bytes().decode().split("\0")
        except OSError:
            continue
        name = Path(argv[0]).name
        if (name == "terraform" and "apply" in argv) or name.startswith("terraform-provider"):
            out.append(pid)
            todo += child_pids(pid)
    return out


def signal_all(pids: list[int], sig: signal.Signals) -> None:
    for pid in pids:
        with contextlib.suppress(ProcessLookupError):
            os.kill(pid, sig)


@pytest.mark.timeout(900)
def test_an_unknown_instance_is_destroyed_or_adopted_and_a_stuck_node_failed_through_terraform(
        moto: MotoSandbox, tmp_path: Path) -> None:  # noqa: F811
    scn, own = one_ready_node(moto, tmp_path, "destroy")
    [own_name] = scn.states()
    # destroy: exactly the stray goes, through an apply of the pool; the node is kept.
    leaked = stray(moto, own, "vision-v100-9")
    assert set(live(moto)) == {own, leaked}
    [destroying] = scn.reconciler.run().of("destroying")
    assert destroying.instance_id == leaked and destroying.pool == f"vision/{POOL}"
    scn.executor.advance()
    assert set(live(moto)) == {own}
    assert scn.reconciler.run().of("unknown-instance") == []
    assert terraform_nodes(tmp_path / "tf") == {own_name: own}

    # adopt (the same service restarted with that setting, room in the pool for one more).
    scn.world.settings = ExecutorSettings(lost_after_misses=2, unknown_instances="adopt")
    scn.world.policies = {"vision": policy(2)}
    scn.restart()
    name = "vision-v100-7"
    taken = stray(moto, own, name)
    [adopted] = scn.reconciler.run().of("adopted")
    assert adopted.node == name
    node = {n.name: n for n in scn.raw_store.nodes()}[name]
    assert node.instance_id == taken and node.state is S.BOOTSTRAPPING
    # The next apply imports it under its key instead of launching a second instance.
    scn.run_until(lambda: scn.states().get(name) is S.READY, max_ticks=10)
    assert set(live(moto)) == {own, taken}
    assert terraform_nodes(tmp_path / "tf") == {own_name: own, name: taken}

    # Stuck BOOTSTRAPPING: a third node's instance comes up but its address never resolves,
    # so Ansible never runs; past its state limit the reconciler fails it, and the engine
    # has its instance destroyed through an apply of the pool (and a replacement launched,
    # which comes up).
    stuck: list[str] = []

    def address(n: Node) -> str | None:
        blocked = n.name not in (own_name, name) and (not stuck or n.name == stuck[0])
        return "169.254.77.2" if n.instance_id and not blocked else None

    scn.world.address_of = address
    scn.world.policies = {"vision": policy(3)}
    scn.restart()
    scn.run_until(lambda: S.BOOTSTRAPPING in scn.states().values(), max_ticks=5)
    stuck += [n for n, st in scn.states().items() if st is S.BOOTSTRAPPING]
    [instance] = set(live(moto)) - {own, taken}
    scn.step_s = 600  # the limit is the bootstrap's runs and backoffs plus the ready wait
    scn.run_until(lambda: scn.states()[stuck[0]] is S.TERMINATED
                  and list(scn.states().values()).count(S.READY) == 3, max_ticks=20)
    failed = [t for t in scn.raw_store.transitions(stuck[0]) if t.to_state == "BOOTSTRAP_FAILED"]
    assert failed and "BOOTSTRAPPING for" in failed[0].reason, scn.raw_store.transitions(stuck[0])
    assert instance not in live(moto) and len(live(moto)) == 3 and {own, taken} < set(live(moto))
    assert set(terraform_nodes(tmp_path / "tf").values()) == set(live(moto))

    # Stuck PROVISIONING: the apply for a fourth node hangs (its terraform and provider
    # stopped, as on a cloud API that never answers) while the service's ticks go on; past
    # the state limit the reconciler fails the node. When the apply returns, the instance
    # it made for the given-up node is destroyed by the next apply, and a replacement comes.
    before = set(live(moto))
    scn.world.operations = "workers"
    scn.world.policies = {"vision": policy(4)}
    scn.step_s = 30
    scn.restart()
    scn.tick()  # the launch: a worker writes PROVISIONING, then starts the apply
    stopped: list[int] = []

    def apply_stopped() -> bool:
        stopped[:] = terraform_applies()
        signal_all(stopped, signal.SIGSTOP)
        return bool(stopped)

    wait_until(apply_stopped, 30, "the apply to start", interval=0.05)
    try:
        [hung] = [n for n, st in scn.states().items() if st is S.PROVISIONING]
        scn.step_s = 600
        for _ in range(6):  # ticks go on beside the hung apply (its pool stays busy)
            scn.tick()
            if scn.states()[hung] is S.PROVISION_FAILED:
                break
        signal_all(stopped + terraform_applies(), signal.SIGSTOP)  # a provider started late
    finally:
        signal_all(stopped + terraform_applies(), signal.SIGCONT)
    gave_up = [t for t in scn.raw_store.transitions(hung) if t.to_state == "PROVISION_FAILED"]
    assert gave_up and "PROVISIONING for" in gave_up[0].reason, scn.raw_store.transitions(hung)
    scn.step_s = 30
    scn.run_until(lambda: scn.states()[hung] is S.TERMINATED
                  and list(scn.states().values()).count(S.READY) == 4, max_ticks=20)
    assert len(live(moto)) == 4 and before < set(live(moto))
    in_state = terraform_nodes(tmp_path / "tf")
    assert set(in_state.values()) == set(live(moto)) and hung not in in_state

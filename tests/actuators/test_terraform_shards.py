"""A pool's nodes in Terraform shards of bounded size (actuators/terraform/shards.py): where
each node goes, that an apply or a preview runs only in the shards that change, and that a
node never moves. The same on real Terraform: tests/service/control/test_reconciler_terraform.py
runs with two nodes per shard."""

from __future__ import annotations

import json
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

from autoscaler.actuators.node_map import NodeMap, NodeSpec, PoolMaps
from autoscaler.actuators.terraform import ApplyResult, NodeOutput, TerraformSettings, shards
from autoscaler.actuators.terraform.planfile import NodeChange, PoolPlan
from autoscaler.actuators.terraform.preview import preview_pool
from autoscaler.actuators.terraform.provisioner import STALE_MARKER, TerraformProvisioner
from autoscaler.catalog import default_catalog
from autoscaler.clouds.base import CloudInstance, InstanceState
from autoscaler.model.pool import PoolRef
from autoscaler.model.prices import PriceBook
from autoscaler.model.snapshot import Snapshot
from autoscaler.policy.models import Market

REF = PoolRef("vision", "v100", "aws", "us-east-1")
SPEC = NodeSpec(instance_type="g4dn.xlarge", market=Market.ON_DEMAND)
AT = datetime(2026, 12, 3, 12, 0, tzinfo=UTC)


def nodes(*numbers: int) -> NodeMap:
    return {f"vision-v100-{n}": SPEC for n in numbers}


class ShardWorkspace:
    """A shard's workspace without Terraform: what it was asked to converge, and a state
    that is exactly its last map (or ``fail`` makes its next apply fail on every node)."""

    def __init__(self, settings: TerraformSettings, ref: PoolRef, shard: int):
        self.shard, self.key = shard, ref.key
        self.label = ref.key if shard == 0 else f"{ref.key}#{shard}"
        self.dir = shards.directory(Path(settings.workdir).resolve() / ref.team / ref.pool, shard)
        self.converged: list[NodeMap] = []
        self.planned: list[NodeMap] = []
        self.fail = False

    def init(self) -> None:
        self.dir.mkdir(parents=True, exist_ok=True)
        (self.dir / "main.tf.json").write_text("{}")

    def applied_nodes(self) -> NodeMap:
        path = self.dir / "applied.json"
        return {k: NodeSpec.model_validate(v) for k, v in json.loads(path.read_text()).items()} \
            if path.exists() else {}

    def pull_state(self) -> dict[str, Any]:
        return {"resources": [{"module": "module.pool", "mode": "managed", "name": "node",
                               "instances": [{"index_key": n, "attributes": {"id": f"i-{n}"}}
                                             for n in self.applied_nodes()]}]}

    def converge(self, node_map: NodeMap) -> ApplyResult:
        self.init()
        self.converged.append(dict(node_map))
        if self.fail:
            return ApplyResult(pool=self.key, ok=False, failed={n: "boom" for n in node_map})
        before = self.applied_nodes()
        (self.dir / "applied.json").write_text(json.dumps(
            {k: v.model_dump(mode="json") for k, v in node_map.items()}))
        return ApplyResult(pool=self.key, ok=True, nodes={
            n: NodeOutput(id=f"i-{n}", lifecycle="on-demand") for n in node_map},
            created=sorted(set(node_map) - set(before)), destroyed=sorted(set(before) - set(node_map)))

    def plan(self, node_map: NodeMap) -> PoolPlan:
        self.planned.append(dict(node_map))
        before = self.applied_nodes()
        return PoolPlan(pool=self.key, shard=self.shard, cloud="aws", region="us-east-1",
                        plan_file=self.dir / "plan" / "pending.tfplan", plan_sha256="x",
                        nodes=node_map, planned_at=AT, changes=[
                            NodeChange(node=n, action="create", after=s)
                            for n, s in node_map.items() if n not in before])

    def discard_plan(self) -> None:
        pass


class Shards:
    def __init__(self, tmp_path: Path, size: int = 2):
        self.settings = TerraformSettings(workdir=tmp_path, shard_size=size, regions={
            "aws/us-east-1": {"ami": "ami-1"}})
        self.made: dict[int, ShardWorkspace] = {}

    def __call__(self, settings: TerraformSettings, ref: PoolRef, *rest: Any) -> ShardWorkspace:
        # (clock, shard, image) from the provisioner, (shard,) from a preview
        shard = next((r for r in rest if isinstance(r, int)), 0)
        if shard not in self.made:
            self.made[shard] = ShardWorkspace(settings, ref, shard)
        return self.made[shard]

    def provisioner(self) -> TerraformProvisioner:
        return TerraformProvisioner(self.settings, workspace=self)  # type: ignore[arg-type]

    def converged(self) -> dict[int, list[NodeMap]]:
        out = {k: ws.converged for k, ws in sorted(self.made.items()) if ws.converged}
        for ws in self.made.values():
            ws.converged = []
        return out


def test_a_new_node_goes_to_the_shard_its_number_points_to() -> None:
    assert [shards.home(f"vision-v100-{n}", 50) for n in (1, 50, 51, 100, 101, 501)] == [
        0, 0, 1, 1, 2, 10]
    assert shards.home("no-number-here", 50) == 0 and shards.home("x-0", 2) == 0
    # A node stays where it is held; every known shard gets a map, empty if nothing is left.
    assert shards.assign(nodes(1, 3, 4), {"vision-v100-4": 0}, 2, [0, 5]) == {
        0: nodes(1, 4), 1: nodes(3), 5: {}}


def test_an_apply_runs_only_in_the_shards_whose_nodes_change(tmp_path: Path) -> None:
    fake = Shards(tmp_path)
    prov = fake.provisioner()
    result = prov.apply(REF, nodes(1, 2, 3, 4, 5))
    assert fake.converged() == {0: [nodes(1, 2)], 1: [nodes(3, 4)], 2: [nodes(5)]}
    assert result.ok and result.created == sorted(nodes(1, 2, 3, 4, 5)) and len(result.nodes) == 5
    assert prov.applied(REF) == nodes(1, 2, 3, 4, 5)
    assert shards.existing(tmp_path.resolve() / "vision" / "v100") == [0, 1, 2]
    # One more node: only its shard; one node less: only its shard (the others untouched).
    prov.apply(REF, nodes(1, 2, 3, 4, 5, 6))
    assert fake.converged() == {2: [nodes(5, 6)]}
    result = prov.apply(REF, nodes(2, 3, 4, 5, 6))
    assert fake.converged() == {0: [nodes(2)]}
    assert result.destroyed == ["vision-v100-1"] and set(result.nodes) == {"vision-v100-2"}
    assert set(prov.instances(REF)) == set(nodes(2, 3, 4, 5, 6))
    # The last node of a shard goes: the shard is applied empty, and stays known.
    prov.apply(REF, nodes(2, 3, 4))
    assert fake.converged() == {2: [{}]}
    assert prov.applied(REF) == nodes(2, 3, 4)


def test_nodes_held_before_shards_existed_stay_in_shard_zero(tmp_path: Path) -> None:
    fake = Shards(tmp_path, size=100)
    legacy = fake.provisioner()
    legacy.apply(REF, nodes(1, 2, 3, 4, 5))  # one state held them all
    fake.settings = fake.settings.model_copy(update={"shard_size": 2})
    fake.made.clear()
    fake.converged()
    prov = fake.provisioner()
    assert prov.applied(REF) == nodes(1, 2, 3, 4, 5)
    prov.apply(REF, nodes(1, 2, 3, 4, 5, 6))
    assert fake.converged() == {2: [nodes(6)]}  # node 5 stays in shard 0, node 6 goes home
    prov.apply(REF, nodes(1, 2, 3, 6))
    assert fake.converged() == {0: [nodes(1, 2, 3)]}


def test_a_failed_shard_alone_is_applied_again(tmp_path: Path) -> None:
    fake = Shards(tmp_path)
    prov = fake.provisioner()
    prov.apply(REF, nodes(1, 2, 3))
    fake.converged()
    fake.made[1].fail = True
    result = prov.apply(REF, nodes(1, 2, 3, 4, 5))
    assert fake.converged() == {1: [nodes(3, 4)], 2: [nodes(5)]}
    assert not result.ok and set(result.failed) == set(nodes(3, 4))
    assert "vision-v100-5" in result.nodes and "vision-v100-3" in result.nodes  # the state's
    assert (fake.made[1].dir / STALE_MARKER).exists()
    assert not (fake.made[2].dir / STALE_MARKER).exists()
    assert prov.applied(REF) is None  # the executor applies the pool again...
    fake.made[1].fail = False
    assert prov.apply(REF, nodes(1, 2, 3, 4, 5)).ok
    assert fake.converged() == {1: [nodes(3, 4)]}  # ...and only the failed shard runs
    assert prov.applied(REF) == nodes(1, 2, 3, 4, 5)


def test_a_node_marked_stale_applies_its_own_shard_again_not_the_pool(tmp_path: Path) -> None:
    fake = Shards(tmp_path)
    prov = fake.provisioner()
    prov.apply(REF, nodes(1, 2, 3, 5))
    fake.converged()
    prov.mark_stale(REF, ["vision-v100-3"])  # e.g. the state lost it: only shard 1 holds it
    assert [k for k, ws in sorted(fake.made.items()) if (ws.dir / STALE_MARKER).exists()] == [1]
    assert prov.applied(REF) is None
    assert prov.apply(REF, nodes(1, 2, 3, 5)).ok
    assert fake.converged() == {1: [nodes(3)]}
    prov.mark_stale(REF)  # no names: every shard
    assert prov.apply(REF, nodes(1, 2, 3, 5)).ok
    assert fake.converged() == {0: [nodes(1, 2)], 1: [nodes(3)], 2: [nodes(5)]}


def test_a_preview_plans_only_the_shards_that_change(tmp_path: Path) -> None:
    fake = Shards(tmp_path)
    fake.provisioner().apply(REF, nodes(1, 2, 3))
    prices = PriceBook(default_catalog(), Snapshot(taken_at=AT))
    preview = preview_pool(PoolMaps(REF, nodes(1, 2, 3), nodes(1, 2, 3, 4, 5)), fake.settings,
                           prices, fake)  # type: ignore[arg-type]
    assert preview.status == "planned"
    assert [c.node for c in preview.changes] == ["vision-v100-4", "vision-v100-5"]
    assert fake.made[0].planned == [] and fake.made[1].planned == [nodes(3, 4)]
    assert fake.made[2].planned == [nodes(5)]
    assert preview.plan_files == [str(fake.made[k].dir / "plan" / "pending.tfplan") for k in (1, 2)]
    same = preview_pool(PoolMaps(REF, nodes(1, 2, 3), nodes(1, 2, 3)), fake.settings, prices,
                        fake)  # type: ignore[arg-type]
    assert same.status == "unchanged" and same.plan_files == []


def test_an_instance_to_destroy_is_imported_into_the_shard_its_node_tag_points_to(
        tmp_path: Path) -> None:
    fake = Shards(tmp_path)
    prov = fake.provisioner()
    prov.apply(REF, nodes(1))
    fake.converged()
    stray = CloudInstance(instance_id="i-stray", node="vision-v100-9", team="vision", pool="v100",
                          instance_type="g4dn.xlarge", zone="us-east-1a", market=Market.ON_DEMAND,
                          state=InstanceState.RUNNING, private_ip=None, launched_at=None)
    prov.cloud_for = lambda cloud, region: StrayCloud([stray])  # type: ignore[assignment,return-value]
    runs: list[tuple[str, ...]] = []
    # The shard the stray's node tag points to, (9 - 1) // 2, which holds no node yet.
    fake.made[4] = ShardWorkspace(fake.settings, REF, 4)
    fake.made[4].runner = Recorder(runs)  # type: ignore[attr-defined]
    fake.made[4].write_config = lambda node_map=None: None  # type: ignore[attr-defined]
    result = prov.apply(REF, nodes(1), destroy=["i-stray"])
    assert result.ok and fake.converged() == {4: [{}]}  # applied empty: the stray goes
    assert runs == [("import", 'module.pool.aws_instance.node["vision-v100-9-stray-stray"]',
                     "i-stray")]


class StrayCloud:
    def __init__(self, instances: list[CloudInstance]):
        self.instances = instances

    def managed_instances(self, tags: dict[str, str]) -> list[CloudInstance]:
        return list(self.instances)


class Recorder:
    def __init__(self, runs: list[tuple[str, ...]]):
        self.runs = runs

    def run(self, cmd: str, *args: str, **options: Any) -> None:
        self.runs.append((cmd, *args))

"""The executor's Provisioner (``service/executor/collaborators.py``) over Terraform: one
PoolWorkspace per pool, plus strays.

``apply(ref, nodes)`` applies the pool's node map in one ``terraform apply`` (planned and
applied under one state lock; the operator's preview is ``gpu-autoscaler plan``). Before
that it lists the
pool's instances in the cloud (by the ``managed-by``, ``team`` and ``pool`` tags every
instance gets from the module) and compares them with the state: an instance whose
``node`` tag is wanted but that the state does not hold was created by an apply that
was killed before it saved the state. It is imported under its node's key, so the
retry adopts it instead of launching a second instance. Instance ids the reconciler
asks to destroy are imported under a spare key (``<node>-stray-<id>``) that the map
leaves out, so the same apply destroys them: nothing but Terraform ever terminates an
instance.

What a pool holds (``instances``, and ``ApplyResult.nodes`` after a failed apply) is read
from the state itself, not from ``terraform output``: after an apply that failed on one
node the outputs still show the last successful apply, while the state (and the cloud)
already hold the instances it did create (verified with terraform 1.11 against moto).
Reading the outputs lost such an instance: its node was marked TERMINATED while it ran.
``leftovers`` is the cloud's word on nodes the state holds nothing for.

A pool with ``bootstrap.image: baked`` gets its :class:`BakedImage` from ``images`` (the
service passes one computed from the current policies, ``bootstrap_hash.baked_images``) each
time its workspace is asked for: a cached workspace whose image differs (a reload changed
the driver, say) is replaced, so the next apply writes the new hash into the root module.
The nodes ``apply`` and ``instances`` return carry the image each instance was launched
from, and ``baked`` for a baked pool's instance on another image than the region's base one
(:func:`mark_baked`): the executor bootstraps those with the node-time part only.

``mark_stale(ref)`` leaves a marker in the workspace: the next advance applies the pool
even though its node map did not change (the state and the store disagree).

A terraform killed with the service (SIGKILL, OOM, node loss) leaves its state lock
behind on a remote backend (S3 ``.tflock``; the local backend's lock dies with the
process). A lock is released with ``terraform force-unlock`` and the apply tried once more
only when this process has seen it held for ``stale_lock_after`` (default: the command
timeout plus five minutes, longer than any run of ours can hold it, and only the lease holder
runs Terraform), on its own monotonic clock, and its ``Created`` is that old too. ``Created``
alone proves nothing: it is the holder's clock (another host, an operator's laptop, a deposed
leader) or Go's zero time, and force-unlocking a live lock lets two applies write one state.
The cost: after a restart, a lock truly left behind is released up to ``stale_lock_after``
later. The first refusal by a lock is logged with its id and why the apply waits.
"""

from __future__ import annotations

import logging
import re
import threading
import time
from collections.abc import Callable, Collection, Iterable, Mapping
from concurrent.futures import ThreadPoolExecutor
from datetime import UTC, datetime, timedelta
from typing import Any

from autoscaler.actuators.node_map import NodeMap, NodeSpec
from autoscaler.actuators.terraform import (
    ApplyResult,
    BakedImage,
    NodeOutput,
    PoolWorkspace,
    StateLockedError,
    TerraformError,
    TerraformSettings,
    shards,
)
from autoscaler.actuators.terraform.runner import FLAG
from autoscaler.clouds.base import MANAGED_TAGS, CloudInstance, CloudMarket
from autoscaler.model.clock import utc_now
from autoscaler.model.pool import PoolRef

log = logging.getLogger(__name__)
STALE_MARKER = "gpu-autoscaler-stale"
RESOURCES = {"aws": "aws_instance", "alicloud": "alicloud_instance"}
CloudFor = Callable[[str, str], CloudMarket]
WorkspaceFactory = Callable[[TerraformSettings, PoolRef, Callable[[], datetime], int,
                             BakedImage | None], PoolWorkspace]
ImagesFor = Callable[[PoolRef], BakedImage | None]  # None: a base pool
Imports = dict[str, tuple[str, NodeSpec]]  # map key -> (instance id, spec)
KEPT = 100  # entries of ``imported`` and ``unlocked``
_LOCK_ID = re.compile(r"^\s*ID:\s*(\S+)", re.MULTILINE)
_LOCK_CREATED = re.compile(r"^\s*Created:\s*(\d{4}-\d\d-\d\d[ T]\d\d:\d\d:\d\d)", re.MULTILINE)


def stray_key(node: str | None, instance_id: str) -> str:
    """A map key for an instance to destroy (a valid node name, never a real node's)."""
    base = (node or "unnamed")[:40]
    return f"{base}-stray-{instance_id.removeprefix('i-')[-12:]}".lower()


def default_workspace(settings: TerraformSettings, ref: PoolRef, clock: Callable[[], datetime],
                      shard: int = 0, image: BakedImage | None = None) -> PoolWorkspace:
    return PoolWorkspace(settings, ref.team, ref.pool, ref.cloud, ref.region, clock=clock,
                         shard=shard, image=image)


def base_images(ref: PoolRef) -> BakedImage | None:
    """Every pool launches from its region's base image."""
    return None


def lock_of(error: StateLockedError) -> tuple[str, datetime] | None:
    """The lock's id and creation time (UTC) from a lock error, if Terraform told them."""
    found_id, found_at = _LOCK_ID.search(error.detail), _LOCK_CREATED.search(error.detail)
    if not found_id or not found_at:
        return None
    created = datetime.fromisoformat(found_at.group(1).replace(" ", "T")).replace(tzinfo=UTC)
    return found_id.group(1), created


def state_outputs(state: Mapping[str, Any]) -> dict[str, NodeOutput]:
    """Node key -> the instance a pool's state (``terraform state pull``) holds for it,
    tainted ones included (an instance that exists is billed and must be destroyed)."""
    out: dict[str, NodeOutput] = {}
    for res in state.get("resources", []):
        if res.get("module") != "module.pool" or res.get("mode") != "managed" \
                or res.get("name") != "node":
            continue
        for inst in res.get("instances", []):
            attrs, key = inst.get("attributes") or {}, inst.get("index_key")
            if not isinstance(key, str) or not attrs.get("id"):
                continue
            spot = attrs.get("instance_lifecycle") == "spot" or attrs.get("spot_strategy") in (
                "SpotAsPriceGo", "SpotWithPriceLimit")
            out[key] = NodeOutput(id=attrs["id"], private_ip=attrs.get("private_ip") or None,
                                  lifecycle="spot" if spot else "on-demand",
                                  image=attrs.get("ami") or attrs.get("image_id") or None)
    return out


def mark_baked(outputs: Mapping[str, NodeOutput], baked_pool: bool,
               base_image: str | None) -> dict[str, NodeOutput]:
    """``outputs`` with ``baked`` set on the instances launched from the pool's baked image.

    ==========================================  ========
    pool, instance image                        baked
    ==========================================  ========
    base pool (``bootstrap.image: base``)       False
    baked pool, the region's base image         False (stale: launched for a full bootstrap)
    baked pool, image unknown (None)            False (the full bootstrap is always safe)
    baked pool, any other image                 True
    ==========================================  ========

    The root module of a baked pool sets only two images: the base one and the newest one
    tagged with the pool's bootstrap hash (``rootmodule._baked``), so any other image is the
    baked one. (An instance launched before a reload changed the hash keeps its older baked
    image: the module ignores ``ami`` changes.)
    """
    return {name: out.model_copy(update={"baked": baked_pool and out.image is not None
                                         and out.image != base_image})
            for name, out in outputs.items()}


def pool_instances(cloud: CloudMarket, ref: PoolRef) -> list[CloudInstance]:
    tags = {**MANAGED_TAGS, "team": ref.team, "pool": ref.pool}
    return cloud.managed_instances(tags=tags)


class TerraformProvisioner:
    def __init__(self, settings: TerraformSettings, *, cloud_for: CloudFor | None = None,
                 clock: Callable[[], datetime] = utc_now,
                 stale_lock_after: timedelta | None = None,
                 workspace: WorkspaceFactory = default_workspace,
                 images: ImagesFor = base_images,
                 monotonic: Callable[[], float] = time.monotonic):
        self.settings = settings
        self.cloud_for = cloud_for
        self.clock = clock
        self.monotonic = monotonic
        self.stale_lock_after = stale_lock_after or timedelta(
            seconds=settings.command_timeout_s + 300)
        self._make_workspace = workspace
        self._images = images
        # (pool key, shard) -> (the image it was made with, the workspace)
        self._workspaces: dict[tuple[str, int], tuple[BakedImage | None, PoolWorkspace]] = {}
        self._guard = threading.Lock()
        # The last KEPT of each, for status and tests: trimmed, as the process lives for months.
        self.imported: list[tuple[str, str, str]] = []  # (pool, key, instance id)
        self.unlocked: list[tuple[str, str]] = []  # (pool, lock id) of stale locks released
        # workspace label -> (lock id, monotonic time it first refused us): one per workspace
        self._locks_seen: dict[str, tuple[str, float]] = {}

    def workspace(self, ref: PoolRef, shard: int = 0) -> PoolWorkspace:
        image = self._images(ref)
        with self._guard:
            made = self._workspaces.get((ref.key, shard))
            if made is None or made[0] != image:
                made = (image, self._make_workspace(self.settings, ref, self.clock, shard, image))
                self._workspaces[(ref.key, shard)] = made
            return made[1]

    def shards(self, ref: PoolRef) -> list[PoolWorkspace]:
        """The pool's shards that have a workspace (shard 0 always: the pool's own)."""
        base = self.workspace(ref)
        found = shards.existing(base.dir)
        return [self.workspace(ref, k) for k in sorted({0, *found})]

    # -- Provisioner -----------------------------------------------------------------------
    def applied(self, ref: PoolRef) -> NodeMap | None:
        """The node map of the pool's last applies, every shard's together; None while a
        shard must be applied again whatever its map."""
        out: NodeMap = {}
        for ws in self.shards(ref):
            if (ws.dir / STALE_MARKER).exists():
                return None
            out.update(ws.applied_nodes())
        return out

    def mark_stale(self, ref: PoolRef, nodes: Collection[str] | None = None) -> None:
        """Apply again, whatever the maps say: the shards whose last apply or state holds
        one of ``nodes`` (every shard when None). A shard holding none of them keeps its
        apply skipped: one adopted or missing node never costs the whole pool's applies."""
        names = None if nodes is None else set(nodes)
        for ws in self.shards(ref):
            if names is None or names & {*ws.applied_nodes(), *self._held(ws)}:
                _mark_stale(ws)

    def instances(self, ref: PoolRef) -> dict[str, NodeOutput]:
        out: dict[str, NodeOutput] = {}
        for ws in self.shards(ref):
            out.update(self._held(ws))
        return self._marked(ref, out)

    def _marked(self, ref: PoolRef, outputs: Mapping[str, NodeOutput]) -> dict[str, NodeOutput]:
        """``outputs`` with ``baked`` set (:func:`mark_baked`)."""
        inputs = self.settings.inputs_for(ref.cloud, ref.region)
        return mark_baked(outputs, self._images(ref) is not None,
                          inputs.ami if inputs is not None else None)

    def leftovers(self, ref: PoolRef, names: Iterable[str]) -> dict[str, list[str]]:
        """Node name -> ids of live cloud instances tagged with it that the pool's state
        does not hold (an apply killed between RunInstances and saving the state); {}
        without a cloud adapter to ask."""
        wanted = set(names)
        if self.cloud_for is None or not wanted:
            return {}
        held = {out.id for out in self.instances(ref).values()}
        out: dict[str, list[str]] = {}
        for inst in pool_instances(self.cloud_for(ref.cloud, ref.region), ref):
            if inst.node in wanted and inst.instance_id not in held:
                out.setdefault(inst.node, []).append(inst.instance_id)
        return out

    def apply(self, ref: PoolRef, nodes: NodeMap, *, destroy: Collection[str] = ()) -> ApplyResult:
        """Make the pool hold exactly ``nodes``: one apply in each shard whose map changed
        (or that is marked stale, or takes an instance to import), shards in parallel. The
        result is the pool's: ``nodes`` holds what the applied shards hold afterwards."""
        existing = self.shards(ref)
        held = shards.held({ws.shard: ws.applied_nodes() for ws in existing})
        maps = shards.assign(nodes, held, self.settings.shard_size, [ws.shard for ws in existing])
        imports = self._strays(ref, existing, nodes, maps, set(destroy))
        for k in imports:  # a stray's shard may hold no node yet: it is applied empty
            maps.setdefault(k, {})
        todo = [(k, node_map) for k, node_map in sorted(maps.items())
                if k in imports or self._changed(self.workspace(ref, k), node_map)]
        if not todo:  # the caller found a difference the shards do not: apply shard 0
            todo = [(0, maps.get(0, {}))]

        def one(item: tuple[int, NodeMap]) -> ApplyResult:
            k, node_map = item
            return self._apply_shard(ref, self.workspace(ref, k), node_map, imports.get(k, {}))

        workers = min(self.settings.shard_parallelism, len(todo))
        if workers == 1:
            results = [one(item) for item in todo]
        else:
            with ThreadPoolExecutor(max_workers=workers, thread_name_prefix="shard") as pool:
                results = list(pool.map(one, todo))
        merged = _merged(ref, results)
        return merged.model_copy(update={"nodes": self._marked(ref, merged.nodes)})

    def _changed(self, ws: PoolWorkspace, node_map: NodeMap) -> bool:
        return (ws.dir / STALE_MARKER).exists() or ws.applied_nodes() != node_map

    def _apply_shard(self, ref: PoolRef, ws: PoolWorkspace, nodes: NodeMap,
                     imports: Imports) -> ApplyResult:
        try:
            result = self._converge(ref, ws, nodes, imports)
        except StateLockedError as exc:
            if not self._break_stale_lock(ref, ws, exc):
                raise
            result = self._converge(ref, ws, nodes, imports)
        if not result.ok:
            # The outputs (and the applied map recorded from them) are the last good
            # apply's; the state is the truth, and the shard is applied again next time.
            _mark_stale(ws)
            result = result.model_copy(update={"nodes": self._held(ws)})
        return result

    def _converge(self, ref: PoolRef, ws: PoolWorkspace, nodes: NodeMap,
                  imports: Imports) -> ApplyResult:
        ws.init()
        if imports:
            self._import(ref, ws, nodes, imports)
        result = ws.converge(nodes)
        if result.ok:
            (ws.dir / STALE_MARKER).unlink(missing_ok=True)
        return result

    @staticmethod
    def _held(ws: PoolWorkspace) -> dict[str, NodeOutput]:
        if ws.shard and not (ws.dir / "main.tf.json").exists():
            return {}  # a shard never applied holds nothing (and init would create it)
        ws.init()
        return state_outputs(ws.pull_state())

    def _break_stale_lock(self, ref: PoolRef, ws: PoolWorkspace, exc: StateLockedError) -> bool:
        lock = lock_of(exc)
        if lock is None:
            return False
        lock_id, created = lock
        with self._guard:
            seen = self._locks_seen.get(ws.label)
            if seen is None or seen[0] != lock_id:
                seen = self._locks_seen[ws.label] = (lock_id, self.monotonic())
                log.warning("pool %s: state lock %s (Created %s by its holder's clock) refused "
                            "the apply; it is force-unlocked only after this process has seen it "
                            "held for %s and its Created is that old: until then the apply waits",
                            ws.label, lock_id, created.isoformat(), self.stale_lock_after)
        held = timedelta(seconds=self.monotonic() - seen[1])
        if held < self.stale_lock_after or self.clock() - created < self.stale_lock_after:
            return False
        ws.runner.run("force-unlock", lock_id, force=FLAG)
        with self._guard:
            self._locks_seen.pop(ws.label, None)
        self.unlocked.append((ws.label, lock_id))
        del self.unlocked[:-KEPT]
        return True

    # -- strays ------------------------------------------------------------------------------
    def _strays(self, ref: PoolRef, existing: list[PoolWorkspace], nodes: NodeMap,
                maps: Mapping[int, NodeMap], destroy: set[str]) -> dict[int, Imports]:
        """Shard -> map key -> (instance id, spec) of cloud instances to bring into that
        shard's state: a wanted node's lost instance into the node's shard, an instance to
        destroy into the shard its node tag points to."""
        if self.cloud_for is None:
            if destroy:
                raise TerraformError(f"pool {ref.key}: cannot destroy {sorted(destroy)}: no cloud "
                                     "adapter to read them from")
            return {}
        found = pool_instances(self.cloud_for(ref.cloud, ref.region), ref)
        recorded = {name for ws in existing for name in ws.applied_nodes()}
        # Reading the states costs a terraform run each: only when the cloud has an
        # instance the last recorded applies do not account for (after a crash, or a stray).
        if not any(i.instance_id in destroy or (i.node in nodes and i.node not in recorded)
                   for i in found):
            return {}
        held: dict[str, NodeOutput] = {}
        for ws in existing:
            held.update(self._held(ws))
        known = {out.id for out in held.values()}
        where = {name: k for k, node_map in maps.items() for name in node_map}
        out: dict[int, Imports] = {}
        taken: set[str] = set()
        for inst in found:
            if inst.instance_id in known:
                continue
            if inst.instance_id in destroy:
                spec = NodeSpec(instance_type=inst.instance_type, market=inst.market,
                                zone=inst.zone or "")
                shard = where.get(inst.node or "", shards.home(inst.node or "", self.settings.shard_size))
                out.setdefault(shard, {})[stray_key(inst.node, inst.instance_id)] = (
                    inst.instance_id, spec)
            elif inst.node and inst.node in nodes and inst.node not in held and inst.node not in taken:
                taken.add(inst.node)
                out.setdefault(where[inst.node], {})[inst.node] = (inst.instance_id, nodes[inst.node])
        return out

    def _import(self, ref: PoolRef, ws: PoolWorkspace, nodes: NodeMap, imports: Imports) -> None:
        resource = RESOURCES.get(ref.cloud)
        if resource is None:
            raise TerraformError(f"pool {ws.label}: no import for cloud {ref.cloud!r}")
        ws.write_config({**nodes, **{key: spec for key, (_, spec) in imports.items()}})
        for key, (instance_id, _) in sorted(imports.items()):
            address = f'module.pool.{resource}.node["{key}"]'
            try:
                ws.runner.run("import", address, instance_id, input=False, no_color=FLAG,
                              lock_timeout=self.settings.lock_timeout)
            except TerraformError as exc:
                if "already managed" not in str(exc):
                    raise
            self.imported.append((ws.label, key, instance_id))
            del self.imported[:-KEPT]


def _mark_stale(ws: PoolWorkspace) -> None:
    ws.dir.mkdir(parents=True, exist_ok=True)
    (ws.dir / STALE_MARKER).touch()


def _merged(ref: PoolRef, results: list[ApplyResult]) -> ApplyResult:
    """One result for the pool from its shards' (which ran side by side: ``seconds`` is
    the longest)."""
    if len(results) == 1:
        return results[0]
    nodes: dict[str, NodeOutput] = {}
    failed: dict[str, str] = {}
    for r in results:
        nodes.update(r.nodes)
        failed.update(r.failed)
    return ApplyResult(
        pool=ref.key, ok=all(r.ok for r in results), nodes=nodes,
        created=sorted(n for r in results for n in r.created),
        destroyed=sorted(n for r in results for n in r.destroyed), failed=failed,
        capacity_errors=[e for r in results for e in r.capacity_errors],
        errors=[e for r in results for e in r.errors], seconds=max(r.seconds for r in results))

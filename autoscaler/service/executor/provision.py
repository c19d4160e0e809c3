"""Terraform applies, one pool at a time: launches and terminations become real.

For each pool whose desired node map (nodes in states that keep an instance) differs from
its last applied map, or that has nodes waiting on Terraform (REQUESTED, PROVISIONING,
TERMINATING, LOST):

1. REQUESTED -> PROVISIONING is written first (the apply may create the instance);
2. the pool is applied with the map built from the store *after* that write; pools are
   applied in parallel (own state, own lock), new applies stop after the time budget;
3. the outcome is settled per node: an instance in the state -> BOOTSTRAPPING with its id
   and address (and, launched from its pool's baked image, that image in its progress:
   ``baked_image``, so its bootstrap runs only the node-time part); a node the apply
   named as failed -> PROVISION_FAILED with the error (and the capacity error goes back
   to the engine); TERMINATING/LOST nodes no longer in the
   state -> TERMINATED (the scheduler forgets them first) once the cloud lists no instance
   tagged with them either; warm-pool nodes: STOPPING -> WARM once an apply stopped the
   instance, STARTING -> BOOTSTRAPPING (node-time part) once one started it, and back to
   WARM when the start was refused. Settling reads the nodes again after the apply (a node may
   have moved while it ran); a leaving node keeps the id of any instance seen for it, and
   instances the cloud still runs for it are destroyed through Terraform first (imported
   under a spare key): the store never forgets an instance that may still be billed.

When the map already matches, the state is only read, which settles what a crash
between an apply and its bookkeeping left behind.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Sequence
from concurrent.futures import ThreadPoolExecutor
from dataclasses import replace

from autoscaler.actuators.node_map import NodeMap, desired_maps
from autoscaler.actuators.terraform import ApplyResult, NodeOutput, StateLockedError
from autoscaler.clouds.base import CloudUnreachableError
from autoscaler.model.changes import Move, NodeFields, Patch
from autoscaler.model.lifecycle import (
    INSTANCE_STATES,
    POWER_PENDING,
    REMOVING,
    WAITING,
    NodeState,
)
from autoscaler.model.node import Node
from autoscaler.model.pool import PoolRef
from autoscaler.model.progress import ProgressUpdate
from autoscaler.service.executor.advance import AdvanceReport, PoolApply, Step
from autoscaler.service.executor.bootstrap import bootstrap_part
from autoscaler.service.executor.collaborators import Provisioner
from autoscaler.service.executor.operations import Runner
from autoscaler.words import first_few

S = NodeState
AddressOf = Callable[[Node], str | None]
# Drops what the bootstrapper keeps of nodes that are gone (Bootstrapper.forget).
Forget = Callable[[list[str]], None]


def _keep(names: list[str]) -> None:
    pass


def apply_key(pool: str) -> str:
    """The operation key of a pool's apply: one at a time per pool."""
    return f"apply:{pool}"


def pools_to_apply(step: Step, provisioner: Provisioner, nodes: Sequence[Node],
                   busy: Callable[[str], bool] = lambda key: False) -> list[PoolRef]:
    """Pools whose map changed or that have nodes waiting on Terraform; a pool whose apply
    is still running is left alone (its nodes are counted in flight by the engine, and the
    next apply after it picks up whatever changed meanwhile)."""
    desired = desired_maps(nodes)
    refs: dict[str, PoolRef] = {}
    waiting: set[str] = set()
    for node in nodes:
        refs.setdefault(node.pool_key, PoolRef(node.team, node.pool, node.cloud, node.region))
        if node.state in WAITING:
            waiting.add(node.pool_key)
    out = []
    for key, ref in sorted(refs.items()):
        if busy(apply_key(key)):
            continue
        try:
            if key in waiting or provisioner.applied(ref) != desired.get(key, {}):
                out.append(ref)
        except Exception as exc:  # one pool's broken workspace must not stop the others
            step.error("terraform", f"pool {key}: cannot read its applied map: {exc}")
    return out


def provision(step: Step, provisioner: Provisioner, address_of: AddressOf, runner: Runner,
              forget: Forget = _keep) -> None:
    refs = pools_to_apply(step, provisioner, step.store.nodes(), runner.busy)
    if not refs:
        return
    started = time.monotonic()
    budget = step.settings.advance_budget.total_seconds()

    def work(ref: PoolRef, report: AdvanceReport) -> None:
        own = replace(step, report=report)
        try:
            apply_pool(own, provisioner, ref, address_of, forget)
        except StateLockedError as exc:
            # Another run (e.g. a dead leader's terraform that outlives it) holds the pool:
            # not this node's failure. The PROVISIONING timeout still bounds the wait.
            own.error("terraform", f"pool {ref.key}: state locked by another run, retrying "
                      f"next tick: {exc}")
        except CloudUnreachableError as exc:
            # The cloud did not answer the stray check before the apply (at 1,000 nodes a
            # loaded endpoint timed out; AWS throttles the same way): no apply ran, so it
            # is not the nodes' failure. The PROVISIONING timeout still bounds the wait.
            own.error("terraform", f"pool {ref.key}: cloud did not answer, retrying next "
                      f"tick: {exc}")
        except Exception as exc:  # a failed apply is retried next advance
            own.error("terraform", f"pool {ref.key}: {type(exc).__name__}: {exc}")
            _count_failure(own, ref, str(exc))

    def run(ref: PoolRef) -> None:
        if time.monotonic() - started > budget:
            step.report.deferred_pools.append(ref.key)
            return
        if runner.start("apply", [apply_key(ref.key)], f"terraform apply {ref.key}",
                        lambda report: work(ref, report), step.report):
            step.report.started.append(apply_key(ref.key))

    workers = min(step.settings.apply_parallelism, len(refs))
    if workers == 1:
        for ref in refs:
            run(ref)
        return
    with ThreadPoolExecutor(max_workers=workers, thread_name_prefix="apply") as pool:
        list(pool.map(run, refs))


def apply_pool(step: Step, provisioner: Provisioner, ref: PoolRef, address_of: AddressOf,
               forget: Forget = _keep) -> None:
    nodes = step.store.nodes(pool=ref.key)
    applied = provisioner.applied(ref)
    held_back = not_the_stores(step, provisioner, ref, nodes, applied)
    if held_back:
        step.error("terraform", f"pool {ref.key}: not applied: {held_back}")
        return
    step.move_all([Move(node.name, S.PROVISIONING, f"terraform apply of pool {ref.key}")
                   for node in nodes if node.state is S.REQUESTED])
    nodes = step.store.nodes(pool=ref.key)
    want: NodeMap = desired_maps(nodes).get(ref.key, {})
    result: ApplyResult | None = None
    if applied != want:
        step.store.fence()  # a deposed leader never applies
        result = provisioner.apply(ref, want)
        step.report.applies.append(PoolApply(
            pool=ref.key, ok=result.ok, created=result.created, destroyed=result.destroyed,
            failed=result.failed, seconds=result.seconds))
        step.report.capacity_errors += result.capacity_errors
        outputs = result.nodes
    else:
        outputs = provisioner.instances(ref)
    # Settled against the store as it is now: a node may have moved while the apply ran
    # (TERMINATING on a cancel), and a move that assumes its old state would fail and
    # drop the instance id on the floor.
    settle(step, provisioner, ref, step.store.nodes(pool=ref.key), outputs, result, address_of,
           forget)


def not_the_stores(step: Step, provisioner: Provisioner, ref: PoolRef,
                   nodes: Sequence[Node], applied: NodeMap | None) -> str | None:
    """Why the pool must not be applied, or None. An apply makes the state hold exactly the
    store's nodes, so a node the state holds and the store has no row for would be destroyed
    (a store restored from a backup, or another store), and one the store has just named
    again (REQUESTED: names are never reused otherwise) would be handed the old instance.
    Neither is evidence that the instance may go: the reconciler adopts them
    (``executor.unknown_instances: adopt``) or reports them, and the apply waits."""
    if applied:  # the last apply's map (``provisioner.applied``), on the controller's disk
        held = set(applied)
    else:  # else the state itself, read as an apply would: never by a deposed leader
        step.store.fence()
        held = set(provisioner.instances(ref))
    rows = {n.name: n.state for n in nodes}
    unknown = sorted(k for k in held if k not in rows)
    renamed = sorted(k for k in held if rows.get(k) is S.REQUESTED)
    if not unknown and not renamed:
        return None
    parts = []
    if unknown:
        parts.append(f"its Terraform state holds {first_few(unknown)}, which the store has no row "
                     "for, and an apply would destroy")
    if renamed:
        parts.append(f"the store named new nodes {first_few(renamed)} as the state already "
                     "holds them")
    return ("; ".join(parts) + " (a store restored from a backup?). Nothing is destroyed: set "
            "executor.unknown_instances: adopt, or remove the rows and instances by hand")


def settle(step: Step, provisioner: Provisioner, ref: PoolRef, nodes: Sequence[Node],
           outputs: dict[str, NodeOutput], result: ApplyResult | None,
           address_of: AddressOf, forget: Forget = _keep) -> None:
    failed = result.failed if result is not None else {}
    gone: list[Node] = []
    created: list[Move] = []  # written together, after the loop
    for node in nodes:
        out = outputs.get(node.name)
        if node.state is S.PROVISIONING:
            if out is not None:
                address = _address(step, node, out, address_of)
                baked = out.image if out.baked else None
                part = ("bootstrap for the warm pool but the start part, then stopped"
                        if node.progress.in_warm_pool else bootstrap_part(baked))
                created.append(Move(node.name, S.BOOTSTRAPPING,
                                    f"instance {out.id} created; {part}",
                                    NodeFields(instance_id=out.id, address=address),
                                    ProgressUpdate(baked_image=baked)))
            elif node.name in failed:
                step.move(node.name, S.PROVISION_FAILED, f"terraform apply failed: {failed[node.name]}")
            elif result is not None and not result.ok:
                _count_failure(step, ref, "; ".join(result.errors) or "apply failed", [node])
            else:
                provisioner.mark_stale(ref, [node.name])  # state and applied map disagree
        elif node.state in POWER_PENDING and out is not None:
            move = _powered(step, node, out, result, address_of)
            if move is not None:
                created.append(move)
        elif node.state in REMOVING:
            if out is None:
                gone.append(node)
            else:
                if node.instance_id != out.id:  # never lose track of an instance
                    step.patch(node.name, fields=NodeFields(instance_id=out.id))
                if result is None:  # the state holds what the map left out: apply again
                    provisioner.mark_stale(ref, [node.name])
        elif node.state in INSTANCE_STATES and out is not None and node.instance_id \
                and out.id != node.instance_id:
            step.move(node.name, S.LOST, f"instance {node.instance_id} is gone: Terraform "
                      f"recreated the node as {out.id}, which is not bootstrapped")
    step.move_all(created)
    if gone:
        _terminated(step, provisioner, ref, nodes, gone, forget)


def _powered(step: Step, node: Node, out: NodeOutput, result: ApplyResult | None,
             address_of: AddressOf) -> Move | None:
    """A warm-pool node whose instance the apply (or an earlier one: ``result`` None means
    the applied map already held its power) stopped or started; None: not yet."""
    warm = node.progress.warm
    failed = result.failed.get(node.name) if result is not None else None
    if failed is not None and node.state is S.STARTING:
        again = warm.start_refused() if warm else None
        return Move(node.name, S.WARM, f"start of {out.id} refused: {failed}; it stays stopped",
                    progress=ProgressUpdate(warm=again))
    if result is not None and not result.ok:
        return None  # the next apply tries again; STOPPING/STARTING's limit bounds it
    if node.state is S.STOPPING:
        stopped = warm.stopped(step.now()) if warm else None
        return Move(node.name, S.WARM, f"instance {out.id} stopped: in the warm pool, billed "
                    "for its volume only", progress=ProgressUpdate(warm=stopped))
    address = _address(step, node, out, address_of)
    return Move(node.name, S.BOOTSTRAPPING, f"instance {out.id} started from the warm pool; "
                "node-time bootstrap", NodeFields(instance_id=out.id, address=address))


def _terminated(step: Step, provisioner: Provisioner, ref: PoolRef, nodes: Sequence[Node],
                gone: Sequence[Node], forget: Forget = _keep) -> None:
    """Leaving nodes the state holds nothing for -> TERMINATED, unless the cloud still runs
    an instance tagged with them (the state lost it): that one is destroyed through
    Terraform first and the node waits for the next settle. A TERMINATED node is forgotten
    by the bootstrapper (its pinned host key: node names are never reused)."""
    try:
        left = provisioner.leftovers(ref, [n.name for n in gone])
    except Exception as exc:  # no answer is no evidence that the instance is gone
        step.error("terraform", f"pool {ref.key}: cannot check the cloud for "
                   f"{', '.join(n.name for n in gone)}; not marked TERMINATED: {exc}")
        return
    doomed: list[str] = []
    for node in gone:
        ids = left.get(node.name)
        if not ids:
            _forget(step, node)
            if step.move(node.name, S.TERMINATED, f"instance {node.instance_id or '(none)'} "
                         "destroyed by terraform") is not None:
                _drop(step, forget, node.name)
            continue
        if node.instance_id not in ids:
            step.patch(node.name, fields=NodeFields(instance_id=ids[0]))
        step.error("terraform", f"{node.name}: the state of {ref.key} holds no instance but "
                   f"the cloud runs {', '.join(ids)}: destroying it through terraform")
        doomed += ids
    if doomed:
        keep = desired_maps(n for n in nodes if n.state is not S.REQUESTED).get(ref.key, {})
        step.store.fence()  # a deposed leader never destroys
        result = provisioner.apply(ref, keep, destroy=doomed)
        step.report.applies.append(PoolApply(
            pool=ref.key, ok=result.ok, created=result.created, destroyed=result.destroyed,
            failed=result.failed, seconds=result.seconds))


def _address(step: Step, node: Node, out: NodeOutput, address_of: AddressOf) -> str | None:
    try:
        found = address_of(node.with_instance(instance_id=out.id, address=out.private_ip))
    except Exception as exc:  # the resolver is a seam: its failure must not lose the instance id
        step.error("resolver", f"{node.name}: address resolver failed: {exc}")
        found = None
    return found or out.private_ip


def _forget(step: Step, node: Node) -> None:
    kind = step.cluster_kind(node)
    drainer = step.drainers.get(kind)
    if drainer is None:
        return
    step.store.fence()
    try:
        drainer.forget(node)
    except Exception as exc:  # the instance is gone either way
        step.error("drain", f"{node.name}: {kind} could not forget it: {exc}")


def _drop(step: Step, forget: Forget, name: str) -> None:
    try:
        forget([name])
    except Exception as exc:  # left for the sweep at the next start
        step.error("ansible", f"{name}: its pinned host key could not be deleted: {exc}")


def _count_failure(step: Step, ref: PoolRef, why: str,
                   nodes: Sequence[Node] | None = None) -> None:
    """Applies that fail without naming a node: PROVISION_FAILED after a few. (Only the
    pool's apply, which holds its key, writes ``provision_failures``.)"""
    if nodes is None:
        nodes = step.store.nodes(states=[S.PROVISIONING], pool=ref.key)
    failed: list[Move] = []
    counted: list[Patch] = []
    for node in nodes:  # one write each way, not one per node (a pool may hold hundreds)
        count = node.progress.provision_failures + 1
        if count >= step.settings.provision_attempts:
            failed.append(Move(node.name, S.PROVISION_FAILED,
                               f"{count} applies of {ref.key} failed; last: {why[:300]}"))
        else:
            counted.append(Patch(node.name, NodeFields(),
                                 ProgressUpdate(provision_failures=count)))
    step.move_all(failed)
    step.patch_all(counted)

"""A plan's actions as intents in the store; no side effect outside it.

Launch creates REQUESTED nodes (names from the store), Drain moves READY -> DRAINING,
CancelDrain DRAINING/DRAINED -> READY (the scheduler resume is owed: ``drain_trigger`` is
``"cancelled"`` until advance() did it),
Terminate -> TERMINATING, Replace drains the node and creates one like it; a Launch that
``replaces`` interrupted nodes flags them ``replacement_requested``; a warm-pool Launch
creates nodes that carry ``progress.warm``; StartWarm moves a WARM node to STARTING (its
bootstrap record cleared: the node-time part runs once the instance is up again).

Resubmitting a recorded plan (same ``plan_id``) after a crash creates nothing twice: an
action row goes ``planned -> submitting -> submitted``, and the nodes a launch creates
carry the action id and slot in their progress. A replacement is promised on the old node
first (``replacement``: its :class:`LaunchSpec`) and the promise is cleared once the new
node exists; :func:`repair_replacements` finishes promises a crash interrupted.
"""

from __future__ import annotations

from collections.abc import Iterator

from pydantic import TypeAdapter

from autoscaler.fleet.intents import (
    FlagLongJob,
    Intent,
    NewNode,
    Remove,
    StartDrain,
    StopDrain,
    Wake,
    action_keys,
    intents_of,
)
from autoscaler.fleet.store import RecordedAction
from autoscaler.model.changes import Create, Move, NodeChange, NodeFields, Patch
from autoscaler.model.lifecycle import GONE, TERMINABLE, NodeState
from autoscaler.model.node import Node
from autoscaler.model.plan import Action, Drain, Launch, Plan, Replace, Terminate
from autoscaler.model.progress import (
    BootstrapProgress,
    LaunchSpec,
    LongJob,
    NodeProgress,
    ProgressUpdate,
    WarmProgress,
)
from autoscaler.policy.models import find_pool
from autoscaler.service.control.backoff import fingerprint
from autoscaler.service.executor.advance import Step, SubmitError

S = NodeState
ACTION: TypeAdapter[Action] = TypeAdapter(Action)


def rows_for(step: Step, plan: Plan, plan_id: int | None
             ) -> Iterator[tuple[Action, str, RecordedAction | None]]:
    """Each action with its stable key and its row, matched by key (record_plan writes one
    row per action but Hold; the same keys come out of the rows' bodies)."""
    keyed = action_keys(plan.actions)
    if plan_id is None:
        yield from ((a, k, None) for a, k in keyed)
        return
    rows = step.store.actions(plan_id=plan_id)
    by_key = {k: row for (_, k), row in zip(action_keys(
        [ACTION.validate_python(r.body) for r in rows]), rows, strict=True)}
    missing = [k for _, k in keyed if k not in by_key]
    if missing or len(rows) != len(keyed):
        raise SubmitError(f"plan {plan_id} has {len(rows)} recorded actions, the plan {len(keyed)}"
                          + (f"; not recorded: {', '.join(missing)}" if missing else ""))
    yield from ((a, k, by_key[k]) for a, k in keyed)


def submit(step: Step, plan: Plan, plan_id: int | None) -> list[str]:
    """Each action still to do, in order; the Drain and Terminate actions (one move of one
    node each) together at the end, as a batch (:func:`_submit_moves`)."""
    created: list[str] = []
    moves: list[tuple[Drain | Terminate, str, RecordedAction | None]] = []
    for action, key, row in rows_for(step, plan, plan_id):
        if row is not None and row.status not in ("planned", "submitting"):
            continue
        if isinstance(action, Drain | Terminate):
            moves.append((action, key, row))
            continue
        resumed = row is not None and row.status == "submitting"
        if row is not None and not resumed:
            step.store.set_action_status(row.id, "submitting", step.now())
        try:
            created += _apply(step, action, intents_of(action, key), row.id if row else None,
                              resumed)
            status, detail = "submitted", ""
        except SubmitError as exc:
            status, detail = "failed", str(exc)
            step.error("submit", f"{action.kind} {getattr(action, 'node', action.pool)}: {exc}")
        if row is not None:
            step.store.set_action_status(row.id, status, step.now(), detail)
    _submit_moves(step, moves)
    return created


def _submit_moves(step: Step, batch: list[tuple[Drain | Terminate, str, RecordedAction | None]]
                  ) -> None:
    """Drains and terminations in a bounded number of store writes, whatever their number:
    their rows ``submitting`` (one write), their nodes read (one query), the moves in one
    transaction (:meth:`Step.move_all`: when it is refused, each on its own, so a node that
    moved meanwhile fails only its action), the rows' outcomes (one write). A node in the
    wrong state fails its action with the reason, as one at a time did. A crash leaves the
    rows ``submitting`` and the moves all written or none: resubmitting the plan finds each
    node READY (moved now) or draining for this action (done: submitted)."""
    if not batch:
        return
    step.store.set_action_statuses({row.id: ("submitting", "") for _, _, row in batch
                                    if row is not None and row.status == "planned"}, step.now())
    names = [i.node for action, key, _ in batch for i in intents_of(action, key)
             if isinstance(i, StartDrain | Remove)]
    nodes = {n.name: n for n in step.store.nodes(names=names, include_terminated=True)}
    outcome: dict[int, tuple[str, str]] = {}
    planned: list[tuple[Move, RecordedAction | None, Drain | Terminate]] = []
    for action, key, row in batch:
        try:
            for intent in intents_of(action, key):
                move = (_move_of(step, intent, nodes.get(intent.node),
                                 resumed=row is not None and row.status == "submitting")
                        if isinstance(intent, StartDrain | Remove) else None)
                if move is not None:
                    planned.append((move, row, action))
        except SubmitError as exc:
            _failed(step, action, exc, row, outcome)
            continue
        if row is not None:
            outcome[row.id] = ("submitted", "")
    written = step.move_all([move for move, *_ in planned])
    for (move, row, action), node in zip(planned, written, strict=True):
        if node is None:  # moved meanwhile: Step.move_all logged why
            what = "drained" if move.to is S.DRAINING else "terminated"
            _failed(step, action, SubmitError(f"{move.node} changed state; not {what}"), row,
                    outcome)
    step.store.set_action_statuses(outcome, step.now())


def _failed(step: Step, action: Action, exc: SubmitError, row: RecordedAction | None,
            outcome: dict[int, tuple[str, str]]) -> None:
    step.error("submit", f"{action.kind} {getattr(action, 'node', action.pool)}: {exc}")
    if row is not None:
        outcome[row.id] = ("failed", str(exc))


def _apply(step: Step, action: Action, intents: list[Intent], action_id: int | None,
           resumed: bool) -> list[str]:
    if isinstance(action, Launch):
        return _launch(step, [i for i in intents if isinstance(i, NewNode)], action_id, resumed)
    if isinstance(action, Replace):
        return _replace(step, intents, action_id, resumed)
    for intent in intents:
        if isinstance(intent, StopDrain):
            _cancel_drain(step, intent)
        elif isinstance(intent, FlagLongJob):
            _report_job(step, intent)
        elif isinstance(intent, Wake):
            _wake(step, intent)
    return []


def _wake(step: Step, intent: Wake) -> None:
    """WARM -> STARTING. A resubmitted plan finds the node STARTING (or further) for this
    very start and leaves it."""
    node = _node(step, intent.node)
    warm = node.progress.warm
    if warm is None:
        raise SubmitError(f"{node.name} is not a warm-pool node")
    if node.state is not S.WARM:
        if warm.started_for == intent.reason:
            return
        raise SubmitError(f"{node.name} is {node.state}, not WARM: not started")
    started = warm.started(step.now(), intent.reason)
    moved = step.move(node.name, S.STARTING, intent.reason,
                      progress=ProgressUpdate(warm=started, bootstrap=BootstrapProgress()))
    if moved is None:
        raise SubmitError(f"{node.name} changed state; not started")


def _report_job(step: Step, action: FlagLongJob) -> None:
    """The engine repeats a long job's report every tick while it runs: the first one of a
    run is audited and, when the policy asks, owes the job one checkpoint signal and one
    release (advance()). A requeued job that runs past the limit again is a new run (its
    start time differs), reported afresh."""
    found = step.store.get(action.node)
    if found is None:
        return
    known = found.progress.long_jobs.get(action.job)
    same_run = known is not None and (known.started_at is None
                                      or known.started_at == action.started_at)
    if known is not None and same_run:
        if action.release and not known.release:  # the policy now says release
            jobs = {**found.progress.long_jobs, action.job: known.with_release()}
            step.patch(action.node, progress=ProgressUpdate(long_jobs=jobs))
        return
    now = step.now()
    step.store.audit("long-job", action.reason, now, pool=action.pool, node=action.node)
    entry = LongJob(reported_at=now, signal=action.signal, release=action.release,
                    started_at=action.started_at)
    jobs = {**found.progress.long_jobs, action.job: entry}
    step.patch(action.node, progress=ProgressUpdate(long_jobs=jobs))


def _node(step: Step, name: str) -> Node:
    node = step.store.get(name)
    if node is None:
        raise SubmitError(f"no node named {name}")
    return node


# -- launches -------------------------------------------------------------------------------

def _launch(step: Step, slots: list[NewNode], action_id: int | None, resumed: bool) -> list[str]:
    """Every slot's node in ONE store write: all of them or none (a crash leaves the
    action ``submitting`` with no node, or every node made; a resubmission skips the slots
    that have one). A replaced node is flagged in the same write, its promise cleared."""
    existing = _created_slots(step, slots[0].pool, action_id) if resumed and slots else {}
    creates: list[NodeChange] = [new_node(step, slot.launch(action_id), replaces=slot.replaces)
                                 for slot in slots if slot.slot not in existing]
    # What _promise then _clear_marker leave on a replaced node (flagged, no promise), at once.
    flags: list[NodeChange] = [
        Patch(slot.replaces, NodeFields(replacement_requested=True)
              if slot.slot not in existing else NodeFields(), ProgressUpdate(replacement=None))
        for slot in slots if slot.replaces]
    if not creates and not flags:
        return []
    written = step.store.apply(creates + flags, step.now())  # the creates first: one batch
    return [node.name for node in written[:len(creates)]]


def _replace(step: Step, intents: list[Intent], action_id: int | None, resumed: bool) -> list[str]:
    [drain] = [i for i in intents if isinstance(i, StartDrain)]
    [new] = [i for i in intents if isinstance(i, NewNode)]
    old = _node(step, drain.node)
    if resumed and _created_slots(step, new.pool, action_id):
        _clear_marker(step, old.name)
        return []
    spec = new.launch(action_id)
    if old.state is S.READY:
        progress = ProgressUpdate(
            drain=step.drain_progress(old, drain.reason, step.now(), drain.trigger),
            replacement=spec)
        moved = step.move(old.name, S.DRAINING, drain.reason, progress=progress, fields=NodeFields(
            drain_trigger=drain.trigger, replacement_requested=True))
        if moved is None:
            raise SubmitError(f"{old.name} changed state; not replaced")
    elif old.state in (S.DRAINING, S.DRAINED, S.INTERRUPTED):
        _promise(step, old.name, spec)
    else:
        raise SubmitError(f"{old.name} is {old.state}, not READY: not replaced")
    created = create(step, spec, replaces=old.name)
    _clear_marker(step, old.name)
    return [created.name]


def create(step: Step, spec: LaunchSpec, replaces: str | None = None) -> Node:
    """A REQUESTED node for one launch slot (also used to finish a promised replacement)."""
    [node] = step.store.apply([new_node(step, spec, replaces)], step.now())
    return node


def new_node(step: Step, spec: LaunchSpec, replaces: str | None = None) -> Create:
    """The store change that creates a REQUESTED node for one launch slot."""
    team, pool_name = spec.team_and_pool
    pool = find_pool(step.policies, team, pool_name)
    if pool is None:
        raise SubmitError(f"pool {spec.pool} has no policy: cannot tell its cloud and region")
    # The policy fingerprint: a policy change resets the launch backoff.
    progress = NodeProgress(cluster=pool.cluster.kind, action=spec.action, index=spec.index,
                            policy=fingerprint(pool),
                            warm=WarmProgress(image=spec.image or "")
                            if spec.trigger == "warm-pool" else None)
    return Create(team, pool_name, pool.cloud.value, pool.region, spec, progress, replaces)


def _promise(step: Step, old: str, spec: LaunchSpec) -> None:
    step.patch(old, fields=NodeFields(replacement_requested=True),
               progress=ProgressUpdate(replacement=spec))


def _clear_marker(step: Step, old: str) -> None:
    step.patch(old, progress=ProgressUpdate(replacement=None))


def _created_slots(step: Step, pool: str, action_id: int | None) -> dict[int, str]:
    """Launch slots of ``action_id`` that already have a node (after a crash mid-submit)."""
    if action_id is None:
        return {}
    # Only this action's nodes, selected in SQL: the pool keeps a row per node it ever had.
    return {node.progress.index: node.name
            for node in step.store.nodes(pool=pool, include_terminated=True, action=action_id)
            if node.progress.index is not None}


def _replacement_of(step: Step, pool: str, old: str) -> str | None:
    found = step.store.nodes(pool=pool, include_terminated=True, replaces=old)
    return found[0].name if found else None


def repair_replacements(step: Step) -> list[str]:
    """Finish replacements promised before a crash: create the node if it is missing."""
    created = []
    for node in step.store.nodes():
        spec = node.progress.replacement
        if not node.replacement_requested or spec is None:
            continue
        if _replacement_of(step, spec.pool, node.name) is None:
            created.append(create(step, spec, replaces=node.name).name)
        _clear_marker(step, node.name)
    return created


# -- drains and terminations ------------------------------------------------------------------

def _move_of(step: Step, intent: StartDrain | Remove, node: Node | None, *,
             resumed: bool) -> Move | None:
    """The move a StartDrain (READY -> DRAINING, with the pool's drain) or a Remove
    (-> TERMINATING; nothing for a node already gone) makes of ``node`` as read; raises
    SubmitError when the node is missing or in a state it cannot leave that way. ``resumed``
    (the action was being submitted when the process stopped): a node already draining for
    this very drain (its trigger and reason) was moved by it, so nothing is left to do."""
    if node is None:
        raise SubmitError(f"no node named {intent.node}")
    if isinstance(intent, Remove):
        if node.state in GONE:
            return None
        if node.state not in TERMINABLE:
            raise SubmitError(f"{node.name} is {node.state}: drain it before terminating")
        return Move(node.name, S.TERMINATING, intent.reason)
    if resumed and node.state is S.DRAINING and node.drain_trigger == intent.trigger and (
            node.progress.drain is not None and node.progress.drain.reason == intent.reason):
        return None
    if node.state is not S.READY:
        raise SubmitError(f"{node.name} is {node.state}, not READY: not drained")
    progress = ProgressUpdate(
        drain=step.drain_progress(node, intent.reason, step.now(), intent.trigger))
    return Move(node.name, S.DRAINING, intent.reason, NodeFields(drain_trigger=intent.trigger),
                progress, intent.cooldown)


def _cancel_drain(step: Step, action: StopDrain) -> None:
    node = _node(step, action.node)
    if node.state not in (S.DRAINING, S.DRAINED):
        raise SubmitError(f"{node.name} is {node.state}: no drain to cancel")
    # READY first; the scheduler resume it owes is done by advance() (drain.UNDRAIN).
    moved = step.move(node.name, S.READY, action.reason,
                      fields=NodeFields(drain_trigger="cancelled"),
                      progress=ProgressUpdate(drain=None))
    if moved is None:
        raise SubmitError(f"{node.name} changed state; drain not cancelled")

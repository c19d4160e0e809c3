"""The one interpreter of a Plan: Plan + fleet -> typed intents (pure, no I/O).

The executor's submit, the simulator's engine strategy, the node-map preview and the test
fakes all read a plan through :func:`interpret`, so they agree on what an action changes:

* ``Launch`` -> one :class:`NewNode` per slot (slot ``i`` stands in for ``replaces[i]``);
* ``Drain`` -> :class:`StartDrain` of a READY node;
* ``Replace`` -> :class:`StartDrain` of the node (``replaced``) and a :class:`NewNode` like
  the action says (``replaces`` the node);
* ``CancelDrain`` -> :class:`StopDrain`; ``Terminate`` -> :class:`Remove`;
  ``ReportJob`` -> :class:`FlagLongJob`; ``StartWarm`` -> :class:`Wake` of a WARM node;
  ``Hold`` -> nothing.

Every intent carries its action's stable key (:func:`action_keys`: kind, pool and target,
plus an ordinal among equal ones), so a recorded plan's rows are matched to actions by
identity, never by position, and the cooldown effect decided here, once
(:func:`cooldown_of`): a launch for pending jobs, utilization or a floor is a scale-up; a
drain for idle, consolidation, over-max, over-quota or preemption is a scale-down;
replacements (interruption stand-ins, Replace) and drains of broken or removed capacity
are neither. The store and the simulator both record history from this.

With a fleet, an action whose node is missing or in the wrong state yields
:class:`Refused` with the reason instead (the executor re-checks when it writes).
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from datetime import datetime
from typing import Protocol

from autoscaler.model.lifecycle import (
    CANCELLABLE,
    DRAINABLE,
    GONE,
    REPLACEABLE,
    STARTABLE,
    TERMINABLE,
    NodeState,
)
from autoscaler.model.plan import (
    Action,
    CancelDrain,
    Drain,
    Hold,
    Launch,
    Plan,
    Replace,
    ReportJob,
    StartWarm,
    Terminate,
    subject_of,
    target_of,
)
from autoscaler.model.progress import Cooldown, LaunchSpec
from autoscaler.policy.models import Market

SCALE_UP_TRIGGERS = frozenset({"pending", "utilization", "floor"})
SCALE_DOWN_TRIGGERS = frozenset({"idle", "consolidate", "over-max", "over-quota", "preempted"})


class Stateful(Protocol):
    """A node as far as the interpreter looks: the store's Node or the simulator's."""

    @property
    def name(self) -> str: ...

    @property
    def state(self) -> NodeState: ...


def cooldown_of(action: Action) -> Cooldown:
    """Whether the action restarts the pool's scale-up or scale-down cooldown."""
    if isinstance(action, Launch):
        return "up" if action.trigger in SCALE_UP_TRIGGERS else None
    if isinstance(action, Drain):
        return drain_cooldown(action.trigger)
    return None


def drain_cooldown(trigger: str | None) -> Cooldown:
    """A plain drain (not a replacement) with this trigger."""
    return "down" if trigger in SCALE_DOWN_TRIGGERS else None


def action_key(action: Action) -> str:
    """Kind, pool and target: equal for two actions that do the same thing."""
    what = target_of(action)
    if isinstance(action, Launch | Replace):
        what += f" {action.instance_type} {action.market.value} {action.zone or '-'} {action.trigger}"
    elif isinstance(action, Drain):
        what += f" {action.trigger}"
    return f"{action.kind}:{action.pool}:{what.strip()}"


def action_keys(actions: Iterable[Action]) -> list[tuple[Action, str]]:
    """Each non-Hold action with its stable key (``#n`` tells equal ones apart)."""
    seen: Counter[str] = Counter()
    out: list[tuple[Action, str]] = []
    for action in actions:
        if isinstance(action, Hold):
            continue
        base = action_key(action)
        seen[base] += 1
        out.append((action, base if seen[base] == 1 else f"{base}#{seen[base]}"))
    return out


@dataclass(frozen=True)
class NewNode:
    key: str
    slot: int
    pool: str
    instance_type: str
    market: Market
    zone: str | None
    reason: str
    cooldown: Cooldown
    replaces: str | None = None
    trigger: str | None = None  # the action's trigger, kept with the node (Node.launched_for)
    fallback_from_spot: bool = False  # kept with the node: a candidate for return to spot
    image: str | None = None  # a warm-pool node: the bootstrap hash it is warmed with

    def launch(self, action: int | None = None) -> LaunchSpec:
        """This slot as the store writes it (``action``: the recorded plan action's id, so
        a resubmitted plan finds the slot's node instead of creating it twice)."""
        return LaunchSpec(pool=self.pool, instance_type=self.instance_type, market=self.market,
                          zone=self.zone, reason=self.reason, action=action, index=self.slot,
                          cooldown=self.cooldown, trigger=self.trigger,
                          fallback_from_spot=self.fallback_from_spot, image=self.image)


@dataclass(frozen=True)
class StartDrain:
    key: str
    pool: str
    node: str
    trigger: str
    reason: str
    cooldown: Cooldown
    replaced: bool = False  # a Replace: the new node is a NewNode of the same key


@dataclass(frozen=True)
class StopDrain:
    key: str
    pool: str
    node: str
    reason: str


@dataclass(frozen=True)
class Wake:
    """WARM -> STARTING: the next apply starts the stopped instance."""

    key: str
    pool: str
    node: str
    reason: str


@dataclass(frozen=True)
class Remove:
    key: str
    pool: str
    node: str
    reason: str


@dataclass(frozen=True)
class FlagLongJob:
    key: str
    pool: str
    node: str
    job: str
    signal: bool
    reason: str
    release: bool = False
    started_at: datetime | None = None


@dataclass(frozen=True)
class Refused:
    key: str
    pool: str
    why: str


Intent = NewNode | StartDrain | StopDrain | Remove | FlagLongJob | Wake | Refused


def interpret(plan: Plan, fleet: Mapping[str, Stateful] | None = None) -> list[Intent]:
    """The plan's intents in plan order; ``fleet`` (name -> node) checks node states."""
    out: list[Intent] = []
    for action, key in action_keys(plan.actions):
        out += intents_of(action, key, fleet)
    return out


def intents_of(action: Action, key: str, fleet: Mapping[str, Stateful] | None = None) -> list[Intent]:
    """One action's intents (what :func:`interpret` does per action)."""
    if isinstance(action, Launch):
        replaces = list(action.replaces)
        return [NewNode(key, i, action.pool, action.instance_type, action.market, action.zone,
                        action.reason, cooldown_of(action) if i == 0 else None,
                        replaces[i] if i < len(replaces) else None, action.trigger,
                        action.fallback_from_spot, action.image) for i in range(action.count)]
    node_name = subject_of(action).node or ""
    refused = _refused(action, key, fleet.get(node_name) if fleet is not None else None, fleet)
    if refused is not None:
        return [refused]
    if isinstance(action, Drain):
        return [StartDrain(key, action.pool, action.node, action.trigger, action.reason,
                           cooldown_of(action))]
    if isinstance(action, Replace):
        return [StartDrain(key, action.pool, action.node, action.trigger,
                           f"replaced ({action.trigger}): {action.reason}", None, replaced=True),
                NewNode(key, 0, action.pool, action.instance_type, action.market, action.zone,
                        action.reason, None, replaces=action.node, trigger=action.trigger)]
    if isinstance(action, CancelDrain):
        return [StopDrain(key, action.pool, action.node, action.reason)]
    if isinstance(action, Terminate):
        return [Remove(key, action.pool, action.node, action.reason)]
    if isinstance(action, StartWarm):
        return [Wake(key, action.pool, action.node, action.reason)]
    if isinstance(action, ReportJob):
        return [FlagLongJob(key, action.pool, action.node, action.job, action.signal, action.reason,
                            action.release, action.started_at)]
    return []


def _refused(action: Action, key: str, node: Stateful | None,
             fleet: Mapping[str, Stateful] | None) -> Refused | None:
    if fleet is None:
        return None
    if node is None:
        return Refused(key, action.pool, f"no node named {getattr(action, 'node', '?')}")
    allowed = {Drain: DRAINABLE, CancelDrain: CANCELLABLE, Replace: REPLACEABLE,
               Terminate: TERMINABLE | GONE, StartWarm: STARTABLE}.get(type(action))
    if allowed is not None and node.state not in allowed:
        return Refused(key, action.pool, f"{node.name} is {node.state}, not "
                       f"{'/'.join(sorted(s.value for s in allowed))}")
    return None

"""The per-node records are slotted, validated like the models, and the simulator's
unvalidated construction fills defaults as model_construct did."""

from __future__ import annotations

import dataclasses

import pytest
from pydantic import ValidationError

from autoscaler.model.node import Node
from autoscaler.model.progress import NodeProgress
from autoscaler.model.record import construct
from autoscaler.model.snapshot import GpuMetrics, NodeObservation, RunningJob, SchedulerNode, Snapshot
from tests.builders import NOW, make_node


@pytest.mark.parametrize("cls", [Node, NodeObservation, GpuMetrics, SchedulerNode, RunningJob])
def test_records_are_slotted_and_frozen(cls: type) -> None:
    assert "__dict__" not in dir(cls) and "__getattr__" not in vars(cls)
    assert cls.__dataclass_params__.frozen  # type: ignore[attr-defined]


def test_records_are_validated_on_construction_and_refuse_unknown_fields() -> None:
    with pytest.raises(ValidationError, match="less than or equal to 1"):
        SchedulerNode(gpus_free=[2.0])
    with pytest.raises(ValidationError, match=r"at most 300"):
        SchedulerNode(unusable="x" * 301)
    with pytest.raises(ValidationError):
        NodeObservation(metrics_missing="x", surprise=1)  # type: ignore[call-arg]
    with pytest.raises(ValidationError):
        dataclasses.replace(SchedulerNode(), gpus_free=[-1.0])
    node = make_node("n1")
    with pytest.raises(dataclasses.FrozenInstanceError):
        node.state = node.state  # type: ignore[misc]


def test_a_hostile_snapshot_file_is_refused_down_to_the_node_records() -> None:
    good = {"taken_at": NOW.isoformat(), "nodes": {"n1": {"metrics": {"util_mean": 5}}}}
    assert Snapshot.model_validate(good).nodes["n1"].metrics == GpuMetrics(util_mean=5)
    with pytest.raises(ValidationError, match="Unexpected keyword argument"):
        Snapshot.model_validate({**good, "nodes": {"n1": {"metrics": {"util_mean": 5, "evil": 1}}}})
    with pytest.raises(ValidationError):
        Snapshot.model_validate({**good, "nodes": {"n1": {"scheduler": {"gpus_free": [1e9]}}}})
    snap = Snapshot.model_validate(good)
    assert Snapshot.model_validate_json(snap.model_dump_json()) == snap


def test_construct_fills_defaults_and_refuses_unknown_or_missing_fields() -> None:
    sched = construct(SchedulerNode, state="idle", gpus_total=4.0)
    assert sched == SchedulerNode(state="idle", gpus_total=4.0)
    assert construct(SchedulerNode).jobs is not construct(SchedulerNode).jobs  # factories run
    node = make_node("n1")
    built = construct(Node, **{f.name: getattr(node, f.name) for f in dataclasses.fields(Node)
                               if f.name != "progress"})
    assert built == node and built.progress == NodeProgress()
    with pytest.raises(TypeError, match="no field bogus"):
        construct(GpuMetrics, bogus=1)
    with pytest.raises(TypeError, match=r"RunningJob\.id is required"):
        construct(RunningJob, gpus=1.0)

"""Recorded engine inputs as untrusted files: generated garbage never raises anything but
SnapshotFileError, and each refusal names a line (hypothesis + regressions)."""

from __future__ import annotations

import json
import re
from datetime import UTC, datetime, timedelta

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from autoscaler.catalog import default_catalog
from autoscaler.engine import Launch, decide
from autoscaler.engine.snapshot_file import SnapshotFileError, locate_json, parse_decision_input
from autoscaler.model.snapshot import DecisionInput, OnPremNode, PendingJob, PendingShape, PoolObservation
from tests.builders import NOW, make_policy, snapshot
from tests.hostile_files import REPO, snapshot_cases

EXAMPLE = (REPO / "examples" / "snapshot.json").read_bytes()
WHERE = re.compile(r"^s\.json:\d+(:\d+)?: ")


def _refused(data: bytes) -> list[str]:
    try:
        parse_decision_input("s.json", data)
    except SnapshotFileError as exc:
        assert exc.problems and all(WHERE.match(p) for p in exc.problems), exc.problems
        return exc.problems
    return []


def test_the_example_is_accepted() -> None:
    assert _refused(EXAMPLE) == []


@pytest.mark.exhausts_stack
@pytest.mark.parametrize("case", snapshot_cases(), ids=lambda c: c.name)
def test_each_hostile_snapshot_is_refused_at_its_line(case) -> None:  # type: ignore[no-untyped-def]
    problems = _refused(case.data)
    assert problems
    if case.line is not None:
        assert problems[0].startswith(f"s.json:{case.line}:"), problems


@settings(max_examples=100, deadline=None)
@given(data=st.binary(max_size=3000))
def test_random_bytes_never_raise_anything_else(data: bytes) -> None:
    _refused(data)


@settings(max_examples=100, deadline=None)
@given(cut=st.integers(0, len(EXAMPLE)), noise=st.binary(max_size=40))
def test_a_damaged_example_never_raises_anything_else(cut: int, noise: bytes) -> None:
    _refused(EXAMPLE[:cut] + noise + EXAMPLE[cut:])


VALUES = st.recursive(st.none() | st.booleans() | st.integers(-10**20, 10**20)
                      | st.floats(allow_nan=False) | st.text(max_size=12),
                      lambda inner: st.lists(inner, max_size=3)
                      | st.dictionaries(st.text(max_size=6), inner, max_size=3), max_leaves=20)


@settings(max_examples=100, deadline=None)
@given(path=st.sampled_from([("now",), ("snapshot", "taken_at"), ("fleet", "nodes"),
                             ("snapshot", "nodes"), ("snapshot", "pools"), ("fleet", "history")]),
       value=VALUES)
def test_any_value_in_any_section_is_accepted_or_refused_cleanly(path: tuple[str, ...],
                                                                 value: object) -> None:
    doc = json.loads(EXAMPLE)
    target = doc
    for key in path[:-1]:
        target = target[key]
    target[path[-1]] = value
    _refused(json.dumps(doc).encode())


def test_locate_json_finds_nested_values() -> None:
    text = '{\n  "a": [1,\n    {"b": "x"}],\n  "c": 2\n}'
    assert locate_json(text, ["a", 1, "b"]) == (3, 11)
    assert locate_json(text, ["c"]) == (4, 8)
    assert locate_json(text, ["a", 5]) == (2, 8)  # the deepest part that exists


# -- a pending job's submit time, as the signal reader would make it -----------------------

BURST_ONLY = {"vision": make_policy(cluster={"kind": "slurm", "partition": "gpu",
                                             "on_prem": {"nodes": "gpu01", "burst_after": "30m"}})}
FULL = [OnPremNode(name="gpu01", gpus=4, allocated=4)]


def _recorded(now: datetime, submitted: datetime | None) -> DecisionInput:
    pools = {"vision/gpu": PoolObservation(
        on_prem=FULL, pending=[PendingJob(id="1", gpus=1, submitted_at=submitted)],
        pending_shapes=[PendingShape(gpus=1, ids=["2"], submitted_at=[submitted])])}
    data = DecisionInput(now=now, snapshot=snapshot({}, pools))
    return parse_decision_input("s.json", data.model_dump_json().encode())


@pytest.mark.parametrize("submitted", [None, datetime(1970, 1, 1, tzinfo=UTC), datetime(9000, 1, 1, tzinfo=UTC),
                                       datetime(2026, 11, 30, 12, 0)])
def test_a_submit_time_not_given_or_not_believed_is_the_snapshots_own(submitted: datetime | None) -> None:
    """Not "waited forever" (it burst at once past burst_after), nor never (9000): it waits
    from taken_at, the first tick the snapshot saw it, as the live reader counts; a time
    without a zone is UTC, as the reader reads it (the engine could not subtract it)."""
    def launched(now: datetime) -> int:
        data = _recorded(now, submitted)
        pool = data.snapshot.pools["vision/gpu"]
        assert [j.submitted_at for j in pool.pending] == [NOW]
        assert pool.pending_shapes[0].submitted_at == [NOW]
        plan = decide(BURST_ONLY, data.fleet, data.snapshot, data.now, catalog=default_catalog())
        return sum(a.count for a in plan.actions if isinstance(a, Launch))

    assert launched(NOW + timedelta(minutes=29)) == 0
    assert launched(NOW + timedelta(minutes=31)) > 0


def test_a_believable_submit_time_is_kept() -> None:
    data = _recorded(NOW, NOW - timedelta(minutes=40))
    assert data.snapshot.pools["vision/gpu"].pending[0].submitted_at == NOW - timedelta(minutes=40)


@pytest.mark.parametrize(("now", "taken_at", "refused"), [
    ("2026-11-30T14:00:00Z", "9999-12-31T23:59:00Z",
     "snapshot.taken_at: 9999-12-31T23:59:00+00:00 is no time a snapshot was taken at"),
    ("0001-01-01T00:00:00Z", "2026-11-30T13:59:57Z",
     "now: 0001-01-01T00:00:00+00:00 is no time a snapshot was taken at"),
    ("2027-12-01T14:00:00Z", "2026-11-30T13:59:57Z", "now: more than 365 days from snapshot.taken_at"),
    ("2025-11-30T13:59:56Z", "2026-11-30T13:59:57Z", "now: more than 365 days from snapshot.taken_at"),
    ("2027-11-30T13:59:57Z", "2026-11-30T13:59:57Z", None),  # a year to the second
])
def test_a_now_or_taken_at_no_snapshot_has_is_refused_not_a_traceback(
        now: str, taken_at: str, refused: str | None) -> None:
    """taken_at near datetime's ends used to raise OverflowError (Times(taken_at) adds
    MAX_AGE and SKEW); a now years from taken_at was a plan for a time nothing saw."""
    text = EXAMPLE.decode().replace('"now": "2026-11-30T14:00:00Z"', f'"now": "{now}"')
    text = text.replace('"taken_at": "2026-11-30T13:59:57Z"', f'"taken_at": "{taken_at}"')
    problems = _refused(text.encode())
    assert (refused in problems[0]) if refused else problems == [], problems

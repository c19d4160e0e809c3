"""Parsing Slurm's spellings of gres, host lists, node states, times, arrays and job
constraints."""

from __future__ import annotations

import math
from datetime import UTC, datetime, timedelta

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from autoscaler.schedulers.slurm.parse import (
    MAX_CONSTRAINT,
    ConstraintError,
    Gres,
    array_tasks,
    epoch,
    expand_hostlist,
    gpu_count,
    gpu_model,
    gpu_type,
    node_state,
    parse_constraint,
    parse_gres,
    time_limit,
    whole_gpu_count,
)
from tests.hostile import SPLIT, TF_DIRECTIVE, TF_FILE, jinja


@pytest.mark.parametrize(("spec", "count", "gtype"), [
    ("gpu:2", 2, None),
    ("gpu:t4:2", 2, "t4"),
    ("gres:gpu:t4:2", 2, "t4"),        # 22.05 tres_per_node
    ("gres:gpu:1", 1, None),
    ("gres/gpu:v100=4", 4, "v100"),    # 23.02+ tres_per_node
    ("gres/gpu=3", 3, None),
    ("gpu:t4:1(IDX:0)", 1, "t4"),       # gres_used / gres_detail
    ("gpu:v100:4(IDX:0-1,3)", 4, "v100"),
    ("gpu:2(S:0-1)", 2, None),          # sinfo Gres with sockets
    ("gpu:a100:2,shard:8", 2, "a100"),
    ("shard:4", 0, None),
    ("gpu", 1, None),
    ("(null)", 0, None),
    ("", 0, None),
    (None, 0, None),
])
def test_gres_strings(spec: str | None, count: float, gtype: str | None) -> None:
    assert gpu_count(spec) == count
    assert gpu_type(spec) == gtype


@pytest.mark.parametrize(("spec", "count"), [
    ("gpu:v100:4", 4), ("gpu:t4:4(S:0),shard:8", 4), ("(null)", 0), ("gpu", 1),
    ("gpu:nan", None), ("gpu:1e400", None), ("gpu:v100:inf", None), ("gpu:-4", None),
    ("gpu:1.5", None), ("gpu:v100:4,gpu:nan", None),
])
def test_whole_gpu_count_refuses_counts_that_are_no_number_of_devices(
        spec: str, count: float | None) -> None:
    assert whole_gpu_count(spec) == count


def test_parse_gres_keeps_other_resources() -> None:
    assert parse_gres("gpu:t4:2(IDX:0,1),mps:100") == [Gres("gpu", "t4", 2), Gres("mps", None, 100)]


@pytest.mark.parametrize(("slurm", "model"), [("t4", "T4"), ("v100", "V100"), ("a10g", "A10G"),
                                              ("A100", "A100"), ("l40s", "L40S"), (None, None)])
def test_gpu_model_names(slurm: str | None, model: str | None) -> None:
    assert gpu_model(slurm) == model


@pytest.mark.parametrize(("hostlist", "names"), [
    ("gpu1", ["gpu1"]),
    ("gpu[1-3]", ["gpu1", "gpu2", "gpu3"]),
    ("n[01-03,7]", ["n01", "n02", "n03", "n7"]),
    ("a[1-2],b5,c[9]", ["a1", "a2", "b5", "c9"]),
    ("vision-v100-train-[1-2]", ["vision-v100-train-1", "vision-v100-train-2"]),
    ("", []),
    ("(null)", []),
])
def test_expand_hostlist(hostlist: str, names: list[str]) -> None:
    assert expand_hostlist(hostlist) == names


@pytest.mark.parametrize(("hostlist", "names"), [
    ("vision-v100-[a-b]", []),
    ("gpu[1-3-5]", []),
    ("gpu[-5]", []),
    ("gpu[1-x]", []),
    ("gpu[1-2,a-b,5]", ["gpu1", "gpu2", "gpu5"]),  # only the malformed range is dropped
    ("gpu[x],cpu1,n[1-2]", ["cpu1", "n1", "n2"]),
    pytest.param("gpu[1-" + "9" * 5000 + "]", [], id="past int()'s digit limit"),
    pytest.param("gpu[" + "0" * 100_000 + "1-2]", [], id="zero padding as long as the input"),
    pytest.param("x" * 100_000 + "[1-65536]", [], id="a prefix as long as the input"),
])
def test_a_malformed_host_range_yields_no_names_and_spares_the_rest(
        hostlist: str, names: list[str]) -> None:
    assert expand_hostlist(hostlist) == names


def test_a_huge_host_range_is_cut_at_the_limit() -> None:
    names = expand_hostlist("gpu[1-999999999]")
    assert len(names) == 65536 and names[-1] == "gpu65536"


@pytest.mark.parametrize(("state", "flags", "expected"), [
    ("idle", [], ("idle", True, False)),
    ("mixed", [], ("mixed", True, False)),
    ("allocated", [], ("allocated", True, False)),
    ("mixed", ["DRAIN"], ("draining", True, True)),      # 22.05 sinfo --json
    ("idle", ["DRAIN"], ("drained", True, True)),
    (["MIXED", "DRAIN"], None, ("draining", True, True)),  # 23.02+
    (["IDLE", "DRAIN"], None, ("drained", True, True)),
    (["IDLE", "NOT_RESPONDING"], None, ("down", False, False)),
    ("down", [], ("down", False, False)),
    ("draining", None, ("draining", True, True)),        # sinfo %T text
    ("drained", None, ("drained", True, True)),
    ("idle*", None, ("down", False, False)),
    ("allocated+", None, ("allocated", True, False)),
    ("down~", None, ("down", False, False)),
    ("completing", None, ("mixed", True, False)),
    ("unknown", None, ("unknown", False, False)),
    ("future", None, ("down", False, False)),
])
def test_node_states(state: str | list[str], flags: list[str] | None,
                     expected: tuple[str, bool, bool]) -> None:
    assert node_state(state, flags) == expected


def test_epoch_shapes() -> None:
    at = datetime(2026, 11, 30, 12, 0, tzinfo=UTC)
    ts = int(at.timestamp())
    assert epoch(ts) == at
    assert epoch({"set": True, "infinite": False, "number": ts}) == at
    assert epoch({"set": False, "number": 0}) is None
    assert epoch(0) is None
    assert epoch("2026-11-30T12:00:00+00:00") == at
    assert epoch("N/A") is None and epoch("garbage") is None


@pytest.mark.parametrize(("text", "read"), [
    ("2026-11-30T12:00:00", datetime(2026, 11, 30, 12, tzinfo=UTC)),  # squeue runs in UTC
    ("2026-11-30T06:00:00-06:00", datetime(2026, 11, 30, 12, tzinfo=UTC)),
    ("0001-01-01T00:00:00", datetime(1, 1, 1, tzinfo=UTC)),
    ("9999-12-31T23:59:59", datetime(9999, 12, 31, 23, 59, 59, tzinfo=UTC)),
    ("0001-01-01T00:00:00+01:00", None),  # year 0 in UTC
    ("9999-12-31T23:00:00-05:00", None),  # year 10000 in UTC
])
def test_formatted_times_read_as_utc_and_past_datetimes_ends_as_none(
        text: str, read: datetime | None) -> None:
    """Never in this process's zone; never an error out of the reader."""
    assert epoch(text) == read
    assert read is None or epoch(text).tzinfo is UTC  # type: ignore[union-attr]



@pytest.mark.parametrize("value", [1e20, 2**63, {"set": True, "number": 10**30}, True, math.nan])
def test_an_epoch_no_clock_can_hold_is_no_time(value: object) -> None:
    """A reason time or submit time past year 9999 (a broken or hostile slurmrestd) reads
    as unknown: the engine then waits instead of counting a grace from it."""
    assert epoch(value) is None


def test_array_tasks() -> None:
    assert array_tasks("1-3") == ["1", "2", "3"]
    assert array_tasks("1,4-5%2") == ["1", "4", "5"]
    assert array_tasks("0-10:5") == ["0", "5", "10"]
    assert len(array_tasks("1-100000")) == 1000
    assert array_tasks("") == []


@pytest.mark.parametrize(("spec", "tasks"), [
    ("1-5:0", []),  # step 0: range() would raise
    ("1-x", []),
    ("1-5:x", []),
    ("-5", []),
    ("1-3-5", []),
    pytest.param("1-" + "9" * 5000, [], id="past int()'s digit limit"),
    ("1-2,4-6:0,8", ["1", "2", "8"]),  # only the malformed range is dropped
    pytest.param("0-999999999:2", [str(i) for i in range(0, 2000, 2)], id="cut at the limit"),
])
def test_a_malformed_array_range_has_no_tasks_and_spares_the_rest(
        spec: str, tasks: list[str]) -> None:
    assert array_tasks(spec) == tasks


@pytest.mark.parametrize(("value", "want"), [
    (90, timedelta(minutes=90)),  # 22.05 JSON: minutes
    (0xFFFFFFFF, None), (0xFFFFFFFE, None), (0, None),  # INFINITE, NO_VAL, none
    ({"set": True, "infinite": False, "number": 30}, timedelta(minutes=30)),  # 23.02+
    ({"set": True, "infinite": True, "number": 0}, None), ({"set": False, "number": 5}, None),
    ("1-02:03:04", timedelta(days=1, hours=2, minutes=3, seconds=4)),  # squeue %l
    ("2:00:00", timedelta(hours=2)), ("30:00", timedelta(minutes=30)), ("45", timedelta(minutes=45)),
    ("UNLIMITED", None), ("NOT_SET", None), ("INVALID", None), ("", None), (None, None),
    ("1:2:3:4", None), (True, None),
])
def test_time_limit(value: object, want: timedelta | None) -> None:
    assert time_limit(value) == want


NODE = frozenset({"team-vision", "pool-v100", "partition-gpu", "p3.2xlarge", "v100", "spot",
                  "us-east-1a"})


@pytest.mark.parametrize(("text", "admitted"), [
    ("v100", True), ("t4", False),
    ("v100&spot", True), ("v100,spot", True), ("v100,on-demand", False),  # ',' is AND (sbatch stores '&')
    ("t4|v100", True), ("t4|a100", False),
    ("[t4|v100]", True), ("[us-east-1b|us-east-1c]", False),  # matching OR: one node's view
    ("v100*2", True), ("(t4|v100)*1&spot", True), ("[(t4|v100)*1&p3.2xlarge*2]", True),
    ("t4|v100&on-demand", False),  # left to right, as slurmctld: (t4|v100)&on-demand
    ("v100&on-demand|spot", True),  # (v100&on-demand)|spot
    ("v100|(t4&on-demand)", True), ("team-vision&pool-v100&partition-gpu", True),
])
def test_constraints_as_slurmctld_reads_them(text: str, admitted: bool) -> None:
    constraint = parse_constraint(text)
    assert constraint is not None and constraint.admits(NODE) is admitted


def test_no_constraint_and_the_names_a_constraint_uses() -> None:
    assert parse_constraint(None) is None and parse_constraint("(null)") is None
    assert parse_constraint("") is None
    constraint = parse_constraint("[(t4|v100)*1&spot*2]")
    assert constraint is not None and constraint.names() == {"t4", "v100", "spot"}


@pytest.mark.parametrize("text", [
    "a&", "&a", "a||b", "a b", "!a", "(a", "a)", "[a|b)", "a*", "*2", "a*x", "()", "a(b)",
    "((((((a))))))", "x" * 65, "a" * (MAX_CONSTRAINT + 1), "a\nb", "a;b", "a\x00",
    jinja("constraint"), TF_FILE, TF_DIRECTIVE, SPLIT, "$(reboot)", "a`id`", "\u202ea",
])
def test_what_is_not_slurms_syntax_is_refused_without_quoting_it(text: str) -> None:
    with pytest.raises(ConstraintError) as err:
        parse_constraint(text)
    assert text not in str(err.value)


@settings(max_examples=300, deadline=None)
@given(st.text(alphabet="ab.-_&|,()[]*0123456789 !x", max_size=60) | st.text(max_size=60))
def test_any_text_is_a_constraint_or_a_constraint_error(text: str) -> None:
    try:
        constraint = parse_constraint(text)
    except ConstraintError:
        return
    if constraint is not None:
        constraint.admits(frozenset({"a", "b"}))
        assert all(len(name) <= 64 for name in constraint.names())

"""Slurm demand: squeue/sinfo JSON (22.05 and 23.02+ shapes), formatted fallback, pool
attribution by partition and GPU model, failures; and a real Slurm cluster."""

from __future__ import annotations

import json
import os
import shutil
import time
from collections.abc import Iterator, Mapping, Sequence
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

import pytest

from autoscaler.catalog import default_catalog
from autoscaler.sandbox.hosts.procs import wait_until
from autoscaler.sandbox.services.slurm import SlurmCluster, SlurmNodeSpec
from autoscaler.schedulers.slurm.client import SlurmCommandError, SlurmConfig
from autoscaler.signals import slurm as slurm_module
from autoscaler.signals.readings import ClusterPool, pools_in_priority_order
from autoscaler.signals.slurm import SQUEUE_FORMAT, SQUEUE_STATES, SlurmReader, jobs_from_json, jobs_from_text
from tests.builders import make_policy

T0 = 1_795_000_000
AT = datetime.fromtimestamp(T0, UTC)


def pool(name: str, types: list[str], partition: str) -> dict[str, Any]:
    return {"name": name, "cloud": "aws", "region": "us-east-1", "instance_types": types,
            "max_nodes": 4, "cluster": {"kind": "slurm", "partition": partition}}


POLICIES = {
    "vision": make_policy("vision", priority="high", pools=[
        pool("v100", ["p3.2xlarge", "p3.8xlarge"], "gpu")]),
    "search": make_policy("search", priority="medium", pools=[
        pool("t4", ["g4dn.xlarge"], "gpu"), pool("batch", ["g4dn.12xlarge"], "batch")]),
}


def refs() -> list[ClusterPool]:
    return pools_in_priority_order(POLICIES, default_catalog(), "slurm")


class FakeRunner:
    """Answers commands from a table; an Exception value is raised."""

    def __init__(self, answers: Mapping[str, str | Exception]):
        self.answers = answers
        self.calls: list[list[str]] = []

    def __call__(self, argv: Sequence[str], timeout: float, env: Mapping[str, str]) -> str:
        self.calls.append(list(argv))
        i = next(i for i, a in enumerate(argv) if Path(a).name in ("squeue", "sinfo"))
        name, rest = Path(argv[i]).name, argv[i + 1:]
        if name == "sinfo":  # hidden partitions' nodes are fleet nodes too
            assert rest[0] == "--all", argv
            rest = rest[1:]
        key = f"{name} {rest[0]}"
        answer = self.answers[key]
        if isinstance(answer, Exception):
            raise answer
        return answer


def job_2205(jid: int, state: str, tres: str, partition: str = "gpu", nodes: str = "",
             reason: str = "None", detail: list[str] | None = None, **kw: Any) -> dict[str, Any]:
    return {"job_id": jid, "job_state": state, "state_reason": reason, "partition": partition,
            "nodes": nodes, "node_count": 1, "tres_per_node": tres, "tres_per_job": "",
            "tres_per_task": "", "gres_detail": detail or [], "submit_time": T0,
            "start_time": T0 + 60 if state == "RUNNING" else 0, "name": f"job{jid}",
            "array_task_id": None, "array_task_string": "", **kw}


SQUEUE_2205 = {"jobs": [
    job_2205(1, "RUNNING", "gres:gpu:1", nodes="gpu1", detail=["gpu:v100:1(IDX:0)"],
             time_limit=90),
    job_2205(2, "PENDING", "gres:gpu:v100:2", reason="Resources"),
    job_2205(3, "PENDING", "gres:gpu:t4:1", reason="Priority"),
    job_2205(4, "PENDING", "gres:gpu:2", reason="JobHeldUser"),
    job_2205(5, "PENDING", "gres:gpu:4", partition="batch", reason="Resources",
             array_task_string="1-2", array_job_id=5),
    job_2205(6, "PENDING", "", reason="Resources"),  # a CPU-only job: no GPU demand
    job_2205(7, "PENDING", "gres:gpu:1", partition="cpu-only", reason="Resources"),
    job_2205(8, "RUNNING", "gres:gpu:1", nodes="gpu[1-2]", detail=["gpu:v100:1(IDX:1)",
                                                                     "gpu:v100:1(IDX:0)"]),
    job_2205(9, "COMPLETED", "gres:gpu:1", nodes="gpu2"),
]}
SINFO_2205 = {"nodes": [
    {"name": "gpu1", "state": "mixed", "state_flags": ["DRAIN"], "gres": "gpu:v100:2",
     "gres_used": "gpu:v100:2(IDX:0-1)"},
    {"name": "gpu2", "state": "mixed", "state_flags": [], "gres": "gpu:v100:2",
     "gres_used": "gpu:v100:1(IDX:0)"},
    {"name": "gpu3", "state": "idle", "state_flags": ["NOT_RESPONDING"], "gres": "gpu:v100:2",
     "gres_used": "gpu:v100:0(IDX:N/A)"},
]}


def json_runner(squeue: dict[str, Any], sinfo: dict[str, Any]) -> FakeRunner:
    return FakeRunner({"squeue --json": json.dumps(squeue), "sinfo --json": json.dumps(sinfo)})


def test_json_2205_demand_running_jobs_and_node_states() -> None:
    reading = SlurmReader(SlurmConfig(), json_runner(SQUEUE_2205, SINFO_2205)).read(refs())
    assert reading.error is None and reading.source == "squeue/sinfo --json"
    pending = {k: [(j.id, j.gpus, j.gpu_model, j.reason) for j in v]
               for k, v in reading.pending.items()}
    assert pending == {
        "vision/v100": [("2", 2, "V100", "Resources"), ("4", 2, None, "JobHeldUser")],
        "search/t4": [("3", 1, "T4", "Priority")],  # first pool on "gpu" whose model fits
        "search/batch": [("5_1", 4, None, "Resources"), ("5_2", 4, None, "Resources")],
    }
    assert reading.pending["vision/v100"][0].submitted_at == AT
    assert [j.id for j in reading.unattributed] == ["7"]
    gpu1 = reading.nodes["gpu1"]
    assert (gpu1.state, gpu1.cordoned, gpu1.ready) == ("draining", True, True)
    assert (gpu1.gpus_total, gpu1.gpus_allocated) == (2, 2)
    assert [(j.id, j.gpus, j.started_at) for j in gpu1.jobs] == [
        ("1", 1, datetime.fromtimestamp(T0 + 60, UTC)), ("8", 1, datetime.fromtimestamp(T0 + 60, UTC))]
    assert [j.ends_at for j in gpu1.jobs] == [datetime.fromtimestamp(T0 + 60 + 90 * 60, UTC), None]
    assert [j.id for j in reading.nodes["gpu2"].jobs] == ["8"]
    assert (reading.nodes["gpu3"].state, reading.nodes["gpu3"].ready) == ("down", False)


def test_json_2302_shapes() -> None:
    number = {"set": True, "infinite": False, "number": T0}
    squeue = {"jobs": [
        {"job_id": 11, "job_state": ["PENDING"], "state_reason": "Resources", "partition": "gpu",
         "nodes": "", "node_count": {"set": True, "number": 2}, "tres_per_node": "gres/gpu:v100=4",
         "submit_time": number, "start_time": {"set": False, "number": 0},
         "array_task_id": {"set": False, "number": 0}, "name": "big"},
        {"job_id": 12, "job_state": ["PENDING"], "state_reason": "Resources", "partition": "gpu",
         "tres_per_job": "gres/gpu=6", "node_count": {"set": True, "number": 3},
         "submit_time": number, "array_task_id": {"set": True, "number": 4},
         "array_job_id": {"set": True, "number": 10}},
    ]}
    sinfo = {"nodes": [{"name": "gpu1", "state": ["IDLE", "DRAIN"], "gres": "gpu:v100:4",
                        "gres_used": "gpu:v100:0(IDX:N/A)"}]}
    reading = SlurmReader(SlurmConfig(), json_runner(squeue, sinfo)).read(refs())
    jobs = [(j.id, j.gpus, j.nodes, j.gpu_model) for j in reading.pending["vision/v100"]]
    assert jobs == [("11", 4, 2, "V100"), ("10_4", 2, 3, None)]
    assert reading.pending["vision/v100"][0].submitted_at == AT
    assert reading.nodes["gpu1"].state == "drained"


SQUEUE_TEXT = """\
2|gpu|PENDING|Resources|gres:gpu:v100:2|1|2026-11-30T12:00:00|N/A||1-00:00:00|cv|normal|alice|(null) train|x
5_[1-3]|batch|PENDING|Resources|gres:gpu:4|1|2026-11-30T12:00:00|N/A||UNLIMITED|(null)|(null)|bob|g4dn.12xlarge|spot sweep
1|gpu|RUNNING|None|gres:gpu:1|1|2026-11-30T12:00:00|2026-11-30T12:01:00|gpu1|2:00:00|cv|(null)|alice|(null) run
"""
SINFO_TEXT = """\
gpu1|draining|gpu:v100:2|gpu:v100:1(IDX:0)|gpu*
gpu1|draining|gpu:v100:2|gpu:v100:1(IDX:0)|batch
gpu2|idle|gpu:v100:2|gpu:v100:0(IDX:N/A)|gpu*
"""


@pytest.fixture
def west_of_utc() -> Iterator[None]:
    """This process 6 h west of UTC, as a controller host may be: no Slurm time may be read
    in its zone."""
    before = os.environ.get("TZ")
    os.environ["TZ"] = "XST+6"
    time.tzset()
    try:
        yield
    finally:
        if before is None:
            os.environ.pop("TZ", None)
        else:
            os.environ["TZ"] = before
        time.tzset()


PINNED = ["env", "TZ=UTC", "SLURM_TIME_FORMAT=standard"]


@pytest.mark.usefixtures("west_of_utc")
def test_falls_back_to_formatted_output_when_json_fails() -> None:
    runner = FakeRunner({
        "squeue --json": SlurmCommandError("squeue --json failed (1): unrecognized option"),
        "squeue -h": SQUEUE_TEXT, "sinfo -h": SINFO_TEXT,
    })
    reading = SlurmReader(SlurmConfig(), runner).read(refs())
    assert reading.error is None and reading.source == "squeue/sinfo formatted"
    assert [(j.id, j.gpus, j.gpu_model) for j in reading.pending["vision/v100"]] == [("2", 2, "V100")]
    assert [j.id for j in reading.pending["search/batch"]] == ["5_1", "5_2", "5_3"]
    assert runner.calls[1][-1] == "%i|%P|%T|%r|%b|%D|%V|%S|%N|%l|%a|%q|%u|%f %j"
    # squeue prints its times in the zone (and SLURM_TIME_FORMAT) of where it runs: UTC there.
    assert runner.calls[1:] == [
        [*PINNED, "squeue", "-h", "-t", SQUEUE_STATES, "-o", SQUEUE_FORMAT],
        [*PINNED, "sinfo", "--all", "-h", "-N", "-O", slurm_module.SINFO_FIELDS]]
    # The constraint may hold the separator; a space ends it, and the name may hold anything.
    jobs = jobs_from_text(SQUEUE_TEXT)
    assert [j.name for j in jobs] == ["train|x", "sweep", "run"]
    said = [(j.submission.account, j.submission.qos, j.submission.user, str(j.submission.constraint))
            for j in jobs]
    assert said[:2] == [("cv", "normal", "alice", "None"), (None, None, "bob", "g4dn.12xlarge|spot")]
    assert reading.pending["vision/v100"][0].submitted_at == datetime(2026, 11, 30, 12, tzinfo=UTC)
    gpu1 = reading.nodes["gpu1"]
    assert (gpu1.state, gpu1.gpus_allocated, [j.name for j in gpu1.jobs]) == ("draining", 1, ["run"])
    assert reading.nodes["gpu2"].state == "idle"
    # Slurm ends it at start + time limit: the return-to-spot guard reads this.
    assert gpu1.jobs[0].started_at == datetime(2026, 11, 30, 12, 1, tzinfo=UTC)
    assert gpu1.jobs[0].ends_at == datetime(2026, 11, 30, 14, 1, tzinfo=UTC)


def test_unreadable_json_also_falls_back() -> None:
    runner = FakeRunner({"squeue --json": "{not json", "sinfo --json": "{}",
                         "squeue -h": SQUEUE_TEXT, "sinfo -h": SINFO_TEXT})
    assert SlurmReader(SlurmConfig(), runner).read(refs()).source == "squeue/sinfo formatted"


def squeue_line(jid: str, state: str = "PENDING", nodes: str = "") -> str:
    return (f"{jid}|gpu|{state}|Resources|gres:gpu:v100:2|1|2026-11-30T12:00:00|N/A|{nodes}|"
            "1:00:00|cv|normal|alice|(null) odd\n")


@pytest.mark.parametrize(("line", "pending", "on_gpu1"), [
    (squeue_line("42_[1-5:0]"), ["2", "42"], ["run"]),  # no tasks read: the job counts once
    (squeue_line("42_[1-x]"), ["2", "42"], ["run"]),
    (squeue_line("42_[1-2,4-5:0]"), ["2", "42_1", "42_2"], ["run"]),
    (squeue_line("7", "RUNNING", "vision-v100-[a-b]"), ["2"], ["run"]),  # on no node
    (squeue_line("7", "RUNNING", "gpu[1-3-5]"), ["2"], ["run"]),
    (squeue_line("7", "RUNNING", "gpu[-5]"), ["2"], ["run"]),
    (squeue_line("7", "RUNNING", "gpu[x,1]"), ["2"], ["run", "odd"]),
], ids=["42_[1-5:0]", "42_[1-x]", "42_[1-2,4-5:0]", "vision-v100-[a-b]", "gpu[1-3-5]", "gpu[-5]",
        "gpu[x,1]"])
def test_a_malformed_range_in_formatted_output_costs_only_its_own_job(
        line: str, pending: list[str], on_gpu1: list[str]) -> None:
    """One odd line used to raise ValueError and lose the source for every pool."""
    runner = FakeRunner({"squeue -h": SQUEUE_TEXT + line, "sinfo -h": SINFO_TEXT})
    reading = SlurmReader(SlurmConfig(use_json=False), runner).read(refs())
    assert reading.error is None and reading.source == "squeue/sinfo formatted"
    assert [j.id for j in reading.pending["vision/v100"]] == pending
    assert [j.name for j in reading.nodes["gpu1"].jobs] == on_gpu1


@pytest.mark.usefixtures("west_of_utc")
@pytest.mark.parametrize(("when", "read"), [
    ("0001-01-01T00:00:00+01:00", None),  # year 0 in UTC
    ("9999-12-31T23:00:00-05:00", None),  # year 10000 in UTC
    ("0001-01-01T00:00:00", datetime(1, 1, 1, tzinfo=UTC)),  # UTC: model/bounds.Times drops it
    ("9999-12-31T23:59:59", datetime(9999, 12, 31, 23, 59, 59, tzinfo=UTC)),
])
def test_a_formatted_time_at_datetimes_ends_costs_only_that_time(
        when: str, read: datetime | None) -> None:
    """One such submit time used to raise out of the reader: Slurm missing for every pool."""
    line = squeue_line("42").replace("2026-11-30T12:00:00", when)
    runner = FakeRunner({"squeue -h": SQUEUE_TEXT + line, "sinfo -h": SINFO_TEXT})
    reading = SlurmReader(SlurmConfig(use_json=False), runner).read(refs())
    assert reading.error is None and reading.source == "squeue/sinfo formatted"
    assert [(j.id, j.submitted_at) for j in reading.pending["vision/v100"]] == [
        ("2", datetime(2026, 11, 30, 12, tzinfo=UTC)), ("42", read)]


@pytest.mark.exhausts_stack
@pytest.mark.parametrize("answer", [
    "[1,2]",
    '{"jobs": ["x"]}',
    '{"jobs": 5}',
    pytest.param("[" * 100_000 + "]" * 100_000, id="nested past the parser's depth"),
])
def test_json_of_the_wrong_shape_falls_back_to_formatted_output(answer: str) -> None:
    runner = FakeRunner({"squeue --json": answer, "sinfo --json": "{}",
                         "squeue -h": SQUEUE_TEXT, "sinfo -h": SINFO_TEXT})
    reading = SlurmReader(SlurmConfig(), runner).read(refs())
    assert reading.error is None and reading.source == "squeue/sinfo formatted"
    assert [j.id for j in reading.pending["vision/v100"]] == ["2"]


@pytest.mark.parametrize(("field", "value", "pending", "running", "allocated"), [
    ("nodes", 5, ["2_1", "2_2"], [], 0),  # no node runs it
    ("nodes", ["gpu1"], ["2_1", "2_2"], [], 0),
    ("tres_per_node", 5, [], ["1"], 1),  # no GPUs asked: no demand; gres_detail still counts
    ("tres_per_node", {"gpu": 2}, [], ["1"], 1),
    ("gres_detail", 5, ["2_1", "2_2"], ["1"], 1),  # the request's GPUs instead
    ("gres_detail", [5], ["2_1", "2_2"], ["1"], 0),  # an entry of no gres
    ("array_task_string", 5, ["2"], ["1"], 1),  # no tasks read: the job counts once
    ("array_task_string", ["1-2"], ["2"], ["1"], 1),
])
def test_json_fields_that_are_not_text_are_absent(field: str, value: object, pending: list[str],
                                                  running: list[str], allocated: float) -> None:
    jobs = [job_2205(1, "RUNNING", "gres:gpu:1", nodes="gpu1", detail=["gpu:v100:1(IDX:0)"]),
            job_2205(2, "PENDING", "gres:gpu:v100:2", reason="Resources", array_job_id=2)]
    jobs[1]["array_task_string"] = "1-2"
    for job in jobs:
        job[field] = value
    sinfo = {"nodes": [{"name": "gpu1", "state": "mixed", "gres": 5, "gres_used": 7},
                       {"name": "gpu2", "state": "idle", "gres": "gpu:v100:2", "gres_used": None}]}
    reading = SlurmReader(SlurmConfig(), json_runner({"jobs": jobs}, sinfo)).read(refs())
    assert reading.error is None and reading.source == "squeue/sinfo --json"
    assert [(j.id, j.gpus) for j in reading.pending["vision/v100"]] == [(i, 2) for i in pending]
    gpu1 = reading.nodes["gpu1"]
    assert [j.id for j in gpu1.jobs] == running
    assert (gpu1.gpus_total, gpu1.gpus_allocated) == (0, allocated)  # its gres: 5, used: 7
    assert reading.nodes["gpu2"].gpus_total == 2


@pytest.mark.parametrize("use_json", [True, False], ids=["json", "formatted"])
def test_a_reading_that_names_too_many_hosts_in_all_is_refused_not_cut_short(
        monkeypatch: pytest.MonkeyPatch, use_json: bool) -> None:
    """Each host list is capped, but many jobs each naming gpu[1-65535] are not one list:
    past the reading's cap the source is missing (scale-down frozen), rather than running
    jobs read without their nodes, which would look free."""
    monkeypatch.setattr(slurm_module, "MAX_READING_NAMES", 1000)
    jobs = [job_2205(i, "RUNNING", "gres:gpu:1", nodes="gpu[1-400]") for i in range(1, 4)]
    lines = "".join(squeue_line(str(i), "RUNNING", "gpu[1-400]") for i in range(1, 4))
    runner = FakeRunner({"squeue --json": json.dumps({"jobs": jobs}), "sinfo --json": "{}",
                         "squeue -h": lines, "sinfo -h": SINFO_TEXT})
    reading = SlurmReader(SlurmConfig(use_json=use_json), runner).read(refs())
    assert reading.error == ("slurm: squeue's node lists and job arrays name more than 1,000 "
                             "hosts and tasks")
    # Refused at the first listing: no formatted retry of the same hosts, no sinfo
    assert [Path(a).name for c in runner.calls for a in c
            if Path(a).name in ("squeue", "sinfo")] == ["squeue"]
    # Two such jobs (800 names) are a reading like any other.
    runner = FakeRunner({"squeue --json": json.dumps({"jobs": jobs[:2]}),
                         "sinfo --json": json.dumps(SINFO_2205),
                         "squeue -h": "".join(lines.splitlines(keepends=True)[:2]),
                         "sinfo -h": SINFO_TEXT})
    reading = SlurmReader(SlurmConfig(use_json=use_json), runner).read(refs())
    assert reading.error is None
    assert [j.id for j in reading.nodes["gpu1"].jobs] == ["1", "2"]


def test_timeout_makes_the_source_missing_without_fallback() -> None:
    runner = FakeRunner({"squeue --json": SlurmCommandError("squeue --json timed out after 10s")})
    reading = SlurmReader(SlurmConfig(), runner).read(refs())
    assert reading.error == "slurm: squeue --json timed out after 10s"
    assert len(runner.calls) == 1


def test_both_formats_failing_reports_both() -> None:
    runner = FakeRunner({"squeue --json": SlurmCommandError("squeue --json failed (1): x"),
                         "squeue -h": SlurmCommandError("squeue -h failed (1): slurmctld down")})
    reading = SlurmReader(SlurmConfig(), runner).read(refs())
    assert reading.error == ("slurm: squeue -h failed (1): slurmctld down "
                             "(after --json: squeue --json failed (1): x)")


def test_command_prefix_bin_dir_and_env() -> None:
    runner = json_runner({"jobs": []}, {"nodes": []})
    cfg = SlurmConfig(bin_dir=Path("/opt/slurm/bin"), command_prefix=["ssh", "login"],
                      env={"SLURM_CONF": "/etc/slurm/x.conf"})
    SlurmReader(cfg, runner).read(refs())
    assert runner.calls[0] == ["ssh", "login", "/opt/slurm/bin/squeue", "--json"]
    # Formatted output: its times pinned to UTC on the login node, so after the prefix.
    runner = FakeRunner({"squeue -h": "", "sinfo -h": ""})
    SlurmReader(cfg.model_copy(update={"use_json": False}), runner).read(refs())
    assert [c[:6] for c in runner.calls] == [["ssh", "login", *PINNED, "/opt/slurm/bin/squeue"],
                                             ["ssh", "login", *PINNED, "/opt/slurm/bin/sinfo"]]


def test_missing_binary_is_an_error() -> None:
    cfg = SlurmConfig(bin_dir=Path("/nonexistent"))
    reading = SlurmReader(cfg).read(refs())
    assert reading.error == "slurm: /nonexistent/squeue not found"


# ------------------------------------------------------------ real Slurm


@pytest.fixture(scope="module")
def slurm(tmp_path_factory: pytest.TempPathFactory) -> Iterator[SlurmCluster]:
    if shutil.which("slurmctld") is None:
        pytest.skip("slurmctld not installed")
    nodes = [SlurmNodeSpec("gpu1", gpus=2, gpu_type="v100"),
             SlurmNodeSpec("gpu2", gpus=2, gpu_type="v100")]
    with SlurmCluster(tmp_path_factory.mktemp("slurm-signals"), nodes) as cluster:
        yield cluster


@pytest.mark.slow
@pytest.mark.usefixtures("west_of_utc")  # squeue's zone, formatted output's unless pinned
@pytest.mark.parametrize("use_json", [True, False])
def test_real_slurm_one_running_one_pending(slurm: SlurmCluster, use_json: bool) -> None:
    running = slurm.submit("sleep 600", gpus=2, gpu_type="v100", nodelist="gpu1", name="train",
                           extra=["--time=1:30:00"])
    blocker = slurm.submit("sleep 600", gpus=2, nodelist="gpu2", name="other")
    pending = slurm.submit("sleep 600", gpus=2, gpu_type="v100", name="waiting")
    try:
        slurm.wait_job_state(running, {"RUNNING"}, timeout=60)
        slurm.wait_job_state(blocker, {"RUNNING"}, timeout=60)
        reader = SlurmReader(SlurmConfig(env=slurm.env(), use_json=use_json))
        # A job has reason "None" until slurmctld's first scheduling pass looks at it.
        wait_until(lambda: reader.read(refs()).pending["vision/v100"][0].reason != "None",
                   timeout=30, what="slurmctld to give the pending job a reason")
        reading = reader.read(refs())
        assert reading.error is None
        demand = reading.pending["vision/v100"]
        assert [(j.id, j.gpus, j.nodes, j.gpu_model) for j in demand] == [(pending, 2, 1, "V100")]
        assert demand[0].reason in ("Resources", "Priority")
        gpu1 = reading.nodes["gpu1"]
        assert [(j.id, j.gpus, j.name) for j in gpu1.jobs] == [(running, 2, "train")]
        started = gpu1.jobs[0].started_at
        assert started is not None and gpu1.jobs[0].ends_at == started + timedelta(minutes=90)
        assert abs(datetime.now(UTC) - started) < timedelta(minutes=2)
        # Slurm's state counts CPUs (1 of 2 used): "mixed", while every GPU is allocated.
        assert (gpu1.state, gpu1.gpus_total, gpu1.gpus_allocated) == ("mixed", 2, 2)
    finally:
        slurm.run(["scancel", running, blocker, pending])


@pytest.mark.slow
def test_real_slurm_down_is_missing(tmp_path: Path) -> None:
    cfg = SlurmConfig(env={"SLURM_CONF": str(tmp_path / "missing.conf")}, timeout="3s")
    reading = SlurmReader(cfg).read(refs())
    assert reading.error is not None and reading.error.startswith("slurm: ")


def test_impossible_gres_counts_are_refused_before_the_snapshot() -> None:
    """gres counts Slurm reports are checked against the node's type like any scheduler's
    (model/bounds.py, in SignalReader): the node's view is missing with the reason, a
    pending job no pool node could hold is unserved, and decide() works on the rest."""
    from autoscaler.engine import decide
    from autoscaler.model.snapshot_parts import assemble
    from autoscaler.signals.config import SignalsConfig
    from autoscaler.signals.reader import SignalReader
    from tests.builders import NOW, fleet, make_node

    names = {"vision-v100-1": "gpu:v100:1e9", "vision-v100-2": "gpu:nan", "vision-v100-3": "gpu:-1",
             "vision-v100-4": "gpu:v100:inf", "vision-v100-5": "gpu:v100:1"}
    sinfo = {"nodes": [{"name": n, "state": "idle", "state_flags": [], "gres": g, "gres_used": None}
                       for n, g in names.items()]}
    squeue = {"jobs": [
        job_2205(1, "PENDING", "gres:gpu:inf", reason="Resources"),
        job_2205(2, "PENDING", "gres:gpu:1", reason="Resources", node_count=10**9),
        job_2205(3, "PENDING", "gres:gpu:1", reason="Resources"),
        job_2205(4, "RUNNING", "gres:gpu:1", nodes="vision-v100-[1-1000000000]"),
    ]}
    nodes = [make_node(n, "vision", "v100") for n in names]  # p3.2xlarge: 1 GPU
    reader = SignalReader(SignalsConfig(scheduler=["slurm"]), default_catalog(),
                          slurm=SlurmReader(SlurmConfig(), json_runner(squeue, sinfo)))
    observed = reader.read(POLICIES, nodes, NOW)
    assert "slurm" not in observed.missing
    why = {n: observed.nodes[n].scheduler_missing for n in names}
    assert why == {
        "vision-v100-1": "the scheduler reports GPUs=1e+09; p3.2xlarge has 1 GPU(s)",
        "vision-v100-2": "the scheduler reports GPUs=nan (not a number); p3.2xlarge has 1 GPU(s)",
        "vision-v100-3": "the scheduler reports GPUs=-1; p3.2xlarge has 1 GPU(s)",
        "vision-v100-4": "the scheduler reports GPUs=inf; p3.2xlarge has 1 GPU(s)",
        "vision-v100-5": None}
    assert [j.id for j in observed.pools["vision/v100"].pending] == ["3"]
    assert {j.id: j.constraint for j in observed.unserved} == {
        "1": "asks inf GPUs per node: not a number of GPUs",
        "2": "asks 1000000000 nodes; the pool has at most 4 (max_nodes)"}
    plan = decide(POLICIES, fleet(*nodes), assemble(observed), NOW, catalog=default_catalog())
    assert all(s.error is None for s in plan.pools.values())


def test_json_unusable_nodes_carry_slurms_words_and_reason_time() -> None:
    """``scontrol show node``'s Reason=... [user@time] as the JSON gives it: the engine
    counts its grace from that time. NOT_RESPONDING alone has no time yet."""
    changed = {"set": True, "infinite": False, "number": T0}
    sinfo = {"nodes": [
        {"name": "gpu1", "state": ["DOWN", "NOT_RESPONDING"], "gres": "gpu:v100:2",
         "reason": "Not responding", "reason_set_by_user": "slurm", "reason_changed_at": changed},
        {"name": "gpu2", "state": ["IDLE", "DRAIN"], "gres": "gpu:v100:2",
         "reason": "rma ticket 42", "reason_set_by_user": "alice", "reason_changed_at": T0},
        {"name": "gpu3", "state": "idle", "state_flags": ["NOT_RESPONDING"], "gres": "gpu:v100:2"},
        {"name": "gpu4", "state": ["DOWN"], "gres": "gpu:v100:2", "reason": "x" * 1000,
         "reason_changed_at": "not a time"},
        {"name": "gpu5", "state": ["IDLE"], "gres": "gpu:v100:2", "reason": "stale text"},
    ]}
    nodes = SlurmReader(SlurmConfig(), json_runner({"jobs": []}, sinfo)).read(refs()).nodes
    said = {n: (s.unusable, s.unusable_since) for n, s in nodes.items()}
    assert said["gpu1"] == ("NOT_RESPONDING by slurm: Not responding", AT)
    assert said["gpu2"] == ("DRAIN by alice: rma ticket 42", AT)
    assert said["gpu3"] == ("NOT_RESPONDING", None)
    assert said["gpu4"][0] is not None and len(said["gpu4"][0]) <= 300 and said["gpu4"][1] is None
    assert said["gpu5"] == (None, None)  # usable: an old reason means nothing


@pytest.mark.slow
def test_real_slurm_a_drain_by_someone_else_reads_with_who_and_since(slurm: SlurmCluster) -> None:
    before = datetime.now(UTC).replace(microsecond=0)
    slurm.drain("gpu2", reason="rma-ticket-42")
    try:
        reader = SlurmReader(SlurmConfig(env=slurm.env()))
        wait_until(lambda: reader.read(refs()).nodes["gpu2"].unusable is not None, timeout=30,
                   what="slurmctld to show the drain")
        gpu2 = reader.read(refs()).nodes["gpu2"]
        assert gpu2.unusable is not None and gpu2.unusable.startswith("DRAIN by ")
        assert gpu2.unusable.endswith(": rma-ticket-42")
        assert gpu2.unusable_since is not None
        assert before - timedelta(seconds=2) <= gpu2.unusable_since <= datetime.now(UTC)
    finally:
        slurm.resume("gpu2")


SHARED = {  # two teams on one partition, split by account
    "vision": make_policy("vision", priority="high", pools=[
        {**pool("v100", ["p3.2xlarge"], "gpu"), "capacity": {"on_demand_base": 0, "spot_percent": 0},
         "cluster": {"kind": "slurm", "partition": "gpu", "accounts": ["cv"]}}]),
    "nlp": make_policy("nlp", priority="medium", pools=[
        {**pool("v100", ["p3.8xlarge"], "gpu"), "capacity": {"on_demand_base": 0, "spot_percent": 0},
         "cluster": {"kind": "slurm", "partition": "gpu", "accounts": ["nlp"]}}]),
}


@pytest.mark.slow
@pytest.mark.parametrize("use_json", [True, False])
def test_real_slurm_jobs_go_to_their_accounts_team(slurm: SlurmCluster, use_json: bool) -> None:
    """accounting_storage/none takes any --account: each team's jobs are its own pool's
    demand and launch there; an account no pool lists is unserved, with why, and bought
    nothing; so is a job whose constraint its team's nodes never satisfy. Both squeue
    formats carry the account and the constraint (with its '|', before a name with one)."""
    from autoscaler.engine import decide
    from autoscaler.model.snapshot_parts import assemble
    from autoscaler.signals.config import SignalsConfig
    from autoscaler.signals.reader import SignalReader
    from tests.builders import NOW, fleet

    features = ["scontrol", "update", "nodename=gpu1"]  # sbatch refuses a feature no node has
    slurm.run([*features, "availablefeatures=p3.2xlarge,spot", "activefeatures=p3.2xlarge,spot"], check=True)
    blockers = [slurm.submit("sleep 600", gpus=2, nodelist=n, name="blocker") for n in ("gpu1", "gpu2")]
    waiting = {account: slurm.submit("sleep 600", gpus=1, gpu_type="v100", name=account,
                                     extra=[f"--account={account}"]) for account in ("cv", "nlp", "physics")}
    waiting["cv-typed"] = slurm.submit("sleep 600", gpus=1, name="typed",
                                       extra=["--account=cv", "--constraint=p3.2xlarge"])
    waiting["nlp-spot"] = slurm.submit("sleep 600", gpus=1, name="odd name|x",
                                       extra=["--account=nlp", "--constraint=p3.2xlarge|spot"])
    try:
        for job in blockers:
            slurm.wait_job_state(job, {"RUNNING"}, timeout=60)
        reader = SignalReader(SignalsConfig(scheduler=["slurm"]), default_catalog(),
                              slurm=SlurmReader(SlurmConfig(env=slurm.env(), use_json=use_json)))

        seen = []

        def read() -> bool:
            seen.append(reader.read(SHARED, [], NOW))
            pending = [j for p in seen[-1].pools.values() for j in p.pending]
            return len(pending) == 3 and all(j.reason in ("Resources", "Priority") for j in pending)

        wait_until(read, timeout=30, what="slurmctld to give the pending jobs a reason")
        observed = seen[-1]
        assert {k: sorted(j.id for j in p.pending) for k, p in observed.pools.items()} == {
            "vision/v100": sorted([waiting["cv"], waiting["cv-typed"]]), "nlp/v100": [waiting["nlp"]]}
        lost = {j.id: (j.team, j.constraint, j.reason) for j in observed.unserved}
        assert lost == {
            waiting["physics"]: (None, "account physics", "account physics matches no pool of "
                                 "partition gpu (vision/v100: accounts [cv]; nlp/v100: accounts [nlp])"),
            waiting["nlp-spot"]: ("nlp", "constraint p3.2xlarge|spot", "no pool's nodes could run "
                                  "it: nlp/v100: no node of it has p3.2xlarge, spot")}
        plan = decide(SHARED, fleet(), assemble(observed), NOW, catalog=default_catalog())
        launches = {(a.pool, a.instance_type, a.count) for a in plan.actions if a.kind == "launch"}
        assert launches == {("vision/v100", "p3.2xlarge", 2), ("nlp/v100", "p3.8xlarge", 1)}
        assert {j.id for j in plan.unserved} == {waiting["physics"], waiting["nlp-spot"]}
    finally:
        slurm.run(["scancel", *blockers, *waiting.values()])
        slurm.run([*features, "availablefeatures=", "activefeatures="])


# -- hostile times: made plausible in SignalReader (model/bounds.Times) before the engine ---

EPOCH_1 = 1  # 1970-01-01T00:00:01Z
Y9000 = int(datetime(9000, 1, 1, tzinfo=UTC).timestamp())
Y9999 = 253402297200  # 9999-12-31T23:00:00Z


def one_pool(**kw: Any) -> dict[str, Any]:
    cluster = {"kind": "slurm", "partition": "gpu", **kw.pop("cluster", {})}
    return {"vision": make_policy("vision", pools=[{
        **pool("v100", ["p3.2xlarge"], "gpu"), "capacity": {"on_demand_base": 0, "spot_percent": 0},
        "cluster": cluster, **kw}])}


class Tick:
    """One SignalReader over fake squeue/sinfo answers, kept across ticks, and decide()."""

    def __init__(self, policies: dict[str, Any], nodes: list[Any]) -> None:
        from autoscaler.signals.config import SignalsConfig
        from autoscaler.signals.reader import SignalReader
        self.policies, self.nodes = policies, nodes
        self.runner = json_runner({"jobs": []}, {"nodes": []})
        self.reader = SignalReader(SignalsConfig(scheduler=["slurm"]), default_catalog(),
                                   slurm=SlurmReader(SlurmConfig(), self.runner))

    def __call__(self, squeue: dict[str, Any], sinfo: dict[str, Any], now: datetime) -> tuple[Any, Any]:
        from autoscaler.engine import decide
        from autoscaler.model.snapshot_parts import assemble
        from tests.builders import fleet
        self.runner.answers = {"squeue --json": json.dumps(squeue), "sinfo --json": json.dumps(sinfo)}
        observed = self.reader.read(self.policies, self.nodes, now)
        return observed, decide(self.policies, fleet(*self.nodes), assemble(observed), now,
                                catalog=default_catalog())


def slurm_node(name: str, state: Any = "allocated", **kw: Any) -> dict[str, Any]:
    used = "gpu:v100:0(IDX:N/A)" if state != "allocated" else "gpu:v100:1(IDX:0)"
    return {"name": name, "state": state, "state_flags": [], "gres": "gpu:v100:1", "gres_used": used, **kw}


@pytest.mark.parametrize("changed_at", [EPOCH_1, Y9000])
def test_a_down_nodes_reason_time_in_1970_or_9000_counts_the_grace_from_first_seen(changed_at: int) -> None:
    """1970 replaced a node that had just gone DOWN at once; 9000 never replaced it."""
    from autoscaler.engine import Replace
    from tests.builders import NOW, make_node

    nodes = [make_node(f"vision-v100-{i}", "vision", "v100") for i in (1, 2)]
    sinfo = {"nodes": [slurm_node("vision-v100-1", state=["DOWN"], reason="Not responding",
                                  reason_set_by_user="slurm", reason_changed_at=changed_at),
                       slurm_node("vision-v100-2")]}
    squeue = {"jobs": [job_2205(2, "RUNNING", "gres:gpu:1", nodes="vision-v100-2")]}
    tick = Tick(one_pool(health={"unready_grace": "10m"}), nodes)

    observed, plan = tick(squeue, sinfo, NOW)
    assert observed.nodes["vision-v100-1"].scheduler.unusable_since == NOW
    assert not [a for a in plan.actions if isinstance(a, Replace)]
    observed, plan = tick(squeue, sinfo, NOW + timedelta(minutes=9))
    assert observed.nodes["vision-v100-1"].scheduler.unusable_since == NOW
    assert not [a for a in plan.actions if isinstance(a, Replace)]
    _, plan = tick(squeue, sinfo, NOW + timedelta(minutes=11))
    (replace,) = [a for a in plan.actions if isinstance(a, Replace)]
    assert replace.node == "vision-v100-1" and "for 11m > unready_grace 10m" in replace.reason


@pytest.mark.parametrize(("state", "flags", "said"), [
    (["DOWN"], [], "DOWN"),  # no Reason: no time
    ("idle", ["NOT_RESPONDING"], "NOT_RESPONDING"),  # idle*: no time until slurmctld sets it DOWN
    (["IDLE", "DRAIN"], [], "DRAIN"),
])
def test_an_unusable_node_without_a_time_is_replaced_a_grace_after_first_seen_so(
        state: Any, flags: list[str], said: str, caplog: pytest.LogCaptureFixture) -> None:
    """Without a since-time such a node stayed forever. Counted from the first tick the
    reader saw it unusable, not before the grace has passed since then, with a reason that
    says so; usable again forgets it, and unusable again counts afresh. Ordinary Slurm
    output: no "not believed" warning."""
    from autoscaler.engine import Replace
    from tests.builders import NOW, make_node

    nodes = [make_node(f"vision-v100-{i}", "vision", "v100") for i in (1, 2)]
    down = {"nodes": [slurm_node("vision-v100-1", state=state, state_flags=flags),
                      slurm_node("vision-v100-2")]}
    usable = {"nodes": [slurm_node("vision-v100-1", state="idle"), slurm_node("vision-v100-2")]}
    squeue = {"jobs": [job_2205(2, "RUNNING", "gres:gpu:1", nodes="vision-v100-2")]}
    tick = Tick(one_pool(health={"unready_grace": "10m"}), nodes)

    def replaced(sinfo: dict[str, Any], minutes: int) -> tuple[Any, list[str]]:
        observed, plan = tick(squeue, sinfo, NOW + timedelta(minutes=minutes))
        return observed.nodes["vision-v100-1"].scheduler, [
            a.reason for a in plan.actions if isinstance(a, Replace) and a.node == "vision-v100-1"]

    seen, reasons = replaced(down, 0)
    assert (seen.unusable_since, reasons) == (NOW, [])
    assert replaced(down, 9)[1] == []
    seen, [reason] = replaced(down, 11)
    assert seen.unusable_since == NOW
    assert (f"the scheduler says {said} (no time given; first seen so at {NOW.isoformat()}) "
            "for 11m > unready_grace 10m") in reason
    seen, reasons = replaced(usable, 12)
    assert (seen.unusable, seen.unusable_since, reasons) == (None, None, [])
    assert replaced(down, 13)[0].unusable_since == NOW + timedelta(minutes=13)  # afresh
    assert replaced(down, 23)[1] == []
    assert "for 11m > unready_grace 10m" in replaced(down, 24)[1][0]
    assert not [r for r in caplog.records if "not believed" in r.getMessage()]


def test_a_running_jobs_start_in_1970_is_unknown_and_never_past_max_job_runtime() -> None:
    from autoscaler.model.plan import ReportJob
    from tests.builders import NOW, make_node

    nodes = [make_node("vision-v100-1", "vision", "v100", age=timedelta(days=10))]
    sinfo = {"nodes": [slurm_node("vision-v100-1")]}
    policies = one_pool(lifetime={"max_job_runtime": "48h", "action": "release"})
    for start, reported in [(EPOCH_1, []), (int((NOW - timedelta(hours=49)).timestamp()), ["7"])]:
        squeue = {"jobs": [job_2205(7, "RUNNING", "gres:gpu:1", nodes="vision-v100-1", start_time=start)]}
        observed, plan = Tick(policies, nodes)(squeue, sinfo, NOW)
        (job,) = observed.nodes["vision-v100-1"].scheduler.jobs
        assert job.started_at == (None if start == EPOCH_1 else NOW - timedelta(hours=49))
        assert [a.job for a in plan.actions if isinstance(a, ReportJob)] == reported


def test_a_start_in_9999_with_a_time_limit_loses_neither_the_source_nor_its_jobs() -> None:
    """start + time_limit overflowed past 9999: an OverflowError took all of Slurm away."""
    from tests.builders import NOW, make_node

    (job,) = jobs_from_json({"jobs": [job_2205(8, "RUNNING", "gres:gpu:1", nodes="vision-v100-1",
                                                    start_time=Y9999, time_limit=120)]})
    assert job.started_at == datetime.fromtimestamp(Y9999, UTC) and job.ends_at is None
    (text,) = jobs_from_text("8|gpu|RUNNING|None|gres:gpu:1|1|2026-11-30T10:00:00|"
                             "9999-12-31T23:00:00|vision-v100-1|1-00:00:00|a|q|u|(null) job8")
    assert text.ends_at is None

    nodes = [make_node(f"vision-v100-{i}", "vision", "v100") for i in (1, 2)]
    squeue = {"jobs": [job_2205(8, "RUNNING", "gres:gpu:1", nodes="vision-v100-1", start_time=Y9999,
                                time_limit=120),
                       job_2205(9, "PENDING", "gres:gpu:1", reason="Resources",
                                submit_time=int(NOW.timestamp()) - 60)]}
    sinfo = {"nodes": [slurm_node("vision-v100-1"), slurm_node("vision-v100-2", state="idle")]}
    observed, plan = Tick(one_pool(), nodes)(squeue, sinfo, NOW)
    assert "slurm" not in observed.missing and observed.pools["vision/v100"].scheduler_missing is None
    assert [j.id for j in observed.pools["vision/v100"].pending] == ["9"]
    (running,) = observed.nodes["vision-v100-1"].scheduler.jobs
    assert (running.id, running.started_at, running.ends_at) == ("8", None, None)
    assert plan.pools["vision/v100"].error is None


@pytest.mark.parametrize("submitted", [EPOCH_1, Y9000])
def test_a_pending_jobs_submit_time_in_1970_or_9000_waits_burst_after_from_first_seen(submitted: int) -> None:
    """9000 never burst ("the longest has waited 0s" forever), 1970 burst at once."""
    from tests.builders import NOW

    policies = one_pool(cluster={"on_prem": {"nodes": "gpu01", "burst_after": "30m"}})
    sinfo = {"nodes": [{"name": "gpu01", "state": "allocated", "state_flags": [], "gres": "gpu:v100:4",
                        "gres_used": "gpu:v100:4(IDX:0-3)", "partitions": ["gpu"]}]}
    squeue = {"jobs": [job_2205(42, "PENDING", "gres:gpu:1", reason="Resources", submit_time=submitted)]}
    tick = Tick(policies, [])

    def launched(now: datetime) -> int:
        observed, plan = tick(squeue, sinfo, now)
        assert [j.submitted_at for j in observed.pools["vision/v100"].pending] == [NOW]
        return sum(a.count for a in plan.actions if a.kind == "launch")

    assert launched(NOW) == 0
    assert launched(NOW + timedelta(minutes=29)) == 0
    assert launched(NOW + timedelta(minutes=31)) == 1

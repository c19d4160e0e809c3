"""Slurm jobs go to their team: pools split a shared partition by account, qos and user,
and a job's constraint narrows the pools (and their types and zones) that can run it."""

from __future__ import annotations

import json
import logging
from collections.abc import Mapping, Sequence
from typing import Any

import pytest

from autoscaler.catalog import default_catalog
from autoscaler.model.snapshot import PendingJob, UnservedJob
from autoscaler.schedulers.slurm.client import SlurmConfig
from autoscaler.signals.readings import pools_in_priority_order
from autoscaler.signals.slurm import SlurmReader
from autoscaler.signals.slurm_match import NO_ZONES, Submission
from tests.builders import make_policy
from tests.hostile import SPLIT, TF_FILE, jinja

ON_DEMAND = {"on_demand_base": 0, "spot_percent": 0}


def spool(name: str, types: list[str], partition: str = "gpu", zones: Sequence[str] = (),
          capacity: Mapping[str, Any] | None = None, **lists: list[str]) -> dict[str, Any]:
    return {"name": name, "cloud": "aws", "region": "us-east-1", "instance_types": types,
            "zones": list(zones), "max_nodes": 4, "capacity": dict(capacity or ON_DEMAND),
            "cluster": {"kind": "slurm", "partition": partition, **lists}}


POLICIES = {
    "vision": make_policy("vision", priority="high", pools=[
        spool("v100", ["p3.2xlarge", "p3.8xlarge"], zones=["us-east-1a", "us-east-1b"],
              accounts=["cv"])]),
    "nlp": make_policy("nlp", priority="medium", pools=[
        spool("mixed", ["g4dn.xlarge", "g4dn.12xlarge"], accounts=["NLP"],
              capacity={"on_demand_base": 1, "spot_percent": 50})]),
    "search": make_policy("search", priority="low", pools=[
        spool("open", ["g5.xlarge"]),
        spool("batch", ["g5.12xlarge"], partition="batch", qos=["high"], users=["bob", "alice@corp"])]),
}
REFS = pools_in_priority_order(POLICIES, default_catalog(), "slurm")


def job(jid: int, partition: str = "gpu", tres: str = "gres:gpu:1", **kw: Any) -> dict[str, Any]:
    return {"job_id": jid, "job_state": "PENDING", "state_reason": "Resources",
            "partition": partition, "node_count": 1, "tres_per_node": tres, "submit_time": 0,
            "account": "", "qos": "", "user_name": "root", "features": "", **kw}


def read(*jobs: dict[str, Any]) -> tuple[dict[str, list[PendingJob]], list[UnservedJob]]:
    answers = {"squeue --json": json.dumps({"jobs": list(jobs)}),
               "sinfo --all": json.dumps({"nodes": []})}

    def runner(argv: Sequence[str], timeout: float, env: Mapping[str, str]) -> str:
        return answers[" ".join(argv[:2])]

    reading = SlurmReader(SlurmConfig(), runner).read(REFS)
    assert reading.error is None and not reading.unattributed
    return {k: v for k, v in reading.pending.items() if v}, reading.unserved


@pytest.mark.parametrize(("fields", "pool", "types", "zones"), [
    ({"account": "cv"}, "vision/v100", None, None),
    ({"account": "nlp"}, "nlp/mixed", None, None),  # accounts compare without case
    ({"account": "physics"}, "search/open", None, None),  # no list claims it: the open pool
    ({"account": ""}, "search/open", None, None),
    ({"partition": "batch", "qos": "high", "user_name": "bob"}, "search/batch", None, None),
    ({"partition": "batch", "qos": "HIGH", "user_name": "alice@corp"}, "search/batch", None, None),
    ({"partition": "gpu,batch", "account": "cv", "qos": "high", "user_name": "bob"},
     "vision/v100", None, None),  # both partitions' lists take it: priority order
    # Constraints: the pool's types and zones that satisfy them.
    ({"account": "cv", "features": "p3.8xlarge"}, "vision/v100", ["p3.8xlarge"], None),
    ({"account": "cv", "features": "us-east-1b&on-demand"}, "vision/v100", None, ["us-east-1b"]),
    ({"account": "cv", "features": "[us-east-1a|us-east-1b]*2"}, "vision/v100", None, None),
    ({"account": "cv", "features": "p3.2xlarge,us-east-1a"}, "vision/v100", ["p3.2xlarge"], ["us-east-1a"]),
    ({"account": "cv", "features": "team-vision&pool-v100&partition-gpu&v100"}, "vision/v100", None, None),
    ({"account": "nlp", "features": "spot"}, "nlp/mixed", None, None),  # a pool that buys spot too
    ({"account": "nlp", "features": "g4dn.12xlarge|a100"}, "nlp/mixed", ["g4dn.12xlarge"], None),
    ({"account": "nlp", "features": "t4"}, "nlp/mixed", None, None),  # every type has T4s
    ({"account": "physics", "features": "g5.xlarge&a10g"}, "search/open", None, None),
])
def test_jobs_go_to_the_pool_that_takes_them(fields: dict[str, str], pool: str,
                                             types: list[str] | None, zones: list[str] | None) -> None:
    pending, unserved = read(job(1, **fields))
    assert unserved == []
    assert {k: [(j.id, j.instance_types, j.zones) for j in v] for k, v in pending.items()} == {
        pool: [("1", types, zones)]}


@pytest.mark.parametrize(("fields", "team", "constraint", "reason"), [
    ({"partition": "batch", "qos": "high", "user_name": "carol"}, None, "qos high, user carol",
     "qos high, user carol matches no pool of partition batch "
     "(search/batch: qos [high], users [bob, alice@corp])"),
    ({"partition": "batch", "qos": "", "user_name": "bob"}, None, "qos (none), user bob", None),
    ({"partition": "batch", "qos": "x" * 65, "user_name": "bob"}, None,
     "qos (unreadable: not a Slurm name (65 characters)), user bob", None),
    ({"account": "cv", "features": "spot"}, "vision", "constraint spot",
     "no pool's nodes could run it: vision/v100: no node of it has spot"),
    ({"account": "cv", "features": "a100|h100"}, "vision", "constraint a100|h100",
     "no pool's nodes could run it: vision/v100: no node of it has a100, h100"),
    ({"account": "cv", "features": "p3.2xlarge&p3.8xlarge"}, "vision", "constraint p3.2xlarge&p3.8xlarge",
     "no pool's nodes could run it: vision/v100: no node of it satisfies p3.2xlarge&p3.8xlarge"),
    ({"account": "cv", "features": "(p3.2xlarge&us-east-1a)|(p3.8xlarge&us-east-1b)"}, "vision",
     "constraint (p3.2xlarge&us-east-1a)|(p3.8xlarge&us-east-1b)", "no pool's nodes could run it: "
     "vision/v100: only some of its (type, zone) pairs satisfy (p3.2xlarge&us-east-1a)|"
     "(p3.8xlarge&us-east-1b) and the pool may launch the others"),
    ({"account": "nlp", "features": "us-east-1a"}, "nlp", "constraint us-east-1a",
     f"no pool's nodes could run it: nlp/mixed: no node of it has us-east-1a: {NO_ZONES}"),
    # The claim decides the team: another team's feature does not move the job there.
    ({"account": "physics", "features": "team-vision"}, "search", "constraint team-vision",
     "no pool's nodes could run it: search/open: no node of it has team-vision"),
    ({"account": "cv", "features": "v100 t4"}, "vision",
     "constraint (unreadable: character 5 does not belong there in Slurm's syntax)", None),
    ({"account": "cv", "features": ["v100"]}, "vision", "constraint (unreadable: not text (list))", None),
])
def test_jobs_no_pool_takes_are_unserved_with_why(fields: dict[str, Any], team: str | None,
                                                  constraint: str, reason: str | None) -> None:
    pending, unserved = read(job(7, **fields), job(8, account="cv"))
    assert [j.id for jobs in pending.values() for j in jobs] == ["8"]  # the others still counted
    assert [(j.id, j.team, j.constraint) for j in unserved] == [("7", team, constraint)]
    if reason is not None:
        assert unserved[0].reason == reason


def test_the_example_of_issue_34() -> None:
    policies = {team: make_policy(team, pools=[spool("train", ["p3.2xlarge"], accounts=[account])])
                for team, account in (("vision", "cv"), ("nlp", "nlp"))}
    refs = pools_in_priority_order(policies, default_catalog(), "slurm")
    doc = json.dumps({"jobs": [job(5, account="physics", array_task_string="1-2", array_job_id=5)]})
    reading = SlurmReader(SlurmConfig(), lambda argv, *_: doc if argv[0] == "squeue" else "{}").read(refs)
    assert [(j.id, j.reason) for j in reading.unserved] == [
        (jid, "account physics matches no pool of partition gpu "
              "(nlp/train: accounts [nlp]; vision/train: accounts [cv])") for jid in ("5_1", "5_2")]


@pytest.mark.parametrize("value", [
    jinja("slurm-account"), TF_FILE, SPLIT, "cv;reboot", "cv\nnlp", "cv\n", "$(id)", "a" * 10_000, "\u202ecv",
    "-cv", "", 7, ["cv"], {"cv": 1}, None,
])
def test_hostile_names_are_never_used_nor_quoted(value: Any) -> None:
    submission = Submission.read(value, value, value, value)
    assert (submission.account, submission.qos, submission.user) == (None, None, None)
    pending, unserved = read(job(1, partition="batch", account=value, qos=value, user_name=value,
                                 features=value if isinstance(value, str) else ""))
    assert pending == {}
    for job_ in unserved:
        for text in (job_.reason, job_.constraint):
            assert not isinstance(value, str) or len(value) < 2 or value not in text
            assert len(text) < 400


def test_a_long_list_is_shown_short() -> None:
    many = [f"acct{i}" for i in range(256)]
    policies = {"vision": make_policy("vision", pools=[spool("v100", ["p3.2xlarge"], accounts=many)])}
    refs = pools_in_priority_order(policies, default_catalog(), "slurm")
    doc = json.dumps({"jobs": [job(1, account="physics")]})
    (lost,) = SlurmReader(SlurmConfig(), lambda argv, *_: doc if argv[0] == "squeue" else "{}").read(refs).unserved
    assert lost.reason.endswith("(vision/v100: accounts [acct0, acct1, acct2, acct3, acct4 +251 more])")


def test_unserved_jobs_are_logged_once_not_every_tick(caplog: pytest.LogCaptureFixture) -> None:
    doc = json.dumps({"jobs": [job(1, account="cv", features="spot")]})
    reader = SlurmReader(SlurmConfig(), lambda argv, *_: doc if argv[0] == "squeue" else "{}")
    with caplog.at_level(logging.WARNING, logger="autoscaler.signals.slurm"):
        reader.read(REFS)
        reader.read(REFS)
    assert [r.getMessage() for r in caplog.records] == [
        "slurm: pending job 1 is not bought for: no pool's nodes could run it: "
        "vision/v100: no node of it has spot"]


def test_a_placement_group_lists_every_pool_that_can_run_the_job() -> None:
    """The engine chooses among them (engine/placement.py); signals only say which can."""
    west = {**spool("west", ["p3.2xlarge"], zones=["us-west-2a"]), "region": "us-west-2"}
    group = {"ml": make_policy("ml", pools=[
        spool("east", ["p3.2xlarge"], zones=["us-east-1a"]), west, spool("t4", ["g4dn.xlarge"])],
        ).model_copy(update={"placement_groups": {"any": ["east", "west", "t4"]}})}
    refs = pools_in_priority_order(group, default_catalog(), "slurm")
    answers = {"squeue --json": json.dumps({"jobs": [
        job(1, tres="gres:gpu:v100:1"), job(2, features="us-east-1a"), job(3)]}),
        "sinfo --all": json.dumps({"nodes": []})}
    reading = SlurmReader(SlurmConfig(), lambda argv, timeout, env: answers[" ".join(argv[:2])]).read(refs)
    pending = {j.id: j for jobs in reading.pending.values() for j in jobs}
    v100 = pending["1"]
    assert [(o.pool, o.zones) for o in v100.options] == [("ml/east", None), ("ml/west", None)]
    assert pending["2"].options == []  # only east has the zone
    assert [o.pool for o in pending["3"].options] == ["ml/east", "ml/west", "ml/t4"]


def test_a_running_job_is_told_the_pools_of_its_group_it_could_run_in() -> None:
    """What consolidation may move it to (RunningJob.pools): the terms a pending job's
    options come from, read for the job where it runs (the home pool first)."""
    west = {**spool("west", ["p3.2xlarge"], zones=["us-west-2a"]), "region": "us-west-2"}
    group = {"ml": make_policy("ml", pools=[
        spool("east", ["p3.2xlarge"], zones=["us-east-1a"]), west, spool("t4", ["g4dn.xlarge"]),
        spool("solo", ["p3.2xlarge"])],
        ).model_copy(update={"placement_groups": {"any": ["east", "west", "t4"]}})}
    refs = pools_in_priority_order(group, default_catalog(), "slurm")

    def running(jid: int, host: str, **kw: Any) -> dict[str, Any]:
        return job(jid, **{"job_state": "RUNNING", "nodes": host, "start_time": 0, **kw})

    answers = {"squeue --json": json.dumps({"jobs": [
        running(1, "ml-east-1"), running(2, "ml-east-2", tres="gres:gpu:v100:1"),
        running(3, "ml-east-3", features="us-east-1a"), running(4, "ml-east-4", partition="other"),
        running(5, "ml-solo-1"), running(6, "ml-east-5", features="a&&")]}),
        "sinfo --all": json.dumps({"nodes": [
            {"name": f"ml-east-{i}", "state": "MIXED", "gres": "gpu:v100:1"} for i in range(1, 6)]
            + [{"name": "ml-solo-1", "state": "MIXED", "gres": "gpu:v100:1"}]})}
    reading = SlurmReader(SlurmConfig(), lambda argv, timeout, env: answers[" ".join(argv[:2])]).read(refs)
    pools = {j.id: j.pools for n in reading.nodes.values() for j in n.jobs}
    assert pools == {
        "1": ["ml/east", "ml/west", "ml/t4"],  # any GPU, any zone: every pool of the group
        "2": ["ml/east", "ml/west"],  # a V100: not the T4 pool
        "3": ["ml/east"],  # only east has the zone (a region pin)
        "4": ["ml/east"],  # its partition is no pool's: it stays where it runs
        "5": None,  # a pool in no group: no narrowing
        "6": ["ml/east"],  # an unreadable constraint: it stays where it runs
    }

"""Slurm demand and node state: ``squeue --json`` and ``sinfo --json``, or formatted output.

Pending GPU jobs become ``PendingJob`` (GPUs per node from the gres request, GPU model from
the gres type: ``gpu:t4:2`` -> 2 x T4) and are attributed to a pool by partition, account,
qos, user and constraint (``slurm_match.py``): the first such pool (high priority first)
whose GPU model fits; a job those leave no pool for is unserved, with the reason. Running
jobs are listed per node, each with the pools of its node's placement group those same
terms admit it to (``RunningJob.pools``). Slurm node names are fleet node names. Each command has a
timeout; any failure makes the whole source missing for this tick.
"""

from __future__ import annotations

import json
import logging
from collections.abc import Mapping
from dataclasses import dataclass, field
from datetime import datetime, timedelta
from typing import Any

from autoscaler.model.snapshot import PendingJob, PoolOption, RunningJob, SchedulerNode, UnservedJob
from autoscaler.policy.models import Pool
from autoscaler.schedulers.slurm.client import Runner, SlurmCommandError, SlurmConfig, run_command
from autoscaler.schedulers.slurm.parse import (
    MAX_HOSTS,
    Gres,
    array_tasks,
    epoch,
    expand_hostlist,
    gpu_count,
    gpu_model,
    gpu_type,
    node_state,
    parse_gres,
    time_limit,
)
from autoscaler.signals import slurm_gres
from autoscaler.signals.readings import (
    ClusterPool,
    SchedulerReading,
    first_fitting,
    group_options,
    key_by_name_prefix,
)
from autoscaler.signals.slurm_match import (
    PoolTerms,
    Refused,
    Served,
    Submission,
    admitted,
    running_pools,
)
from autoscaler.signals.slurm_onprem import on_prem_capacity
from autoscaler.words import first_few

log = logging.getLogger(__name__)
RUNNING_STATES = {"RUNNING", "COMPLETING", "CONFIGURING", "SUSPENDED", "STOPPED"}
# Fallback formats (names last: they may contain the separator). A constraint may contain
# '|' too but never a space: a space ends it, and the job name follows.
SQUEUE_FORMAT = "%i|%P|%T|%r|%b|%D|%V|%S|%N|%l|%a|%q|%u|%f %j"
SQUEUE_STATES = "PENDING,RUNNING,COMPLETING,CONFIGURING,SUSPENDED"
SINFO_FIELDS = "NodeList:|,StateLong:|,Gres:|,GresUsed:|,Partition:"
# Formatted output prints times in the zone, and the SLURM_TIME_FORMAT, of the host the
# command runs on (a login node, over command_prefix): set there, after the prefix, so a
# time without a zone is UTC (parse.epoch) wherever that host is.
PINNED_TIME = ("TZ=UTC", "SLURM_TIME_FORMAT=standard")
# Host and array-task names one squeue reading may expand to, all jobs together: each list
# is capped (parse.MAX_HOSTS, array_tasks' limit), but a listing of many jobs each naming
# gpu[1-65535] would still take gigabytes. Past this the reading is refused as a whole:
# jobs cut short would leave busy nodes looking free.
MAX_READING_NAMES = 1_000_000


class ReadingTooLarge(ValueError):
    """squeue's host lists and arrays expand to more names than MAX_READING_NAMES."""


class _Names:
    """The names a reading has expanded so far, against MAX_READING_NAMES."""

    def __init__(self) -> None:
        self.left = MAX_READING_NAMES

    def hosts(self, hostlist: str | None) -> list[str]:
        # One past what is left: enough to know the budget is spent, never more.
        return self._spend(expand_hostlist(hostlist, min(MAX_HOSTS, self.left + 1)))

    def tasks(self, spec: str | None) -> list[str]:
        return self._spend(array_tasks(spec))

    def _spend(self, names: list[str]) -> list[str]:
        self.left -= len(names)
        if self.left < 0:
            raise ReadingTooLarge(f"squeue's node lists and job arrays name more than "
                                  f"{MAX_READING_NAMES:,} hosts and tasks")
        return names


@dataclass
class SlurmJob:
    id: str
    state: str
    partition: str = ""
    reason: str = ""
    name: str = ""
    gpus_per_node: float = 0
    gpu_type: str | None = None
    node_count: int = 1
    submitted_at: datetime | None = None
    started_at: datetime | None = None
    limit: timedelta | None = None  # the job's time limit, None when unlimited
    nodes: list[str] = field(default_factory=list)
    node_gpus: list[float] = field(default_factory=list)  # per entry of nodes, when known
    array: list[str] = field(default_factory=list)  # pending array task ids
    submission: Submission = field(default_factory=Submission)  # account, qos, user, constraint
    gres: list[Gres] = field(default_factory=list)  # gpu and shard per node (slurm_gres.py)
    node_gres: list[list[Gres]] = field(default_factory=list)  # per entry of nodes, when known

    @property
    def ends_at(self) -> datetime | None:
        """When Slurm ends the job at the latest (start + time limit), if it has a limit;
        None past year 9999 (a start there is no time: ``model/bounds.Times`` drops it)."""
        if not self.started_at or not self.limit:
            return None
        try:
            return self.started_at + self.limit
        except OverflowError:
            return None


@dataclass
class SlurmNode:
    name: str
    state: str | list[str]
    flags: list[str] = field(default_factory=list)
    gres: str = ""
    gres_used: str | None = None
    reason: str = ""  # why an admin or slurmctld set DOWN/DRAIN ("Not responding")
    reason_by: str = ""
    reason_at: datetime | None = None
    partitions: list[str] = field(default_factory=list)


def _gpus_per_node(job: Mapping[str, Any]) -> tuple[float, str | None, list[Gres]]:
    """GPUs per node, their type, and the gpu and shard gres per node."""
    nodes = max(1, _int(job.get("node_count"), 1))
    tasks = max(1, _int(job.get("tasks"), 1))
    per = (("tres_per_node", 1.0), ("tres_per_job", 1.0 / nodes), ("tres_per_task", tasks / nodes))
    for key, scale in per:
        spec = _text(job.get(key))
        gres = slurm_gres.gpu_like(parse_gres(spec))
        if gpu_count(spec) or any(g.name == slurm_gres.SHARD and g.count for g in gres):
            return (gpu_count(spec) * scale, gpu_type(spec),
                    [Gres(g.name, g.type, g.count * scale) for g in gres])
    return 0.0, None, []


def _text(value: Any) -> str:
    """A field squeue gives as text; any other JSON type is no value, not a crash later."""
    return value if isinstance(value, str) else ""


def _int(value: Any, default: int) -> int:
    if isinstance(value, dict):
        value = value.get("number")
    try:
        return int(value)
    except (TypeError, ValueError):
        return default


def _array_task(job: Mapping[str, Any]) -> int | None:
    task = job.get("array_task_id")
    if isinstance(task, dict):  # 23.02+: {"set": bool, "number": N}
        task = task.get("number") if task.get("set") else None
    return task if isinstance(task, int) else None


def jobs_from_json(doc: Mapping[str, Any]) -> list[SlurmJob]:
    out, names = [], _Names()
    for job in doc.get("jobs", []):
        state = job.get("job_state")
        state = (state[0] if state else "") if isinstance(state, list) else str(state or "")
        gpus, gtype, gres = _gpus_per_node(job)
        nodes = names.hosts(_text(job.get("nodes")))
        detail = job.get("gres_detail")
        detail = [_text(d) for d in detail] if isinstance(detail, list) else []
        task = _array_task(job)
        jid = str(job.get("job_id"))
        if task is not None:
            jid = f"{_int(job.get('array_job_id'), 0)}_{task}"
        out.append(SlurmJob(
            id=jid, state=state.upper(), partition=str(job.get("partition") or ""),
            reason=str(job.get("state_reason") or ""), name=str(job.get("name") or ""),
            gpus_per_node=gpus, gpu_type=gtype, node_count=max(1, _int(job.get("node_count"), 1)),
            submitted_at=epoch(job.get("submit_time")), started_at=epoch(job.get("start_time")),
            limit=time_limit(job.get("time_limit")),
            nodes=nodes, node_gpus=[gpu_count(d) for d in detail] if len(detail) == len(nodes) else [],
            array=names.tasks(_text(job.get("array_task_string")))
            if state.upper() == "PENDING" else [],
            submission=Submission.read(job.get("account"), job.get("qos"), job.get("user_name"),
                                       job.get("features")),
            gres=gres, node_gres=[slurm_gres.gpu_like(parse_gres(d)) for d in detail]
            if len(detail) == len(nodes) else [],
        ))
    return out


def nodes_from_json(doc: Mapping[str, Any]) -> list[SlurmNode]:
    return [SlurmNode(name=n["name"], state=n.get("state") or "unknown",
                      flags=list(n.get("state_flags") or []), gres=_text(n.get("gres")),
                      gres_used=n["gres_used"] if isinstance(n.get("gres_used"), str) else None,
                      reason=str(n.get("reason") or "")[:200],
                      reason_by=str(n.get("reason_set_by_user") or "")[:64],
                      reason_at=epoch(n.get("reason_changed_at")),
                      partitions=[str(x)[:64] for x in (n.get("partitions") or [])][:64])
            for n in doc.get("nodes", [])]


def jobs_from_text(text: str) -> list[SlurmJob]:
    out, names = [], _Names()
    for line in text.splitlines():
        parts = line.split("|", 13)
        if len(parts) < 14:
            continue
        jid, part, state, reason, tres, count, submit, start, nodelist, limit = parts[:10]
        account, qos, user = parts[10:13]
        features, _, name = parts[13].partition(" ")
        array: list[str] = []
        if "_[" in jid:  # a pending array: 123_[1-10%2]
            jid, _, spec = jid.partition("_[")
            array = names.tasks(spec.rstrip("]"))
        out.append(SlurmJob(
            id=jid, state=state.upper(), partition=part, reason=reason, name=name,
            gpus_per_node=gpu_count(tres), gpu_type=gpu_type(tres),
            node_count=max(1, _int(count, 1)), submitted_at=epoch(submit),
            started_at=epoch(start), limit=time_limit(limit), nodes=names.hosts(nodelist),
            array=array, submission=Submission.read(account, qos, user, features),
            gres=slurm_gres.gpu_like(parse_gres(tres)),
        ))
    return out


def nodes_from_text(text: str) -> list[SlurmNode]:
    out: dict[str, SlurmNode] = {}
    for line in text.splitlines():
        parts = [p.strip() for p in line.split("|")]
        if len(parts) < 5:
            continue
        if parts[0] in out:  # a node in two partitions is listed once per partition
            out[parts[0]].partitions.append(parts[4].rstrip("*")[:64])
            continue
        out[parts[0]] = SlurmNode(parts[0], parts[1], gres=parts[2], gres_used=parts[3],
                                  partitions=[parts[4].rstrip("*")[:64]])
    return list(out.values())


def _demand(job: SlurmJob, by_partition: dict[str, list[PoolTerms]],
            rank: dict[str, int]) -> tuple[ClusterPool | Refused | None, list[PendingJob]]:
    """The pool the job is demand for (None: no pool has its partition; Refused: why no
    pool serves it) and its pending jobs (one per array task)."""
    model = gpu_model(job.gpu_type)
    served = admitted(job.submission, job.partition, by_partition, rank)
    if isinstance(served, Refused):
        return served, []
    if slurm_gres.shared(job.gres):
        return _shared_demand(job, served)
    ref = first_fitting([s.ref for s in served], model)
    narrowed = next((s for s in served if s.ref == ref), Served(ref)) if ref else None
    options = group_options(ref, (
        (s.ref, PoolOption(pool=s.ref.key, instance_types=s.instance_types, zones=s.zones))
        for s in served if not model or model in s.ref.gpu_models)) if ref else []
    jobs = [PendingJob(id=jid, gpus=job.gpus_per_node, nodes=job.node_count,
                       reason=job.reason or "Unknown", submitted_at=job.submitted_at,
                       gpu_model=model, instance_types=narrowed.instance_types if narrowed else None,
                       zones=narrowed.zones if narrowed else None, options=options)
            for jid in _ids(job)]
    return ref, jobs


def _shared_demand(job: SlurmJob, served: list[Served]
                   ) -> tuple[ClusterPool | Refused | None, list[PendingJob]]:
    """A job asking for MIG slices or shards: the first pool whose nodes offer them, with
    the request in its GPUs (slurm_gres.py); the GPU model plays no part."""
    bad = slurm_gres.unreadable(job.gres)
    teams = {s.ref.team for s in served}
    team = next(iter(teams)) if len(teams) == 1 else None
    if bad is not None:
        return Refused(team, "gres (unreadable)", f"its gres request cannot be read ({bad})"), []
    if not served:
        gpus = slurm_gres.unpooled_gpus(job.gres)
        return None, [PendingJob(id=jid, gpus=gpus, nodes=job.node_count,
                                 reason=job.reason or "Unknown", submitted_at=job.submitted_at)
                      for jid in _ids(job)] if gpus > 0 else []
    for s in served:
        on_pool = slurm_gres.gpus_on(s.ref.pool, job.gres)
        if on_pool is not None and on_pool > 0:
            return s.ref, [PendingJob(id=jid, gpus=on_pool, nodes=job.node_count,
                                      reason=job.reason or "Unknown", submitted_at=job.submitted_at,
                                      instance_types=s.instance_types, zones=s.zones)
                           for jid in _ids(job)]
    asked = slurm_gres.asked(job.gres)
    return Refused(team, f"gres {asked}", f"no pool's nodes offer {asked}: " + "; ".join(
        f"{s.ref.key} offers {', '.join(slurm_gres.offered(s.ref.pool))}" for s in served)), []


def _ids(job: SlurmJob) -> list[str]:
    return [f"{job.id}_{t}" for t in job.array] or [job.id]


def _scheduler_node(node: SlurmNode, jobs: list[RunningJob], pool: Pool | None) -> SchedulerNode:
    state, ready, cordoned = node_state(node.state, node.flags)
    allocated = (gpu_count(node.gres_used) if node.gres_used is not None
                 else sum(j.gpus for j in jobs))
    total = gpu_count(node.gres)
    gres = parse_gres(node.gres)
    if pool is not None and pool.bootstrap.sharing != "none" and slurm_gres.shared(gres):
        # MIG slices and shards at their share; 22.05's gres_used undercounts shards, so
        # the jobs' own allocations count too (the larger wins: capacity is kept).
        total = slurm_gres.node_gpus(pool, gres)
        allocated = max(slurm_gres.used_gpus(pool, parse_gres(node.gres_used)),
                        sum(j.gpus for j in jobs))
    return SchedulerNode(state=state, gpus_total=total, gpus_allocated=allocated,
                         jobs=jobs, cordoned=cordoned, ready=ready, **_unusable(node, state))


def _unusable(node: SlurmNode, state: str) -> dict[str, Any]:
    """Why Slurm will not run jobs on the node, in its words, and since when it says so.

    DOWN and DRAIN carry the reason and its time (``scontrol show node``'s
    ``Reason=... [user@time]``); a node only NOT_RESPONDING (``idle*``) has no time until
    slurmctld sets it DOWN after SlurmdTimeout, and a DOWN without a reason none at all:
    no since-time here. The signal reader then counts from the first tick it saw the node
    unusable (``model/bounds.Times``), a lower bound: not replaced sooner than provably
    due, nor kept forever."""
    if state not in ("down", "draining", "drained", "unknown"):
        return {}
    flags = {f.upper() for f in node.flags} | (
        {str(s).upper() for s in node.state[1:]} if isinstance(node.state, list) else set())
    if state in ("draining", "drained"):
        head = "DRAIN"
    elif "NOT_RESPONDING" in flags or (isinstance(node.state, str) and "*" in node.state):
        head = "NOT_RESPONDING"
    else:
        head = state.upper()
    by = f" by {node.reason_by}" if node.reason_by else ""
    said = f"{head}{by}: {node.reason}" if node.reason else head
    return {"unusable": said[:300], "unusable_since": node.reason_at if node.reason else None}


def assemble(jobs: list[SlurmJob], nodes: list[SlurmNode], refs: list[ClusterPool],
             source: str) -> SchedulerReading:
    by_partition: dict[str, list[PoolTerms]] = {}
    for ref in refs:
        by_partition.setdefault(ref.pool.cluster.partition, []).append(PoolTerms.of(ref))
    rank = {ref.key: i for i, ref in enumerate(refs)}
    pool_of = slurm_gres.pool_by_name(refs)
    ref_by_key = {ref.key: ref for ref in refs}
    key_of = key_by_name_prefix(ref_by_key)
    pending: dict[str, list[PendingJob]] = {ref.key: [] for ref in refs}
    unattributed: list[PendingJob] = []
    unserved: list[UnservedJob] = []
    running: dict[str, list[RunningJob]] = {}
    for job in jobs:
        if job.state == "PENDING" and (job.gpus_per_node > 0 or slurm_gres.shared(job.gres)):
            owner, demand = _demand(job, by_partition, rank)
            if isinstance(owner, Refused):
                unserved += [UnservedJob(id=jid, team=owner.team, reason=owner.reason,
                                         constraint=owner.constraint) for jid in _ids(job)]
            else:
                (pending[owner.key] if owner else unattributed).extend(demand)
        elif job.state in RUNNING_STATES:
            may_run: dict[str, list[str] | None] = {}  # by home pool key
            for i, host in enumerate(job.nodes):
                gpus = job.node_gpus[i] if job.node_gpus else job.gpus_per_node
                gres = job.node_gres[i] if job.node_gres else job.gres
                pool = pool_of(host)
                if pool is not None and slurm_gres.shared(gres):
                    gpus = slurm_gres.gpus_on(pool, gres) or gpus
                home = ref_by_key.get(key_of(host) or "")
                if home is not None and home.key not in may_run:
                    may_run[home.key] = running_pools(job.submission, job.partition, job.gpu_type,
                                                      job.gres, home, by_partition, rank)
                running.setdefault(host, []).append(
                    RunningJob(id=job.id, gpus=gpus, started_at=job.started_at, name=job.name,
                               ends_at=job.ends_at, pools=may_run[home.key] if home else None))
    sched = {n.name: _scheduler_node(n, running.get(n.name, []), pool_of(n.name)) for n in nodes}
    return SchedulerReading(nodes=sched, pending=pending, unattributed=unattributed,
                            unserved=unserved, source=source,
                            on_prem=on_prem_capacity(refs, nodes, sched))


class SlurmReader:
    def __init__(self, config: SlurmConfig, runner: Runner = run_command):
        self.config = config
        self._run = runner
        self._reported: set[str] = set()  # unserved jobs already logged

    def _cmd(self, name: str, *args: str, pinned: bool = False) -> str:
        return self._run(self.config.command(name, *args, env=PINNED_TIME if pinned else ()),
                         self.config.timeout.total_seconds(), self.config.env)

    def read(self, refs: list[ClusterPool]) -> SchedulerReading:
        reading = self._read(refs)
        if reading.error is None:
            self._log_unserved(reading.unserved)
        return reading

    def _log_unserved(self, unserved: list[UnservedJob]) -> None:
        """Once per job, not once per tick; an array's tasks in one line."""
        fresh: dict[str, list[str]] = {}
        for job in unserved:
            if job.id not in self._reported:
                fresh.setdefault(job.reason, []).append(job.id)
        for reason, ids in fresh.items():
            log.warning("slurm: pending job %s is not bought for: %s", first_few(ids), reason)
        self._reported = {job.id for job in unserved}

    def _read(self, refs: list[ClusterPool]) -> SchedulerReading:
        json_error = None
        if self.config.use_json:
            try:
                jobs = jobs_from_json(json.loads(self._cmd("squeue", "--json")))
                nodes = nodes_from_json(json.loads(self._cmd("sinfo", "--all", "--json")))
                return assemble(jobs, nodes, refs, "squeue/sinfo --json")
            except SlurmCommandError as exc:
                if "timed out" in str(exc) or "not found" in str(exc):
                    return SchedulerReading(error=f"slurm: {exc}", source="json")
                json_error = str(exc)
            except ReadingTooLarge as exc:  # the formatted listing names the same hosts
                return SchedulerReading(error=f"slurm: {exc}", source="json")
            except (ValueError, KeyError, TypeError, AttributeError, RecursionError) as exc:
                # wrong JSON types ([1,2], "nodes": 5) or nesting past the parser's depth
                json_error = f"unreadable JSON ({type(exc).__name__})"
        try:
            jobs = jobs_from_text(self._cmd("squeue", "-h", "-t", SQUEUE_STATES,
                                            "-o", SQUEUE_FORMAT, pinned=True))
            nodes = nodes_from_text(self._cmd("sinfo", "--all", "-h", "-N", "-O", SINFO_FIELDS,
                                              pinned=True))
        except (SlurmCommandError, ReadingTooLarge) as exc:
            why = f"slurm: {exc}" + (f" (after --json: {json_error})" if json_error else "")
            return SchedulerReading(error=why, source="text")
        return assemble(jobs, nodes, refs, "squeue/sinfo formatted")

"""Slurm and Kubernetes, reachable with what the reader reads and the drainer runs.

Slurm: ``scontrol ping`` says the controller is UP, every pool's partition exists
(``sinfo``), ``squeue`` and ``scancel`` are there, and the user the commands run as
(through ``command_prefix``, e.g. ssh) may ``scontrol update`` nodes: root, the
SlurmUser, or an Operator/Administrator in ``sacctmgr``. With dynamic registration,
slurm.conf must let the pools' nodes in: select/cons_tres, a MaxNodeCount with room for
them, and a Nodeset in each pool's partition.

Kubernetes: nodes and pods are listed, then a SelfSubjectAccessReview asks for each
right the drainer uses (patch nodes, create pods/eviction and pods/exec). An API server
that does not answer access reviews (404) has its reads checked only, and the row says so.
"""

from __future__ import annotations

from kubernetes import client
from kubernetes.client.exceptions import ApiException
from kubernetes.config import ConfigException
from urllib3.exceptions import HTTPError

from autoscaler.schedulers.kubernetes.client import api_client
from autoscaler.schedulers.slurm.client import SlurmCommandError, SlurmConfig, run_command
from autoscaler.secrets import SecretError
from autoscaler.service.doctor.context import Context
from autoscaler.service.doctor.report import Result, fail, ok, skip

ADMIN_LEVELS = frozenset({"operator", "administrator"})
# (verb, resource, subresource) the Kubernetes drainer needs (actuators/drain/kubernetes.py).
DRAIN_RIGHTS = (("patch", "nodes", ""), ("create", "pods", "eviction"),
                ("create", "pods", "exec"), ("list", "pods", ""))


def slurm(ctx: Context) -> list[Result]:
    name, pools = "slurm", ctx.uses("slurm")
    if not pools:
        return [skip(name, "no Slurm pool")]
    if "slurm" not in ctx.config.signals.scheduler:
        return [fail(name, f"{len(pools)} Slurm pool(s) but signals.scheduler does not list "
                           "slurm: their jobs and nodes would never be read")]
    cfg = ctx.config.signals.slurm
    try:
        ping = _run(cfg, "scontrol", "ping")
        if "UP" not in ping:
            return [fail(name, f"scontrol ping: {ping.strip()[:200]}")]
        partitions = set(_run(cfg, "sinfo", "--all", "-h", "-o", "%R").split())
        for tool in ("squeue", "scancel"):
            _run(cfg, tool, "--version")
        settings = slurm_settings(_run(cfg, "scontrol", "show", "config"))
        rights = _drain_rights(cfg, settings)
        dynamic = None
        if cfg.registration == "dynamic":
            slurm_pools = [p for _, p in ctx.pools() if p.cluster.kind == "slurm"]
            dynamic = dynamic_problems(
                settings, _run(cfg, "scontrol", "--oneliner", "show", "partition"),
                len(set(_run(cfg, "sinfo", "--all", "-h", "-N", "-o", "%N").split())),
                {p.cluster.partition for p in slurm_pools}, sum(p.max_nodes for p in slurm_pools))
    except SlurmCommandError as exc:
        return [fail(name, str(exc))]
    wanted = {p.cluster.partition for _, p in ctx.pools() if p.cluster.kind == "slurm"}
    absent = sorted(wanted - partitions)
    if absent:
        return [fail(name, f"partition(s) {', '.join(absent)} not in Slurm "
                           f"(it has {', '.join(sorted(partitions)) or 'none'})")]
    if rights is not None:
        return [fail(name, rights)]
    if dynamic:
        return [fail(name, f"dynamic nodes (signals.slurm.registration) cannot join: {dynamic}")]
    how = ("dynamic nodes can join" if cfg.registration == "dynamic"
           else "node names declared in slurm.conf (registration: declared)")
    return [ok(name, f"controller UP; partition(s) {', '.join(sorted(wanted))} present; "
                     f"scontrol, squeue, scancel runnable with the right to drain; {how}")]


def slurm_settings(show_config: str) -> dict[str, str]:
    """``scontrol show config``'s ``Name = value`` lines."""
    return {k.strip(): v.strip() for k, sep, v in (line.partition("=") for line in
                                                    show_config.splitlines()) if sep}


def dynamic_problems(settings: dict[str, str], partitions: str, nodes_now: int,
                     wanted: set[str], cloud_max: int) -> str:
    """What in the controller's settings (``slurm_settings``) or ``show partition
    --oneliner`` keeps the pools' dynamic nodes out ('' when nothing does): Slurm refuses a
    dynamic slurmd without cons_tres or beyond MaxNodeCount, and a node no Nodeset takes is
    in no partition."""
    problems = []
    if settings.get("SelectType") != "select/cons_tres":
        problems.append(f"SelectType is {settings.get('SelectType') or 'unset'}, dynamic nodes "
                        "need select/cons_tres")
    try:
        room = int(settings.get("MaxNodeCount", "")) - nodes_now
    except ValueError:
        room = 0
    if room < cloud_max:
        problems.append(f"MaxNodeCount={settings.get('MaxNodeCount') or 'unset'} leaves room "
                        f"for {max(room, 0)} more node(s) beside the {nodes_now} Slurm has, and "
                        f"the Slurm pools may hold {cloud_max}")
    sets: dict[str, str] = {}
    for line in partitions.splitlines():
        fields = dict(f.split("=", 1) for f in line.split() if "=" in f)
        if "PartitionName" in fields:
            sets[fields["PartitionName"]] = fields.get("NodeSets", "")
    bare = sorted(p for p in wanted if p in sets and sets[p] in ("", "(null)"))
    if bare:
        problems.append("no Nodeset in partition(s) " + ", ".join(bare) + " (add "
                        + "; ".join(f"Nodeset={p}_cloud Feature=partition-{p} and {p}_cloud to "
                                    f"PartitionName={p} Nodes=" for p in bare) + ")")
    return "; ".join(problems)


def _run(cfg: SlurmConfig, tool: str, *args: str) -> str:
    return run_command(cfg.command(tool, *args), cfg.timeout.total_seconds(), cfg.env)


def _drain_rights(cfg: SlurmConfig, settings: dict[str, str]) -> str | None:
    """None when the command user may drain nodes, else why not."""
    user = run_command([*cfg.command_prefix, "id", "-un"], cfg.timeout.total_seconds(),
                       cfg.env).strip()
    if user == "root":
        return None
    slurm_user = settings.get("SlurmUser", "").split("(")[0]
    if user == slurm_user:
        return None
    try:
        level = _run(cfg, "sacctmgr", "-n", "-P", "show", "user", user, "format=AdminLevel")
    except SlurmCommandError as exc:
        return (f"{user} is neither root nor SlurmUser {slurm_user or '?'}, and its admin "
                f"level could not be read ({exc}): scontrol update (drain) may be refused")
    if level.strip().lower() in ADMIN_LEVELS:
        return None
    return (f"{user} is neither root, SlurmUser {slurm_user or '?'} nor a Slurm Operator "
            f"(AdminLevel {level.strip() or 'None'}): scontrol update (drain) would be refused")


def kubernetes(ctx: Context) -> list[Result]:
    name, pools = "kubernetes", ctx.uses("kubernetes")
    if not pools:
        return [skip(name, "no Kubernetes pool")]
    cfg = ctx.config.signals.kubernetes
    if cfg is None or "kubernetes" not in ctx.config.signals.scheduler:
        return [fail(name, f"{len(pools)} Kubernetes pool(s) but no signals.kubernetes in "
                           "signals.scheduler: their pods and nodes would never be read")]
    timeout = cfg.timeout.total_seconds()
    try:
        api = api_client(cfg)
    except (SecretError, OSError, ConfigException) as exc:
        return [fail(name, f"cannot build the client: {exc}")]
    try:
        core = client.CoreV1Api(api)
        nodes = core.list_node(limit=1, _request_timeout=timeout)
        core.list_pod_for_all_namespaces(limit=1, _request_timeout=timeout)
        denied, checked = drainer_rights(api, timeout)
    except ApiException as exc:
        return [fail(name, f"{cfg.host or cfg.kubeconfig}: {exc.status} {exc.reason}")]
    except (HTTPError, OSError) as exc:
        return [fail(name, f"{cfg.host or cfg.kubeconfig} unreachable: {type(exc).__name__}")]
    except (ValueError, TypeError, RecursionError) as exc:  # the client's models refuse it
        return [fail(name, f"{cfg.host or cfg.kubeconfig} answered something that is not a "
                           f"Kubernetes API answer ({type(exc).__name__})")]
    finally:
        api.close()  # type: ignore[no-untyped-call]
    where = f"{cfg.host or cfg.kubeconfig}: nodes and pods readable"
    if denied:
        return [fail(name, f"{where}, but the drainer may not {', '.join(denied)}")]
    if not checked:
        return [ok(name, f"{where} ({len(nodes.items)} node(s) in the first page); the API "
                         "server does not answer SelfSubjectAccessReview, so the drainer's "
                         "rights (patch nodes, evict, exec) were not checked")]
    return [ok(name, f"{where}; the drainer may {', '.join(checked)}")]


def drainer_rights(api: client.ApiClient, timeout: float) -> tuple[list[str], list[str]]:
    """(denied, allowed) drainer rights; both empty when reviews are not served."""
    auth = client.AuthorizationV1Api(api)
    denied: list[str] = []
    allowed: list[str] = []
    for verb, resource, sub in DRAIN_RIGHTS:
        what = f"{verb} {resource}/{sub}" if sub else f"{verb} {resource}"
        review = client.V1SelfSubjectAccessReview(spec=client.V1SelfSubjectAccessReviewSpec(
            resource_attributes=client.V1ResourceAttributes(verb=verb, resource=resource,
                                                            subresource=sub or None)))
        try:
            answer = auth.create_self_subject_access_review(review, _request_timeout=timeout)
        except ApiException as exc:
            if exc.status == 404:
                return [], []
            raise
        (allowed if answer.status and answer.status.allowed else denied).append(what)
    return denied, allowed

"""``gpu-autoscaler signals``: read the live sources once and show the snapshot."""

from __future__ import annotations

import sys
from datetime import UTC, datetime
from pathlib import Path
from typing import Annotated

import typer
from rich.markup import escape
from rich.table import Table
from ruamel.yaml import YAML

from autoscaler.cli.common import catalog_from, console, err_console, fail
from autoscaler.engine.context import DEMAND_REASONS
from autoscaler.model.node import FleetView
from autoscaler.model.snapshot import DecisionInput
from autoscaler.model.snapshot_parts import Observed, assemble
from autoscaler.policy import PolicyLoadError, TeamPolicy, load_policies, pool_key
from autoscaler.policy.duration import format_duration
from autoscaler.policy.models import Pool
from autoscaler.service.config.load import ConfigError, load_config
from autoscaler.service.config.models import ServiceConfig
from autoscaler.signals.reader import SignalReader, SignalsResult
from autoscaler.signals.readings import key_by_name_prefix
from autoscaler.signals.rules import RuleSet, recording_rules

CONFIG_HELP = (
    "The service config, or a file with only its `policies_dir`, optional `prices_file` and "
    "`signals:` section (prometheus, scheduler, slurm, kubernetes): the other sections are "
    "not read. Relative paths are relative to the file."
)
# Exit statuses, also in the command's help.
SOURCE_FAILED = 2


def load_signals_file(path: Path) -> ServiceConfig:
    """The service config, or the part of it this command reads (every other section takes
    its default): one loader, so both files give the same ``file:line:col`` errors."""
    try:
        return load_config(path)
    except ConfigError as exc:
        if not any(e.path for e in exc.errors):  # unreadable, or not YAML: file:line:col says it
            fail(str(exc))
        fail(f"{path} is neither a service config nor a signals file (policies_dir, "
             f"prices_file, signals):\n{exc}")


def _pool_row(key: str, pool: Pool, snap: Observed, nodes: list[str]) -> list[str]:
    obs = snap.pools.get(key)
    utils, idle, stale = [], 0, 0
    for name in nodes:
        node = snap.nodes[name]
        m = node.metrics
        if node.metrics_missing or m is None:
            stale += 1
            continue
        if m.util_mean is not None:
            utils.append(m.util_mean)
        busy = node.scheduler is not None and (node.scheduler.jobs or node.scheduler.gpus_allocated)
        peak = m.util_max_idle_window
        if peak is not None and peak < pool.scale_down.gpu_utilization_below and not busy:
            idle += 1
    pending = obs.pending if obs else []
    demand = sum(j.gpus * j.nodes for j in pending if j.reason in DEMAND_REASONS)
    other = len([j for j in pending if j.reason not in DEMAND_REASONS])
    problems = [p for p in ((obs.metrics_missing, obs.scheduler_missing) if obs else ()) if p]
    if stale:
        problems.append(f"{stale} node(s) without fresh metrics")
    refused = sum(1 for name in nodes if snap.nodes[name].scheduler_missing)
    if refused:
        problems.append(f"{refused} node(s) whose scheduler view is not believed")
    util = f"{sum(utils) / len(utils):.0f}%" if utils else "-"
    jobs = f"{demand:g}" + (f" (+{other} held/other)" if other else "")
    data = "[red]" + "; ".join(problems) + "[/]" if problems else "[green]ok[/]"
    return [key, str(len(nodes)), util, str(idle), jobs, data]


def pools_table(policies: dict[str, TeamPolicy], result: SignalsResult) -> Table:
    snap = result.observed
    pools = {pool_key(t.team, p.name): p for t in policies.values() for p in t.pools}
    key_of = key_by_name_prefix(pools)
    members: dict[str, list[str]] = {k: [] for k in pools}
    for name in snap.nodes:
        key = key_of(name)
        if key is not None:
            members[key].append(name)
    table = Table(title=f"Signals at {snap.taken_at:%Y-%m-%d %H:%M:%S %Z}")
    for col in ("pool", "nodes", "mean util", "idle nodes", "pending GPUs", "data"):
        table.add_column(col, justify="left" if col in ("pool", "data") else "right")
    for key in sorted(pools):
        table.add_row(*_pool_row(key, pools[key], snap, members[key]))
    return table


def _print_rules(cfg: ServiceConfig, policies: dict[str, TeamPolicy]) -> None:
    prom = cfg.signals.prometheus
    if prom is None:
        fail("--print-rules needs a signals.prometheus section (node_label, stale_after)")
    pools = [p for t in policies.values() for p in t.pools]
    rules = recording_rules(RuleSet.of(pools, prom.node_label, prom.stale_after),
                            format_duration(prom.rules_interval))
    yaml = YAML()
    yaml.default_flow_style = False
    yaml.width = 4096  # one line per expression
    yaml.dump(rules, sys.stdout)


def signals(
    config: Annotated[Path, typer.Option("--config", "-c", help=CONFIG_HELP, exists=True,
                                         dir_okay=False)],
    json_out: Annotated[bool, typer.Option(
        "--json", help="Print the engine input JSON that `plan --snapshot` reads.")] = False,
    print_rules: Annotated[bool, typer.Option(
        "--print-rules", help="Print the Prometheus recording rules that "
        "`prometheus.recording_rules: true` reads (for large fleets), derived from the "
        "policies' windows, then exit.")] = False,
) -> None:
    """Read Prometheus, Slurm and Kubernetes once and show what the engine would see.

    Without a store the fleet is EMPTY: nodes are not invented from what Prometheus or the
    scheduler report. Hosts named `<team>-<pool>-...` are shown under that pool; the JSON
    output carries `fleet: {nodes: []}` and the snapshot of every observed node.

    Exit status: 0 every source answered; 1 the config or the policies cannot be read;
    2 a source did not answer (named on stderr; the table or JSON is still printed, with
    that source's data missing).
    """
    cfg = load_signals_file(config)
    catalog = catalog_from(cfg.prices_file)
    try:
        policies = load_policies(cfg.policies_dir, catalog)
    except PolicyLoadError as exc:
        fail(f"policies in {cfg.policies_dir} are invalid:\n{exc}")
    if print_rules:
        _print_rules(cfg, policies)
        return
    reader = SignalReader(cfg.signals, catalog)
    now = datetime.now(UTC)
    try:
        result = reader.read_all(policies, [], now)
    finally:
        reader.close()
    failed = {k: v for k, v in result.sources.items() if not v.startswith("ok")}
    if json_out:
        data = DecisionInput(now=now, fleet=FleetView(), snapshot=assemble(result.observed))
        typer.echo(data.model_dump_json(indent=2))
    else:
        console.print(pools_table(policies, result))
        for source, status in sorted(result.sources.items()):
            if source not in failed:
                console.print(f"[green]{source}[/]: {escape(status)}", highlight=False)
    for kind, jobs in sorted(result.unattributed.items()):
        if jobs:
            err_console.print(f"[yellow]{kind}: {len(jobs)} pending GPU job(s) match no pool[/]")
    for job in result.observed.unserved:
        # markup off: pod names and reasons come from the cluster
        err_console.print(f"not bought for: {job.id}: {job.reason}", style="yellow",
                          highlight=False, markup=False)
    for source, status in sorted(failed.items()):
        # The reason quotes URLs and answers from other systems: never markup.
        err_console.print(f"[red]{source}[/]: {escape(status.removeprefix(f'{source}: '))}",
                          highlight=False, soft_wrap=True)
    if failed:
        raise typer.Exit(SOURCE_FAILED)


def register(app: typer.Typer) -> None:
    app.command("signals")(signals)

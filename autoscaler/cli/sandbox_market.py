"""``gpu-autoscaler sandbox fault|scores|interrupt``: the running sandbox's spot market,
changed live.

The sandbox's moto refuses launches that match a capacity fault and answers
GetSpotPlacementScores from a score file; it reads both files on every request, so a change
counts from the next launch or read. ``interrupt`` sends the spot notice EC2 would send to
the sandbox's interruption queue and, for a warning, reclaims the instance two minutes later
as EC2 does. These commands check what they write the way the
service checks a pool (a catalog type, a zone of its region, a code the service treats as a
capacity error), so a typo is refused here instead of silently matching nothing.
"""

from __future__ import annotations

import time
from collections.abc import Sequence
from enum import StrEnum
from pathlib import Path
from typing import Annotated, Any

import typer
from rich.table import Table

from autoscaler.actuators.terraform.errors import CAPACITY_CODES
from autoscaler.catalog import default_catalog
from autoscaler.catalog.catalog import UnknownInstanceTypeError
from autoscaler.catalog.regions import REGIONS, region_problem, zone_problem
from autoscaler.cli.common import console, fail
from autoscaler.cli.sandbox import DEFAULT_DIR, DirOption, running
from autoscaler.clouds.aws_events import SPOT_NOTICE
from autoscaler.policy.duration import parse_duration
from autoscaler.sandbox.services.moto_server import (
    CapacityFault,
    SpotScoreRule,
    add_fault,
    read_faults,
    read_scores,
    sandbox_client,
    write_faults,
    write_scores,
)
from autoscaler.sandbox.services.spot_notices import Kind, queues, spot_event
from autoscaler.sandbox.stack.state import StackState, read_state

fault_app = typer.Typer(
    help="Capacity faults: launches of a type, zone or market that the sandbox's moto "
    "refuses with a capacity error, as EC2 does in a spot outage.", no_args_is_help=True)
scores_app = typer.Typer(
    help="Spot placement scores (1-10 per zone) that the sandbox's moto answers; the service "
    "reads them with clouds.aws.spot_placement_scores: true.", no_args_is_help=True)


class Market(StrEnum):
    spot = "spot"
    on_demand = "on-demand"


# EC2's codes among those the service treats as a capacity error (the dotted ones are
# Alibaba Cloud's, which moto does not stand for).
Code = StrEnum("Code", {c: c for c in CAPACITY_CODES if "." not in c})  # type: ignore[misc]


def _running(directory: Path) -> StackState:
    """The state of the sandbox running in ``directory``; refused when none runs there (its
    moto starts with no fault, no score and empty queues, so a change made before would not
    count)."""
    state = read_state(directory)
    if state is None or not running(state):
        fail(f"no running sandbox in {directory} (start one: gpu-autoscaler sandbox up --dir "
             f"{directory})")
    return state


def _market_file(directory: Path, key: str, name: str) -> Path:
    """The file a running sandbox in ``directory`` reads."""
    directory = directory.resolve()
    return Path(_running(directory).endpoints.get(key) or directory / "moto" / name)


def _faults_file(directory: Path) -> Path:
    return _market_file(directory, "moto_faults", "moto-faults.json")


def _scores_file(directory: Path) -> Path:
    return _market_file(directory, "moto_spot_scores", "moto-spot-scores.json")


def _check_types(types: Sequence[str]) -> None:
    catalog = default_catalog()
    for name in types:
        try:
            catalog.get("aws", name)
        except UnknownInstanceTypeError as exc:
            fail(str(exc))


def _region_of(zone: str) -> str:
    region = next((r for r, zones in REGIONS["aws"].items() if zone in zones), None)
    if region is None:
        fail(f"'{zone}' is not an AWS availability zone in the catalog (a zone is its region "
             "and a letter, e.g. us-east-1a)")
    return region


def _show_faults(path: Path) -> None:
    faults = read_faults(path)
    if not faults:
        console.print("no capacity faults: every launch succeeds", highlight=False)
        return
    table = Table(title=f"Capacity faults ({path})")
    for col in ("type", "zone", "market", "refused with"):
        table.add_column(col)
    for f in faults:
        table.add_row(f.instance_type or "any", f.zone or "any", f.market or "any", f.code)
    console.print(table)


def _show_scores(path: Path) -> None:
    scores = read_scores(path)
    if not scores:
        console.print("no Spot placement scores: every request gets an empty answer",
                      highlight=False)
        return
    table = Table(title=f"Spot placement scores ({path})")
    for col in ("region", "zone", "score", "for types"):
        table.add_column(col)
    for s in scores:
        table.add_row(s.region, s.zone, str(s.score), ", ".join(s.instance_types) or "any set")
    console.print(table)


@fault_app.command("add")
def fault_add(
    instance_type: Annotated[str, typer.Option("--type", help="Instance type (any when left out).")] = "",
    zone: Annotated[str, typer.Option("--zone", help="Availability zone (any when left out).")] = "",
    market: Annotated[Market | None, typer.Option(
        "--market", help="Refuse only spot or only on-demand launches (both when left out).")] = None,
    code: Annotated[Code, typer.Option(
        "--code", help="The EC2 error code of the refusal.")] = Code("InsufficientInstanceCapacity"),
    directory: DirOption = DEFAULT_DIR,
) -> None:
    """Refuse every launch that matches all the given fields, from the next launch on."""
    if not (instance_type or zone or market):
        fail("name at least one of --type, --zone and --market (a fault on every launch is "
             "not what a spot outage looks like)")
    if instance_type:
        _check_types([instance_type])
    if zone:
        _region_of(zone)
    path = _faults_file(directory)
    add_fault(path, CapacityFault(instance_type, zone, market.value if market else "", code.value))
    _show_faults(path)


@fault_app.command("list")
def fault_list(directory: DirOption = DEFAULT_DIR) -> None:
    """The capacity faults in force."""
    _show_faults(_faults_file(directory))


@fault_app.command("clear")
def fault_clear(directory: DirOption = DEFAULT_DIR) -> None:
    """End every capacity fault: launches succeed again."""
    path = _faults_file(directory)
    write_faults(path, [])
    _show_faults(path)


@scores_app.command("set")
def scores_set(
    region: Annotated[str, typer.Argument(help="AWS region asked about, e.g. us-east-1.")],
    zone_scores: Annotated[list[str], typer.Argument(
        metavar="ZONE=SCORE...", help="A score of 1-10 per zone of the region, e.g. us-east-1a=9.")],
    types: Annotated[str, typer.Option(
        "--types", help="Comma-separated instance types: the scores answer only a request for "
        "exactly this set (any set when left out).")] = "",
    directory: DirOption = DEFAULT_DIR,
) -> None:
    """Answer these scores from now on, replacing those of the same zones and set of types."""
    problem = region_problem("aws", region)
    if problem:
        fail(problem)
    wanted = tuple(sorted({t.strip() for t in types.split(",") if t.strip()}))
    _check_types(wanted)
    new: list[SpotScoreRule] = []
    for item in zone_scores:
        zone, sep, text = item.partition("=")
        if not sep or not text.strip().isdigit() or not 1 <= int(text) <= 10:
            fail(f"'{item}' is not ZONE=SCORE with a score of 1-10 (e.g. {region}a=9)")
        problem = zone_problem("aws", region, zone)
        if problem:
            fail(problem)
        new.append(SpotScoreRule(region, zone, int(text), wanted))
    path = _scores_file(directory)
    replaced = {(s.region, s.zone, s.instance_types) for s in new}
    kept = [s for s in read_scores(path) if (s.region, s.zone, tuple(sorted(s.instance_types)))
            not in replaced]
    write_scores(path, [*kept, *new])
    _show_scores(path)


@scores_app.command("list")
def scores_list(directory: DirOption = DEFAULT_DIR) -> None:
    """The Spot placement scores answered."""
    _show_scores(_scores_file(directory))


@scores_app.command("clear")
def scores_clear(directory: DirOption = DEFAULT_DIR) -> None:
    """Answer no scores (an empty answer, as for a region EC2 has no data on)."""
    path = _scores_file(directory)
    write_scores(path, [])
    _show_scores(path)


def _instance(endpoint: str, regions: Sequence[str], node: str) -> tuple[str, dict[str, Any]]:
    """The region and the pending or running instance of ``node`` (a node name, or an
    instance id), among the regions that have a queue."""
    key = "instance-id" if node.startswith("i-") else "tag:node"
    found = []
    for region in regions:
        ec2 = sandbox_client("ec2", endpoint, region, attempts=2)
        pages = ec2.get_paginator("describe_instances").paginate(
            Filters=[{"Name": key, "Values": [node]},
                     {"Name": "instance-state-name", "Values": ["pending", "running"]}])
        found += [(region, i) for page in pages for r in page["Reservations"] for i in r["Instances"]]
    if len(found) != 1:
        fail(f"{len(found) or 'no'} running instances for {node!r} in {', '.join(regions)} "
             "(gpu-autoscaler sandbox status lists the sandbox's instances)")
    return found[0]


def _reclaim(ec2: Any, instance_id: str, node: str, after_s: float) -> None:
    """Terminate the instance ``after_s`` from now, as EC2 ends a spot instance after its
    warning, unless it is gone by then (the service drained and removed it first)."""
    console.print(f"EC2 reclaims {instance_id} in {after_s:.0f} s (Ctrl-C leaves it running)",
                  highlight=False)
    deadline = time.monotonic() + after_s
    try:
        while (left := deadline - time.monotonic()) > 0:
            time.sleep(min(left, 1.0))
    except KeyboardInterrupt:
        console.print(f"not reclaimed: {instance_id} keeps running", highlight=False)
        raise typer.Exit(130) from None
    state = ec2.describe_instances(InstanceIds=[instance_id])["Reservations"][0]["Instances"][0][
        "State"]["Name"]
    if state in ("shutting-down", "terminated"):
        console.print(f"{node}: {instance_id} was already {state} (the service removed it "
                      "before the reclaim)", highlight=False)
        return
    ec2.terminate_instances(InstanceIds=[instance_id])
    console.print(f"{node}: {instance_id} reclaimed (terminated; it was {state})", highlight=False)


def interrupt(
    node: Annotated[str, typer.Argument(help="The node's name (its instance's node tag) or its "
                                        "instance id.")],
    rebalance: Annotated[bool, typer.Option(
        "--rebalance", help="Send a rebalance recommendation (elevated risk, nothing reclaimed) "
        "instead of an interruption warning.")] = False,
    reclaim_after: Annotated[str, typer.Option(
        "--reclaim-after", help="How long after the warning the instance is terminated (EC2: "
        "2m; 0s: at once).")] = "2m",
    no_reclaim: Annotated[bool, typer.Option(
        "--no-reclaim", help="Send the warning only: the instance keeps running.")] = False,
    directory: DirOption = DEFAULT_DIR,
) -> None:
    """Send a spot notice for a node to the sandbox's interruption queue, as EC2 does, and
    reclaim the instance when the warning runs out. The service reads the queue
    (clouds.aws.sqs_queue_urls in the sandbox's service.yaml): it drains the node, and decides
    its replacement."""
    try:
        wait = parse_duration(reclaim_after).total_seconds()
    except ValueError as exc:
        fail(f"--reclaim-after: {exc}")
    if not 0 <= wait <= 3600:
        fail("--reclaim-after must be between 0s and 1h (EC2 reclaims after "
             f"{SPOT_NOTICE.total_seconds():.0f} s)")
    directory = directory.resolve()
    state = _running(directory)
    urls = queues(state.endpoints)
    endpoint = state.endpoints.get("moto")
    if not urls or endpoint is None:
        fail(f"the sandbox in {directory} has no interruption queue (started by an older "
             "version: gpu-autoscaler sandbox down, then up)")
    from botocore.exceptions import BotoCoreError, ClientError

    try:
        region, instance = _instance(endpoint, sorted(urls), node)
        instance_id = str(instance["InstanceId"])
        if instance.get("InstanceLifecycle") != "spot":
            fail(f"{node} ({instance_id}) is an on-demand instance: EC2 sends spot notices only for "
                 "spot instances")
        zone = str(instance.get("Placement", {}).get("AvailabilityZone", region))
        account = str(sandbox_client("sts", endpoint, region, attempts=2).get_caller_identity()["Account"])
        kind: Kind = "rebalance" if rebalance else "interruption"
        sandbox_client("sqs", endpoint, region, attempts=2).send_message(
            QueueUrl=urls[region], MessageBody=spot_event(kind, instance_id, region, zone, account))
        what = "rebalance recommendation" if rebalance else "spot interruption warning"
        console.print(f"{node}: {what} for {instance_id} ({zone}) sent to {urls[region]}",
                      highlight=False)
        if not rebalance and not no_reclaim:
            _reclaim(sandbox_client("ec2", endpoint, region, attempts=2), instance_id, node, wait)
    except (BotoCoreError, ClientError) as exc:  # moto gone, or an answer it refused
        fail(f"the sandbox's moto at {endpoint} did not answer: {exc}")


def register(sandbox_app: typer.Typer) -> None:
    sandbox_app.add_typer(fault_app, name="fault")
    sandbox_app.add_typer(scores_app, name="scores")
    sandbox_app.command("interrupt")(interrupt)

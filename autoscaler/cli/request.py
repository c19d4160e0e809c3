"""``gpu-autoscaler request create|wait|release|list``: capacity requests for pipelines.

A CI step runs ``create`` (with an idempotency key, so a retried step does not buy twice),
``wait`` (blocks until Provisioned or Failed, within a deadline, and prints the node
names, one a line, or the request as JSON), runs its job on the nodes, and ``release``.
The team's token is read from an environment variable, never from the command line.
"""

from __future__ import annotations

import json
import time
from typing import Annotated, Any

import typer
from pydantic import Field

from autoscaler.cli.common import fail, finite, service_url
from autoscaler.cli.service_api import Answer, Line, call, shaped, token_from
from autoscaler.model.request_spec import (
    MAX_GPUS_PER_NODE,
    MAX_NODES_PER_REQUEST,
    MAX_TTL,
    Condition,
    RequestId,
    request_id,
)

request_app = typer.Typer(help="Capacity requests: ask for GPUs, wait for them, release them.",
                          no_args_is_help=True)

UrlOption = Annotated[str, typer.Option("--url", parser=service_url,
                                        help="The service's HTTP address.")]
TokenOption = Annotated[str, typer.Option(
    "--token-env", help="Environment variable holding the team's bearer token.")]
JsonOption = Annotated[bool, typer.Option("--json", help="Print the request as JSON.")]
IdArgument = Annotated[str, typer.Argument(parser=request_id, help="The id create printed.")]
DEFAULT_URL = "http://127.0.0.1:9464"
DEFAULT_TOKEN_ENV = "GPU_AUTOSCALER_TOKEN"
DONE = {"Provisioned": 0, "Failed": 1, "Released": 1, "BookingExpired": 1}
MAX_WAIT_S = MAX_TTL.total_seconds()


class RequestAnswer(Answer):
    """What the CLI reads of a request the service answers with."""

    id: RequestId
    condition: Condition
    reason: Line
    nodes: dict[Annotated[str, Field(pattern=r"^[A-Za-z0-9][A-Za-z0-9._-]{0,252}$")],
                Line | None] = Field(default_factory=dict)


class RequestList(Answer):
    requests: list[RequestAnswer]


def ask(url: str, token_env: str, method: str, path: str,
        body: dict[str, Any] | None = None) -> tuple[RequestAnswer, Any]:
    """One request as the service answered it: checked, and as sent (for --json)."""
    raw = call(url, method, path, token_from(token_env), body)
    return shaped(RequestAnswer, raw, f"{method} {path}"), raw


def _show(view: RequestAnswer, raw: Any, as_json: bool) -> None:
    if as_json:
        typer.echo(json.dumps(raw, indent=2))
    else:
        typer.echo(f"{view.id} {view.condition.value}: {view.reason}")


@request_app.command("create")
def create(
    name: Annotated[str, typer.Option("--name", help="What the pipeline calls it, e.g. ci-4711.")],
    gpus: Annotated[int, typer.Option("--gpus", min=1, max=MAX_GPUS_PER_NODE,
                                      help="GPUs per node.")],
    nodes: Annotated[int, typer.Option("--nodes", min=1, max=MAX_NODES_PER_REQUEST,
                                       help="Nodes.")] = 1,
    gpu_model: Annotated[str | None, typer.Option(
        "--gpu-model", help="e.g. V100: any type with this model and --gpus GPUs. Give this "
        "or --instance-type.")] = None,
    instance_type: Annotated[str | None, typer.Option(
        "--instance-type", help="e.g. p3.8xlarge: exactly this type. Give this or "
        "--gpu-model.")] = None,
    request_class: Annotated[str, typer.Option("--class", help="atomic, best-effort or check.")]
    = "atomic",
    ttl: Annotated[str, typer.Option("--ttl", help="Released this long after Provisioned.")]
    = "24h",
    pool: Annotated[str | None, typer.Option("--pool", help="The team's pool (default: any).")]
    = None,
    slurm_job: Annotated[str | None, typer.Option("--slurm-job", help="Release when it ends.")]
    = None,
    idempotency_key: Annotated[str | None, typer.Option(
        "--idempotency-key", help="The same key makes one request however often it is sent.")]
    = None,
    dry_run: Annotated[bool, typer.Option("--dry-run", help="Preview the cost; buy nothing.")]
    = False,
    url: UrlOption = DEFAULT_URL, token_env: TokenOption = DEFAULT_TOKEN_ENV,
    as_json: JsonOption = False,
) -> None:
    """Ask for nodes; prints the request id (or the request as JSON).

    With --dry-run nothing is bought: it prints the id with the service's answer
    and its cost preview ($/h on-demand); one that would be refused exits 1 with
    the reason.
    """
    if (gpu_model is None) == (instance_type is None):
        fail("give exactly one of --gpu-model (e.g. V100) or --instance-type (e.g. p3.8xlarge)")
    node_set: dict[str, Any] = {"gpus": gpus, "nodes": nodes}
    node_set.update({k: v for k, v in (("gpu_model", gpu_model),
                                       ("instance_type", instance_type)) if v is not None})
    body: dict[str, Any] = {"name": name, "class": request_class, "ttl": ttl,
                            "node_sets": [node_set], "dry_run": dry_run}
    optional = (("pool", pool), ("idempotency_key", idempotency_key),
                ("link", {"slurm_job": slurm_job} if slurm_job else None))
    body.update({k: v for k, v in optional if v is not None})
    view, raw = ask(url, token_env, "POST", "/v1/requests", body)
    if as_json:
        _show(view, raw, True)
    elif dry_run and view.condition is not Condition.FAILED:  # its answer is the cost preview
        _show(view, raw, False)
    else:
        typer.echo(view.id)
    if view.condition is Condition.FAILED:
        fail(view.reason)


@request_app.command("wait")
def wait(
    request_id: IdArgument,
    timeout: Annotated[float, typer.Option("--timeout", parser=finite(0, MAX_WAIT_S, " s"),
                                           help="Seconds to wait at most.")] = 1800,
    poll: Annotated[float, typer.Option("--poll", parser=finite(0.1, 3600, " s"),
                                        help="Seconds between looks.")] = 5,
    url: UrlOption = DEFAULT_URL, token_env: TokenOption = DEFAULT_TOKEN_ENV,
    as_json: JsonOption = False,
) -> None:
    """Block until Provisioned (print the node names) or Failed (exit 1); exit 2 at the deadline."""
    deadline = time.monotonic() + timeout
    while True:
        view, raw = ask(url, token_env, "GET", f"/v1/requests/{request_id}")
        code = DONE.get(view.condition.value)
        if code is not None:
            if as_json:
                _show(view, raw, True)
            elif code == 0:
                typer.echo("\n".join(sorted(view.nodes)))
            if code:
                fail(f"{view.condition.value}: {view.reason}")
            return
        left = deadline - time.monotonic()
        if left <= 0:
            fail(f"{request_id} is still {view.condition.value} after {timeout:g}s: "
                 f"{view.reason}", code=2)
        time.sleep(min(poll, left))


@request_app.command("release")
def release(
    request_id: IdArgument,
    url: UrlOption = DEFAULT_URL, token_env: TokenOption = DEFAULT_TOKEN_ENV,
    as_json: JsonOption = False,
) -> None:
    """Release the request: its nodes take the usual drain."""
    _show(*ask(url, token_env, "DELETE", f"/v1/requests/{request_id}"), as_json)


@request_app.command("list")
def list_requests(
    url: UrlOption = DEFAULT_URL, token_env: TokenOption = DEFAULT_TOKEN_ENV,
    as_json: JsonOption = False,
) -> None:
    """The team's requests with their conditions and reasons."""
    raw = call(url, "GET", "/v1/requests", token_from(token_env))
    views = shaped(RequestList, raw, "GET /v1/requests").requests
    if as_json:
        typer.echo(json.dumps(raw["requests"], indent=2))
        return
    for view in views:
        _show(view, None, False)


def register(app: typer.Typer) -> None:
    app.add_typer(request_app, name="request")

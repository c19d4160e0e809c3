"""``gpu-autoscaler request create|wait|release|list``: capacity requests for pipelines.

A CI step runs ``create`` (with an idempotency key, so a retried step does not buy twice),
``wait`` (blocks until Provisioned or Failed, within a deadline, and prints the node
names, one a line, or the request as JSON), runs its job on the nodes, and ``release``.
The team's token is read from an environment variable, never from the command line.
"""

from __future__ import annotations

import json
import os
import time
import urllib.error
import urllib.request
from typing import Annotated, Any

import typer

from autoscaler.cli.common import fail

request_app = typer.Typer(help="Capacity requests: ask for GPUs, wait for them, release them.",
                          no_args_is_help=True)

UrlOption = Annotated[str, typer.Option("--url", help="The service's HTTP address.")]
TokenOption = Annotated[str, typer.Option(
    "--token-env", help="Environment variable holding the team's bearer token.")]
JsonOption = Annotated[bool, typer.Option("--json", help="Print the request as JSON.")]
DEFAULT_URL = "http://127.0.0.1:9464"
DEFAULT_TOKEN_ENV = "GPU_AUTOSCALER_TOKEN"
DONE = {"Provisioned": 0, "Failed": 1, "Released": 1, "BookingExpired": 1}


def call(url: str, token_env: str, method: str, path: str,
         body: dict[str, Any] | None = None, timeout: float = 10) -> dict[str, Any]:
    token = os.environ.get(token_env)
    if not token:
        fail(f"environment variable {token_env} is not set (the team's token)")
    data = json.dumps(body).encode() if body is not None else None
    req = urllib.request.Request(url.rstrip("/") + path, data=data, method=method)
    req.add_header("Authorization", f"Bearer {token}")
    if data is not None:
        req.add_header("Content-Type", "application/json")
    try:
        with urllib.request.urlopen(req, timeout=timeout) as resp:
            answer: dict[str, Any] = json.loads(resp.read())
            return answer
    except urllib.error.HTTPError as exc:
        try:
            detail = json.loads(exc.read())
        except ValueError:
            detail = {}
        problems = "; ".join(f"{p['field']}: {p['problem']}" for p in detail.get("problems", []))
        fail(f"{method} {path}: HTTP {exc.code}: {detail.get('error', '')} {problems}".strip())
    except (urllib.error.URLError, OSError) as exc:
        fail(f"cannot reach the service at {url}: {getattr(exc, 'reason', exc)}")


def _show(view: dict[str, Any], as_json: bool) -> None:
    if as_json:
        typer.echo(json.dumps(view, indent=2))
    else:
        typer.echo(f"{view['id']} {view['condition']}: {view['reason']}")


@request_app.command("create")
def create(
    name: Annotated[str, typer.Option("--name", help="What the pipeline calls it, e.g. ci-4711.")],
    gpus: Annotated[int, typer.Option("--gpus", help="GPUs per node.")],
    nodes: Annotated[int, typer.Option("--nodes", help="Nodes.")] = 1,
    gpu_model: Annotated[str | None, typer.Option("--gpu-model", help="e.g. V100.")] = None,
    instance_type: Annotated[str | None, typer.Option("--instance-type")] = None,
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
    """Ask for nodes; prints the request id (or the request as JSON)."""
    node_set: dict[str, Any] = {"gpus": gpus, "nodes": nodes}
    node_set.update({k: v for k, v in (("gpu_model", gpu_model),
                                       ("instance_type", instance_type)) if v is not None})
    body: dict[str, Any] = {"name": name, "class": request_class, "ttl": ttl,
                            "node_sets": [node_set], "dry_run": dry_run}
    optional = (("pool", pool), ("idempotency_key", idempotency_key),
                ("link", {"slurm_job": slurm_job} if slurm_job else None))
    body.update({k: v for k, v in optional if v is not None})
    view = call(url, token_env, "POST", "/v1/requests", body)
    if as_json:
        _show(view, True)
    else:
        typer.echo(view["id"])
    if view["condition"] == "Failed":
        fail(view["reason"])


@request_app.command("wait")
def wait(
    request_id: Annotated[str, typer.Argument(help="The id create printed.")],
    timeout: Annotated[float, typer.Option("--timeout", help="Seconds to wait at most.")] = 1800,
    poll: Annotated[float, typer.Option("--poll", help="Seconds between looks.")] = 5,
    url: UrlOption = DEFAULT_URL, token_env: TokenOption = DEFAULT_TOKEN_ENV,
    as_json: JsonOption = False,
) -> None:
    """Block until Provisioned (print the node names) or Failed (exit 1); exit 2 at the deadline."""
    deadline = time.monotonic() + timeout
    while True:
        view = call(url, token_env, "GET", f"/v1/requests/{request_id}")
        code = DONE.get(view["condition"])
        if code is not None:
            if as_json:
                _show(view, True)
            elif code == 0:
                typer.echo("\n".join(sorted(view["nodes"])))
            if code:
                fail(f"{view['condition']}: {view['reason']}")
            return
        left = deadline - time.monotonic()
        if left <= 0:
            fail(f"{request_id} is still {view['condition']} after {timeout:g}s: "
                 f"{view['reason']}", code=2)
        time.sleep(min(poll, left))


@request_app.command("release")
def release(
    request_id: Annotated[str, typer.Argument(help="The id create printed.")],
    url: UrlOption = DEFAULT_URL, token_env: TokenOption = DEFAULT_TOKEN_ENV,
    as_json: JsonOption = False,
) -> None:
    """Release the request: its nodes take the usual drain."""
    _show(call(url, token_env, "DELETE", f"/v1/requests/{request_id}"), as_json)


@request_app.command("list")
def list_requests(
    url: UrlOption = DEFAULT_URL, token_env: TokenOption = DEFAULT_TOKEN_ENV,
    as_json: JsonOption = False,
) -> None:
    """The team's requests with their conditions and reasons."""
    views = call(url, token_env, "GET", "/v1/requests")["requests"]
    if as_json:
        typer.echo(json.dumps(views, indent=2))
        return
    for view in views:
        _show(view, False)


def register(app: typer.Typer) -> None:
    app.add_typer(request_app, name="request")

"""Terraform: the binary, and per cloud region the provider from the plugin mirror, the
backend and its state lock, in a workspace of the doctor's own (``<workdir>/gpu-autoscaler-doctor/``,
state key ``<prefix>/gpu-autoscaler-doctor/<cloud>-<region>/``): ``terraform init`` installs the provider
and opens the backend (an S3 bucket that is not there fails here), and a plan of an empty
node map takes the state lock and releases it. No pool's state or lock is touched."""

from __future__ import annotations

import json
import shutil
import subprocess

from autoscaler.actuators.terraform import (
    PoolWorkspace,
    ProviderUnavailableError,
    S3Backend,
    StateLockedError,
    TerraformError,
)
from autoscaler.service.doctor.context import Context
from autoscaler.service.doctor.report import Result, fail, ok, skip

# The doctor's workspace: a team name no policy is expected to use (the pool module takes
# lowercase letters, digits and dashes only), pool ``<cloud>-<region>``.
TEAM = "gpu-autoscaler-doctor"
COMMAND_S = 50.0  # per terraform command; the check's deadline covers init and plan


def binary(ctx: Context) -> list[Result]:
    """``terraform version -json`` of ``terraform.terraform_bin``."""
    name = ctx.config.terraform.terraform_bin
    path = shutil.which(name)
    if path is None:
        return [fail("terraform", f"{name} not found (terraform.terraform_bin)")]
    try:
        out = subprocess.run([path, "version", "-json"], capture_output=True, text=True,
                             timeout=10, check=False, env={"CHECKPOINT_DISABLE": "1"})
    except (OSError, subprocess.TimeoutExpired) as exc:
        return [fail("terraform", f"{path} version: {exc}")]
    try:
        version = json.loads(out.stdout).get("terraform_version", "?")
    except (json.JSONDecodeError, AttributeError):
        return [fail("terraform", f"{path} version -json answered no version "
                                  f"(exit {out.returncode})")]
    return [ok("terraform", f"Terraform {version} at {path}")]


def workspaces(ctx: Context) -> list[Result]:
    """Per cloud region of the pools (with Terraform inputs): init, then a locked plan."""
    regions = sorted({(p.cloud.value, p.region) for _, p in ctx.pools()})
    if not regions:
        return [skip("terraform backend", "no pool")]
    if shutil.which(ctx.config.terraform.terraform_bin) is None:
        return [skip("terraform backend", "no terraform binary")]
    return [_workspace(ctx, cloud, region) for cloud, region in regions]


def _workspace(ctx: Context, cloud: str, region: str) -> Result:
    name = f"terraform backend {cloud}/{region}"
    settings = ctx.config.terraform
    if settings.inputs_for(cloud, region) is None:
        return fail(name, f"no terraform.regions[{cloud}/{region}] inputs: these pools are "
                          "never planned")
    ws = PoolWorkspace(settings, TEAM, f"{cloud}-{region}", cloud, region)
    ws.runner.timeout_s = COMMAND_S
    backend = _backend(ctx)
    try:
        ws.init(again=True)  # the mirror is not in the root module: init each time
    except ProviderUnavailableError:
        return fail(name, f"the {cloud} provider is not in the plugin mirror "
                          f"{settings.plugin_mirror} (terraform init)")
    except TerraformError as exc:
        return fail(name, f"terraform init of the {backend} backend failed: {_first(exc)}")
    try:
        ws.plan({})
    except StateLockedError:
        return fail(name, f"the state lock in the {backend} backend is held by another run "
                          f"(the doctor's own key, {TEAM}/)")
    except TerraformError as exc:
        return fail(name, f"plan with -lock in the {backend} backend failed: {_first(exc)}")
    finally:
        ws.discard_plan()
    return ok(name, f"provider from {settings.plugin_mirror}; {backend} backend opened; "
                    "state lock taken and released")


def _backend(ctx: Context) -> str:
    backend = ctx.config.terraform.backend
    if isinstance(backend, S3Backend):
        return f"s3://{backend.bucket}"
    return "local"


def _first(exc: TerraformError) -> str:
    """The first diagnostic line that says something (the command line is in the log)."""
    lines = [line.strip() for line in (exc.detail or str(exc)).splitlines() if line.strip()]
    useful = [line for line in lines if not line.startswith("terraform ")]
    return (useful or lines or ["no output"])[0][:300]

"""``gpu-autoscaler doctor``: every dependency of the service checked once, up front, into
one table with a reason per row, instead of failing tick by tick in the log.

``diagnose(path)`` loads the config, the policies and the store (in that order: nothing
else can be checked without them), then runs :data:`CHECKS` side by side, each under its
own deadline. Rows are ``ok``, ``fail`` or ``skip`` (does not apply to this config); the
command exits 0 only when no row failed. Secrets are read to be checked, never printed.
"""

from __future__ import annotations

import concurrent.futures
from collections.abc import Collection
from pathlib import Path

from autoscaler.service.doctor import aws, basics, schedulers, signals, terraform
from autoscaler.service.doctor.context import Context, load
from autoscaler.service.doctor.report import Check, Result, Status, in_background, passed, run_checks

CHECKS: tuple[Check[Context], ...] = (
    Check("secrets", basics.secrets, help="Every secret the config names (HTTP and team "
          "tokens, store password) is readable; an HTTP listen address that is not loopback "
          "has a token."),
    Check("ssh user", basics.ssh_user, help="ansible.ssh_user: root is a warning (cloud "
          "images refuse root logins over SSH; use the image's own user, with sudo)."),
    Check("prices", basics.prices, 20, help="A price for every instance type of every pool "
          "(the market's when clouds.market_prices is on, else the catalog and price file)."),
    Check("aws credentials", aws.credentials, help="STS GetCallerIdentity with the standard "
          "credential chain; the account is clouds.aws.account_id when set."),
    Check("ec2", aws.ec2, 20, help="Per AWS region: RunInstances of the pools' first type "
          "with the region's Terraform inputs, and TerminateInstances of one of our "
          "instances, both with DryRun (nothing is launched or ended)."),
    Check("spot scores", aws.spot_scores, help="With clouds.aws.spot_placement_scores on: "
          "per AWS region, GetSpotPlacementScores of a scored pool's types, with DryRun."),
    Check("sqs", aws.queues, help="Per region with spot pools: the interruption queue is "
          "readable and its policy lets EventBridge send; messages are counted, not received."),
    Check("terraform", terraform.binary, help="terraform version of terraform.terraform_bin."),
    Check("terraform backend", terraform.workspaces, 150, help="Per cloud region: terraform "
          "init in a workspace of the doctor's own (provider from the plugin mirror, backend "
          "opened), then a plan of no nodes that takes and releases the state lock."),
    Check("prometheus", signals.prometheus, 20, help="The tick's own read for every ready "
          "or draining node in the store: each has recent DCGM utilization samples. And "
          "every pool's window and idle_for hold two scrapes of the DCGM targets (their "
          "interval from Prometheus' targets API)."),
    Check("slurm", schedulers.slurm, 30, help="scontrol ping is UP, the pools' partitions "
          "exist, squeue and scancel run, and the command user may drain nodes."),
    Check("kubernetes", schedulers.kubernetes, 20, help="Nodes and pods are listed; a "
          "SelfSubjectAccessReview per right the drainer uses (when the server answers them)."),
)
LOAD_S = 30.0  # config, policies and the store (a database that does not answer)
# The whole command: loading, then the slowest check's deadline.
TOTAL_S = LOAD_S + max(c.timeout_s for c in CHECKS)


def diagnose(path: Path, only: Collection[str] = ()) -> list[Result]:
    """Every row, in :data:`CHECKS` order after the config, policies and store rows;
    ``only``: just these checks (by name) after loading."""
    unknown = set(only) - {c.name for c in CHECKS}
    if unknown:
        raise ValueError(f"no check named {', '.join(sorted(unknown))} (known: "
                         f"{', '.join(c.name for c in CHECKS)})")
    checks = [c for c in CHECKS if not only or c.name in only]
    try:
        context, rows = in_background("doctor-load", load, path).result(timeout=LOAD_S)
    except concurrent.futures.TimeoutError:
        context, rows = None, [Result("store", Status.FAIL, f"config, policies and store not "
                                      f"loaded within {LOAD_S:g}s")]
    except Exception as exc:  # a row, never a traceback: the table is the report
        context, rows = None, [Result("config", Status.FAIL, f"{type(exc).__name__}: {exc}")]
    if context is None:
        return [*rows, *(Result(c.name, Status.SKIP, "the config or store did not load")
                         for c in checks)]
    return [*rows, *run_checks(checks, context)]


__all__ = ["CHECKS", "TOTAL_S", "Check", "Context", "Result", "Status", "diagnose", "passed"]

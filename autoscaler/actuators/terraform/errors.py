"""Terraform failures as typed errors, and cloud capacity errors as engine input.

Capacity errors come from the diagnostics of ``terraform apply -json``: each names the
resource address (so the node) and carries the cloud's error code in its text.
"""

from __future__ import annotations

import re
from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from datetime import datetime

from autoscaler.model.snapshot import CapacityError
from autoscaler.policy.models import Market


class TerraformError(RuntimeError):
    """A terraform command failed; ``detail`` holds its error diagnostics."""

    def __init__(self, message: str, detail: str = ""):
        super().__init__(f"{message}\n{detail}".rstrip())
        self.detail = detail


class StateLockedError(TerraformError):
    """Another run holds the pool's state lock (a concurrent plan or apply)."""


class StalePlanError(TerraformError):
    """The saved plan was made against an older state: plan again before applying."""


class PlanNotFoundError(TerraformError):
    """No saved plan to apply (``gpu-autoscaler plan`` was not run, or it was applied)."""


class ProviderUnavailableError(TerraformError):
    """``terraform init`` could not install the provider from the local mirror."""


# Codes that mean "no capacity for this (type, zone, market) now": the engine avoids the
# offering for a while and falls back to the next type or market.
CAPACITY_CODES = (
    "InsufficientInstanceCapacity",
    "SpotMaxPriceTooLow",
    "MaxSpotInstanceCountExceeded",
    "InstanceLimitExceeded",
    "VcpuLimitExceeded",
    "Unsupported",
    "OperationDenied.NoStock",
)
_CODE_RE = re.compile(
    r"(?<![A-Za-z.])(" + "|".join(re.escape(c) for c in CAPACITY_CODES) + r")(?![A-Za-z])"
)
# A node's instance, or a warm-pool node's power state (a start the cloud refused).
_NODE_RE = re.compile(r'\.(?:node|power)\["([^"]+)"\]')

_LOCK_MARKERS = ("Error acquiring the state lock", "Error locking state")
_STALE_MARKERS = ("Saved plan is stale",)


@dataclass(frozen=True)
class Diagnostic:
    severity: str
    summary: str
    detail: str = ""
    address: str = ""

    @property
    def text(self) -> str:
        return f"{self.summary}: {self.detail}" if self.detail else self.summary

    @property
    def node(self) -> str | None:
        match = _NODE_RE.search(self.address)
        return match.group(1) if match else None


def capacity_code(text: str) -> str | None:
    match = _CODE_RE.search(text)
    return match.group(1) if match else None


def classify(message: str, diagnostics: Iterable[Diagnostic]) -> TerraformError:
    """The most specific error for a failed command."""
    diags = [d for d in diagnostics if d.severity == "error"]
    detail = "\n".join(d.text for d in diags)
    text = f"{detail}\n{message}"
    if any(m in text for m in _LOCK_MARKERS):
        return StateLockedError(f"{message}: the state is locked by another run "
                                "(a concurrent plan or apply on this pool); try again later",
                                _lock_info(detail))
    if any(m in text for m in _STALE_MARKERS):
        return StalePlanError(f"{message}: the saved plan is older than the state; "
                              "run `gpu-autoscaler plan` again", detail)
    return TerraformError(message, detail)


def _lock_info(detail: str) -> str:
    """Keep who holds the lock and since when, drop the rest of Terraform's advice."""
    keep = ("ID:", "Path:", "Operation:", "Who:", "Created:")
    lines = [ln.strip() for ln in detail.splitlines() if ln.strip().startswith(keep)]
    if lines:
        return "\n".join(lines)
    return detail.splitlines()[0] if detail else ""


@dataclass(frozen=True)
class NodeTarget:
    """What a node was asked to be, to describe its failure."""

    instance_type: str
    market: Market
    zone: str


def capacity_errors(diagnostics: Iterable[Diagnostic], targets: Mapping[str, NodeTarget],
                    cloud: str, region: str, at: datetime) -> dict[str, CapacityError]:
    """One CapacityError per failed node whose diagnostic carries a capacity code."""
    out: dict[str, CapacityError] = {}
    for diag in diagnostics:
        node = diag.node
        code = capacity_code(diag.text)
        if diag.severity != "error" or node is None or code is None or node not in targets:
            continue
        target = targets[node]
        out[node] = CapacityError(
            cloud=cloud, region=region, instance_type=target.instance_type,
            zone=target.zone or None, market=target.market, code=code, at=at,
            message=_one_line(diag.text),
        )
    return out


def _one_line(text: str, limit: int = 300) -> str:
    flat = " ".join(text.split())
    return flat if len(flat) <= limit else flat[: limit - 1] + "…"


_TEXT_BLOCK_RE = re.compile(r"^Error: (?P<summary>.*?)$(?P<body>.*?)(?=^Error: |\Z)",
                            re.MULTILINE | re.DOTALL)
_WITH_RE = re.compile(r"^\s*with (\S+),", re.MULTILINE)


def diagnostics_from_text(output: str) -> list[Diagnostic]:
    """Diagnostics from Terraform's human-readable output (``-no-color``), for commands
    run without ``-json``."""
    out: list[Diagnostic] = []
    plain = "\n".join(ln.replace("│", "").strip() for ln in output.splitlines())
    for block in _TEXT_BLOCK_RE.finditer(plain):
        body = block.group("body")
        with_match = _WITH_RE.search(body)
        detail = "\n".join(ln.strip() for ln in body.splitlines()
                           if ln.strip() and not _WITH_RE.match(ln)
                           and not ln.strip().startswith("on "))
        out.append(Diagnostic("error", block.group("summary").strip(), detail,
                              with_match.group(1) if with_match else ""))
    return out

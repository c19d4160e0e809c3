"""What one hostile case did to the surface it was sent to (bench_hostile.py adds them up).

Each ``benchmarks/hostile_<surface>.py`` exposes ``run() -> list[Outcome]``: it starts the
real surface (the HTTP server, the notice loop on moto's SQS, the Kubernetes reader against
the project's API server, the CLI), sends its cases and stops what it started.
"""

from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True)
class Outcome:
    surface: str  # http, notices, kubernetes, cli, forecast, alerts, policy ...
    case: str
    handled: bool  # refused or ignored as the issue says it must be, and the service still serves
    traceback: bool  # a traceback reached the log or the output
    seconds: float  # wall time to refuse or handle it


__all__ = ["Outcome"]

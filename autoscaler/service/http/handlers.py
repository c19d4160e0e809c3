"""What the HTTP API serves, as plain callables the service hands it (``service/app.py``)."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import Any


@dataclass(frozen=True)
class Health:
    ok: bool
    reason: str


@dataclass(frozen=True)
class ApiHandlers:
    health: Callable[[], Health]
    metrics: Callable[[], bytes]
    status: Callable[[], dict[str, Any]]
    plan: Callable[[], dict[str, Any] | None]
    links: tuple[tuple[str, str], ...] = ()  # (title, url) of the dashboards /ui links to
    # /v1/requests: (method, path, Authorization header, body) -> (code, JSON)
    requests: Callable[[str, str, str, bytes], tuple[int, Any]] | None = None


__all__ = ["ApiHandlers", "Health"]

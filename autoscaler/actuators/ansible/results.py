"""Per-host results of one run, read from ansible-runner's events and stats."""

from __future__ import annotations

import re
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import asdict, dataclass, field
from enum import StrEnum
from pathlib import Path
from typing import Any

MESSAGE_LIMIT = 600
REDACTED = "<redacted>"
# Ansible's own marker for the output of no_log tasks.
_NO_LOG = "the output has been hidden due to the fact that 'no_log: true' was specified"


class HostStatus(StrEnum):
    OK = "ok"
    FAILED = "failed"
    UNREACHABLE = "unreachable"


@dataclass(frozen=True)
class HostResult:
    node: str
    status: HostStatus
    failed_task: str | None = None
    message: str = ""
    changed: int = 0
    ok: int = 0

    def to_json(self) -> dict[str, Any]:
        return {**asdict(self), "status": self.status.value}


@dataclass(frozen=True)
class BootstrapRun:
    """What one ansible-runner run did to each node of its batch."""

    run_id: str
    run_dir: Path
    status: str  # ansible-runner's: successful, failed, timeout, canceled
    duration_s: float
    hosts: dict[str, HostResult] = field(default_factory=dict)
    tags: str | None = None  # the playbook tags it ran with ("node": node-time); None: all
    part: str = "full"  # runner.Part's name: full, node, warm, start, image (a bake), health

    @property
    def ok(self) -> list[str]:
        return sorted(n for n, r in self.hosts.items() if r.status is HostStatus.OK)

    @property
    def failed(self) -> list[str]:
        return sorted(n for n, r in self.hosts.items() if r.status is not HostStatus.OK)

    def changed_total(self) -> int:
        return sum(r.changed for r in self.hosts.values())

    def to_json(self) -> dict[str, Any]:
        return {"run_id": self.run_id, "run_dir": str(self.run_dir), "status": self.status,
                "duration_s": round(self.duration_s, 3), "tags": self.tags,
                "part": self.part,
                "hosts": {n: r.to_json() for n, r in sorted(self.hosts.items())}}


class Redactor:
    """Replaces every secret value (and its base64 decoding, for keys) in text."""

    def __init__(self, secrets: Iterable[str]):
        values = sorted({s for s in secrets if s and len(s) >= 4}, key=len, reverse=True)
        self._pattern = re.compile("|".join(re.escape(v) for v in values)) if values else None

    def __call__(self, text: str) -> str:
        if self._pattern is None or not text:
            return text
        return self._pattern.sub(REDACTED, text)


def _message(res: Mapping[str, Any]) -> str:
    if res.get("censored"):
        return _NO_LOG
    for key in ("msg", "stderr", "stdout", "reason", "exception"):
        value = res.get(key)
        if value:
            return str(value).strip()
    return ""


@dataclass
class _Seen:
    failed_task: str | None = None
    message: str = ""
    unreachable: bool = False
    last_task: str | None = None


def _scan(events: Iterable[Mapping[str, Any]]) -> tuple[dict[str, _Seen], dict[str, Any]]:
    seen: dict[str, _Seen] = {}
    stats: dict[str, Any] = {}
    for event in events:
        kind = event.get("event", "")
        data = event.get("event_data") or {}
        host = data.get("host")
        if kind == "playbook_on_stats":
            stats = data
        if not host:
            continue
        entry = seen.setdefault(host, _Seen())
        task = data.get("task") or data.get("name")
        if kind == "runner_on_start":
            entry.last_task = task
        elif kind == "runner_on_failed" and not data.get("ignore_errors"):
            entry.failed_task, entry.message = task, _message(data.get("res") or {})
        elif kind == "runner_on_unreachable":
            entry.unreachable = True
            entry.failed_task, entry.message = task, _message(data.get("res") or {})
    return seen, stats


def host_results(names: Sequence[str], events: Iterable[Mapping[str, Any]], status: str,
                 timeout_s: float, redact: Redactor) -> dict[str, HostResult]:
    """One result per node name; hosts the run never finished count as failed."""
    seen, stats = _scan(events)

    def count(key: str, host: str) -> int:
        return int((stats.get(key) or {}).get(host, 0))

    results: dict[str, HostResult] = {}
    for name in names:
        entry = seen.get(name, _Seen())
        changed, ok = count("changed", name), count("ok", name)
        if entry.unreachable or count("dark", name):
            result = HostResult(name, HostStatus.UNREACHABLE, entry.failed_task,
                                entry.message or "unreachable", changed, ok)
        elif entry.failed_task is not None or count("failures", name):
            result = HostResult(name, HostStatus.FAILED, entry.failed_task, entry.message,
                                changed, ok)
        elif name not in (stats.get("processed") or {}):
            why = (f"run timed out after {timeout_s:.0f}s" if status == "timeout"
                   else f"run ended ({status}) before this host finished")
            result = HostResult(name, HostStatus.FAILED, entry.last_task, why, changed, ok)
        else:
            result = HostResult(name, HostStatus.OK, None, "", changed, ok)
        results[name] = HostResult(result.node, result.status, result.failed_task,
                                   redact(result.message)[:MESSAGE_LIMIT], result.changed,
                                   result.ok)
    return results

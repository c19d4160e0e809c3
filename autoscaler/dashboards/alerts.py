"""Prometheus alert rules, written once with templated thresholds.

``rules(Thresholds())`` is what ``alerts/gpu-autoscaler.rules.yml`` holds (a test checks the
committed file equals it, ``promtool check rules`` accepts it and ``promtool test rules``
runs ``alerts/tests.yml``). Operators who want other thresholds render their own with
``gpu-autoscaler dashboards alerts --set NAME=VALUE``; the scenario test renders them with
short ``for`` durations so they fire within a minute.
"""

from __future__ import annotations

import io
import re
from typing import Annotated, Any

from pydantic import AfterValidator, BaseModel, ConfigDict, Field, ValidationError
from ruamel.yaml import YAML

from autoscaler.dashboards.panels import NODE_LABEL, THERMAL

P = "gpu_autoscaler"
XID_OFF_THE_BUS = 79
DBE = "DCGM_FI_DEV_ECC_DBE_VOL_TOTAL"

# Prometheus' duration syntax (prometheus/common model.ParseDuration): units largest first,
# each at most once. Anything else (PromQL text included) never reaches a rule.
PROM_DURATION = re.compile(r"(?:[0-9]+y)?(?:[0-9]+w)?(?:[0-9]+d)?(?:[0-9]+h)?(?:[0-9]+m)?"
                           r"(?:[0-9]+s)?(?:[0-9]+ms)?")
_UNIT_S = {"y": 365 * 86400, "w": 7 * 86400, "d": 86400, "h": 3600, "m": 60, "s": 1, "ms": 0.001}
MAX_DURATION_S = 30 * 86400  # an alert that waits longer than a month is not one


def prom_seconds(text: str) -> float:
    """Seconds of a Prometheus duration (``1h30m``)."""
    return sum(int(n) * _UNIT_S[u] for n, u in re.findall(r"([0-9]+)(ms|[ywdhms])", text))


def _duration(text: str, least: float) -> str:
    if not text or len(text) > 32 or not PROM_DURATION.fullmatch(text):
        raise ValueError(f"{text[:40]!r} is not a Prometheus duration (e.g. 90s, 10m, 1h30m)")
    if not least <= prom_seconds(text) <= MAX_DURATION_S:
        raise ValueError(f"{text!r} must be {'above 0' if least else 'at least 0'} and at most "
                         f"{MAX_DURATION_S // 86400} days")
    return text


def _for(text: str) -> str:
    return _duration(text, 0)


def _window(text: str) -> str:
    return _duration(text, 0.001)  # a range selector of 0 is a PromQL error


For = Annotated[str, AfterValidator(_for)]  # how long a condition holds before it fires
Window = Annotated[str, AfterValidator(_window)]  # a range selector: more than 0
Count = Annotated[int, Field(ge=1, le=10_000)]


class Thresholds(BaseModel):
    """The alerts' thresholds: finite numbers in range and Prometheus durations, checked
    when made (overrides from the command line included)."""

    model_config = ConfigDict(frozen=True, extra="forbid", allow_inf_nan=False)

    thermal_for: For = "5m"
    xid_for: For = "0m"
    ecc_window: Window = "10m"
    tick_errors: Count = 3  # failed ticks of one stage ...
    tick_window: Window = "10m"  # ... within this window
    tick_stale_s: int = Field(300, ge=1, le=MAX_DURATION_S)  # no tick finished for this long
    data_missing_for: For = "10m"
    quota_fraction: float = Field(1.0, gt=0, le=1)  # "at quota": usage >= this share of the quota
    quota_for: For = "15m"
    interruptions: Count = 3  # spot interruptions in one pool ...
    interruption_window: Window = "10m"  # ... within this window
    # Time in state / the limit the reconciler acts on (model/lifecycle.state_limit, which
    # includes bootstrap retries, drain grace and the like), so one ratio fits every state.
    stuck_ratio: float = Field(1.5, gt=0, le=100)
    stuck_for: For = "10m"
    backoff_for: For = "15m"

    def with_overrides(self, pairs: dict[str, str]) -> Thresholds:
        """These thresholds with ``NAME=VALUE`` overrides (text, as typed) applied; a
        ValueError names the first that is unknown or out of range."""
        known = type(self).model_fields
        for name in pairs:
            if name not in known:
                raise ValueError(f"unknown threshold {name[:40]!r} (known: {', '.join(sorted(known))})")
        try:
            return type(self).model_validate({**self.model_dump(), **pairs})
        except ValidationError as exc:
            first = exc.errors(include_input=False, include_url=False)[0]
            name = str(first["loc"][0]) if first["loc"] else "?"
            text = pairs.get(name, getattr(self, name, ""))
            raise ValueError(f"threshold {name}={str(text)[:40]!r}: "
                             f"{first['msg'].removeprefix('Value error, ')}") from None


def _alert(name: str, expr: str, for_: str, severity: str, summary: str, description: str
           ) -> dict[str, Any]:
    return {"alert": name, "expr": expr, "for": for_, "labels": {"severity": severity},
            "annotations": {"summary": summary, "description": description}}


def _gpu_rules(t: Thresholds) -> list[dict[str, Any]]:
    node = f"{{{{ $labels.{NODE_LABEL} }}}}"
    gpu = f"{node} GPU {{{{ $labels.gpu }}}}"
    xid = "DCGM_FI_DEV_XID_ERRORS"
    return [
        _alert("GpuThermalThrottling",
               THERMAL.format(v="DCGM_FI_DEV_CLOCK_THROTTLE_REASONS").replace(" bool ", " "),
               t.thermal_for, "warning", f"{gpu} is thermally throttled",
               "NVML reports thermal slowdown (clock throttle reasons 0x20/0x40): the jobs on it "
               "run slower. The engine drains and replaces nodes whose GPUs throttle."),
        _alert("GpuXidError", f"{xid} > 0 and {xid} != {XID_OFF_THE_BUS}", t.xid_for, "warning",
               f"{gpu} reported XID {{{{ $value }}}}",
               "See NVIDIA's XID catalogue; the engine drains and replaces the node."),
        _alert("GpuFellOffTheBus", f"{xid} == {XID_OFF_THE_BUS}", t.xid_for, "critical",
               f"{gpu} fell off the bus (XID 79)",
               "The GPU is no longer reachable on PCIe; the node needs replacing."),
        _alert("GpuEccDoubleBitErrors", f"increase({DBE}[{t.ecc_window}]) > 0", "0m", "critical",
               f"{gpu}: {{{{ $value }}}} double-bit ECC errors in {t.ecc_window}",
               "Uncorrectable memory errors kill the jobs that touch them; the row is remapped "
               "at the next GPU reset."),
    ]


def _service_rules(t: Thresholds) -> list[dict[str, Any]]:
    quota = t.quota_fraction
    at_quota = (f"(max by (team) ({P}_team_gpus) >= max by (team) ({P}_team_quota_gpus) * {quota}"
                f" or max by (team) ({P}_team_hourly_usd) >= "
                f"max by (team) ({P}_team_quota_hourly_usd) * {quota})")
    demand = f"sum by (team) (max by (team, pool, priority) ({P}_pending_gpus)) > 0"
    return [
        _alert("AutoscalerTickFailures",
               f"sum by (stage) (increase({P}_tick_errors_total[{t.tick_window}])) >= {t.tick_errors}",
               "0m", "warning", "{{ $value }} ticks failed in stage {{ $labels.stage }}",
               "The service log has the exception of each failed tick (stage and cause)."),
        _alert("AutoscalerNotTicking",
               f"time() - max({P}_last_tick_timestamp_seconds > 0) > {t.tick_stale_s}", "0m",
               "critical", f"no tick finished for more than {t.tick_stale_s}s",
               "The loop is stuck: nothing scales up or down (a service that never finished a "
               "tick is caught by /healthz and by `up`)."),
        _alert("PoolDataMissing", f"max by (pool) ({P}_data_missing) == 1", t.data_missing_for,
               "warning", "{{ $labels.pool }}: signals missing, scale-down frozen",
               "The engine keeps every node of the pool while its metrics or scheduler data "
               "are missing; /status says which source is missing."),
        _alert("BrokenNodesHeld", f"max by (pool) ({P}_unhealthy_budget_held) > 0", "0m",
               "critical", "{{ $labels.pool }}: {{ $value }} broken node(s) not replaced",
               "More of the fleet looks broken than max_unready_percent and ok_unready_count "
               "allow, so the engine replaces none: check the observer first (Prometheus, the "
               "exporters, the scheduler); the Hold in /status has the numbers."),
        _alert("TeamAtQuotaWithPendingDemand", f"{at_quota} and on (team) ({demand})", t.quota_for,
               "warning", "team {{ $labels.team }} is at its quota with GPU jobs pending",
               "Jobs wait because the team's quota (GPUs or $/h) is used up, not for capacity."),
        _alert("SpotInterruptionBurst",
               f"sum by (pool) (increase({P}_interruptions_total[{t.interruption_window}])) "
               f">= {t.interruptions}", "0m", "warning",
               "{{ $labels.pool }}: {{ $value }} spot interruptions in " + t.interruption_window,
               "Consider on_interruption: on-demand or other instance types for the pool."),
        _alert("NodeStuckInState",
               f"max by (node, pool, state) ({P}_node_state_timeout_ratio) > {t.stuck_ratio}",
               t.stuck_for, "warning",
               "{{ $labels.node }} stuck in {{ $labels.state }} "
               "({{ $value | printf \"%.1f\" }} x its timeout)",
               "The reconciler acts on a state timeout; a node still there long after it means "
               "that action keeps failing (see the service log and /status)."),
        _alert("PoolLaunchBackoff", f"max by (pool) ({P}_pool_backoff) > 0 or "
               f"max by (pool) ({P}_launch_backoff_failures) > 0", t.backoff_for, "warning",
               "{{ $labels.pool }}: launches backed off ({{ $value }})",
               "Capacity errors (the engine skips those offerings) or failed launches in a row "
               "(the executor waits before the next try) keep the pool from growing."),
    ]


def rules(t: Thresholds | None = None) -> dict[str, Any]:
    t = t or Thresholds()
    return {"groups": [{"name": "gpu-autoscaler-gpus", "rules": _gpu_rules(t)},
                       {"name": "gpu-autoscaler-service", "rules": _service_rules(t)}]}


def rules_yaml(t: Thresholds | None = None) -> str:
    yaml = YAML()
    yaml.width = 4096  # one expression per line
    out = io.StringIO()
    out.write("# Generated by `gpu-autoscaler dashboards alerts` (autoscaler/dashboards/alerts.py).\n")
    yaml.dump(rules(t), out)
    return out.getvalue()


def alert_names() -> list[str]:
    return [r["alert"] for g in rules()["groups"] for r in g["rules"]]

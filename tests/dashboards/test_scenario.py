"""Every panel's and every alert's PromQL returns data from a real Prometheus that scraped
the real service and the synthetic dcgm-exporter through a demo-like scenario; each alert
fires in the phase made to trigger it (tests/dashboards/scenario.py)."""

from __future__ import annotations

import json
import urllib.parse
import urllib.request
from pathlib import Path
from typing import Any

import pytest

from autoscaler.dashboards.alerts import alert_names
from autoscaler.dashboards.panels import DASHBOARDS
from tests.dashboards.scenario import FAST, Scenario, substitute

pytestmark = pytest.mark.slow
ROOT = Path(__file__).resolve().parents[2]
# Panels whose metric another change increments (the definition is here, the wiring is not):
# their query must succeed; series are required once the service exposes any sample.
WIRED_ELSEWHERE = {"gpu_autoscaler_step_errors_total": "async actuation counts step errors",
                   "gpu_autoscaler_launch_backoff_failures": "async actuation's launch backoff",
                   # A forecast needs a day of a predictive pool's history (tests/service/
                   # test_forecasts_loop.py exports both); the scenario runs for minutes.
                   "gpu_autoscaler_forecast_gpus": "a predictive pool's forecast",
                   "gpu_autoscaler_forecast_mape": "a predictive pool's scored forecasts",
                   # No pool of the scenario keeps a warm pool (tests/service/observe/
                   # test_metrics_fleet.py exports it for a stopped warm node).
                   "gpu_autoscaler_warm_pool_hourly_usd": "a warm pool's stopped nodes"}


def range_query(s: Scenario, expr: str) -> dict[str, Any]:
    params = urllib.parse.urlencode({"query": expr, "start": f"{s.started:.3f}",
                                     "end": f"{s.ended:.3f}", "step": "1"})
    try:
        with urllib.request.urlopen(f"{s.prom.url}/api/v1/query_range?{params}", timeout=30) as r:
            body: dict[str, Any] = json.loads(r.read())
    except urllib.error.HTTPError as exc:
        body = json.loads(exc.read())
    return body


def committed_queries() -> list[tuple[str, str, str]]:
    """(dashboard, panel, expr) of every target and annotation in the committed JSON."""
    out = []
    for spec in DASHBOARDS:
        doc = json.loads((ROOT / "dashboards" / f"{spec.uid}.json").read_text())
        for panel in doc["panels"]:
            out += [(doc["title"], panel["title"], t["expr"]) for t in panel["targets"]]
        out += [(doc["title"], f"annotation {a['name']}", a["expr"])
                for a in doc.get("annotations", {}).get("list", []) if a.get("expr")]
    return out


def test_every_panel_query_returns_series(scenario):
    empty, errors = [], []
    for dash, panel, expr in committed_queries():
        body = range_query(scenario, substitute(expr))
        if body.get("status") != "success":
            errors.append(f"{dash} / {panel}: {body.get('error')}")
            continue
        series = body["data"]["result"]
        if not any(s["values"] for s in series):
            wired = next((m for m in WIRED_ELSEWHERE if m in expr), None)
            exposed = wired and f"\n{wired}{{" in _exposition(scenario)
            if wired and not exposed:
                continue
            empty.append(f"{dash} / {panel}: {expr}")
    assert errors == [] and empty == [], "\n".join(errors + empty)
    assert len(committed_queries()) >= 30


def _exposition(s: Scenario) -> str:
    return s.service.metrics.exposition().decode()


def test_every_alert_expression_returns_series_and_fires(scenario):
    fired = {}
    for name in alert_names():
        body = range_query(scenario, f'ALERTS{{alertname="{name}", alertstate="firing"}}')
        assert body["status"] == "success", body
        fired[name] = [s["metric"] for s in body["data"]["result"]]
    assert [n for n, series in fired.items() if not series] == [], fired
    by = {n: {tuple(sorted(m.items())) for m in series} for n, series in fired.items()}

    def labels(name: str, key: str) -> set[str]:
        return {dict(m)[key] for m in by[name] if key in dict(m)}

    assert labels("TeamAtQuotaWithPendingDemand", "team") == {"vision"}
    assert labels("PoolDataMissing", "pool") == {"vision/train"}
    assert labels("SpotInterruptionBurst", "pool") == {"search/infer"}
    assert labels("AutoscalerTickFailures", "stage") == {"signals"}
    assert labels("NodeStuckInState", "state") == {"BOOTSTRAPPING"}
    assert labels("PoolLaunchBackoff", "pool") == {"search/infer"}
    assert labels("BrokenNodesHeld", "pool") <= {"vision/train", "search/infer"}
    assert FAST.stuck_ratio == 1.5  # the committed bound, only `for` is shorter


def test_the_alerts_fire_in_their_phase_not_before(scenario):
    starts = dict(scenario.phases)

    def first(name: str) -> float:
        body = range_query(scenario, f'ALERTS{{alertname="{name}", alertstate="firing"}}')
        return min(float(v[0]) for s in body["data"]["result"] for v in s["values"])

    assert first("GpuFellOffTheBus") > starts["scale-up"]
    assert first("SpotInterruptionBurst") > starts["trouble"]
    assert first("PoolDataMissing") > starts["interruptions"]
    assert starts["observer"] < first("BrokenNodesHeld") < starts["interruptions"]
    assert first("AutoscalerNotTicking") > starts["blind"]

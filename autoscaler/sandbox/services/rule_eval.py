"""Recording rules evaluated at chosen instants and written as TSDB blocks (tests, benchmarks).

``promtool tsdb create-blocks-from rules`` evaluates on each group's own offset grid, as a
live Prometheus does, so the newest recorded sample lags the read time by up to one
interval. Tests that compare with hand-computed values, and benchmarks that compare the
raw and recorded readings, need the evaluation AT the read time: this runs each rule's
expression as an instant query at each instant (what Prometheus does per evaluation) and
backfills the results. Rules that read other rules' output need those in the TSDB first:
evaluate them in a later call, after restarting Prometheus on the data directory.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Iterable, Mapping
from pathlib import Path
from typing import Any

import requests

from autoscaler.sandbox.services.prometheus import PrometheusServer, Series, backfill, openmetrics_lines

History = dict[Series, list[tuple[float, float]]]


def evaluate(url: str, rule_file: Mapping[str, Any], times: Iterable[float],
             timeout: float = 120) -> tuple[History, dict[str, float]]:
    """Each rule at each instant: the recorded samples, and the milliseconds each rule's
    evaluation took at the last instant."""
    history: History = {}
    cost_ms: dict[str, float] = {}
    instants = sorted(times)
    with requests.Session() as session:
        for group in rule_file["groups"]:
            for rule in group["rules"]:
                for at in instants:
                    started = time.perf_counter()
                    resp = session.get(f"{url}/api/v1/query", timeout=timeout, params={
                        "query": rule["expr"], "time": f"{at:.3f}"})
                    resp.raise_for_status()
                    cost_ms[rule["record"]] = (time.perf_counter() - started) * 1000
                    _record(history, rule, at, resp.json()["data"]["result"])
    return history, cost_ms


def _record(history: History, rule: Mapping[str, Any], at: float,
            result: list[dict[str, Any]]) -> None:
    for series in result:
        value = float(series["value"][1])  # NaN too, as Prometheus records it
        labels = {k: v for k, v in series["metric"].items() if k != "__name__"}
        labels.update(rule.get("labels", {}))
        history.setdefault((rule["record"], tuple(sorted(labels.items()))), []).append(
            (at, value))


def record(url: str, rule_file: Mapping[str, Any], times: Iterable[float],
           data_dir: Path) -> dict[str, float]:
    """Evaluate and backfill into ``data_dir`` (restart Prometheus to see the blocks)."""
    history, cost_ms = evaluate(url, rule_file, times)
    if history:
        backfill("".join(openmetrics_lines(history)), data_dir)
    return cost_ms


def _only(rule_file: Mapping[str, Any], keep: Callable[[Mapping[str, Any]], bool]) -> dict[str, Any]:
    groups = [{**g, "rules": [r for r in g["rules"] if keep(r)]} for g in rule_file["groups"]]
    return {"groups": [g for g in groups if g["rules"]]}


def record_all(rule_file: Mapping[str, Any], data_dir: Path, workdir: Path, at: float,
               since: float, step_s: int) -> None:
    """Every rule of ``rule_file`` evaluated at ``at`` into ``data_dir``; the rules that other
    rules read are evaluated every ``step_s`` from ``since`` too. Runs Prometheus twice on
    ``data_dir`` (rules over raw series, then the rules over those)."""
    records = {r["record"] for g in rule_file["groups"] for r in g["rules"]}

    def reads(rule: Mapping[str, Any]) -> set[str]:
        return {name for name in records if name != rule["record"] and name in rule["expr"]}

    chained = _only(rule_file, lambda r: bool(reads(r)))
    inputs = set().union(*(reads(r) for g in chained["groups"] for r in g["rules"]))
    grid = [at - step_s * k for k in range(int((at - since) // step_s) + 1)]
    with PrometheusServer(workdir / "rules-raw", data_dir=data_dir) as prom:
        record(prom.url, _only(rule_file, lambda r: r["record"] in inputs), grid, data_dir)
        record(prom.url, _only(rule_file, lambda r: not reads(r) and r["record"] not in inputs),
               [at], data_dir)
    if chained["groups"]:
        with PrometheusServer(workdir / "rules-chained", data_dir=data_dir) as prom:
            record(prom.url, chained, [at], data_dir)

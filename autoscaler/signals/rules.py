"""Prometheus recording rules that pre-aggregate DCGM series per node, for large fleets.

With ``prometheus.recording_rules: true`` the reader queries these per-node series (one
per node and field) instead of every GPU's raw series, so a tick touches about 8 x fewer
series on 8-GPU nodes and dates dropped-out nodes exactly without a subquery. Install the
output of ``gpu-autoscaler signals --config FILE --print-rules`` in Prometheus' rule_files.

Semantics: a window mean is the mean of the per-node GPU mean at each rule evaluation
(evaluate the group at least as often as the scrape interval); maxima and the newest
sample's timestamp are exact.
"""

from __future__ import annotations

from typing import Any

from autoscaler.signals.promql import (
    THERMAL_BITS_EXPR,
    THROTTLE,
    UTIL_METRICS,
    XID,
    QueryBuilder,
    gpus_key,
    max_key,
    mean_key,
    now_key,
    xid_key,
)

GROUP = "gpu-autoscaler"


def util_rule(metric: str, kind: str) -> str:
    """``gas:<metric>:<avg|max|gpus|newest>_by_node`` for a ``scale_up.metric`` value."""
    return f"gas:{metric}:{kind}_by_node"


FB_USED = "gas:fb_used_mib:sum_by_node"
FB_FREE = "gas:fb_free_mib:sum_by_node"
TEMP = "gas:gpu_temp_c:max_by_node"
POWER = "gas:power_w:sum_by_node"
XID_GPUS = "gas:xid_gpus:count_by_node"
THERMAL = "gas:thermal_throttle:max_by_node"


def recording_rules(node_label: str, interval: str = "15s") -> dict[str, Any]:
    """The rule file (as a dict; dump it as YAML or JSON) for ``node_label``."""
    by = f"by ({node_label})"

    def sel(metric: str) -> str:
        return f'{metric}{{{node_label}!=""}}'

    rules = []
    for metric, (name, _factor) in sorted(UTIL_METRICS.items()):
        rules += [
            {"record": util_rule(metric, "avg"), "expr": f"avg {by} ({sel(name)})"},
            {"record": util_rule(metric, "max"), "expr": f"max {by} ({sel(name)})"},
            {"record": util_rule(metric, "gpus"), "expr": f"count {by} ({sel(name)})"},
            {"record": util_rule(metric, "newest"), "expr": f"max {by} (timestamp({sel(name)}))"},
        ]
    rules += [
        {"record": FB_USED, "expr": f"sum {by} ({sel('DCGM_FI_DEV_FB_USED')})"},
        {"record": FB_FREE, "expr": f"sum {by} ({sel('DCGM_FI_DEV_FB_FREE')})"},
        {"record": TEMP, "expr": f"max {by} ({sel('DCGM_FI_DEV_GPU_TEMP')})"},
        {"record": POWER, "expr": f"sum {by} ({sel('DCGM_FI_DEV_POWER_USAGE')})"},
        {"record": XID_GPUS, "expr": f"count {by} ({sel(XID)} > 0)"},
        {"record": THERMAL, "expr": f"max {by} ({THERMAL_BITS_EXPR.format(v=sel(THROTTLE))})"},
    ]
    return {"groups": [{"name": GROUP, "interval": interval, "rules": rules}]}


class RecordedQueryBuilder(QueryBuilder):
    """The same two queries over the recorded per-node series."""

    needs_followup = False  # the recorded newest-sample timestamp survives a dropout

    def _scaled(self, metric: str, expr: str) -> str:
        factor = UTIL_METRICS[metric][1]
        return expr if factor == 1.0 else f"{factor:g} * {expr}"

    def windows_query(self) -> str:
        branches: dict[str, str] = {}
        for w in self.windows:
            avg, peak = util_rule(w.metric, "avg"), util_rule(w.metric, "max")
            branches[mean_key(w.metric, w.window_s)] = self._scaled(
                w.metric, f"avg_over_time({avg}[{w.window_s}s])")
            for span in (w.window_s, w.idle_s):
                branches[max_key(w.metric, span)] = self._scaled(
                    w.metric, f"max_over_time({peak}[{span}s])")
            branches[xid_key(w.window_s)] = f"max_over_time({XID_GPUS}[{w.window_s}s])"
        return self._union(branches)

    def current_query(self) -> str:
        last = f"[{self.stale_s}s]"
        branches = {key: f"last_over_time({rule}{last})" for key, rule in (
            ("mem_used", FB_USED), ("mem_free", FB_FREE), ("temp", TEMP), ("power", POWER),
            ("throttle", THERMAL))}
        for metric in self.metrics():
            branches[gpus_key(metric)] = f"last_over_time({util_rule(metric, 'gpus')}{last})"
            branches[now_key(metric)] = (
                f"time() - max_over_time({util_rule(metric, 'newest')}[{self.horizon_s}s])")
        return self._union(branches)

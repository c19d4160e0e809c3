"""Recording rules that compute each node's WINDOWED aggregates in Prometheus, for large fleets.

With ``prometheus.recording_rules: true`` Prometheus evaluates, every ``rules_interval``,
one rule group per distinct duration among the pools' ``scale_up.window`` and
``scale_down.idle_for`` (``avg_over_time`` / ``max_over_time`` of every GPU's raw series,
then ``by (<node label>)``) plus one group of per-node instant values. A tick then sends
ONE instant query, a single selector over the recorded names (plus, while some node reads
as silent with no date, a follow-up that dates those nodes from their raw series), and
only what the engine decides with crosses the wire:

* for every node, ONE series: the mean utilization over its own pool's
  ``scale_up.window``, labelled ``gpus="<GPUs reporting>"`` (NaN, the mean of an empty
  window, when the GPUs report but had no sample in the window);
* only for the nodes that matter: the max over its pool's idle span when below the
  highest idle threshold using that span, temperature above the lowest
  ``max_gpu_temperature``, XID errors in its window, thermal throttling, and the newest
  sample's timestamp of every node not fresh at an evaluation: silent for
  ``min(60 s, stale_after / 2)``, or with its newest-sample series absent (the reader turns
  it into an age). One failed scrape is enough to be absent: Prometheus marks the target's
  series stale at once, and a short window's mean goes with them, so undated, a healthy
  node READY for an hour would read as silent for that hour. ``rules_interval`` is at most
  ``stale_after / 2``, so a node fresh at the last evaluation is not yet stale.

Prometheus does not know which pool a node is in: a window's series are recorded for
the hosts named like the nodes of a pool using it (the fleet names nodes
``<team>-<pool>-<n>``; RuleSet sees pools, not teams, so ``.+-<pool>-[^-]*``) and for
hosts named like no pool's nodes (every window). A node that matches another pool's name
pattern but not its own is reported missing with that reason. Each fact is filtered in
the rule rather than in the query because the query would read every node's series to
filter them (the tick's Prometheus time grows with every series it touches).

So a busy, healthy node's snapshot has ``util_mean`` and ``gpus_reporting`` but no
``util_max``, memory, power or (below the thresholds) idle-window max and temperature:
those are None, the engine's decisions are the same as in raw mode (the thresholds only
pick which values are sent, the engine compares the exact values), and
``signals --json`` shows fewer fields.

Trade-offs: values lag by at most one rule evaluation (``rules_interval``); Prometheus
spends about one raw-mode read of CPU per evaluation (work moved out of the tick, not
removed: evaluate no more often than the autoscaler ticks); the rules depend on the
policies (pool names, windows, idle and temperature thresholds, ``stale_after``), so a
group carries a digest of its rules and the reader refuses to read (the whole source is
reported missing) when a group it needs is absent, out of date or not evaluated within
the last 5 minutes: reinstall the output of ``gpu-autoscaler signals --config FILE
--print-rules`` in Prometheus' ``rule_files`` whenever the policies change.
"""

from __future__ import annotations

import json
import math
import zlib
from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from datetime import timedelta
from typing import Any

from autoscaler.model.snapshot import GpuMetrics, NodeObservation
from autoscaler.policy.duration import format_duration
from autoscaler.policy.models import Pool
from autoscaler.signals.promql import (
    ECC_DBE,
    ECC_DBE_FIELD,
    PAGES_PENDING_FIELD,
    REMAP_FAILED_FIELD,
    RETIRED_PENDING,
    ROW_REMAP_FAILURE,
    THERMAL_BITS_EXPR,
    THROTTLE,
    UTIL_METRICS,
    XID,
    PoolWindows,
    gpus_key,
    max_key,
    mean_key,
    now_key,
    number,
    regex_literal,
    sample_value,
    seconds,
    xid_key,
)

PREFIX = "gpu_autoscaler"
GROUP_PREFIX = "gpu-autoscaler"
MARKER = f"{PREFIX}:rules_loaded"  # one per group: {rule_group, digest}
TEMP = "DCGM_FI_DEV_GPU_TEMP"
# Nodes whose newest sample is older than this, or absent at an evaluation, are dated
# exactly (sparse in a healthy fleet); the others are fresh.
DATED_AFTER_S = 60


class RulesError(RuntimeError):
    """Prometheus lacks (current) gpu-autoscaler recording rules; the message says which."""


def span_name(secs: int) -> str:
    return format_duration(timedelta(seconds=secs))


def node_rule(field: str, op: str) -> str:
    """``gpu_autoscaler:node_<field>:<op>``, e.g. ``gpu_autoscaler:node_gpu_util:avg_over_5m``."""
    return f"{PREFIX}:node_{field}:{op}"


def avg_rule(metric: str, secs: int) -> str:
    return node_rule(metric, f"avg_over_{span_name(secs)}")


def max_rule(metric: str, secs: int) -> str:
    return node_rule(metric, f"max_over_{span_name(secs)}")


def xid_rule(secs: int) -> str:
    return node_rule("xid_gpus", f"count_over_{span_name(secs)}")


def newest_rule(metric: str, secs: int | None = None) -> str:
    return node_rule(metric, "newest_timestamp" + (f"_over_{span_name(secs)}" if secs else ""))


TEMP_RULE = node_rule("gpu_temp_c", "max")  # recorded above the lowest limit only
THROTTLED_RULE = node_rule("thermal_throttle", "max")  # recorded for throttled nodes only
# Memory faults, recorded for faulty nodes only (docs/concepts/lifecycle.md, "Broken nodes").
ECC_DBE_RULE = node_rule("ecc_dbe_errors", "sum")
REMAP_FAILED_RULE = node_rule("row_remap_failed_gpus", "count")
PAGES_PENDING_RULE = node_rule("retired_pending_gpus", "count")
GPUS_LABEL = "gpus"  # on the window-mean series: the node's GPUs reporting
ANY_MEAN = "any_mean"  # field key: some window's mean series names the node


@dataclass(frozen=True)
class RuleSet:
    """What the rules record for a set of pools, and the thresholds they filter by."""

    label: str
    stale_s: int
    means: frozenset[tuple[str, int]]  # (metric, scale_up.window)
    pools: tuple[tuple[str, str, int, int], ...]  # (name, metric, scale_up.window, idle_for)
    peaks: tuple[tuple[str, int, float], ...]  # (metric, idle_for, highest idle threshold)
    hot_c: float  # the lowest max_gpu_temperature
    horizon_s: int

    @classmethod
    def of(cls, pools: Iterable[Pool], node_label: str, stale_after: timedelta) -> RuleSet:
        pools = list(pools)
        windows = {PoolWindows.of(p) for p in pools}
        peaks: dict[tuple[str, int], float] = {}
        for p in pools:
            key = (p.scale_up.metric, seconds(p.scale_down.idle_for))
            peaks[key] = max(peaks.get(key, 0.0), float(p.scale_down.gpu_utilization_below))
        stale_s = seconds(stale_after)
        spans = [stale_s] + [max(w.window_s, w.idle_s) for w in windows]
        return cls(
            label=node_label, stale_s=stale_s,
            means=frozenset((w.metric, w.window_s) for w in windows),
            pools=tuple(sorted({(p.name, w.metric, w.window_s, w.idle_s)
                                for p in pools for w in [PoolWindows.of(p)]})),
            peaks=tuple(sorted((m, s, t) for (m, s), t in peaks.items())),
            hot_c=min((p.health.max_gpu_temperature for p in pools), default=0.0),
            horizon_s=max(spans),
        )

    @property
    def dated_s(self) -> int:
        """Nodes silent for longer get their newest sample's timestamp recorded. The config
        keeps ``rules_interval <= stale_after / 2``, so a node undated at the last
        evaluation is still fresh when read."""
        return min(DATED_AFTER_S, self.stale_s // 2)

    def metrics(self) -> list[str]:
        return sorted({m for m, _ in self.means} | {m for m, _, _ in self.peaks})

    def spans(self) -> list[int]:
        return sorted({s for _, s in self.means} | {s for _, s, _ in self.peaks})

    def _sel(self, metric: str) -> str:
        return f'{metric}{{{self.label}!=""}}'

    def node_rules(self) -> list[dict[str, str]]:
        """Per-node instant values; the newest-sample rules chain (same group, in order)."""
        by = f"by ({self.label})"
        rules = []
        for m in self.metrics():
            raw = self._sel(UTIL_METRICS[m][0])
            rules += [
                {"record": newest_rule(m), "expr": f"max {by} (timestamp({raw}))"},
                # Dated unless fresh now: a node whose newest sample is old, and one absent
                # now (a failed scrape writes stale markers at once), so a blip is never
                # taken for silence.
                {"record": newest_rule(m, self.horizon_s),
                 "expr": f"max_over_time({newest_rule(m)}[{self.horizon_s}s]) unless on "
                         f"({self.label}) ({newest_rule(m)} >= time() - {self.dated_s})"},
            ]
        thermal = THERMAL_BITS_EXPR.format(v=self._sel(THROTTLE))
        rules.append({"record": TEMP_RULE, "expr": f"max {by} ({self._sel(TEMP)}) > {self.hot_c:g}"})
        rules.append({"record": THROTTLED_RULE, "expr": f"max {by} ({thermal}) > 0"})
        rules.append({"record": ECC_DBE_RULE, "expr": f"sum {by} ({self._sel(ECC_DBE)}) > 0"})
        for record, metric in ((REMAP_FAILED_RULE, ROW_REMAP_FAILURE),
                               (PAGES_PENDING_RULE, RETIRED_PENDING)):
            rules.append({"record": record, "expr": f"count {by} ({self._sel(metric)} > 0)"})
        return rules

    def _hosts(self, raw: str, own: Iterable[str]) -> list[str]:
        """Selectors of ``raw`` for the hosts named like the nodes of the ``own`` pools
        (``<team>-<pool>-<n>``, as the fleet names them) or like no pool's nodes, so a
        window's series are recorded only for the nodes whose pool uses the window."""
        every = "|".join(sorted({regex_literal(p[0]) for p in self.pools}))
        mine = "|".join(sorted({regex_literal(name) for name in own}))
        return [f'{raw}{{{self.label}=~".+-(?:{mine})-[^-]*"}}',
                f'{raw}{{{self.label}!~".+-(?:{every})-[^-]*",{self.label}!=""}}']

    def _over(self, fn: str, hosts: list[str], secs: int) -> str:
        return " or ".join(f"{fn}({h}[{secs}s])" for h in hosts)

    def _mean(self, metric: str, secs: int) -> str:
        """The window mean with a ``gpus`` label (GPUs reporting now), so a node is one
        series; NaN (the mean of an empty window) when only the GPU count exists."""
        by, on = f"by ({self.label})", f"on ({self.label})"
        name, factor = UTIL_METRICS[metric]
        hosts = self._hosts(name, (p for p, m, w, _ in self.pools if (m, w) == (metric, secs)))
        mean = _scaled(f"avg {by} ({self._over('avg_over_time', hosts, secs)})", factor)
        mean = f"({mean})"
        gpus = f'count_values {by} ("{GPUS_LABEL}", count {by} ({" or ".join(hosts)}))'
        return f"{mean} * {on} group_left ({GPUS_LABEL}) {gpus} or {on} {mean} or {on} {gpus} * NaN"

    def span_rules(self, secs: int) -> list[dict[str, str]]:
        by = f"by ({self.label})"
        rules = []
        for m in self.metrics():
            name, factor = UTIL_METRICS[m]
            if (m, secs) in self.means:
                rules.append({"record": avg_rule(m, secs), "expr": self._mean(m, secs)})
            for pm, s, below in self.peaks:
                if pm == m and s == secs:
                    hosts = self._hosts(name, (p for p, pm2, _, i in self.pools
                                               if (pm2, i) == (m, secs)))
                    peak = _scaled(f"max {by} ({self._over('max_over_time', hosts, secs)})", factor)
                    rules.append({"record": max_rule(m, secs), "expr": f"{peak} < {below:g}"})
        if any(s == secs for _, s in self.means):
            hosts = self._hosts(XID, (p for p, _, w, _ in self.pools if w == secs))
            rules.append({"record": xid_rule(secs), "expr": f"count {by} "
                          f"(({self._over('max_over_time', hosts, secs)}) > 0)"})
        return rules

    def groups(self) -> dict[str, list[dict[str, str]]]:
        """Group name -> its rules (without the marker)."""
        out = {f"{GROUP_PREFIX}-nodes": self.node_rules()}
        for secs in self.spans():
            out[f"{GROUP_PREFIX}-{span_name(secs)}"] = self.span_rules(secs)
        return out

    def digests(self) -> dict[str, str]:
        return {name: digest(rules) for name, rules in self.groups().items()}


def _scaled(expr: str, factor: float) -> str:
    """``expr`` in percent: UTIL_METRICS gives the factor of metrics reported as ratios."""
    return expr if factor == 1.0 else f"{factor:g} * {expr}"


def digest(rules: list[dict[str, str]]) -> str:
    return f"{zlib.crc32(json.dumps(rules, sort_keys=True).encode()):08x}"


def recording_rules(rule_set: RuleSet, interval: str = "30s") -> dict[str, Any]:
    """The rule file (as a dict; dump it as YAML or JSON)."""
    groups = []
    for name, rules in rule_set.groups().items():
        marker = {"record": MARKER, "expr": "vector(1)",
                  "labels": {"rule_group": name, "digest": digest(rules)}}
        groups.append({"name": name, "interval": interval, "rules": [*rules, marker]})
    return {"groups": groups}


class RecordedQuery:
    """The one query of a tick over the recorded series, and what its answer means."""

    def __init__(self, rule_set: RuleSet):
        self.rules = rule_set
        self.means = {avg_rule(m, w): (mean_key(m, w), gpus_key(m)) for m, w in rule_set.means}
        self.facts = {THROTTLED_RULE: "throttle", TEMP_RULE: "temp",  # name -> field key
                      ECC_DBE_RULE: ECC_DBE_FIELD, REMAP_FAILED_RULE: REMAP_FAILED_FIELD,
                      PAGES_PENDING_RULE: PAGES_PENDING_FIELD}
        self.facts.update({xid_rule(w): xid_key(w) for _, w in rule_set.means})
        self.facts.update({max_rule(m, s): max_key(m, s) for m, s, _ in rule_set.peaks})
        self.dated = {newest_rule(m, rule_set.horizon_s): now_key(m) for m in rule_set.metrics()}
        self._keys: dict[PoolWindows, tuple[str, ...]] = {}

    def query(self) -> str:
        # A single selector: ``or`` would merge series of different names by node, and
        # costs Prometheus a pass over both sides.
        names = sorted([*self.means, *self.facts, *self.dated, MARKER])
        return f'{{__name__=~"{"|".join(names)}"}}'

    def collect(self, result: list[dict[str, Any]], now_s: float,
                ) -> tuple[dict[str, dict[str, float]], dict[str, str]]:
        """Values by node and field key, and the rule groups' digests."""
        fields: dict[str, dict[str, float]] = {}
        markers: dict[str, str] = {}
        label = self.rules.label
        for series in result:
            labels = series.get("metric") if isinstance(series, dict) else None
            if not isinstance(labels, dict):
                continue
            name = labels.get("__name__", "")
            if not isinstance(name, str):
                continue
            node = labels.get(label)
            if not isinstance(node, str) or not node:
                if name == MARKER:
                    markers[str(labels.get("rule_group", ""))] = str(labels.get("digest", ""))
                continue
            value = sample_value(series.get("value"))
            if value is None:
                continue  # junk from a proxy: absent, never a traceback
            into = fields.setdefault(node, {})
            if name in self.dated:
                if math.isfinite(value):
                    into[self.dated[name]] = now_s - value
                continue
            if name in self.means:
                key, gpus = self.means[name]
                count = number(labels.get(GPUS_LABEL))
                if count is not None and math.isfinite(count):
                    into[gpus] = count
                into[key] = value  # NaN: the window is empty (observe tells it from absent)
                into[ANY_MEAN] = 1.0
            elif name in self.facts and math.isfinite(value):
                into[self.facts[name]] = value
        return fields, markers

    def check(self, markers: Mapping[str, str]) -> None:
        """Raise unless every needed group was evaluated recently with these rules."""
        want = self.rules.digests()
        missing = sorted(g for g in want if g not in markers)
        stale = sorted(g for g, d in want.items() if g in markers and markers[g] != d)
        problems = []
        if missing:
            problems.append(f"missing or not evaluated in the last 5m: {', '.join(missing)}")
        if stale:
            problems.append(f"out of date (policies or version changed): {', '.join(stale)}")
        if problems:
            raise RulesError("prometheus recording rules " + "; ".join(problems)
                             + " (install: gpu-autoscaler signals --print-rules)")

    def observe(self, fields: Mapping[str, float], w: PoolWindows) -> NodeObservation:
        keys = self._keys.get(w)
        if keys is None:
            keys = self._keys[w] = (mean_key(w.metric, w.window_s), max_key(w.metric, w.idle_s),
                                      xid_key(w.window_s), gpus_key(w.metric), now_key(w.metric))
        mean_k, peak_k, xid_k, gpus_k, age_k = keys
        age, mean = fields.get(age_k), fields.get(mean_k)
        if age is None and mean is None:
            if ANY_MEAN in fields:
                # Reporting, but recorded for another pool's window only: the rules pick a
                # node's window by its name.
                return NodeObservation(metrics_missing=(
                    f"no {span_name(w.window_s)} mean recorded: the node's name matches another "
                    "pool's nodes (the recording rules expect <team>-<pool>-<n>)"))
            name = UTIL_METRICS[w.metric][0]
            return NodeObservation(
                metrics_missing=f"no {name} sample in the last {span_name(self.rules.horizon_s)}",
                metrics_silent=True)
        # Only values other than GpuMetrics' defaults are passed: validating the model is
        # most of what a node costs here.
        values: dict[str, Any] = {"gpus_reporting": int(fields.get(gpus_k, 0))}
        if mean is not None and not math.isnan(mean):
            values["util_mean"] = mean
        if (peak := fields.get(peak_k)) is not None:
            values["util_max_idle_window"] = peak
        if (temp := fields.get("temp")) is not None:
            values["temperature_max_c"] = temp
        if xid := fields.get(xid_k):
            values["xid_errors"] = int(xid)
        if fields.get("throttle", 0.0) > 0:
            values["thermal_throttle"] = True
        for key, name in ((ECC_DBE_FIELD, "ecc_dbe_errors"), (REMAP_FAILED_FIELD, "row_remap_failures"),
                          (PAGES_PENDING_FIELD, "retired_pages_pending")):
            if (count := fields.get(key)) is not None:
                values[name] = int(count)
        missing = None
        if age is not None:
            values["sample_age_s"] = round(max(0.0, age), 3)
            if age > self.rules.stale_s:
                missing = f"no sample for {age:.0f}s (stale after {self.rules.stale_s}s)"
        return NodeObservation(metrics=GpuMetrics(**values), metrics_missing=missing,
                               metrics_silent=missing is not None)

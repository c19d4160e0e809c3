"""The PromQL the Prometheus reader sends in raw mode: a fixed number of queries per tick.

Every per-node aggregate is one *branch*: an aggregation ``by (<node label>)`` tagged with
a ``gas_field`` label through ``label_replace``, and all branches are joined with ``or``
(their label sets differ by ``gas_field``, so ``or`` keeps them all). A tick sends exactly
two HTTP queries, whatever the number of nodes, pools or distinct windows:

* ``windows``: for each distinct (utilization metric, window) among the pools'
  ``scale_up.window`` and ``scale_down.idle_for``: mean and max utilization; for each
  distinct ``scale_up.window``: GPUs with a non-zero XID error.
* ``current``: memory, temperature, power and thermal throttling from each GPU's newest
  sample within ``stale_after``; GPUs reporting; the newest sample's age
  (``time() - timestamp(...)``, exact while the node reports).
* ``followup`` (only when some nodes are missing from the age branch, i.e. stopped
  reporting more than the 5 m lookback ago or were marked stale by a failed scrape): the
  age of their newest sample within the longest window, from a subquery restricted to
  those nodes (at most ``MAX_FOLLOWUP_NODES``), so it costs nothing on a healthy fleet.

So a tick sends 2 queries, 3 when nodes dropped out. Distinct windows only lengthen the
query text (bounded by the policies, not the fleet). Prometheus reads window-many samples
of every GPU per tick, so the read time grows with the fleet: ``signals/rules.py`` is the
large-fleet mode (one query over recording rules).
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass
from datetime import timedelta
from typing import Any

from autoscaler.policy.models import Pool

FIELD_LABEL = "gas_field"
UTIL_METRICS: dict[str, tuple[str, float]] = {
    # scale_up.metric -> (DCGM field, factor to percent)
    "gpu_util": ("DCGM_FI_DEV_GPU_UTIL", 1.0),
    "gr_engine_active": ("DCGM_FI_PROF_GR_ENGINE_ACTIVE", 100.0),
}
XID = "DCGM_FI_DEV_XID_ERRORS"
THROTTLE = "DCGM_FI_DEV_CLOCK_THROTTLE_REASONS"
ECC_DBE = "DCGM_FI_DEV_ECC_DBE_VOL_TOTAL"
ROW_REMAP_FAILURE = "DCGM_FI_DEV_ROW_REMAP_FAILURE"
RETIRED_PENDING = "DCGM_FI_DEV_RETIRED_PENDING"
ECC_DBE_FIELD, REMAP_FAILED_FIELD, PAGES_PENDING_FIELD = "ecc_dbe", "remap_failed", "pages_pending"
# NVML clocksThrottleReasonSwThermalSlowdown (0x20) and HwThermalSlowdown (0x40) are bits
# 5 and 6: PromQL has no bitwise operators, so test floor(v / 32) % 4 > 0.
THERMAL_BITS_EXPR = "floor({v} / 32) % 4 > bool 0"
MAX_FOLLOWUP_NODES = 200


def regex_literal(name: str) -> str:
    """``name`` as an RE2 literal inside a PromQL double-quoted string (whose own escapes
    need the backslash doubled)."""
    return "".join(f"\\\\{c}" if c in _REGEX_META else '\\"' if c == '"' else c
                   for c in name)


_REGEX_META = set(".^$*+?()[]{}|\\")


def seconds(d: timedelta) -> int:
    return max(1, int(d.total_seconds()))


@dataclass(frozen=True)
class PoolWindows:
    metric: str  # a key of UTIL_METRICS
    window_s: int
    idle_s: int

    @classmethod
    def of(cls, pool: Pool) -> PoolWindows:
        return cls(pool.scale_up.metric, seconds(pool.scale_up.window),
                   seconds(pool.scale_down.idle_for))


def mean_key(metric: str, window_s: int) -> str:
    return f"mean:{metric}:{window_s}"


def max_key(metric: str, window_s: int) -> str:
    return f"max:{metric}:{window_s}"


def xid_key(window_s: int) -> str:
    return f"xid:{window_s}"


def gpus_key(metric: str) -> str:
    return f"gpus:{metric}"


def newest_key(metric: str) -> str:
    return f"newest:{metric}"


def now_key(metric: str) -> str:
    return f"newest_now:{metric}"


class QueryBuilder:
    """Builds the two queries for a set of pools' windows."""

    def __init__(self, windows: Iterable[PoolWindows], node_label: str, stale_after: timedelta):
        self.windows = sorted(set(windows), key=lambda w: (w.metric, w.window_s, w.idle_s))
        self.label = node_label
        self.stale_s = seconds(stale_after)
        spans = [self.stale_s] + [max(w.window_s, w.idle_s) for w in self.windows]
        # How far back the newest sample is looked for; older means "no sample in <horizon>".
        self.horizon_s = max(spans)
        # Subquery resolution of the newest-sample search: the age is exact while the node
        # reports; after a dropout it is overestimated by at most one step.
        self.step_s = max(1, min(15, self.stale_s // 8))

    def metrics(self) -> list[str]:
        return sorted({w.metric for w in self.windows} | {"gpu_util"})

    def _sel(self, metric: str) -> str:
        return f'{metric}{{{self.label}!=""}}'

    def _branch(self, key: str, expr: str) -> str:
        return f'label_replace({expr}, "{FIELD_LABEL}", "{key}", "", "")'

    def _util(self, metric: str, fn: str, agg: str, window_s: int) -> str:
        name, factor = UTIL_METRICS[metric]
        expr = f"{agg} by ({self.label}) ({fn}({self._sel(name)}[{window_s}s]))"
        return expr if factor == 1.0 else f"{factor:g} * {expr}"

    def windows_query(self) -> str | None:
        """None without windows (no pool at all): there is nothing to aggregate."""
        branches: dict[str, str] = {}
        for w in self.windows:
            branches[mean_key(w.metric, w.window_s)] = self._util(
                w.metric, "avg_over_time", "avg", w.window_s)
            for span in (w.window_s, w.idle_s):
                branches[max_key(w.metric, span)] = self._util(w.metric, "max_over_time", "max", span)
            branches[xid_key(w.window_s)] = (
                f"count by ({self.label}) (max_over_time({self._sel(XID)}[{w.window_s}s]) > 0)")
        return self._union(branches)

    def current_query(self) -> str | None:
        last = f"[{self.stale_s}s]"
        by = f"by ({self.label})"
        branches = {
            "mem_used": f"sum {by} (last_over_time({self._sel('DCGM_FI_DEV_FB_USED')}{last}))",
            "mem_free": f"sum {by} (last_over_time({self._sel('DCGM_FI_DEV_FB_FREE')}{last}))",
            "temp": f"max {by} (last_over_time({self._sel('DCGM_FI_DEV_GPU_TEMP')}{last}))",
            "power": f"sum {by} (last_over_time({self._sel('DCGM_FI_DEV_POWER_USAGE')}{last}))",
            "throttle": f"max {by} ("
            + THERMAL_BITS_EXPR.format(v=f"last_over_time({self._sel(THROTTLE)}{last})") + ")",
            # Memory faults (docs/concepts/lifecycle.md): counts of GPUs, absent (0) when none.
            ECC_DBE_FIELD: f"sum {by} (last_over_time({self._sel(ECC_DBE)}{last}))",
            REMAP_FAILED_FIELD: f"count {by} (last_over_time({self._sel(ROW_REMAP_FAILURE)}{last}) > 0)",
            PAGES_PENDING_FIELD: f"count {by} (last_over_time({self._sel(RETIRED_PENDING)}{last}) > 0)",
        }
        for metric in self.metrics():
            sel = self._sel(UTIL_METRICS[metric][0])
            branches[gpus_key(metric)] = f"count {by} (last_over_time({sel}{last}))"
            branches[now_key(metric)] = f"time() - max {by} (timestamp({sel}))"
        return self._union(branches)

    def followup_query(self, lagging: dict[str, list[str]]) -> str | None:
        """Newest-sample age of ``{metric: [node, ...]}`` within the horizon (None for no
        nodes)."""
        branches = {}
        for metric, nodes in sorted(lagging.items()):
            names = "|".join(regex_literal(n) for n in sorted(nodes))
            sel = f'{UTIL_METRICS[metric][0]}{{{self.label}=~"{names}"}}'
            branches[newest_key(metric)] = (
                f"time() - max by ({self.label}) (max_over_time(timestamp({sel})"
                f"[{self.horizon_s}s:{self.step_s}s]))")
        return self._union(branches)

    def _union(self, branches: dict[str, str]) -> str | None:
        if not branches:
            return None
        return balanced_or([self._branch(k, e) for k, e in branches.items()])


def balanced_or(exprs: list[str]) -> str:
    """``(a or b) or (c or d)``: ``or`` hashes its left side, so a left-deep chain of k
    branches costs O(k^2) per node and a balanced tree O(k log k). PromQL has no empty
    ``or``: no expressions is a ValueError (it recursed until RecursionError)."""
    if not exprs:
        raise ValueError("balanced_or needs at least one expression")
    if len(exprs) == 1:
        return exprs[0]
    mid = len(exprs) // 2
    return f"({balanced_or(exprs[:mid])}) or ({balanced_or(exprs[mid:])})"


def number(text: Any) -> float | None:
    """A number Prometheus wrote as a string (a sample's value, a label); None for anything
    else (a proxy or a broken exporter may answer junk: absent, never a traceback)."""
    if not isinstance(text, str):
        return None
    try:
        return float(text)
    except ValueError:
        return None


def sample_value(pair: Any) -> float | None:
    """The value of a sample ``[time, "value"]``, as :func:`number` reads it."""
    if not isinstance(pair, list | tuple) or len(pair) != 2:
        return None
    return number(pair[1])

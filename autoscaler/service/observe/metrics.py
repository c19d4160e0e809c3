"""The service's Prometheus metrics (``/metrics``), in a registry of their own.

Counters only grow; gauges are rewritten from the store and the last snapshot at the end
of every tick, so a follower instance (not the leader) still reports the fleet it sees.
"""

from __future__ import annotations

from collections import Counter as Tally
from collections.abc import Iterable, Mapping
from typing import Any

from prometheus_client import CollectorRegistry, Counter, Gauge, Histogram, generate_latest
from prometheus_client.exposition import CONTENT_TYPE_LATEST

from autoscaler.model.node import Node
from autoscaler.model.plan import Action, Plan, subject_of
from autoscaler.model.snapshot import SpotScore
from autoscaler.policy.errors import PolicyError

PREFIX = "gpu_autoscaler"
CONTENT_TYPE = CONTENT_TYPE_LATEST
TICK_BUCKETS = (0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10, 20, 30, 60, 120, 300, 600)
# Lifecycle durations: seconds (a spot notice is acted on) to an hour (a slow boot or drain).
# The loop's stages, exported at 0 from the start so that increase() counts a first failure.
TICK_STAGES = ("leader", "reload", "fleet", "signals", "reconcile", "decide", "record", "submit",
               "advance")
LIFECYCLE_BUCKETS = (1, 5, 15, 30, 60, 120, 300, 600, 900, 1200, 1800, 2700, 3600, 7200)
# Why a spot notice was not obeyed (service/control/interruptions.py REJECTED).
NOTICE_REJECTIONS = ("malformed", "forged", "unknown-instance", "wrong-region")


def action_trigger(action: Action) -> str:
    """The reason-trigger label: why this kind of action happened."""
    trigger = subject_of(action).trigger
    if trigger:
        return str(trigger)
    what = getattr(action, "what", None)
    if what:
        return str(what)
    return {"cancel_drain": "demand", "terminate": "cleanup", "report_job": "max-job-runtime",
             "start_warm": "warm-pool"}.get(
        action.kind, "")


def constraint_kind(constraint: str) -> str:
    """A label of few values: "node affinity x In [y]" -> "node affinity"."""
    words = constraint.split(" ", 2)
    return " ".join(words[:2]) if words[:2] == ["node", "affinity"] else words[0].rstrip(":")


class ServiceMetrics:
    def __init__(self) -> None:
        r = self.registry = CollectorRegistry(auto_describe=True)
        self.ticks = Counter(f"{PREFIX}_ticks", "Ticks run (leader or not).", registry=r)
        self.tick_errors = Counter(f"{PREFIX}_tick_errors", "Ticks that failed, by stage.",
                                   ["stage"], registry=r)
        self.tick_duration = Histogram(f"{PREFIX}_tick_duration_seconds", "Duration of a tick.",
                                       buckets=TICK_BUCKETS, registry=r)
        self.last_tick = Gauge(f"{PREFIX}_last_tick_timestamp_seconds",
                               "Unix time the last tick finished.", registry=r)
        self.decisions = Counter(f"{PREFIX}_decisions", "Plans decided, by mode.", ["mode"],
                                 registry=r)
        self.actions = Counter(f"{PREFIX}_actions", "Actions decided, by type and trigger.",
                               ["kind", "trigger", "mode"], registry=r)
        self.nodes = Gauge(f"{PREFIX}_nodes", "Nodes in the store by team, pool, market, state.",
                           ["team", "pool", "market", "state"], registry=r)
        self.fleet_hourly = Gauge(f"{PREFIX}_fleet_hourly_usd",
                                  "$/h of every billable node, at current prices.", registry=r)
        self.pool_hourly = Gauge(f"{PREFIX}_pool_hourly_usd", "$/h per pool.", ["pool"], registry=r)
        self.gpu_util = Gauge(f"{PREFIX}_gpu_utilization_percent",
                              "Mean GPU utilization the engine saw per pool.", ["pool"], registry=r)
        self.data_missing = Gauge(f"{PREFIX}_data_missing",
                                  "1 when a pool's signals are missing (scale-down frozen).",
                                  ["pool"], registry=r)
        self.unhealthy_held = Gauge(f"{PREFIX}_unhealthy_budget_held",
                                    "Broken nodes of a pool not replaced because more of the "
                                    "fleet looks broken than the unhealthy budget allows.",
                                    ["pool"], registry=r)
        self.broken_waiting = Gauge(f"{PREFIX}_broken_nodes_waiting",
                                    "Broken nodes of a pool (unusable, not listed, silent) kept "
                                    "this tick by its max_draining_percent, to be replaced "
                                    "on later ticks.", ["pool"], registry=r)
        self.policy_errors = Gauge(f"{PREFIX}_policy_errors",
                                   "Policy problems per file (the team keeps its last good policy).",
                                   ["file"], registry=r)
        self.lost_frozen = Gauge(f"{PREFIX}_lost_frozen",
                                 "1 when a cloud answer lacked so many of a pool's instances "
                                 "that no node of it is marked LOST (alert on it).", ["pool"],
                                 registry=r)
        self._frozen_pools: set[str] = set()
        self.leader = Gauge(f"{PREFIX}_leader", "1 when this instance holds the lease.", registry=r)
        for stage in TICK_STAGES:
            self.tick_errors.labels(stage)
        self._lifecycle_metrics(r)
        self.unserved = Gauge(f"{PREFIX}_unserved_jobs",
                              "Pending jobs no pool's nodes could run, by team and the kind of "
                              "constraint that failed (taint, nodeSelector, node affinity, zone, "
                              "resource, GPUs).",
                              ["team", "constraint"], registry=r)
        self._unserved_labels: set[tuple[str, str]] = set()
        self.launch_backoff = Gauge(f"{PREFIX}_launch_backoff_failures", "Failed launches in "
                                    "a row of one cause that hold launches into this pool, type, "
                                    "zone and market (no series: none); /status has the cause "
                                    "and next try.",
                                    ["pool", "instance_type", "zone", "market"], registry=r)
        self._backoff_labels: set[tuple[str, str, str, str]] = set()
        self.spot_score = Gauge(f"{PREFIX}_spot_placement_score", "AWS's Spot placement score "
                                "(1-10) of a pool's set of instance types in a zone, as last read "
                                "(clouds.aws.spot_placement_scores); 3 or less ranks the zone last.",
                                ["region", "zone", "instance_types"], registry=r)
        self._score_labels: set[tuple[str, str, str]] = set()
        self._forecast_metrics(r)
        self._node_labels: set[tuple[str, str, str, str]] = set()
        self._pool_labels: set[str] = set()
        self._missing_pools: set[str] = set()
        self._held_pools: set[str] = set()
        self._waiting_pools: set[str] = set()
        self._util_pools: set[str] = set()
        self._error_files: set[str] = set()

    def _lifecycle_metrics(self, r: CollectorRegistry) -> None:
        """Per-node, per-team and lifecycle-duration metrics (the dashboards and alerts use
        them; ``service/observe/metrics_fleet.py`` fills them at the end of every tick)."""
        self.node_info = Gauge(f"{PREFIX}_node_info", "1 per live node: joins DCGM series "
                               "(by node name) to team, pool and instance type.",
                               ["node", "team", "pool", "instance_type", "market"], registry=r)
        self.state_timeout_ratio = Gauge(
            f"{PREFIX}_node_state_timeout_ratio", "Time in the current state over that state's "
            "timeout (lifecycle table, pool overrides): above 1 the node is stuck.",
            ["node", "pool", "state"], registry=r)
        self.team_gpus = Gauge(f"{PREFIX}_team_gpus", "GPUs of the team's billable nodes.",
                               ["team"], registry=r)
        self.team_hourly = Gauge(f"{PREFIX}_team_hourly_usd", "$/h of the team's billable nodes.",
                                 ["team"], registry=r)
        self.warm_hourly = Gauge(f"{PREFIX}_warm_pool_hourly_usd", "$/h of the pool's stopped "
                                 "warm nodes: their volumes only (catalog/volumes.py); also in "
                                 "team_hourly_usd.", ["pool"], registry=r)
        self.team_quota_gpus = Gauge(f"{PREFIX}_team_quota_gpus", "The team's quota.max_gpus.",
                                     ["team"], registry=r)
        self.team_quota_hourly = Gauge(f"{PREFIX}_team_quota_hourly_usd",
                                       "The team's quota.max_hourly_usd.", ["team"], registry=r)
        self.pending_gpus = Gauge(f"{PREFIX}_pending_gpus", "GPUs asked for by pending jobs, "
                                  "by pool and the team's priority tier.",
                                  ["team", "pool", "priority"], registry=r)
        self.pool_backoff = Gauge(f"{PREFIX}_pool_backoff", "Offerings (type x market) of the pool "
                                  "in launch backoff after a capacity error.", ["pool"], registry=r)
        self.step_errors = Counter(f"{PREFIX}_step_errors", "Errors caught inside actuation "
                                   "(terraform, bootstrap, drain, ...) by component; the step is "
                                   "retried, the error is on /status.", ["component"], registry=r)
        self.interruptions = Counter(f"{PREFIX}_interruptions", "Spot interruption notices that "
                                     "made a node INTERRUPTED.", ["pool"], registry=r)
        self.notices_rejected = Counter(
            f"{PREFIX}_notices_rejected", "Interruption queue messages and notices not obeyed, "
            "by reason: malformed, forged (not the cloud's source, the fleet's account or a "
            "configured region), unknown-instance, wrong-region (our instance id, another "
            "region).", ["reason"], registry=r)
        for reason in NOTICE_REJECTIONS:
            self.notices_rejected.labels(reason)
        self.boot_to_ready = Histogram(f"{PREFIX}_boot_to_ready_seconds", "From the launch "
                                       "request to READY.", ["instance_type"],
                                       buckets=LIFECYCLE_BUCKETS, registry=r)
        self.drain_duration = Histogram(f"{PREFIX}_drain_duration_seconds", "From DRAINING to "
                                        "DRAINED.", ["pool", "trigger"], buckets=LIFECYCLE_BUCKETS,
                                        registry=r)
        self.notice_to_drain = Histogram(f"{PREFIX}_interruption_notice_to_drain_seconds",
                                         "From the cloud's spot notice to the node's drain start.",
                                         ["pool"], buckets=LIFECYCLE_BUCKETS, registry=r)

    def _forecast_metrics(self, r: CollectorRegistry) -> None:
        """Demand and its forecast per pool (service/observe/forecasts.py), to compare before
        switching ``predictive.mode`` to scale."""
        self.demand_gpus = Gauge(f"{PREFIX}_demand_gpus", "GPUs requested by the pool's pending "
                                 "and running jobs (the demand history's value; read back "
                                 "from Prometheus by a new controller).", ["pool"], registry=r)
        self.forecast_gpus = Gauge(f"{PREFIX}_forecast_gpus", "Forecast demand for the current "
                                   "5-minute bin, at p50 and the policy quantile.",
                                   ["pool", "quantile"], registry=r)
        self.forecast_mape = Gauge(f"{PREFIX}_forecast_mape", "MAPE (%) of the p50 forecast "
                                   "against demand over the last 7 days.", ["pool"], registry=r)
        self._forecast_labels: dict[str, set[tuple[str, ...]]] = {}

    def set_forecasts(self, views: Mapping[str, Any], actual: Mapping[str, float]) -> None:
        """``views``: pool -> PoolForecast; ``actual``: pool -> requested GPUs this tick."""
        values: dict[str, dict[tuple[str, ...], float]] = {"demand": {
            (p,): v for p, v in actual.items()}, "forecast": {}, "mape": {}}
        for pool, v in views.items():
            if v.p50_gpus is not None:
                values["forecast"][(pool, "0.5")] = v.p50_gpus
                values["forecast"][(pool, f"{v.quantile:g}")] = v.quantile_gpus
            if v.rolling_mape is not None:
                values["mape"][(pool,)] = v.rolling_mape
        for name, gauge in (("demand", self.demand_gpus), ("forecast", self.forecast_gpus),
                            ("mape", self.forecast_mape)):
            for gone in self._forecast_labels.get(name, set()) - set(values[name]):
                gauge.remove(*gone)
            for labels, value in values[name].items():
                gauge.labels(*labels).set(value)
            self._forecast_labels[name] = set(values[name])

    def count_rejected_notices(self, by_reason: Mapping[str, int]) -> None:
        for reason, count in by_reason.items():
            if reason in NOTICE_REJECTIONS:  # a label of few values, whatever a source says
                self.notices_rejected.labels(reason).inc(count)

    def exposition(self) -> bytes:
        return generate_latest(self.registry)

    def count_plan(self, plan: Plan, dry_run: bool) -> None:
        mode = "dry-run" if dry_run else "live"
        self.decisions.labels(mode).inc()
        for action in plan.actions:
            self.actions.labels(action.kind, action_trigger(action), mode).inc()

    def set_fleet(self, nodes: Iterable[Node], pool_usd: Mapping[str, float]) -> None:
        tally = Tally((n.team, n.pool, n.market.value, n.state.value) for n in nodes)
        for stale in self._node_labels - set(tally):
            self.nodes.labels(*stale).set(0)
        for labels, count in tally.items():
            self.nodes.labels(*labels).set(count)
        self._node_labels |= set(tally)
        for pool in self._pool_labels - set(pool_usd):
            self.pool_hourly.labels(pool).set(0)
        for pool, usd in pool_usd.items():
            self.pool_hourly.labels(pool).set(usd)
        self._pool_labels |= set(pool_usd)
        self.fleet_hourly.set(round(sum(pool_usd.values()), 4))

    def set_pools(self, plan: Plan) -> None:
        """Per-pool signals of the last decision (labels of pools gone since are removed)."""
        missing = {p: 1 if s.data_missing else 0 for p, s in plan.pools.items()}
        util = {p: s.util_mean for p, s in plan.pools.items() if s.util_mean is not None}
        held = {p: s.broken_held for p, s in plan.pools.items()}
        waiting = {p: s.broken_waiting for p, s in plan.pools.items()}
        for gauge, labels, values in ((self.data_missing, self._missing_pools, missing),
                                      (self.gpu_util, self._util_pools, util),
                                      (self.unhealthy_held, self._held_pools, held),
                                      (self.broken_waiting, self._waiting_pools, waiting)):
            for gone in labels - set(values):
                gauge.remove(gone)
            for pool, value in values.items():
                gauge.labels(pool).set(value)
        self._missing_pools, self._util_pools = set(missing), set(util)
        self._held_pools, self._waiting_pools = set(held), set(waiting)
        unserved = Tally((j.team or "", constraint_kind(j.constraint)) for j in plan.unserved)
        for left in self._unserved_labels - set(unserved):
            self.unserved.remove(*left)
        for team_kind, count in unserved.items():
            self.unserved.labels(*team_kind).set(count)
        self._unserved_labels = set(unserved)

    def set_backoffs(self, counts: Mapping[tuple[str, str, str, str], int]) -> None:
        """A back-off that ended goes (no series: none), as a renamed pool's would stay."""
        for gone in self._backoff_labels - set(counts):
            self.launch_backoff.remove(*gone)
        for labels, count in counts.items():
            self.launch_backoff.labels(*labels).set(count)
        self._backoff_labels = set(counts)

    def set_spot_scores(self, scores: Iterable[SpotScore]) -> None:
        """The scores of the last read; a series no longer read goes (not 0: no score is not
        a low one)."""
        now = {(s.region, s.zone, ",".join(sorted(set(s.instance_types)))): s.score for s in scores}
        for gone in self._score_labels - set(now):
            self.spot_score.remove(*gone)
        for labels, score in now.items():
            self.spot_score.labels(*labels).set(score)
        self._score_labels = set(now)

    def set_policy_errors(self, errors: Iterable[PolicyError]) -> None:
        """A file whose errors are fixed (or that was removed) goes: no series, no error."""
        per_file = Tally(e.file for e in errors)
        for gone in self._error_files - set(per_file):
            self.policy_errors.remove(gone)
        for file, count in per_file.items():
            self.policy_errors.labels(file).set(count)
        self._error_files = set(per_file)

    def set_lost_frozen(self, pools: Iterable[str]) -> None:
        now = set(pools)
        for gone in self._frozen_pools - now:
            self.lost_frozen.labels(gone).set(0)
        for pool in now:
            self.lost_frozen.labels(pool).set(1)
        self._frozen_pools |= now  # kept at 0 while the pool lives (forget_pools)

    def forget_pools(self, live: set[str]) -> None:
        """Remove the series of every pool not in ``live`` (its team/pool keys: the pools
        of the policies and of the fleet). A live pool keeps its zeros and its counters; a
        removed or renamed one would otherwise keep its series for the life of the process.
        A pool that comes back starts its counters again at 0 (Prometheus reads a reset)."""
        for labels in [la for la in self._node_labels if f"{la[0]}/{la[1]}" not in live]:
            self.nodes.remove(*labels)
            self._node_labels.discard(labels)
        for gauge, pools in ((self.pool_hourly, self._pool_labels),
                             (self.lost_frozen, self._frozen_pools)):
            for pool in pools - live:
                gauge.remove(pool)
            pools &= live
        for metric, names in ((self.interruptions, ("pool",)),
                              (self.drain_duration, ("pool", "trigger")),
                              (self.notice_to_drain, ("pool",))):
            for child in _label_sets(metric, names):
                if child[0] not in live:
                    metric.remove(*child)


def _label_sets(metric: Counter | Histogram, names: tuple[str, ...]) -> set[tuple[str, ...]]:
    """The label sets a metric has children for, from its public samples."""
    return {tuple(s.labels[n] for n in names) for m in metric.collect() for s in m.samples}

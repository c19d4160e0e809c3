"""Per-node GPU metrics (DCGM exporter series) from Prometheus: two queries per tick over
the raw series (``promql.py``), or one over gpu-autoscaler's recording rules (``rules.py``,
``recording_rules: true``).

The node label (``PrometheusConfig.node_label``: ``Hostname`` by default, ``hostname`` for
newer dcgm-exporter, or ``instance`` when the scrape config sets it) must carry the fleet
node name. Fail fast: one short timeout, no retries inside a tick; a failure is reported
as a reason string, never as zeros. The client's timeout bounds each socket read, not the
answer: a server that sends a byte a second would hold the tick for ever. So each query
runs on a thread of its own and is waited for at most twice the timeout (the connect and
the reads each get one); one still running then is left to end by itself, and no query is
sent until it has.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass
from datetime import datetime, timedelta
from typing import Any

import requests
import urllib3
from prometheus_api_client import PrometheusConnect
from prometheus_api_client.exceptions import PrometheusApiClientException
from urllib3.util.retry import Retry

from autoscaler.bounded import Bound, Overran
from autoscaler.model.snapshot import GpuMetrics, NodeObservation
from autoscaler.policy.duration import format_duration
from autoscaler.policy.models import Pool
from autoscaler.secrets import SecretError
from autoscaler.signals.config import PrometheusConfig
from autoscaler.signals.promql import (
    ECC_DBE_FIELD,
    FIELD_LABEL,
    MAX_FOLLOWUP_NODES,
    PAGES_PENDING_FIELD,
    REMAP_FAILED_FIELD,
    UTIL_METRICS,
    PoolWindows,
    QueryBuilder,
    gpus_key,
    max_key,
    mean_key,
    newest_key,
    now_key,
    sample_value,
    xid_key,
)
from autoscaler.signals.rules import RecordedQuery, RulesError, RuleSet

Fields = dict[str, dict[str, float]]  # node -> field key -> value


class PrometheusReadError(RuntimeError):
    """Prometheus could not answer this tick; the message says why (no secrets)."""


@dataclass(frozen=True)
class MetricsReading:
    nodes: dict[str, NodeObservation]
    error: str | None = None  # the whole source failed: every pool's metrics are missing
    queries: int = 0


def _session(config: PrometheusConfig) -> tuple[requests.Session, dict[str, str]]:
    session = requests.Session()
    session.verify = str(config.ca_file) if config.verify and config.ca_file else config.verify
    headers = dict(config.headers)
    if config.bearer_token is not None:
        headers["Authorization"] = f"Bearer {config.bearer_token.token()}"
    if config.basic_auth is not None:
        session.auth = (config.basic_auth.username, config.basic_auth.password())
    return session, headers


class PrometheusReader:
    def __init__(self, config: PrometheusConfig,
                 session_hook: Callable[[requests.Session], None] | None = None):
        self.config = config
        self._session_hook = session_hook
        self._client: PrometheusConnect | None = None
        self._bound = Bound("prometheus-query")  # at most one query left running past its time

    def _connect(self) -> PrometheusConnect:
        if self._client is None:
            session, headers = _session(self.config)
            if self._session_hook is not None:
                self._session_hook(session)
            self._client = PrometheusConnect(
                url=self.config.url.rstrip("/"), headers=headers or None,
                disable_ssl=not self.config.verify, session=session,
                retry=Retry(total=0, connect=0, read=0, redirect=0, status=0),
                timeout=self.config.timeout.total_seconds(),
            )
        return self._client

    def close(self) -> None:
        if self._client is not None:
            self._client.close()
            self._client = None

    def read(self, node_pools: Mapping[str, Pool], pools: Iterable[Pool], now: datetime,
             pool_of: Callable[[str], Pool | None] | None = None) -> MetricsReading:
        """Metrics evaluated at ``now`` for every node in ``node_pools`` (with its pool's
        windows), and for other reporting hosts that ``pool_of`` attributes to a pool."""
        # A tick sees each pool once per node: work per distinct pool object, not per node.
        distinct = list({id(p): p for p in [*pools, *node_pools.values()]}.values())
        if not distinct:  # no pool (an empty policy directory): no window to read, no node
            return MetricsReading({})
        if self.config.recording_rules:
            return self._read_recorded(node_pools, distinct, now, pool_of)
        windows_of = _windows_of(distinct)
        windows = {windows_of(p) for p in distinct}
        builder = QueryBuilder(windows, self.config.node_label, self.config.stale_after)
        fields: Fields = {}
        targets = dict(node_pools)
        sent = 0
        try:
            for query in (builder.windows_query(), builder.current_query()):
                if query is None:
                    continue
                sent += 1
                _collect(self._query(query, now), self.config.node_label, fields)
            if pool_of is not None:
                targets.update(_attributed(fields.keys() - targets.keys(), pool_of, windows,
                                           windows_of))
            dated, undated = _cap(_lagging(targets, fields))
            followup = builder.followup_query(dated)  # None when every node is dated
            if followup is not None:
                sent += 1
                _collect(self._query(followup, now), self.config.node_label, fields)
        except PrometheusReadError as exc:
            return MetricsReading({}, error=str(exc), queries=sent)
        nodes = {name: self._observe(fields.get(name, {}), windows_of(pool), builder,
                                     name in undated)
                 for name, pool in targets.items()}
        return MetricsReading(nodes, queries=sent)

    def _read_recorded(self, node_pools: Mapping[str, Pool], pools: list[Pool], now: datetime,
                       pool_of: Callable[[str], Pool | None] | None) -> MetricsReading:
        """One query over gpu-autoscaler's recording rules (see ``signals/rules.py``)."""
        if not pools:
            return MetricsReading({})
        recorded = RecordedQuery(RuleSet.of(pools, self.config.node_label,
                                            self.config.stale_after))
        windows_of = _windows_of(pools)
        hosts = {name: windows_of(pool) for name, pool in node_pools.items()}
        try:
            fields, markers = recorded.collect(self._query(recorded.query(), now),
                                               now.timestamp())
            recorded.check(markers)
        except (PrometheusReadError, RulesError) as exc:
            return MetricsReading({}, error=str(exc), queries=1)
        if pool_of is not None:
            windows = {windows_of(p) for p in pools}
            for name, pool in _attributed(fields.keys() - hosts.keys(), pool_of, windows,
                                          windows_of).items():
                hosts[name] = windows_of(pool)
        nodes = {name: recorded.observe(fields.get(name, {}), w) for name, w in hosts.items()}
        # The rules date a node at their first evaluation after its scrapes fail, but its
        # window's mean is another group's and may empty first (groups run apart, later under
        # load): undated for that tick, a node READY for an hour would read as silent for the
        # hour. The few nodes read as silent are dated from their raw series, as in raw mode.
        lagging: dict[str, list[str]] = {}
        for name, obs in nodes.items():
            if obs.metrics_silent and obs.metrics is None:
                lagging.setdefault(hosts[name].metric, []).append(name)
        dated, undated = _cap(lagging)
        if not dated:
            return MetricsReading(nodes, queries=1)
        builder = QueryBuilder({windows_of(p) for p in pools}, self.config.node_label,
                               self.config.stale_after)
        followup = builder.followup_query(dated)
        ages: Fields = {}
        try:
            if followup is not None:
                _collect(self._query(followup, now), self.config.node_label, ages)
        except PrometheusReadError as exc:
            return MetricsReading({}, error=str(exc), queries=2)
        for name in undated:
            nodes[name] = _undated(hosts[name].metric)
        for name, values in ages.items():
            w = hosts.get(name)
            age = values.get(newest_key(w.metric)) if w is not None else None
            if w is not None and age is not None:
                nodes[name] = recorded.observe({**fields.get(name, {}), now_key(w.metric): age}, w)
        return MetricsReading(nodes, queries=2)

    def query(self, query: str, now: datetime) -> list[dict[str, Any]]:
        """An instant query at ``now``, with the reader's timeout and errors."""
        return self._query(query, now)

    def _query(self, query: str, now: datetime) -> list[dict[str, Any]]:
        timeout = self.config.timeout.total_seconds()
        return _series(self._guarded(lambda client: client.custom_query(
            query, params={"time": f"{now.timestamp():.3f}", "timeout": f"{timeout:g}s"})))

    def active_targets(self) -> list[dict[str, Any]]:
        """Prometheus' active scrape targets (``/api/v1/targets``), as answered: Prometheus
        itself has this API, not every server that answers queries does."""
        answer = self._guarded(lambda client: client.get_targets(state="active"))
        targets = answer.get("activeTargets") if isinstance(answer, dict) else None
        return [t for t in targets if isinstance(t, dict)] if isinstance(targets, list) else []

    def query_range(self, query: str, start: datetime, end: datetime,
                    step: timedelta) -> list[dict[str, Any]]:
        """A range query (``/api/v1/query_range``), with the same timeout and errors."""
        timeout = self.config.timeout.total_seconds()
        return _series(self._guarded(lambda client: client.custom_query_range(
            query, start_time=start, end_time=end, step=f"{step.total_seconds():g}s",
            params={"timeout": f"{timeout:g}s"})))

    def _guarded(self, call: Callable[[PrometheusConnect], Any]) -> list[dict[str, Any]]:
        timeout = self.config.timeout.total_seconds()
        try:
            result: list[dict[str, Any]] = self._within(2 * timeout, call)
        except (requests.Timeout, requests.ConnectionError) as exc:
            if _timed_out(exc):
                raise PrometheusReadError(f"prometheus timed out after {timeout:g}s") from None
            raise PrometheusReadError(
                f"prometheus unreachable at {public_url(self.config.url)}") from None
        except PrometheusApiClientException as exc:
            raise PrometheusReadError(f"prometheus query failed: {str(exc)[:300]}") from None
        except (requests.RequestException, ValueError, KeyError, TypeError,
                RecursionError) as exc:  # the client reads any JSON it is given
            raise PrometheusReadError(f"prometheus answered badly: {type(exc).__name__}") from None
        except SecretError as exc:
            raise PrometheusReadError(str(exc)) from None
        return result

    def _within(self, limit: float, call: Callable[[PrometheusConnect], Any]) -> Any:
        """``call``'s answer or exception if it ends within ``limit`` seconds."""
        try:
            return self._bound.call("query", limit, lambda: call(self._connect()), "prometheus")
        except Overran as exc:
            if exc.still_running:
                raise PrometheusReadError("prometheus is still sending the answer to a query "
                                          "that overran its time: no query sent") from None
            raise PrometheusReadError(
                f"prometheus did not finish its answer within {limit:g}s") from None

    def _observe(self, fields: dict[str, float], w: PoolWindows, builder: QueryBuilder,
                 undated: bool = False) -> NodeObservation:
        metric_name = UTIL_METRICS[w.metric][0]
        ages = [a for a in (fields.get(now_key(w.metric)), fields.get(newest_key(w.metric)))
                if a is not None]
        if not ages:
            if undated:
                return _undated(w.metric)
            why = f"no {metric_name} sample in the last {format_duration_s(builder.horizon_s)}"
            return NodeObservation(metrics_missing=why, metrics_silent=True)
        age = max(0.0, ages[0])
        metrics = GpuMetrics(
            util_mean=fields.get(mean_key(w.metric, w.window_s)),
            util_max=fields.get(max_key(w.metric, w.window_s)),
            util_max_idle_window=fields.get(max_key(w.metric, w.idle_s)),
            mem_used_mib=fields.get("mem_used"),
            mem_free_mib=fields.get("mem_free"),
            temperature_max_c=fields.get("temp"),
            power_w=fields.get("power"),
            xid_errors=int(fields.get(xid_key(w.window_s), 0)),
            thermal_throttle=fields.get("throttle", 0.0) > 0,
            ecc_dbe_errors=int(fields.get(ECC_DBE_FIELD, 0)),
            row_remap_failures=int(fields.get(REMAP_FAILED_FIELD, 0)),
            retired_pages_pending=int(fields.get(PAGES_PENDING_FIELD, 0)),
            gpus_reporting=int(fields.get(gpus_key(w.metric), 0)),
            sample_age_s=round(age, 3),
        )
        missing = None
        if age > builder.stale_s:
            missing = f"no sample for {age:.0f}s (stale after {builder.stale_s}s)"
        return NodeObservation(metrics=metrics, metrics_missing=missing,
                               metrics_silent=missing is not None)


def _windows_of(pools: Iterable[Pool]) -> Callable[[Pool], PoolWindows]:
    """``PoolWindows.of`` computed once per pool object."""
    cache = {id(p): PoolWindows.of(p) for p in pools}

    def of(pool: Pool) -> PoolWindows:
        found = cache.get(id(pool))
        return found if found is not None else PoolWindows.of(pool)

    return of


def _attributed(hosts: Iterable[str], pool_of: Callable[[str], Pool | None],
                windows: set[PoolWindows],
                windows_of: Callable[[Pool], PoolWindows]) -> dict[str, Pool]:
    out = {}
    for host in hosts:
        pool = pool_of(host)
        if pool is not None and windows_of(pool) in windows:
            out[host] = pool
    return out


def _lagging(targets: Mapping[str, Pool], fields: Fields) -> dict[str, list[str]]:
    """Nodes without an exact age (no sample within the lookback, or marked stale), by
    utilization metric."""
    out: dict[str, list[str]] = {}
    for name, pool in targets.items():
        metric = pool.scale_up.metric
        if now_key(metric) not in fields.get(name, {}):
            out.setdefault(metric, []).append(name)
    return out


def _cap(lagging: dict[str, list[str]]) -> tuple[dict[str, list[str]], set[str]]:
    """At most MAX_FOLLOWUP_NODES nodes are dated by the follow-up query."""
    dated: dict[str, list[str]] = {}
    undated: set[str] = set()
    budget = MAX_FOLLOWUP_NODES
    for metric, names in sorted(lagging.items()):
        names = sorted(names)
        dated[metric], budget = names[:budget], max(0, budget - len(names))
        undated.update(names[len(dated[metric]):])
    return {m: n for m, n in dated.items() if n}, undated


def _series(result: Any) -> list[dict[str, Any]]:
    """A query's ``data.result``, which the client returns unchecked: a list, or an error."""
    if not isinstance(result, list):
        raise PrometheusReadError(f"prometheus answered badly: a result of {type(result).__name__}")
    return result


def _undated(metric: str) -> NodeObservation:
    return NodeObservation(metrics_missing=(
        f"no recent {UTIL_METRICS[metric][0]} sample (not dated: more than "
        f"{MAX_FOLLOWUP_NODES} nodes stopped reporting)"), metrics_silent=True)


def format_duration_s(secs: int) -> str:
    return format_duration(timedelta(seconds=secs))


def _timed_out(exc: BaseException) -> bool:
    """requests reports a read timeout as ConnectionError(MaxRetryError(ReadTimeoutError))
    when retries are off."""
    if isinstance(exc, requests.Timeout):
        return True
    reason = getattr(exc.args[0], "reason", None) if exc.args else None
    # urllib3 2 makes "connection refused" (NewConnectionError) a ConnectTimeoutError.
    if isinstance(reason, urllib3.exceptions.NewConnectionError):
        return False
    return isinstance(reason, urllib3.exceptions.TimeoutError)


def public_url(url: str) -> str:
    """The URL without any user:password part."""
    scheme, _, rest = url.partition("://")
    return f"{scheme}://{rest.rpartition('@')[2]}"


def _collect(result: list[dict[str, Any]], label: str, into: Fields) -> None:
    """Values by node and field key (the ``gas_field`` label)."""
    for series in result:
        labels = series.get("metric") if isinstance(series, dict) else None
        if not isinstance(labels, dict):
            continue
        node = labels.get(label)
        key = labels.get(FIELD_LABEL)
        if not isinstance(node, str) or not isinstance(key, str) or not node or not key:
            continue
        value = sample_value(series.get("value"))
        if value is None or math.isnan(value) or math.isinf(value):
            continue  # absent, not zero
        into.setdefault(node, {})[key] = value

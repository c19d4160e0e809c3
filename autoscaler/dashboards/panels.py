"""The three dashboards as plain data: panels, their PromQL, units, variables.

Rendering (``render.py``, with grafana-foundation-sdk) and the tests read these; nothing
here imports Grafana's SDK, so the service and the CLI load it for free.

Joins: dcgm-exporter series carry the node name in ``Hostname`` (``NODE_LABEL``) but no
pool; the service exports ``gpu_autoscaler_node_info{node, team, pool, ...} 1`` for every
live node, and ``by_pool()`` joins a DCGM expression to it. Service gauges are read with
``max by (...)`` so two service instances (leader and follower report the same fleet)
are not counted twice.
"""

from __future__ import annotations

from dataclasses import dataclass, field

NODE_LABEL = "Hostname"
P = "gpu_autoscaler"
WINDOW_OPTIONS = ("15m", "1h", "6h", "24h")  # $window: rare events (boots, drains, notices)


@dataclass(frozen=True)
class Query:
    expr: str
    legend: str = ""


@dataclass(frozen=True)
class Panel:
    title: str
    queries: tuple[Query, ...]
    unit: str = "short"
    kind: str = "timeseries"  # timeseries | stat | table
    description: str = ""
    stacked: bool = False


@dataclass(frozen=True)
class Dashboard:
    uid: str
    title: str
    description: str
    panels: tuple[Panel, ...]
    variables: tuple[str, ...] = ()  # names among VARIABLES
    annotations: tuple[tuple[str, str], ...] = field(default=())  # (name, expr)


def q(expr: str, legend: str = "") -> Query:
    return Query(expr, legend)


def by_pool(expr: str) -> str:
    """``expr`` (a DCGM expression keeping the node label) with the node's pool attached,
    restricted to the dashboard's $pool (the DCGM selectors carry the $node filter)."""
    info = (f'max by ({NODE_LABEL}, pool) (label_replace({P}_node_info{{pool=~"$pool"}}, '
            f'"{NODE_LABEL}", "$1", "node", "(.+)"))')
    return f"({expr}) * on ({NODE_LABEL}) group_left (pool) {info}"


def dcgm(metric: str) -> str:
    return f'{metric}{{{NODE_LABEL}=~"$node"}}'


def quantiles(metric: str, by: str, window: str, qs: tuple[float, ...] = (0.5, 0.9, 0.99)
              ) -> tuple[Query, ...]:
    return tuple(q(f"histogram_quantile({x}, sum by (le, {by}) "
                   f"(increase({metric}_bucket[{window}])))", f"p{round(x * 100)} {{{{{by}}}}}")
                 for x in qs)


THERMAL = "floor({v} / 32) % 4 > bool 0"  # NVML Sw/HwThermalSlowdown: bits 5, 6 (0x20, 0x40)
POWER = "(floor({v} / 4) % 2) + (floor({v} / 128) % 2) > bool 0"  # SwPowerCap 0x4, HwPowerBrake 0x80
THROTTLE = dcgm("DCGM_FI_DEV_CLOCK_THROTTLE_REASONS")
NODES = f'max by (team, pool, market, state) ({P}_nodes{{team=~"$team"}})'
LIVE = 'state!~"TERMINATED|LOST"'

FLEET = Dashboard(
    uid="gpu-autoscaler-fleet", title="GPU autoscaler: fleet & money",
    description="What the fleet is, what it costs against each team's quota, and what the "
    "autoscaler did about it (decisions as annotations; reasons on the service's /ui page).",
    variables=("team",),
    annotations=(("Decisions", f'sum by (kind, trigger) (increase({P}_actions_total'
                  f'{{mode="live", kind!="hold"}}[1m])) > 0'),),
    panels=(
        Panel("Nodes by team, pool, market and state", (q(NODES, "{{team}}/{{pool}} {{market}} {{state}}"),),
              stacked=True),
        Panel("Fleet $/h", (q(f"max({P}_fleet_hourly_usd)", "$/h"),), unit="currencyUSD", kind="stat"),
        Panel("Spot share of live nodes", (q(
            f'sum(max by (team, pool, market, state) ({P}_nodes{{market="spot", {LIVE}}})) / '
            f'sum(max by (team, pool, market, state) ({P}_nodes{{{LIVE}}}))', "spot"),),
            unit="percentunit", kind="stat"),
        Panel("$/h by team against quota", (
            q(f'max by (team) ({P}_team_hourly_usd{{team=~"$team"}})', "{{team}}"),
            q(f'max by (team) ({P}_team_quota_hourly_usd{{team=~"$team"}})', "quota {{team}}")),
            unit="currencyUSD"),
        Panel("GPUs by team against quota", (
            q(f'max by (team) ({P}_team_gpus{{team=~"$team"}})', "{{team}}"),
            q(f'max by (team) ({P}_team_quota_gpus{{team=~"$team"}})', "quota {{team}}"))),
        Panel("$/h by pool", (q(f"max by (pool) ({P}_pool_hourly_usd)", "{{pool}}"),),
              unit="currencyUSD", stacked=True),
        Panel("Warm pools: stopped nodes' $/h (volumes only)", (
            q(f"max by (pool) ({P}_warm_pool_hourly_usd)", "{{pool}}"),),
            unit="currencyUSD", stacked=True),
        Panel("Launches, drains and terminations by trigger", (q(
            f'sum by (kind, trigger) (increase({P}_actions_total{{mode="live", '
            f'kind=~"launch|drain|terminate|replace|cancel_drain"}}[$__rate_interval]))',
            "{{kind}} {{trigger}}"),), stacked=True),
        Panel("Pending GPU demand by priority tier", (q(
            f'sum by (priority) (max by (team, pool, priority) ({P}_pending_gpus{{team=~"$team"}}))',
            "{{priority}}"),), stacked=True),
        Panel("Demand against its forecast per pool", (
            q(f"max by (pool) ({P}_demand_gpus)", "actual {{pool}}"),
            q(f"max by (pool, quantile) ({P}_forecast_gpus)", "forecast q{{quantile}} {{pool}}")),
            description="GPUs requested by pending and running jobs, and the forecast made for "
            "the same 5-minute bin (pools with predictive.mode forecast-only or scale)."),
        Panel("Forecast MAPE over 7 days per pool", (
            q(f"max by (pool) ({P}_forecast_mape)", "{{pool}}"),), unit="percent",
            description="Mean absolute percentage error of the p50 forecast against demand "
            "(bins with at least one GPU): judge it before switching a pool to scale."),
        Panel("Pools with data missing (scale-down frozen)",
              (q(f"max by (pool) ({P}_data_missing)", "{{pool}}"),), kind="table"),
        Panel("Policy errors per file", (q(f"max by (file) ({P}_policy_errors)", "{{file}}"),),
              kind="table"),
        Panel("Pools in launch backoff", (
            q(f"max by (pool) ({P}_pool_backoff)", "capacity errors {{pool}}"),
            q(f"max by (pool, instance_type, market) ({P}_launch_backoff_failures)",
              "failed launches {{pool}} {{instance_type}} {{market}}")),
            description="Offerings the engine skips after capacity errors, and the executor's "
            "launch backoff after failed launches in a row."),
    ),
)

GPUS = Dashboard(
    uid="gpu-autoscaler-gpus", title="GPU autoscaler: GPUs",
    description="dcgm-exporter metrics per pool and node (pool from gpu_autoscaler_node_info).",
    variables=("pool", "node"),
    panels=(
        Panel("GPU utilization P50 / P90 per pool", tuple(
            q(f"quantile by (pool) ({x}, {by_pool(dcgm('DCGM_FI_DEV_GPU_UTIL'))})",
              f"p{round(x * 100)} {{{{pool}}}}") for x in (0.5, 0.9)), unit="percent"),
        Panel("Graphics engine active", (q(
            f"avg by ({NODE_LABEL}) ({by_pool(dcgm('DCGM_FI_PROF_GR_ENGINE_ACTIVE'))})",
            f"{{{{{NODE_LABEL}}}}}"),), unit="percentunit"),
        Panel("Framebuffer used", (q(
            f"sum by ({NODE_LABEL}) ({by_pool(dcgm('DCGM_FI_DEV_FB_USED'))})",
            f"{{{{{NODE_LABEL}}}}}"),), unit="mbytes"),
        Panel("GPU temperature (hottest GPU)", (q(
            f"max by ({NODE_LABEL}) ({by_pool(dcgm('DCGM_FI_DEV_GPU_TEMP'))})",
            f"{{{{{NODE_LABEL}}}}}"),), unit="celsius"),
        Panel("Power draw", (q(
            f"sum by ({NODE_LABEL}) ({by_pool(dcgm('DCGM_FI_DEV_POWER_USAGE'))})",
            f"{{{{{NODE_LABEL}}}}}"),), unit="watt"),
        Panel("Last XID error per GPU", (q(
            f"max by ({NODE_LABEL}, gpu) ({by_pool(dcgm('DCGM_FI_DEV_XID_ERRORS'))})",
            f"{{{{{NODE_LABEL}}}}} gpu {{{{gpu}}}}"),),
            description="79: the GPU fell off the bus; 48: double-bit ECC; 0: none."),
        Panel("GPUs thermally throttled", (q(
            f"sum by ({NODE_LABEL}) ({by_pool(THERMAL.format(v=THROTTLE))})",
            f"{{{{{NODE_LABEL}}}}}"),), stacked=True),
        Panel("GPUs power throttled", (q(
            f"sum by ({NODE_LABEL}) ({by_pool(POWER.format(v=THROTTLE))})",
            f"{{{{{NODE_LABEL}}}}}"),), stacked=True),
        Panel("ECC errors (volatile)", (
            q(f"sum by ({NODE_LABEL}) ({by_pool(dcgm('DCGM_FI_DEV_ECC_DBE_VOL_TOTAL'))})",
              f"double-bit {{{{{NODE_LABEL}}}}}"),
            q(f"sum by ({NODE_LABEL}) ({by_pool(dcgm('DCGM_FI_DEV_ECC_SBE_VOL_TOTAL'))})",
              f"single-bit {{{{{NODE_LABEL}}}}}"))),
        Panel("Remapped rows", (
            q(f"sum by ({NODE_LABEL}) ({by_pool(dcgm('DCGM_FI_DEV_UNCORRECTABLE_REMAPPED_ROWS'))})",
              f"uncorrectable {{{{{NODE_LABEL}}}}}"),
            q(f"sum by ({NODE_LABEL}) ({by_pool(dcgm('DCGM_FI_DEV_CORRECTABLE_REMAPPED_ROWS'))})",
              f"correctable {{{{{NODE_LABEL}}}}}"),
            q(f"max by ({NODE_LABEL}) ({by_pool(dcgm('DCGM_FI_DEV_ROW_REMAP_FAILURE'))})",
              f"remap failed {{{{{NODE_LABEL}}}}}"))),
    ),
)

PERF = Dashboard(
    uid="gpu-autoscaler-performance", title="GPU autoscaler: performance",
    description="How fast the autoscaler ticks, boots, drains and answers spot notices.",
    variables=("window",),
    panels=(
        Panel("Tick duration p50 / p90 / p99", tuple(
            q(f"histogram_quantile({x}, sum by (le) (rate({P}_tick_duration_seconds_bucket"
              f"[$__rate_interval])))", f"p{round(x * 100)}") for x in (0.5, 0.9, 0.99)), unit="s"),
        Panel("Tick errors by stage", (q(
            f"sum by (stage) (increase({P}_tick_errors_total[$__rate_interval]))", "{{stage}}"),),
            stacked=True),
        Panel("Seconds since the last tick", (q(f"time() - max({P}_last_tick_timestamp_seconds)",
                                                "age"),), unit="s", kind="stat"),
        Panel("Boot to ready p50 / p90 / p99 per instance type",
              quantiles(f"{P}_boot_to_ready_seconds", "instance_type", "$window"), unit="s"),
        Panel("Drain duration p50 / p90 / p99 per pool",
              quantiles(f"{P}_drain_duration_seconds", "pool", "$window"), unit="s"),
        Panel("Spot notice to drain start p50 / p90 / p99",
              quantiles(f"{P}_interruption_notice_to_drain_seconds", "pool", "$window"), unit="s"),
        Panel("Spot interruptions per pool", (q(
            f"sum by (pool) (increase({P}_interruptions_total[$window]))", "{{pool}}"),)),
        Panel("Actuation step errors by component", (q(
            f"sum by (component) (increase({P}_step_errors_total[$__rate_interval]))",
            "{{component}}"),), stacked=True),
        Panel("Nodes against their state timeout (1 = timed out)", (q(
            f"max by (node, state) ({P}_node_state_timeout_ratio)", "{{node}} {{state}}"),)),
        Panel("Leader", (q(f"max by (instance) ({P}_leader)", "{{instance}}"),), kind="stat"),
    ),
)

DASHBOARDS: tuple[Dashboard, ...] = (FLEET, GPUS, PERF)

# name -> (label, query or custom values); queries run against the Prometheus datasource.
VARIABLES: dict[str, tuple[str, str]] = {
    "team": ("Team", f"label_values({P}_team_gpus, team)"),
    "pool": ("Pool", f"label_values({P}_node_info, pool)"),
    "node": ("Node", f'label_values({P}_node_info{{pool=~"$pool"}}, node)'),
    "window": ("Window", ",".join(WINDOW_OPTIONS)),
}

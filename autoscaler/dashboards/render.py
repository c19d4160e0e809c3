"""Render ``panels.DASHBOARDS`` to Grafana dashboard JSON with grafana-foundation-sdk.

``gpu-autoscaler dashboards render`` writes ``dashboards/<uid>.json``; a test checks the
committed files equal this output. Panels flow left to right, ``WIDTH`` columns of the
24-column grid each; the datasource is the ``${datasource}`` variable (any Prometheus).
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from grafana_foundation_sdk.builders import common as cb
from grafana_foundation_sdk.builders import dashboard as db
from grafana_foundation_sdk.builders import prometheus, stat, table, timeseries
from grafana_foundation_sdk.cog.encoder import JSONEncoder
from grafana_foundation_sdk.models import common as cm
from grafana_foundation_sdk.models import dashboard as dm
from grafana_foundation_sdk.models import prometheus as pm

from autoscaler.dashboards.panels import DASHBOARDS, VARIABLES, WINDOW_OPTIONS, Dashboard, Panel

WIDTH, HEIGHT = 8, 8
DATASOURCE = dm.DataSourceRef(type_val="prometheus", uid="${datasource}")
KINDS: dict[str, Any] = {"timeseries": timeseries.Panel, "stat": stat.Panel, "table": table.Panel}


def _panel(spec: Panel) -> Any:
    panel = (KINDS[spec.kind]().title(spec.title).datasource(DATASOURCE).unit(spec.unit)
             .span(WIDTH).height(HEIGHT))
    if spec.description:
        panel = panel.description(spec.description)
    for i, query in enumerate(spec.queries):
        target = prometheus.Dataquery().expr(query.expr).ref_id(chr(ord("A") + i))
        if query.legend:
            target = target.legend_format(query.legend)
        if spec.kind == "table":
            target = target.instant().format(pm.PromQueryFormat.TABLE)
        panel = panel.with_target(target)
    if spec.kind == "timeseries":
        panel = panel.fill_opacity(20 if spec.stacked else 5)
        if spec.stacked:
            panel = panel.stacking(cb.StackingConfig().mode(cm.StackingMode.NORMAL))
    if spec.kind == "stat":
        panel = panel.reduce_options(cb.ReduceDataOptions().calcs(["lastNotNull"]))
    return panel


def _variable(name: str) -> Any:
    label, query = VARIABLES[name]
    if name == "window":
        return (db.CustomVariable(name).label(label).values(query)
                .current(dm.VariableOption(text=WINDOW_OPTIONS[1], value=WINDOW_OPTIONS[1])))
    return (db.QueryVariable(name).label(label).datasource(DATASOURCE).query(query)
            .refresh(dm.VariableRefresh.ON_TIME_RANGE_CHANGED).sort(dm.VariableSort.ALPHABETICAL_ASC)
            .multi(True).include_all(True).all_value(".*"))


def build(spec: Dashboard) -> dict[str, Any]:
    dash = (db.Dashboard(spec.title).uid(spec.uid).description(spec.description)
            .tags(["gpu-autoscaler"]).refresh("30s").time("now-6h", "now").timezone("browser")
            .with_variable(db.DatasourceVariable("datasource").label("Prometheus")
                           .type("prometheus")))
    for name in spec.variables:
        dash = dash.with_variable(_variable(name))
    for title, expr in spec.annotations:
        dash = dash.annotation(db.AnnotationQuery().name(title).datasource(DATASOURCE).expr(expr)
                               .enable(True).icon_color("blue"))
    for other in DASHBOARDS:
        if other.uid != spec.uid:
            dash = dash.link(db.DashboardLink(other.title).type(dm.DashboardLinkType.LINK)
                             .url(f"/d/{other.uid}").keep_time(True).include_vars(False))
    for panel in spec.panels:
        dash = dash.with_panel(_panel(panel))
    rendered: dict[str, Any] = json.loads(JSONEncoder(sort_keys=True).encode(dash.build()))
    return rendered


def render_all() -> dict[str, str]:
    """File name -> JSON text of every dashboard (what ``dashboards/`` holds)."""
    return {f"{d.uid}.json": json.dumps(build(d), indent=2, sort_keys=True) + "\n" for d in DASHBOARDS}


def write_all(directory: Path) -> list[Path]:
    directory.mkdir(parents=True, exist_ok=True)
    paths = []
    for name, text in render_all().items():
        path = directory / name
        path.write_text(text)
        paths.append(path)
    return paths

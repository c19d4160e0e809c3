"""A real Prometheus (the Debian package's binary) for tests, benchmarks and the demo.

It scrapes the targets listed in ``file_sd`` JSON files (which the sandbox rewrites as
nodes come and go; Prometheus re-reads them) and can start on a data directory that
``backfill`` filled with history via ``promtool tsdb create-blocks-from openmetrics``.
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import tempfile
import urllib.parse
import urllib.request
from collections.abc import Iterable, Iterator, Mapping, Sequence
from pathlib import Path
from typing import Any, Self

from autoscaler.sandbox.hosts.procs import ManagedProcess, ProcessError, ServiceProcess, free_port, wait_until

PROMETHEUS_BIN = "prometheus"
PROMTOOL_BIN = "promtool"


def write_file_sd(path: Path, address: str, nodes: Sequence[str]) -> None:
    """One target group per node: ``GET http://<address>/metrics/<node>``, instance=<node>.

    Written to a temp file and renamed, so Prometheus never reads half a file.
    """
    groups = [
        {"targets": [address], "labels": {"__metrics_path__": f"/metrics/{n}", "instance": n}}
        for n in sorted(nodes)
    ]
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    fd, tmp = tempfile.mkstemp(dir=path.parent, prefix=f".{path.name}.")
    with os.fdopen(fd, "w") as fh:
        json.dump(groups, fh)
    os.replace(tmp, path)


Series = tuple[str, tuple[tuple[str, str], ...]]  # (metric, sorted label pairs)


def openmetrics_lines(history: Mapping[Series, Iterable[tuple[float, float]]],
                      types: Mapping[str, str] | None = None) -> Iterator[str]:
    """OpenMetrics text for ``{(metric, labels): [(unix_ts, value), ...]}``, metric by
    metric (promtool wants each family contiguous), ending in ``# EOF``."""
    by_metric: dict[str, list[Series]] = {}
    for series in history:
        by_metric.setdefault(series[0], []).append(series)
    for metric in sorted(by_metric):
        yield f"# TYPE {metric} {(types or {}).get(metric, 'gauge')}\n"
        for series in sorted(by_metric[metric]):
            labels = ",".join(f'{k}="{v}"' for k, v in series[1])
            for ts, value in sorted(history[series]):
                yield f"{metric}{{{labels}}} {float(value)!r} {ts:.3f}\n"
    yield "# EOF\n"


def backfill(openmetrics_text: str | Path, data_dir: Path, timeout: float = 600) -> None:
    """Turn OpenMetrics text (ending in ``# EOF``; a str or a file) into TSDB blocks."""
    data_dir = Path(data_dir)
    data_dir.mkdir(parents=True, exist_ok=True)
    if isinstance(openmetrics_text, Path):
        source = openmetrics_text
        cleanup = False
    else:
        fd, name = tempfile.mkstemp(suffix=".om", dir=data_dir.parent)
        with os.fdopen(fd, "w") as fh:
            fh.write(openmetrics_text)
        source, cleanup = Path(name), True
    try:
        result = subprocess.run(
            [PROMTOOL_BIN, "tsdb", "create-blocks-from", "openmetrics", str(source), str(data_dir)],
            capture_output=True, text=True, timeout=timeout, check=False,
        )
    finally:
        if cleanup:
            source.unlink(missing_ok=True)
    if result.returncode != 0:
        raise ProcessError(f"promtool backfill failed ({result.returncode}): "
                           f"{(result.stderr or result.stdout)[-2000:]}")


def render_config(file_sd: Sequence[Path], scrape_interval: str = "1s",
                  scrape_timeout: str | None = None,
                  rule_files: Sequence[Path] = ()) -> dict[str, Any]:
    timeout = scrape_timeout or scrape_interval
    return {
        "global": {"scrape_interval": scrape_interval, "scrape_timeout": timeout,
                   "evaluation_interval": scrape_interval},
        "rule_files": [str(p) for p in rule_files],
        "scrape_configs": [{
            "job_name": "dcgm",
            "file_sd_configs": [{"files": [str(p) for p in file_sd], "refresh_interval": "1s"}],
        }] if file_sd else [],
    }


class PrometheusServer(ServiceProcess):
    """One Prometheus process on 127.0.0.1:<port>; start/stop by PID, bounded waits.

    ``with PrometheusServer(workdir, file_sd=[...]) as prom: prom.url``
    """

    def __init__(self, workdir: Path, file_sd: Sequence[Path] = (), port: int | None = None,
                 scrape_interval: str = "1s", data_dir: Path | None = None,
                 retention: str = "30d", extra_args: Sequence[str] = (),
                 rules: Mapping[str, Any] | None = None):
        if shutil.which(PROMETHEUS_BIN) is None:
            raise ProcessError("prometheus is not installed (apt-get install -y prometheus)")
        self.workdir = Path(workdir)
        self.workdir.mkdir(parents=True, exist_ok=True)
        self.port = port or free_port()
        self.data_dir = Path(data_dir) if data_dir is not None else self.workdir / "data"
        self.config_path = self.workdir / "prometheus.yml"
        rule_files = []
        if rules is not None:
            rule_files.append(self.workdir / "rules.yml")
            rule_files[0].write_text(json.dumps(rules, indent=1))
        # JSON is valid YAML: no YAML writer needed.
        self.config_path.write_text(
            json.dumps(render_config(file_sd, scrape_interval, rule_files=rule_files), indent=1))
        self.retention = retention
        self.extra_args = list(extra_args)

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.port}"

    def argv(self) -> list[str]:
        return [
            PROMETHEUS_BIN, f"--config.file={self.config_path}",
            f"--storage.tsdb.path={self.data_dir}",
            f"--storage.tsdb.retention.time={self.retention}",
            f"--web.listen-address=127.0.0.1:{self.port}",
            "--web.enable-lifecycle", *self.extra_args,
        ]

    def start(self, timeout: float = 60) -> Self:
        self.proc = ManagedProcess("prometheus", self.argv(), self.workdir / "prometheus.log")
        wait_until(self.ready, timeout, f"prometheus ready on {self.url}", proc=self.proc)
        return self

    def ready(self) -> bool:
        with urllib.request.urlopen(f"{self.url}/-/ready", timeout=2) as resp:
            return bool(resp.status == 200)

    def query(self, promql: str, timeout: float = 5) -> list[dict[str, Any]]:
        """An instant query (for tests and readiness checks; the product uses signals/)."""
        url = f"{self.url}/api/v1/query?" + urllib.parse.urlencode({"query": promql})
        with urllib.request.urlopen(url, timeout=timeout) as resp:
            result: list[dict[str, Any]] = json.loads(resp.read())["data"]["result"]
            return result

    def wait_for_series(self, promql: str, count: int = 1, timeout: float = 30) -> None:
        """Until ``promql`` returns at least ``count`` series (first scrape takes ~5 s)."""
        wait_until(lambda: len(self.query(promql)) >= count, timeout,
                   f"{count} series for {promql}", proc=self.proc)

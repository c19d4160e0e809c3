"""``gpu-autoscaler signals --config``: the files it reads and how it reports a source that
does not answer (without a live Prometheus; tests/signals/test_cli_signals.py has those)."""

from __future__ import annotations

import socket
from pathlib import Path

from typer.testing import CliRunner

from autoscaler.cli import app

# A pool name this long (team + pool: 52 characters at most) is cut at 80 columns.
POLICY = """\
team: research
pools:
  - name: long-pool-name-for-the-width-check
    cloud: aws
    region: us-east-1
    instance_types: [p3.2xlarge]
    max_nodes: 2
"""
LONG_POOL = "research/long-pool-name-for-the-width-check"


def closed_port() -> int:
    """A loopback port nothing listens on (bound, then released)."""
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


def service_config(tmp_path: Path, prometheus: str = "http://127.0.0.1:9") -> Path:
    (tmp_path / "policies").mkdir()
    (tmp_path / "policies" / "research.yaml").write_text(POLICY)
    path = tmp_path / "service.yaml"
    path.write_text(
        "policies_dir: policies\n"
        "tick: {interval: 30s}\n"
        "store: {url: 'sqlite:///store.db'}\n"
        "http: {listen: '127.0.0.1:19999'}\n"
        "signals:\n"
        f"  prometheus: {{url: '{prometheus}', node_label: hostname, timeout: 2s}}\n"
        "  scheduler: []\n")
    return path


def invoke(*args: str, columns: str | None = None):  # type: ignore[no-untyped-def]
    # COLUMNS unset unless given: output that is not a terminal must not depend on it.
    return CliRunner(env={"COLUMNS": columns, "TERMINAL_WIDTH": None}).invoke(app, list(args))


def test_a_service_config_is_read_for_its_signals_section(tmp_path: Path) -> None:
    # docs/operators/troubleshooting.md: `signals --config service.yaml --print-rules`.
    result = invoke("signals", "--config", str(service_config(tmp_path)), "--print-rules")
    assert result.exit_code == 0, result.output
    assert "gpu-autoscaler-nodes" in result.stdout


def test_a_file_that_is_neither_names_both_and_the_key(tmp_path: Path) -> None:
    path = tmp_path / "other.yaml"
    path.write_text("policies_dir: p\ntik: 30s\n")
    result = invoke("signals", "--config", str(path))
    assert result.exit_code == 1
    err = " ".join(result.stderr.split())
    assert "is neither a service config nor a signals file" in err
    assert f"{path}:2:1: tik: unknown key 'tik'; did you mean 'tick'?" in err


def test_yaml_error_is_one_located_line(tmp_path: Path) -> None:
    path = tmp_path / "bad.yaml"
    path.write_text("policies_dir: p\nsignals: [1, 2\nx: {\n")
    result = invoke("signals", "--config", str(path))
    assert result.exit_code == 1
    assert result.stderr.count("\n") == 1, result.stderr
    assert result.stderr.startswith(f"error: {path}:3:2: not valid YAML: "), result.stderr


def test_unreachable_prometheus_is_on_stderr_exit_2_and_pool_names_are_whole(
        tmp_path: Path) -> None:
    url = f"http://127.0.0.1:{closed_port()}"
    result = invoke("signals", "--config", str(service_config(tmp_path, url)))
    assert result.exit_code == 2, result.output
    assert f"prometheus: prometheus unreachable at {url}" in result.stderr
    assert "prometheus:" not in result.stdout  # the table's data column names it, no line
    assert LONG_POOL in result.stdout  # not cut at 80 columns: stdout is not a terminal


def test_columns_still_rules_when_given(tmp_path: Path) -> None:
    url = f"http://127.0.0.1:{closed_port()}"
    result = invoke("signals", "--config", str(service_config(tmp_path, url)), columns="60")
    assert result.exit_code == 2
    assert max(len(line) for line in result.stdout.splitlines()) <= 60

"""A service whose policy directory is empty ticks cleanly: the Prometheus reader has no
window to read and sends nothing, and nothing is logged as an error (the PromQL builder
recursed until RecursionError on no pools, a traceback every tick)."""

from __future__ import annotations

import logging
from pathlib import Path

import pytest
from typer.testing import CliRunner

from autoscaler.cli import app
from autoscaler.sandbox.hosts.procs import free_port


def test_an_empty_policy_directory_ticks_without_a_traceback(
        tmp_path: Path, caplog: pytest.LogCaptureFixture) -> None:
    (tmp_path / "policies").mkdir()
    config = tmp_path / "service.yaml"
    # Nothing listens on the port: a query sent would be logged as unreachable.
    config.write_text(f"policies_dir: policies\nstore: {{url: 'sqlite:///{tmp_path}/fleet.db'}}\n"
                      f"signals: {{prometheus: {{url: 'http://127.0.0.1:{free_port()}'}}}}\n")
    with caplog.at_level(logging.DEBUG):
        result = CliRunner().invoke(app, ["run", "--once", "--dry-run", "--config", str(config)])
    assert result.exit_code == 0, result.output
    assert "Traceback" not in result.output
    problems = [r for r in caplog.records if r.exc_info or r.levelno >= logging.WARNING]
    assert problems == [], [r.getMessage() for r in problems]
    assert not any("prometheus" in r.getMessage() and "unreachable" in r.getMessage()
                   for r in caplog.records)

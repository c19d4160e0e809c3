"""Start-up problems are one clear line and exit 1, never a traceback: a store that cannot
be opened or written, an unreachable PostgreSQL, a non-loopback API without a token, a
corrupt saved plan."""

from __future__ import annotations

import os
from pathlib import Path

import pytest
from typer.testing import CliRunner

from autoscaler.cli import app
from autoscaler.sandbox.hosts.procs import free_port
from tests.service.config.test_config import write


def run_once(path: Path) -> tuple[int, str]:
    result = CliRunner().invoke(app, ["run", "--once", "--dry-run", "--config", str(path)])
    text = result.output + (repr(result.exception) if result.exception and
                            not isinstance(result.exception, SystemExit) else "")
    return result.exit_code, text


def one_error_line(text: str) -> str:
    lines = [line for line in text.splitlines() if line.strip()]
    assert "Traceback" not in text and len(lines) == 1, text
    return lines[0]


def test_a_store_in_a_directory_that_cannot_exist(tmp_path: Path) -> None:
    (tmp_path / "a-file").write_text("")
    path = write(tmp_path, f"policies_dir: policies\nstore: {{url: 'sqlite:///{tmp_path}/a-file/fleet.db'}}\n")
    code, text = run_once(path)
    line = one_error_line(text)
    assert code == 1 and "cannot open the store sqlite:///" in line and "unable to open" in line


@pytest.mark.skipif(os.geteuid() == 0, reason="root may write anywhere")
def test_a_store_file_the_service_cannot_write(tmp_path: Path) -> None:
    db = tmp_path / "ro" / "fleet.db"
    db.parent.mkdir()
    db.write_bytes(b"")
    db.parent.chmod(0o500)
    try:
        path = write(tmp_path, f"policies_dir: policies\nstore: {{url: 'sqlite:///{db}'}}\n")
        code, text = run_once(path)
        assert code == 1 and "is not writable" in one_error_line(text)
    finally:
        db.parent.chmod(0o700)


def test_an_unreachable_postgresql(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("GAS_DB_PASSWORD", "db-pass-5521")
    url = f"postgresql+psycopg://gas@127.0.0.1:{free_port()}/gas"
    path = write(tmp_path, f"policies_dir: policies\nstore: {{url: '{url}', password_env: GAS_DB_PASSWORD}}\n")
    code, text = run_once(path)
    line = one_error_line(text)
    assert code == 1 and f"cannot open the store {url}" in line and "OperationalError" in line
    assert "db-pass-5521" not in text


def test_a_corrupt_saved_plan_is_refused_before_anything_is_applied(tmp_path: Path) -> None:
    settings = tmp_path / "tf.yaml"
    settings.write_text(f"workdir: {tmp_path / 'tf'}\n")
    for pool, body in (("a", '{"pool": "vision/a"'), ("b", "\xff\xfe not json")):
        plan = tmp_path / "tf" / "vision" / pool / "plan" / "pending.json"
        plan.parent.mkdir(parents=True)
        plan.write_text(body, encoding="latin-1")
        result = CliRunner().invoke(app, ["apply", "--settings", str(settings)])
        line = one_error_line(result.output)
        assert result.exit_code == 1 and "pending.json: not a saved plan" in line
        plan.unlink()

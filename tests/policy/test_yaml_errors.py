"""autoscaler/policy/yaml_errors.py read_yaml: what is refused before it is parsed."""

from __future__ import annotations

import os
import threading
from pathlib import Path
from typing import Any

from typer.testing import CliRunner

from autoscaler.cli import app
from autoscaler.policy.untrusted import MAX_BYTES
from autoscaler.policy.yaml_errors import read_yaml


def test_a_fifo_is_refused_without_waiting_for_a_writer(tmp_path: Path) -> None:
    fifo = tmp_path / "config.yaml"
    os.mkfifo(fifo)
    found: list[Any] = []
    reader = threading.Thread(target=lambda: found.append(read_yaml(fifo)), daemon=True)
    reader.start()
    reader.join(timeout=10)
    if reader.is_alive():  # blocked in open(): a writer that closes at once lets it end
        os.close(os.open(fifo, os.O_WRONLY | os.O_NONBLOCK))
        reader.join(timeout=10)
        raise AssertionError("read_yaml waited for a writer on a FIFO")
    doc, errors = found[0]
    assert doc is None
    assert [str(e) for e in errors] == [
        f"{fifo}:1:1: not a regular file (a directory, a FIFO, a device or a socket)"]


def test_a_file_over_the_cap_is_said_to_be_over_it_not_given_a_wrong_size(tmp_path: Path) -> None:
    big = tmp_path / "service.yaml"
    big.write_bytes(b"# " + b"x" * (4 * MAX_BYTES) + b"\n")
    result = CliRunner().invoke(app, ["config", "validate", str(big)])
    assert result.exit_code == 1
    err = " ".join(result.stderr.split())
    assert f"{big}:1:1: file is larger than {MAX_BYTES} bytes, the most that is read" in err
    assert str(MAX_BYTES + 1) not in err

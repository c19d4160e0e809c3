"""autoscaler/cli/common.py: output that is not a terminal is not cut at 80 columns."""

from __future__ import annotations

import os
import subprocess
import sys


def test_help_piped_is_plain_text_with_nothing_cut() -> None:
    # A process of its own: the help's width is decided when the CLI is loaded. Rich's
    # panels cut a long default or URL at 80 columns with "…"; plain text only wraps.
    env = {k: v for k, v in os.environ.items() if k not in ("COLUMNS", "TERMINAL_WIDTH")}
    out = subprocess.run([sys.executable, "-m", "autoscaler.cli", "prices", "--help"],
                         capture_output=True, text=True, timeout=60, env=env, check=True).stdout
    assert "…" not in out and "╭" not in out
    assert "amazonaws.com/offers/v1.0/aws/AmazonEC2/current/{region}/index.json" in out
    assert "\n  --zones <str>           Only these zones (comma-separated).\n" in out
    assert max(len(line) for line in out.splitlines()) <= 200

#!/usr/bin/env python3
"""Build the release artifacts and install the wheel the way an operator would.

``python -m build`` (sdist, then the wheel from the sdist: docs/internals/releasing.md), a new
virtual environment without the system's packages, ``pip install`` of the wheel alone
(no extras), then: ``gpu-autoscaler --version`` prints the wheel's version, ``gpu-autoscaler
run --help`` works, the service's modules import, and neither matplotlib (the ``plots``
extra) nor anything of the ``test`` extra was installed. Prints one line per step with its
seconds and a last ``key=value`` line; exits 1 with the failed step's reason. A release
step (docs/internals/releasing.md): the dependencies come from the package index, as an operator's
install gets them. CI checks the same offline, on a clean host, in
tests/playbooks/test_controller.py.
"""

from __future__ import annotations

import argparse
import re
import subprocess
import sys
import tempfile
import time
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
STEP_TIMEOUT_S = 900
# Distributions only an extra brings: an install without extras must not have them.
NOT_INSTALLED = ("matplotlib", "pytest", "moto", "hypothesis", "grafana-foundation-sdk")
SERVICE_MODULES = "autoscaler.service.app, autoscaler.service.wiring, autoscaler.cli.run"


class CheckFailed(Exception):
    pass


def step(name: str, argv: list[str], *, cwd: Path | None = None) -> str:
    began = time.monotonic()
    try:
        done = subprocess.run(argv, cwd=cwd, capture_output=True, text=True, timeout=STEP_TIMEOUT_S)
    except subprocess.TimeoutExpired as exc:
        raise CheckFailed(f"{name}: no answer after {STEP_TIMEOUT_S} s") from exc
    seconds = time.monotonic() - began
    print(f"{name}: exit {done.returncode} in {seconds:.1f} s", flush=True)
    if done.returncode != 0:
        tail = "\n".join((done.stdout + done.stderr).strip().splitlines()[-20:])
        raise CheckFailed(f"{name} failed (exit {done.returncode}):\n{tail}")
    return done.stdout


def check(work: Path) -> str:
    dist, venv = work / "dist", work / "venv"
    step("build", [sys.executable, "-m", "build", "--outdir", str(dist), str(REPO)])
    wheels = sorted(dist.glob("*.whl"))
    if len(wheels) != 1:
        raise CheckFailed(f"build: expected one wheel in {dist}, found {[w.name for w in wheels]}")
    wheel = wheels[0]
    expected = wheel.name.split("-")[1]  # name-version-python-abi-platform.whl
    # No --system-site-packages; no pip in it either (ensurepip takes ~10 s): this pip
    # installs into it.
    step("venv", [sys.executable, "-m", "venv", "--without-pip", str(venv)])
    python, cli = venv / "bin" / "python", venv / "bin" / "gpu-autoscaler"
    pip = [sys.executable, "-m", "pip", "--python", str(python), "--disable-pip-version-check"]
    step("install", [*pip, "install", "-q", str(wheel)])
    printed = step("version", [str(cli), "--version"]).strip()
    if printed != f"gpu-autoscaler {expected}":
        raise CheckFailed(f"version: printed {printed!r}, the wheel is {expected}")
    usage = step("run --help", [str(cli), "run", "--help"], cwd=work)
    if not re.search(r"Usage: gpu-autoscaler run\b", usage):
        raise CheckFailed(f"run --help: no usage line in:\n{usage}")
    step("service imports", [str(python), "-c", f"import {SERVICE_MODULES}"], cwd=work)
    listed = step("pip list", [*pip, "list", "--format=freeze"])
    names = {re.sub(r"[-_.]+", "-", line.split("==")[0]).lower() for line in listed.splitlines()}
    extras = sorted(names & set(NOT_INSTALLED))
    if extras:
        raise CheckFailed(f"pip list: installed without extras, yet present: {', '.join(extras)}")
    return f"wheel={wheel.name} version={expected} packages={len(names)}"


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.parse_args()
    began = time.monotonic()
    with tempfile.TemporaryDirectory(prefix="gpu-autoscaler-wheel-") as tmp:
        try:
            summary = check(Path(tmp))
        except CheckFailed as exc:
            print(f"error: {exc}", file=sys.stderr)
            return 1
    print(f"{summary} seconds={time.monotonic() - began:.0f} ok=1")
    return 0


if __name__ == "__main__":
    sys.exit(main())

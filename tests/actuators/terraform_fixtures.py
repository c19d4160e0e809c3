"""Fixtures shared by the Terraform tests: one patched moto server per module, the fake
credentials in the environment, and settings that point Terraform at it."""

from __future__ import annotations

import shutil
from collections.abc import Iterator
from pathlib import Path

import pytest

from autoscaler.actuators.terraform import RegionInputs, TerraformSettings
from autoscaler.sandbox.services.moto_server import MOTO_AMI, SANDBOX_ENV, MotoSandbox

# A fake secret that must never appear in any output (user data carries join tokens).
FAKE_SECRET = "s3cr3t-join-token-4f9a1c"


def terraform_available() -> bool:
    return shutil.which("terraform") is not None and any(
        Path("/opt/tf-plugins/registry.terraform.io/hashicorp/aws").glob("5.*"))


needs_terraform = pytest.mark.skipif(
    not terraform_available(),
    reason="terraform and the hashicorp/aws 5.x provider mirror are required "
    "(scripts/install.sh checks for them)")


def moto_running(workdir: Path) -> Iterator[MotoSandbox]:
    """A fixture body: a patched moto server, stopped by PID at the end, and also when its
    start fails half way (its process up, the readiness wait failed)."""
    sandbox = MotoSandbox(workdir)
    try:
        yield sandbox.start()
    finally:
        sandbox.stop()


@pytest.fixture(scope="module")
def moto(tmp_path_factory: pytest.TempPathFactory) -> Iterator[MotoSandbox]:
    for sandbox in moto_running(tmp_path_factory.mktemp("moto")):
        with pytest.MonkeyPatch.context() as mp:
            for key, value in SANDBOX_ENV.items():
                mp.setenv(key, value)
            yield sandbox


def sandbox_settings(moto: MotoSandbox, workdir: Path, **kw: object) -> TerraformSettings:
    inputs = RegionInputs(ami=MOTO_AMI, root_volume_gb=50,
                          user_data=f"#!/bin/sh\nexport JOIN_TOKEN={FAKE_SECRET}\n")
    return TerraformSettings.model_validate({
        "workdir": workdir, "aws_endpoint": moto.endpoint,
        "regions": {"aws/us-east-1": inputs}, **kw,
    })

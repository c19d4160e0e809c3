"""The ``signals:`` configuration section."""

from __future__ import annotations

from datetime import timedelta
from pathlib import Path

import pytest
from pydantic import ValidationError

from autoscaler.schedulers.kubernetes.client import KubernetesConfig
from autoscaler.schedulers.slurm.client import SlurmConfig
from autoscaler.secrets import SecretError
from autoscaler.signals.config import PrometheusConfig, SignalsConfig


def test_prometheus_defaults() -> None:
    cfg = PrometheusConfig(url="http://prom:9090")
    assert cfg.timeout == timedelta(seconds=5)
    assert cfg.stale_after == timedelta(seconds=120)
    assert cfg.node_label == "Hostname" and cfg.verify is True


@pytest.mark.parametrize("bad", [
    {"url": "prom:9090"},
    {"url": "http://p", "node_label": "host-name"},
    {"url": "http://p", "unknown": 1},
    {"url": "http://p", "stale_after": "0s"},
    # The rules date nodes silent for stale_after / 2: one interval later they are not stale.
    {"url": "http://p", "recording_rules": True, "stale_after": "2m", "rules_interval": "90s"},
    {"url": "http://p", "basic_auth": {"username": "u", "password": "inline"}},
    {"url": "http://p", "basic_auth": {"username": "u", "password_env": "P"},
     "bearer_token": {"token_env": "T"}},
    {"url": "http://p", "bearer_token": {}},
    {"url": "http://p", "bearer_token": {"token_env": "T", "token_file": "/t"}},
])
def test_prometheus_rejects(bad: dict[str, object]) -> None:
    with pytest.raises(ValidationError):
        PrometheusConfig.model_validate(bad)


def test_secrets_come_from_env_or_file(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    cfg = PrometheusConfig.model_validate({"url": "http://p", "basic_auth": {
        "username": "ops", "password_env": "PROM_PW"}})
    with pytest.raises(SecretError, match="PROM_PW is not set"):
        cfg.basic_auth.password()  # type: ignore[union-attr]
    monkeypatch.setenv("PROM_PW", "pw")
    assert cfg.basic_auth.password() == "pw"  # type: ignore[union-attr]
    token = tmp_path / "t"
    token.write_text("abc\n")
    bearer = PrometheusConfig.model_validate({"url": "http://p", "bearer_token": {"token_file": token}})
    assert bearer.bearer_token.token() == "abc"  # type: ignore[union-attr]
    # The file holds names of secrets, never their values.
    assert "pw" not in cfg.model_dump_json()


@pytest.mark.parametrize(("value", "expected"), [
    ("none", []), (None, []), ("slurm", ["slurm"]), (["slurm", "kubernetes"], ["slurm", "kubernetes"]),
])
def test_scheduler_forms(value: object, expected: list[str]) -> None:
    data: dict[str, object] = {"scheduler": value}
    if "kubernetes" in expected:
        data["kubernetes"] = {"host": "https://k8s:6443"}
    assert SignalsConfig.model_validate(data).scheduler == expected


def test_kubernetes_scheduler_needs_its_section() -> None:
    with pytest.raises(ValidationError, match="add a kubernetes: section"):
        SignalsConfig.model_validate({"scheduler": "kubernetes"})
    with pytest.raises(ValidationError):
        SignalsConfig.model_validate({"scheduler": "pbs"})
    with pytest.raises(ValidationError):
        KubernetesConfig.model_validate({})


def test_slurm_command_building() -> None:
    assert SlurmConfig().command("squeue") == ["squeue"]
    cfg = SlurmConfig.model_validate({"bin_dir": "/opt/slurm/bin", "command_prefix": ["sudo"],
                                      "env": {"SLURM_CONF": "/etc/slurm/a.conf"}, "timeout": "3s"})
    assert cfg.command("sinfo") == ["sudo", "/opt/slurm/bin/sinfo"]
    assert cfg.timeout == timedelta(seconds=3)


def test_namespace_rules_glob() -> None:
    cfg = KubernetesConfig.model_validate({"host": "https://k", "namespace_teams": [
        {"namespace": "ml-*", "team": "vision"}]})
    assert cfg.namespace_teams[0].matches("ml-research")
    assert not cfg.namespace_teams[0].matches("web")

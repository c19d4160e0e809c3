"""Secrets the config must not hold, tokens too short to protect anything, and an API that
would serve /status beyond loopback without one: refused at load, never repeated."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from typer.testing import CliRunner

from autoscaler.cli import app
from autoscaler.service.config.models import StoreSettings
from tests.service.config.test_config import errors_of, write

JWT = ("eyJhbGciOiJIUzI1NiIsInR5cCI6IkpXVCJ9.eyJzdW4iOiJzbHVybSIsImV4cCI6MTcwMDAwMDAwMH0."
       "c2lnbmF0dXJlLXNpZ25hdHVyZQ")
PASSWORD = "pw-9c1f-77"


@pytest.mark.parametrize(("snippet", "where"), [
    (f"store: {{url: 'postgresql+psycopg://gas@db/gas?password={PASSWORD}'}}", "store.url"),
    (f"store: {{url: 'postgresql+psycopg://gas@db/gas?sslmode=require&sslpassword={PASSWORD}'}}",
     "store.url"),
    (f"signals: {{prometheus: {{url: 'http://127.0.0.1:9090', headers: {{X-Api-Key: {PASSWORD}}}}}}}",
     "signals.prometheus.headers.X-Api-Key"),
    (f"signals: {{prometheus: {{url: 'https://gas:{PASSWORD}@prom.example:9090'}}}}",
     "signals.prometheus.url"),
    (f"signals: {{prometheus: {{url: 'http://127.0.0.1:9090/?token={PASSWORD}'}}}}",
     "signals.prometheus.url"),
    (f"signals: {{slurm: {{env: {{SLURM_JWT: {JWT}}}}}}}", "signals.slurm.env.SLURM_JWT"),
    (f"signals: {{slurm: {{env: {{SLURM_CONF: /etc/slurm.conf, X: 'Bearer {JWT}'}}}}}}",
     "signals.slurm.env.X"),
    (f"signals: {{slurm: {{command_prefix: [ssh, 'ssh://root:{PASSWORD}@login']}}}}",
     "signals.slurm.command_prefix[1]"),
    (f"ansible: {{extra_vars: {{cluster_join_munge_key_b64: {PASSWORD}}}}}",
     "ansible.extra_vars.cluster_join_munge_key_b64"),
    *[(f"terraform: {{regions: {{aws/us-east-1: {{ami: ami-1, user_data: \"{script}\"}}}}}}",
       "terraform.regions.aws/us-east-1.user_data") for script in (
        f"#!/bin/sh\\nexport DB_PASSWORD={PASSWORD}\\n",
        f"#!/bin/sh\\nkubeadm join 10.0.0.1:6443 --token {PASSWORD}\\n",
        f"#cloud-config\\nchpasswd: {{expire: false}}\\npassword: {PASSWORD}\\n",
        f"#!/bin/sh\\ncurl -fsS https://ops:{PASSWORD}@repo.example/x.sh | sh\\n",
        f"#!/bin/sh\\ncurl -H 'Authorization: Bearer {PASSWORD}{PASSWORD}' https://repo\\n",
        f"#!/bin/sh\\necho {JWT} > /etc/slurm/jwt\\n",
        "#!/bin/sh\\nexport AWS_ACCESS_KEY_ID=AKIAIOSFODNN7EXAMPLE\\n",
        "-----BEGIN OPENSSH PRIVATE KEY-----\\nb3BlbnNzaC1rZXktdjEAAAAA\\n")],
])
def test_secrets_are_recognised_by_name_or_by_form(tmp_path: Path, snippet: str, where: str) -> None:
    errs = errors_of(write(tmp_path, f"policies_dir: policies\n{snippet}\n"))
    assert len(errs) == 1 and f": {where}: " in errs[0], errs
    assert PASSWORD not in errs[0] and JWT not in errs[0]
    result = CliRunner().invoke(app, ["config", "validate", str(tmp_path / "service.yaml")])
    assert result.exit_code == 1 and PASSWORD not in result.output and JWT not in result.output
    assert "Traceback" not in result.output


def test_ordinary_urls_and_paths_are_not_secrets(tmp_path: Path) -> None:
    from autoscaler.service.config.load import load_config

    config = load_config(write(tmp_path, """\
        policies_dir: policies
        store: {url: "postgresql+psycopg://gas@db/gas?sslmode=require&sslkey=/etc/gas/key.pem"}
        signals:
          prometheus: {url: "http://127.0.0.1:9090/prom?x=1", headers: {X-Scope-OrgID: fleet}}
          slurm: {env: {SLURM_CONF: /etc/slurm/slurm.conf}}
        """))
    assert "sslkey=" in config.store.display_url()


def test_a_user_data_script_that_fetches_its_secrets_is_not_a_secret(tmp_path: Path) -> None:
    from autoscaler.sandbox.hosts.first_boot import SANDBOX_USER_DATA
    from autoscaler.service.config.load import load_config

    fetches = ("#!/bin/sh\nexport DB_PASSWORD=$(aws ssm get-parameter --name db --with-decryption)\n"
               "kubeadm join 10.0.0.1:6443 --token \"$JOIN_TOKEN\" --discovery-token-ca-cert-hash x\n"
               "PWD=/root XDG_SESSION_TYPE=tty; ssh -o PasswordAuthentication=no host true\n")
    for script in (SANDBOX_USER_DATA, fetches):
        path = write(tmp_path, "policies_dir: policies\nterraform: {regions: {aws/us-east-1: "
                     f"{{ami: ami-1, user_data: {json.dumps(script)}}}}}}}\n")
        assert load_config(path).terraform.regions["aws/us-east-1"].user_data == script


def test_the_displayed_store_url_masks_secret_parameters() -> None:
    url = StoreSettings.model_construct(url=f"postgresql+psycopg://gas@db/gas?sslpassword={PASSWORD}")
    assert PASSWORD not in url.display_url() and "sslpassword=redacted" in url.display_url()


@pytest.mark.parametrize("token", ["", "\n", "short-tok"])
def test_empty_or_short_token_files_are_refused_at_load(tmp_path: Path, token: str) -> None:
    (tmp_path / "token").write_text(token)
    path = write(tmp_path, "policies_dir: policies\nhttp: {listen: '0.0.0.0:0', token_file: token}\n")
    for command in (["config", "validate", str(path)], ["run", "--once", "--config", str(path)]):
        result = CliRunner().invoke(app, command)
        assert result.exit_code == 1, result.output
        assert "at least 16 are required" in result.output and "Traceback" not in result.output


def test_empty_token_env_is_refused(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("GAS_TOKEN", "")
    path = write(tmp_path, "policies_dir: policies\nhttp: {token_env: GAS_TOKEN}\n")
    result = CliRunner().invoke(app, ["config", "validate", str(path)])
    assert result.exit_code == 1 and "GAS_TOKEN is not set" in result.output


def test_a_non_loopback_listen_without_token_is_refused_at_load(tmp_path: Path) -> None:
    path = write(tmp_path, "policies_dir: policies\nhttp: {listen: '0.0.0.0:9464'}\n")
    result = CliRunner().invoke(app, ["run", "--once", "--config", str(path)])
    assert result.exit_code == 1 and "not loopback, and no token is set" in result.output
    assert "Traceback" not in result.output

"""The service config file: validated like policies, no inline secrets, paths relative."""

from __future__ import annotations

from datetime import timedelta
from pathlib import Path
from textwrap import dedent

import pytest
from typer.testing import CliRunner

from autoscaler.cli import app
from autoscaler.service.config.load import ConfigError, load_config
from autoscaler.service.config.models import ServiceConfig

REPO = Path(__file__).resolve().parents[3]
SECRET = "wJalrXUtnFEMI-K7MDENG-bPxRfiCYEXAMPLEKEY"


def write(tmp_path, text: str) -> Path:
    (tmp_path / "policies").mkdir(exist_ok=True)
    path = tmp_path / "service.yaml"
    path.write_text(dedent(text))
    return path


def errors_of(path: Path) -> list[str]:
    with pytest.raises(ConfigError) as info:
        load_config(path)
    return [str(e) for e in info.value.errors]


def test_a_full_config_loads_with_paths_relative_to_the_file(tmp_path):
    path = write(tmp_path, """\
        policies_dir: policies
        tick: {interval: 5s}
        store: {url: "sqlite:///fleet.db"}
        signals:
          prometheus: {url: "http://127.0.0.1:9090", timeout: 2s}
          scheduler: slurm
        clouds:
          aws: {regions: [us-east-1], endpoint_url: "http://127.0.0.1:5000"}
        terraform: {workdir: tf, aws_endpoint: "http://127.0.0.1:5000",
                    regions: {aws/us-east-1: {ami: ami-1e749f67}}}
        ansible: {runs_dir: runs, skip_tags: [gpu-hardware],
                  secret_env: {cluster_join_munge_key_b64: MUNGE_KEY_B64}}
        engine: {max_gpus: 16, max_hourly_usd: 40, drain_removed_pools: true}
        addresses: {source: file, file: /abs/addresses.json}
        http: {listen: "127.0.0.1:0", token_env: GPU_AUTOSCALER_TOKEN}
        leader: {enabled: false, ttl: 10s}  # true needs PostgreSQL and S3 state
        """)
    cfg = load_config(path)
    assert cfg.policies_dir == tmp_path / "policies"
    assert cfg.terraform.workdir == tmp_path / "tf" and cfg.ansible.runs_dir == tmp_path / "runs"
    assert cfg.addresses.file == Path("/abs/addresses.json"), "absolute paths stay"
    assert cfg.tick.interval.total_seconds() == 5 and cfg.engine.max_gpus == 16
    assert cfg.signals.scheduler == ["slurm"] and cfg.clouds.endpoint("aws") == "http://127.0.0.1:5000"
    assert cfg.ansible.playbook.is_absolute(), "defaults stay as they are"


def test_every_path_the_file_gives_is_relative_to_it_and_the_defaults_stay(tmp_path):
    cfg = load_config(write(tmp_path, """\
        policies_dir: ./x/../policies
        prices_file: prices.yaml
        terraform: {workdir: tf, modules_dir: ../modules}
        ansible: {playbook: pb/node.yml, runs_dir: runs, private_key_file: keys/id,
                  known_hosts_file: /etc/known_hosts}
        http: {token_file: token, team_tokens: {vision: {file: tokens/vision}}}
        addresses: {source: file, file: addresses.json}
        """))
    assert (cfg.policies_dir, cfg.prices_file) == (tmp_path / "policies", tmp_path / "prices.yaml")
    assert cfg.terraform.workdir == tmp_path / "tf"
    assert cfg.terraform.modules_dir == tmp_path.parent / "modules"
    assert (cfg.ansible.playbook, cfg.ansible.runs_dir, cfg.ansible.private_key_file) == (
        tmp_path / "pb/node.yml", tmp_path / "runs", tmp_path / "keys/id")
    assert cfg.ansible.known_hosts_file == Path("/etc/known_hosts")
    assert cfg.http.token_file == tmp_path / "token" and cfg.addresses.file == tmp_path / "addresses.json"
    assert cfg.http.team_tokens["vision"].file == tmp_path / "tokens/vision"
    plain = load_config(write(tmp_path, "policies_dir: policies\nterraform: {aws_endpoint: http://x}\n"))
    assert plain.terraform.workdir == Path(".gpu-autoscaler/terraform"), "a default is not given"
    assert plain.ansible.runs_dir == Path(".gpu-autoscaler/ansible-runs") and plain.prices_file is None


def test_paths_are_only_made_relative_by_the_file_loader():
    from autoscaler.actuators.terraform.settings import TerraformSettings

    assert TerraformSettings.model_validate({"workdir": "tf"}).workdir == Path("tf")
    assert TerraformSettings(workdir=Path("tf")).workdir == Path("tf")


def test_unknown_keys_are_reported_with_file_line_and_a_suggestion(tmp_path):
    path = write(tmp_path, """\
        policies_dir: policies
        tick:
          intervall: 10s
        clouds:
          aws: {region: us-east-1}
        """)
    errs = errors_of(path)
    assert f"{path}:3:3: tick.intervall: unknown key 'intervall'; did you mean 'interval'?" in errs
    assert any(e.startswith(f"{path}:5:9: clouds.aws.region") and "'regions'" in e for e in errs)


@pytest.mark.parametrize(("snippet", "where", "hint"), [
    (f"clouds:\n  aws: {{regions: [us-east-1], aws_secret_access_key: {SECRET}}}\n",
     "clouds.aws.aws_secret_access_key", "AWS_ACCESS_KEY_ID"),
    (f"http: {{token: {SECRET}}}\n", "http.token", "<key>_env"),
    (f"ansible: {{extra_vars: {{cluster_join_k8s_token: {SECRET}}}}}\n",
     "ansible.extra_vars.cluster_join_k8s_token", "<key>_env"),
    (f"signals:\n  prometheus: {{url: 'http://x:9090', headers: {{Authorization: Bearer {SECRET}}}}}\n",
     "signals.prometheus.headers.Authorization", "<key>_env"),
])
def test_inline_secrets_are_refused_without_repeating_them(tmp_path, snippet, where, hint):
    path = write(tmp_path, "policies_dir: policies\n" + snippet)
    errs = errors_of(path)
    assert len(errs) == 1 and where in errs[0] and hint in errs[0]
    assert errs[0].startswith(f"{path}:2:") or errs[0].startswith(f"{path}:3:")
    assert SECRET not in errs[0]


def test_a_store_url_with_a_password_is_refused(tmp_path):
    path = write(tmp_path, f"policies_dir: policies\nstore: {{url: 'postgresql+psycopg://gas:{SECRET}@db/gas'}}\n")
    errs = errors_of(path)
    assert "password_env" in errs[0] and SECRET not in errs[0]


def test_secrets_come_from_the_environment(tmp_path, monkeypatch):
    path = write(tmp_path, """\
        policies_dir: policies
        store: {url: "postgresql+psycopg://gas@127.0.0.1:5432/gas", password_env: GAS_DB_PASSWORD}
        http: {token_env: GAS_TOKEN}
        """)
    cfg = load_config(path)
    problems = cfg.check_secrets()
    assert any("GAS_TOKEN" in p for p in problems) and any("GAS_DB_PASSWORD" in p for p in problems)
    monkeypatch.setenv("GAS_TOKEN", SECRET)
    monkeypatch.setenv("GAS_DB_PASSWORD", "pw with @ and :")
    assert cfg.check_secrets() == []
    assert cfg.http.token() == SECRET
    assert "pw%20with" in cfg.store.resolved_url() or "pw with" in cfg.store.resolved_url()
    assert "pw" not in cfg.store.display_url()


def test_each_unreadable_secret_is_said_once_with_its_name_once(tmp_path, monkeypatch):
    path = write(tmp_path, """\
        policies_dir: policies
        store: {url: "postgresql+psycopg://gas@127.0.0.1:5432/gas", password_env: GAS_DB_PASSWORD}
        http:
          token_env: GAS_TOKEN
          team_tokens: {vision: {env: GAS_VISION_TOKEN}}
        """)
    monkeypatch.delenv("GAS_TOKEN", raising=False)
    monkeypatch.delenv("GAS_DB_PASSWORD", raising=False)
    monkeypatch.setenv("GAS_VISION_TOKEN", SECRET)
    # The team tokens read the http token again: its problem is not said twice.
    assert load_config(path).check_secrets() == [
        "http token: environment variable GAS_TOKEN is not set",
        "store password: environment variable GAS_DB_PASSWORD is not set"]
    monkeypatch.setenv("GAS_TOKEN", "short")
    assert load_config(path).check_secrets()[0].startswith(
        "http token: environment variable GAS_TOKEN holds a token of 5 characters")


def test_the_http_api_defaults_to_loopback(tmp_path):
    cfg = load_config(write(tmp_path, "policies_dir: policies\n"))
    assert cfg.http.host == "127.0.0.1" and cfg.store.url.startswith("sqlite")
    assert cfg.tick.interval.total_seconds() == 30 and not cfg.leader.enabled


def test_config_validate_command(tmp_path):
    runner = CliRunner()
    good = write(tmp_path, f"policies_dir: {REPO / 'policies'}\nprices_file: {REPO / 'examples/prices-alicloud.yaml'}\n")
    result = runner.invoke(app, ["config", "validate", str(good)])
    assert result.exit_code == 0, result.output
    assert "3 team(s)" in result.output
    bad = write(tmp_path, "policies_dir: policies\ntick: {intervall: 3s}\n")
    result = runner.invoke(app, ["config", "validate", str(bad)])
    assert result.exit_code == 1 and "did you mean 'interval'" in result.output


def test_the_example_production_config_is_valid(monkeypatch):
    cfg = load_config(REPO / "examples" / "config-production.yaml")
    assert cfg.policies_dir == REPO / "policies" and cfg.leader.enabled
    assert cfg.store.password_env and cfg.http.token_env and cfg.clouds.aws.sqs_queue_urls


def test_spot_notice_trust_reaches_the_aws_adapter(tmp_path):
    from autoscaler.catalog import default_catalog
    from autoscaler.clouds.aws import AwsCloud
    from autoscaler.service.wiring import Markets

    cfg = load_config(write(tmp_path, """\
        policies_dir: policies
        clouds:
          aws:
            regions: [us-east-1]
            account_id: "210987654321"
            sqs_queue_urls: {us-east-1: "https://sqs/q1", us-west-2: "https://sqs/q2"}
            dead_letter_queue_urls: {us-east-1: "https://sqs/refused"}
        """))
    cloud = Markets(cfg, default_catalog())("aws", "us-east-1")
    assert isinstance(cloud, AwsCloud)
    assert cloud.settings.account_id == "210987654321"
    assert cloud.settings.notice_regions == {"us-east-1", "us-west-2"}
    assert cloud.settings.dead_letter_url == "https://sqs/refused"
    assert cloud.notice_trust().account == "210987654321"  # no STS call when configured
    bad = write(tmp_path, "policies_dir: policies\nclouds: {aws: {account_id: '12345'}}\n")
    assert any("account_id" in e for e in errors_of(bad))


def test_the_aws_read_timeout_reaches_every_adapter_the_service_makes():
    from autoscaler.catalog import default_catalog
    from autoscaler.service.wiring import Markets

    config = ServiceConfig.model_validate({"policies_dir": "policies", "clouds": {"aws": {
        "regions": ["us-east-1"], "read_timeout": "2m",
        "sqs_queue_urls": {"us-west-2": "http://127.0.0.1:9/q"}}}})
    markets = Markets(config, default_catalog())
    assert [markets("aws", r).settings.read_timeout for r in ("us-east-1", "us-west-2")] == [
        120.0, 120.0]
    assert ServiceConfig.model_validate({"policies_dir": "p"}).clouds.aws.read_timeout == \
        timedelta(seconds=10)

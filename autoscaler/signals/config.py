"""Configuration of the signal sources: Prometheus (DCGM metrics), Slurm and Kubernetes.

``SignalsConfig`` is the ``signals:`` section of the service config file (and of the file
``gpu-autoscaler signals --config`` reads). Secrets never live in the file: it names an
environment variable or a file that holds them.
"""

from __future__ import annotations

from datetime import timedelta
from pathlib import Path
from typing import Any, Literal

from pydantic import BaseModel, ConfigDict, Field, field_validator, model_validator

from autoscaler.policy.duration import Duration
from autoscaler.schedulers.kubernetes.client import KubernetesConfig
from autoscaler.schedulers.slurm.client import SlurmConfig
from autoscaler.secrets import read_secret

# Prometheus label names: https://prometheus.io/docs/concepts/data_model/
LABEL_PATTERN = r"^[a-zA-Z_][a-zA-Z0-9_]*$"
SchedulerKind = Literal["slurm", "kubernetes"]


class _Model(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True)


class BasicAuth(_Model):
    username: str = Field(description="User name for HTTP basic auth.")
    password_env: str = Field(description="Name of the environment variable with the password.")

    def password(self) -> str:
        value = read_secret(self.password_env, None, "prometheus basic auth")
        return value or ""


class BearerToken(_Model):
    token_env: str | None = Field(None, description="Environment variable holding the token.")
    token_file: Path | None = Field(None, description="File holding the token (re-read per client).")

    @model_validator(mode="after")
    def _one_source(self) -> BearerToken:
        if (self.token_env is None) == (self.token_file is None):
            raise ValueError("set exactly one of token_env or token_file")
        return self

    def token(self) -> str:
        return read_secret(self.token_env, self.token_file, "prometheus bearer token") or ""


class PrometheusConfig(_Model):
    url: str = Field(description="Base URL, e.g. http://prometheus:9090 (a path prefix is kept).")
    timeout: Duration = Field(timedelta(seconds=5), description="Per query; no retries in a tick.")
    node_label: str = Field(
        "Hostname", pattern=LABEL_PATTERN,
        description="Label whose value is the fleet node name: Hostname (dcgm-exporter < 4.7), "
        "hostname (newer dcgm-exporter), or instance (when scrape configs set it to the node name).",
    )
    basic_auth: BasicAuth | None = None
    bearer_token: BearerToken | None = None
    headers: dict[str, str] = Field(
        default_factory=dict, description="Extra headers (e.g. X-Scope-OrgID); not for secrets."
    )
    ca_file: Path | None = Field(None, description="CA bundle for an https URL.")
    verify: bool = Field(True, description="Verify the server certificate.")
    stale_after: Duration = Field(
        timedelta(seconds=120), description="A node whose newest sample is older is stale."
    )
    recording_rules: bool = Field(
        False, description="Read the windowed per-node series of gpu-autoscaler's recording "
        "rules (signals --print-rules) with one query, only the fields decisions use, instead "
        "of every GPU's raw series: for fleets of hundreds of nodes. Values lag by at most "
        "rules_interval.",
    )
    rules_interval: Duration = Field(
        timedelta(seconds=30), description="Evaluation interval written into the printed "
        "recording rules (at most 2m and half of stale_after).",
    )

    @model_validator(mode="after")
    def _one_auth(self) -> PrometheusConfig:
        if self.basic_auth is not None and self.bearer_token is not None:
            raise ValueError("set at most one of basic_auth or bearer_token")
        if not self.url.startswith(("http://", "https://")):
            raise ValueError("url must start with http:// or https://")
        if self.stale_after < timedelta(seconds=1):
            raise ValueError("stale_after must be at least 1s")
        # Recorded samples must stay within Prometheus' 5 m lookback between evaluations,
        # and the rules date only the nodes not fresh at an evaluation (signals/rules.py):
        # one interval later a node fresh then must still be fresh.
        if not timedelta(seconds=1) <= self.rules_interval <= timedelta(minutes=2):
            raise ValueError("rules_interval must be between 1s and 2m")
        if self.recording_rules and self.rules_interval > self.stale_after / 2:
            raise ValueError("rules_interval must be at most half of stale_after")
        return self


class SignalsConfig(_Model):
    prometheus: PrometheusConfig | None = Field(
        None, description="Without it every pool's metrics are reported missing."
    )
    scheduler: list[SchedulerKind] = Field(
        default_factory=list,
        description="slurm, kubernetes, none, or a list of both when pools use both.",
    )
    slurm: SlurmConfig = SlurmConfig()
    kubernetes: KubernetesConfig | None = None

    @field_validator("scheduler", mode="before")
    @classmethod
    def _scheduler_list(cls, value: Any) -> Any:
        if value is None or value == "none":
            return []
        if isinstance(value, str):
            return [value]
        return value

    @model_validator(mode="after")
    def _kubernetes_configured(self) -> SignalsConfig:
        if "kubernetes" in self.scheduler and self.kubernetes is None:
            raise ValueError("scheduler includes kubernetes: add a kubernetes: section")
        if len(set(self.scheduler)) != len(self.scheduler):
            raise ValueError("scheduler lists a kind twice")
        return self

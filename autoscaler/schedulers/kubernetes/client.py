"""The Kubernetes API client: where the API server is, how we authenticate, and the
namespace -> team rules for pods that carry no pool selector."""

from __future__ import annotations

import fnmatch
from datetime import timedelta
from pathlib import Path

from kubernetes import client, config
from pydantic import BaseModel, ConfigDict, Field, model_validator

from autoscaler.policy.duration import Duration
from autoscaler.schedulers.kubernetes.bounded_api import BoundedApiClient
from autoscaler.secrets import read_secret


class NamespaceRule(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True)

    namespace: str = Field(description="Namespace name or glob (fnmatch), e.g. 'vision-*'.")
    team: str = Field(description="The team the namespace's pods belong to.")
    pool: str | None = Field(None, description="Default: the team's first kubernetes pool.")

    def matches(self, namespace: str) -> bool:
        return fnmatch.fnmatchcase(namespace, self.namespace)


class KubernetesConfig(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True)

    host: str | None = Field(None, description="API server URL; default: from kubeconfig.")
    kubeconfig: Path | None = Field(None, description="Used when host is not set.")
    token_env: str | None = Field(None, description="Environment variable holding the API token.")
    token_file: Path | None = Field(None, description="File holding the API token.")
    ca_file: Path | None = Field(None, description="CA bundle of the API server.")
    verify: bool = Field(True, description="Verify the API server's certificate.")
    timeout: Duration = Field(timedelta(seconds=10), description="Time limit of each API call.")
    namespace_teams: list[NamespaceRule] = Field(
        default_factory=list,
        description="Pods without gpu-autoscaler/team+pool selectors: first matching rule, "
        "else namespace == team name (the team's first kubernetes pool).",
    )

    @model_validator(mode="after")
    def _one_token(self) -> KubernetesConfig:
        if self.token_env is not None and self.token_file is not None:
            raise ValueError("set at most one of token_env or token_file")
        if self.host is None and self.kubeconfig is None:
            raise ValueError("set host (API server URL) or kubeconfig")
        return self


def api_client(cfg: KubernetesConfig, *, bounded: bool = True) -> client.ApiClient:
    """A client for the configured API server (kubeconfig, or host + token + CA); the token
    is read now, from its env var or file. ``bounded``: each call ends within a limit
    derived from ``timeout`` (``bounded_api``), as every call a tick, an executor worker or
    a request waits on must; False only for the watch caches, whose streams stay open."""
    conf = client.Configuration()
    if cfg.host is None:
        config.load_kube_config(config_file=str(cfg.kubeconfig),  # type: ignore[no-untyped-call]
                                client_configuration=conf)
    else:
        conf.host = cfg.host
        conf.verify_ssl = cfg.verify
        if cfg.ca_file is not None:
            conf.ssl_ca_cert = str(cfg.ca_file)
        token = read_secret(cfg.token_env, cfg.token_file, "kubernetes token")
        if token:
            conf.api_key = {"authorization": token}
            conf.api_key_prefix = {"authorization": "Bearer"}
    # Fail fast, either way: no retries inside a tick (a kubeconfig client kept urllib3's
    # three, so a dead server held a call four times its whole-call limit).
    conf.retries = False
    if bounded:
        return BoundedApiClient(conf, cfg.timeout.total_seconds())
    return client.ApiClient(conf)


def connect(cfg: KubernetesConfig, *, bounded: bool = True) -> client.CoreV1Api:
    """A CoreV1 client for ``cfg`` (``bounded``: see :func:`api_client`)."""
    return client.CoreV1Api(api_client(cfg, bounded=bounded))

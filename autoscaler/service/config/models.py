"""The service configuration file (``gpu-autoscaler run --config FILE``).

One YAML file, validated like the policies (unknown keys are errors with file:line and a
suggestion; see :mod:`autoscaler.service.config.load`). Secrets never live in it: cloud
credentials come from the standard environment/credential chain, and every other secret
(HTTP token, store password, Prometheus auth) is named by an environment variable or a
file. The loader rejects anything that looks like an inline secret.
"""

from __future__ import annotations

from datetime import timedelta
from typing import Literal

from pydantic import BaseModel, ConfigDict, Field, ValidationInfo, field_validator, model_validator

from autoscaler.actuators.ansible.settings import AnsibleSettings
from autoscaler.actuators.terraform.settings import TerraformSettings
from autoscaler.engine.settings import EngineSettings
from autoscaler.fleet import store_url
from autoscaler.fleet.store import DEFAULT_URL
from autoscaler.policy.duration import Duration
from autoscaler.policy.models import Name
from autoscaler.policy.paths import ConfigPath
from autoscaler.secrets import SecretError, read_secret
from autoscaler.service.executor.settings import ExecutorSettings
from autoscaler.service.http.api import MIN_TOKEN_LENGTH, is_loopback
from autoscaler.signals.config import SignalsConfig


class _Model(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True)


class TickSettings(_Model):
    interval: Duration = Field(timedelta(seconds=30), description="Time between ticks.")
    wake_after: Duration | None = Field(
        timedelta(seconds=10), description="When demand appears between ticks (a pending GPU "
        "pod on the Kubernetes watch, a spot notice, a new capacity request, a launch the "
        "cloud refused in a pool without placement-group mates), start the next tick this "
        "long after the last one began instead of at its interval (arrivals in between share "
        "it); null: only every interval. In the simulator 10s lowered the p95 wait on most "
        "windows and raised it on some of the busiest (docs/designs/benchmark-misses.md#wait).")
    follow_up: Duration | None = Field(
        timedelta(seconds=10), description="When an apply that created or started a node, "
        "or a bootstrap that went through, finishes between ticks, start the next tick this "
        "long after the last one began, so the node moves on (to its bootstrap, to READY) "
        "without waiting out the interval; the same after a launch the cloud refused in a "
        "pool whose placement group has other pools, so the work spills to one of them; "
        "null: only every interval. Other refused launches do not (docs/operators/"
        "running.md). It only moves a tick earlier: with an interval no "
        "longer than it, it changes nothing.")
    preview: Literal["map", "terraform"] = Field(
        "map", description="How each changed pool is previewed before the executor acts: "
        "map (the node-map diff and its $/h delta, no Terraform run) or terraform (also a "
        "real `terraform plan` per changed pool; for --dry-run).")

    @field_validator("interval")
    @classmethod
    def _positive(cls, value: timedelta) -> timedelta:
        if value < timedelta(seconds=1):
            raise ValueError("tick.interval must be at least 1s")
        return value

    @field_validator("wake_after", "follow_up")
    @classmethod
    def _not_busy(cls, value: timedelta | None, info: ValidationInfo) -> timedelta | None:
        if value is not None and value < timedelta(seconds=1):
            raise ValueError(f"tick.{info.field_name} must be at least 1s (or null: off)")
        return value


# The least each store retention may be: (as said in the error, as a duration).
RETENTION_FLOORS = {"plan_retention": ("1h", timedelta(hours=1)),
                    "audit_retention": ("1d", timedelta(days=1))}


class StoreSettings(_Model):
    url: str = Field(DEFAULT_URL, description="SQLAlchemy URL: sqlite:///FILE (default) or "
                     "postgresql+psycopg://user@host/db for two service instances.")
    password_env: str | None = Field(
        None, description="Environment variable with the database password (never in url).")
    plan_retention: Duration = Field(
        timedelta(days=7), description="How long recorded plans and their actions are kept: "
        "the leader deletes older ones hourly (the newest 100, and any with an action still "
        "planned or submitting, stay). At least 1h.")
    audit_retention: Duration = Field(
        timedelta(days=90), description="How long audit log rows (interruptions, failed "
        "health checks, long jobs, operations, capacity request changes) are kept: the "
        "leader deletes older ones hourly, with the plans. At least 1d.")

    @field_validator("plan_retention", "audit_retention")
    @classmethod
    def _retention(cls, value: timedelta, info: ValidationInfo) -> timedelta:
        shown, least = RETENTION_FLOORS[str(info.field_name)]
        if value < least:
            raise ValueError(f"store.{info.field_name} must be at least {shown}")
        return value

    @field_validator("url")
    @classmethod
    def _no_password(cls, value: str) -> str:
        try:
            url = store_url.parse_url(value)
        except store_url.StoreUrlError as exc:
            raise ValueError(f"not a database URL: {exc}") from None
        if url.holds_secret:
            raise ValueError("the store URL holds a password: remove it and name an environment "
                             "variable in store.password_env (or use PGPASSWORD / ~/.pgpass)")
        if url.backend not in ("sqlite", "postgresql"):
            raise ValueError("store.url must be sqlite:/// or postgresql+psycopg://")
        return value

    def resolved_url(self) -> str:
        """The URL with the password from the environment (never logged)."""
        password = read_secret(self.password_env, None, "store password")
        if password is None:
            return self.url
        return store_url.with_password(self.url, password)

    def display_url(self) -> str:
        """The URL for people: no password, secret-looking query values masked."""
        return store_url.display_url(self.url)


class AwsCloudConfig(_Model):
    regions: list[str] = Field(default_factory=list, description="Regions the pools use.")
    endpoint_url: str | None = Field(None, description="Endpoint for every AWS API (moto in "
                                     "the sandbox and tests).")
    sqs_queue_urls: dict[str, str] = Field(
        default_factory=dict, description="Per region, the SQS queue fed by the EventBridge "
        "spot interruption and rebalance rules, e.g. {us-east-1: https://sqs...}.")
    dead_letter_queue_urls: dict[str, str] = Field(
        default_factory=dict, description="Per region, an SQS queue that keeps the messages "
        "the interruption queue's reader refuses (malformed or forged), for inspection. "
        "Without one they are deleted once logged and counted.")
    read_timeout: Duration = Field(
        timedelta(seconds=10), description="How long each read of an AWS API answer may wait "
        "before the call is an error (the tick concludes nothing from it); the whole call (each "
        "page of a listing) is given up after the connect timeout plus twice this per attempt, "
        "plus the SDK's retry waits (52 s by default). A slow endpoint in front "
        "of a large fleet (moto with 1,000 instances takes ~20 s per full listing) needs more.")
    image_check_interval: Duration = Field(
        timedelta(minutes=5), description="How often the images of each baked pool's "
        "bootstrap hash are listed (DescribeImages, once per region and hash; a failure is "
        "kept as long): a pool with when_stale: hold holds its launches while none has the "
        "hash, so after a bake it may wait up to this long before it launches.")
    spot_placement_scores: bool = Field(
        False, description="Read AWS's Spot placement score (GetSpotPlacementScores, one "
        "zone at a time) for each pool that lists zones and at least three instance types "
        "(AWS scores fewer as always low), every 10 minutes per pool's set of types. A zone "
        "scored 3 or less is tried after every other for spot, and in a placement group "
        "after every other pool's offers; a score never rules a zone out. Needs "
        "ec2:GetSpotPlacementScores (the controller module grants it).")
    account_id: str | None = Field(
        None, pattern=r"^[0-9]{12}$", description="The fleet's AWS account: a spot notice "
        "from another account is refused. Unset: the account of the service's credentials "
        "(STS GetCallerIdentity, asked once when the notice loop first reads the queue).")

    def notice_regions(self) -> frozenset[str]:
        """Regions whose notices are obeyed: the pools' regions and the queues'."""
        return frozenset(self.regions) | frozenset(self.sqs_queue_urls)


class AlicloudConfig(_Model):
    regions: list[str] = Field(default_factory=list, description="Regions the pools use.")
    endpoint: str | None = Field(None, description="ECS endpoint host:port (the fake ECS server "
                                 "in tests).")


class CloudsConfig(_Model):
    aws: AwsCloudConfig = AwsCloudConfig()
    alicloud: AlicloudConfig = AlicloudConfig()
    market_prices: bool = Field(
        True, description="Read spot/on-demand prices and stock from the cloud APIs each tick "
        "(cached). false: catalog and price-file prices only (no pricing permissions, or a "
        "test endpoint whose prices are fake); AWS Spot placement scores are still read if "
        "clouds.aws.spot_placement_scores is on.")

    def endpoint(self, cloud: str) -> str | None:
        if cloud == "aws":
            return self.aws.endpoint_url
        if cloud == "alicloud":
            return self.alicloud.endpoint
        return None


class AddressSettings(_Model):
    """How the Ansible actuator and the drainers reach a node (DESIGN.md resolver seam)."""

    source: Literal["terraform", "file"] = Field(
        "terraform", description="terraform: the node's private IP from the Terraform output; "
        "file: a JSON map {node: address} kept by another tool (the sandbox writes one).")
    file: ConfigPath | None = Field(None, description="source file: the JSON map of node to address.")
    wait: Duration = Field(timedelta(seconds=30), description="How long to wait for a node's "
                           "entry in the file before reporting 'no address yet'.")

    @model_validator(mode="after")
    def _file_given(self) -> AddressSettings:
        if self.source == "file" and self.file is None:
            raise ValueError("addresses.source is file: set addresses.file")
        return self


def _checked_token(value: str | None, where: str) -> str | None:
    if value is not None and len(value.strip()) < MIN_TOKEN_LENGTH:
        raise SecretError(f"{where} holds a token of {len(value.strip())} characters; at "
                          f"least {MIN_TOKEN_LENGTH} are required")
    return value.strip() if value is not None else None


class TeamToken(_Model):
    """Where one team's bearer token for /v1/requests is (exactly one of env or file)."""

    env: str | None = Field(
        None, pattern=r"^[A-Za-z_][A-Za-z0-9_]{0,127}$", description="Environment variable.")
    file: ConfigPath | None = Field(None, description="File holding the token.")

    @model_validator(mode="after")
    def _one(self) -> TeamToken:
        if (self.env is None) == (self.file is None):
            raise ValueError("give exactly one of env or file")
        return self


class HttpSettings(_Model):
    enabled: bool = Field(True, description="Serve the HTTP API.")
    listen: str = Field("127.0.0.1:9464", description="host:port; loopback by default.")
    token_env: str | None = Field(None, description="Environment variable with the bearer "
                                  "token that /status and /plan require.")
    token_file: ConfigPath | None = Field(None, description="File with the bearer token.")
    team_tokens: dict[Name, TeamToken] = Field(
        default_factory=dict, description="Per team, the bearer token of its capacity "
        "requests (/v1/requests): a team sees and releases only its own.")
    grafana_url: str | None = Field(None, pattern=r"^https?://[A-Za-z0-9.:\[\]_-]+(/[A-Za-z0-9._~/-]*)?$",
                                    description="Grafana base URL: /ui links to the dashboards there.")

    @model_validator(mode="after")
    def _check(self) -> HttpSettings:
        if self.token_env is not None and self.token_file is not None:
            raise ValueError("set at most one of token_env or token_file")
        host, _, port = self.listen.rpartition(":")
        if not host or not port.isdigit() or not 0 <= int(port) <= 65535:
            raise ValueError("listen must be host:port, e.g. 127.0.0.1:9464")
        return self

    @property
    def host(self) -> str:
        return self.listen.rpartition(":")[0].strip("[]")

    @property
    def port(self) -> int:
        return int(self.listen.rpartition(":")[2])

    def token(self) -> str | None:
        """The bearer token, or None when /status is open (only allowed on loopback).

        A token that is empty or short is refused: an empty token file must never mean
        "anyone may read /status" (nor lift the loopback-only rule)."""
        value = read_secret(self.token_env, self.token_file, "http token")
        where = f"environment variable {self.token_env}" if self.token_env else str(self.token_file)
        return _checked_token(value, where)

    def teams(self) -> dict[str, str]:
        """team -> its request token; each is long enough and no two are the same (nor
        the operator's), or one team could act as another."""
        tokens: dict[str, str] = {}
        for team, where in self.team_tokens.items():
            value = _checked_token(read_secret(where.env, where.file, f"team {team} token"),
                                   f"team {team} token")
            if value is None:
                raise SecretError(f"team {team} token: not set")
            tokens[team] = value
        values = [*tokens.values(), *filter(None, [self.token()])]
        if len(set(values)) != len(values):
            raise SecretError("two teams (or a team and the operator) share a token")
        return tokens


class LeaderSettings(_Model):
    enabled: bool = Field(False, description="Take a lease in the store before acting; turn on "
                          "when two instances share one PostgreSQL store (and an S3 Terraform "
                          "backend: both are required).")
    name: str = Field("gpu-autoscaler", description="Lease name (one per fleet).")
    ttl: Duration = Field(timedelta(seconds=30), description="A dead leader is replaced after this.")
    holder: str | None = Field(None, description="Identity of this instance, unique per "
                               "instance; default host:pid.")

    @field_validator("ttl")
    @classmethod
    def _ttl(cls, value: timedelta) -> timedelta:
        if value < timedelta(seconds=2):
            raise ValueError("leader.ttl must be at least 2s")
        return value


class ServiceConfig(_Model):
    policies_dir: ConfigPath = Field(description="Directory of team policy files.")
    prices_file: ConfigPath | None = Field(None, description="Operator price file (Alibaba prices).")
    tick: TickSettings = TickSettings()
    store: StoreSettings = StoreSettings()
    signals: SignalsConfig = SignalsConfig()
    clouds: CloudsConfig = CloudsConfig()
    terraform: TerraformSettings = TerraformSettings()
    ansible: AnsibleSettings = AnsibleSettings()
    executor: ExecutorSettings = Field(ExecutorSettings(), description="Retries, waits, "
                                       "drain and interruption timings, unknown instances.")
    engine: EngineSettings = Field(EngineSettings(), description="Global caps: max_gpus, "
                                   "max_hourly_usd; drain_removed_pools; preempt_lower_priority.")
    addresses: AddressSettings = AddressSettings()
    http: HttpSettings = HttpSettings()
    leader: LeaderSettings = LeaderSettings()
    log_level: Literal["DEBUG", "INFO", "WARNING", "ERROR"] = Field("INFO", description="Log level.")

    @model_validator(mode="after")
    def _one_registration(self) -> ServiceConfig:
        # The play and the drainer must agree on it, so it is set once, for both.
        if "cluster_join_slurm_registration" in self.ansible.extra_vars:
            raise ValueError("ansible.extra_vars.cluster_join_slurm_registration: set "
                             "signals.slurm.registration instead (the drainer deletes nodes "
                             "the way they registered)")
        return self

    @model_validator(mode="after")
    def _shared_store(self) -> ServiceConfig:
        # Two instances are safe only if both the lease (and its fence) and the Terraform
        # state lock live where both see them; anything local gives each its own.
        if not self.leader.enabled:
            return self
        if store_url.parse_url(self.store.url).backend != "postgresql":
            raise ValueError("leader.enabled needs a PostgreSQL store shared by the instances "
                             "(store.url: postgresql+psycopg://...): SQLite is one host's file, "
                             "and its lease could not fence the other instance")
        if self.terraform.backend.kind == "local":
            raise ValueError("leader.enabled needs a shared Terraform backend (terraform.backend: "
                             "{kind: s3, ...}): with local state each instance has its own state "
                             "and lock, so a deposed leader's apply would not be stopped")
        return self

    def check_secrets(self) -> list[str]:
        """Secrets named by the file that are not there or unusable (an error before the
        first tick), and an API that would serve /status beyond loopback without one."""
        problems: list[str] = []
        for what, read in (("http token", self.http.token), ("team", self.http.teams),
                           ("store password", self.store.resolved_url)):
            try:
                read()
            except SecretError as exc:
                # Most messages name their secret already; teams() reads the http token again.
                message = str(exc)
                if message not in problems:
                    problems.append(message if what in message else f"{what}: {message}")
        http = self.http
        if (http.enabled and http.token_env is None and http.token_file is None
                and not is_loopback(http.host)):
            problems.append(f"http.listen is {http.listen}, not loopback, and no token is set: "
                            "set http.token_env or http.token_file, or listen on 127.0.0.1")
        return problems


__all__ = [
    "AddressSettings",
    "AlicloudConfig",
    "AwsCloudConfig",
    "CloudsConfig",
    "HttpSettings",
    "LeaderSettings",
    "ServiceConfig",
    "StoreSettings",
    "TeamToken",
    "TickSettings",
]

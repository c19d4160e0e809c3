"""Settings of the Ansible actuator (the ``ansible:`` section of the service config)."""

from __future__ import annotations

import re
from datetime import timedelta
from pathlib import Path

from pydantic import BaseModel, ConfigDict, Field, model_validator

from autoscaler.policy.duration import Duration
from autoscaler.policy.paths import ConfigPath

# playbooks/ next to the autoscaler package (a source checkout or editable install).
DEFAULT_PLAYBOOK = Path(__file__).resolve().parents[3] / "playbooks" / "gpu-node.yml"
DEFAULT_HEALTH_PLAYBOOK = DEFAULT_PLAYBOOK.with_name("health-check.yml")
KNOWN_HOSTS_DIR = "known_hosts.d"  # in runs_dir, by default


class AnsibleSettings(BaseModel):
    model_config = ConfigDict(frozen=True, extra="forbid")

    playbook: ConfigPath = Field(DEFAULT_PLAYBOOK, description="The node bootstrap playbook.")
    health_playbook: Path = Field(
        DEFAULT_HEALTH_PLAYBOOK, description="The periodic GPU health check of READY nodes "
        "(a pool's health.check_interval); its roles from the same roles directory.")
    runs_dir: ConfigPath = Field(Path(".gpu-autoscaler/ansible-runs"),
                           description="One directory per run: stdout, events, results.")
    keep_runs: int = Field(200, ge=1, description="Run directories kept; older ones are removed.")
    known_hosts_dir: ConfigPath | None = Field(
        None, description="Pinned SSH host keys, one file per node, named after it (its "
        "key is recorded at first contact; a changed key is refused). A node's file is "
        "deleted when it is TERMINATED, and at start those of nodes the store no longer "
        "holds as live. Default: runs_dir/known_hosts.d.")
    known_hosts_file: ConfigPath | None = Field(
        None, description="A single known_hosts file also read (never written) for the "
        "nodes' keys, as before known_hosts_dir: a file named here is never changed or "
        "deleted. Unset: the service's own old file, runs_dir/known_hosts, whose live nodes' "
        "keys are moved to known_hosts_dir at start, then deleted.")
    ssh_user: str = Field("root", description="SSH user on new nodes (become is used unless root).")
    ssh_port: int = Field(22, ge=1, le=65535, description="SSH port on new nodes.")
    private_key_file: ConfigPath | None = Field(None, description="SSH private key for the nodes.")
    connect_timeout_s: int = Field(10, ge=1, description="SSH connection timeout.")
    control_persist: bool = Field(
        True, description="Reuse SSH connections (ControlMaster=auto); false: ControlMaster=no.")
    become: bool | None = Field(None, description="Use sudo on the nodes; default: unless root.")
    timeout: Duration | None = Field(
        None, description="Time limit of one run; default: the longest bootstrap.timeout of "
        "the batch's pools.")
    forks: int = Field(20, ge=1, description="Hosts configured in parallel.")
    skip_tags: list[str] = Field(default_factory=list,
                                 description="e.g. ['gpu-hardware'] where there are no GPUs.")
    extra_vars: dict[str, object] = Field(
        default_factory=dict, description="Extra variables for every run (not secrets).")
    secret_env: dict[str, str] = Field(
        default_factory=dict,
        description="Secret play variables read from the service's environment at run time, "
        "{variable: ENV_NAME}, e.g. {cluster_join_k8s_token: GPU_AUTOSCALER_K8S_TOKEN}. "
        "They reach the play as extra variables in the run's private directory, which is "
        "deleted after the run, and are masked in results and kept logs.")

    def roles_dir(self) -> Path:
        """The roles the playbooks run (ANSIBLE_ROLES_PATH), next to the bootstrap playbook."""
        return self.playbook.resolve().parent / "roles"

    def host_keys_dir(self) -> Path:
        """The directory of the nodes' pinned host keys (one known_hosts file per node)."""
        return self.known_hosts_dir or self.runs_dir / KNOWN_HOSTS_DIR

    def legacy_known_hosts(self) -> Path:
        return self.known_hosts_file or self.runs_dir / "known_hosts"

    @model_validator(mode="after")
    def _known_hosts_paths_reach_ssh_whole(self) -> AnsibleSettings:
        # ssh splits UserKnownHostsFile at spaces and expands '%' tokens in it.
        for path in (self.host_keys_dir(), self.legacy_known_hosts()):
            if re.search(r"[\s%]", str(path.absolute())):
                raise ValueError(f"{path}: a known_hosts path (known_hosts_dir, known_hosts_file, "
                                 "runs_dir) may hold no space and no '%': ssh would read "
                                 "another file")
        return self

    def run_timeout(self, pool_timeouts: list[timedelta]) -> timedelta:
        if self.timeout is not None:
            return self.timeout
        return max(pool_timeouts, default=timedelta(minutes=30))

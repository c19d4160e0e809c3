"""The whole sandbox under one state directory: what ``sandbox up`` and the demo run.

* the patched moto server (the AWS endpoint Terraform and boto3 talk to);
* the synthetic DCGM exporter (in this process) with one target per sandbox instance,
  written to Prometheus' file_sd as instances come and go (``targets.InstanceFollower``);
* Prometheus scraping it every second;
* when run as root with the packages installed: for Kubernetes pools the fake API server
  and its simple-bind scheduler (``kube_cluster``) on the shared controller address, which
  nodes join with the fake ``kubeadm``; for Slurm pools a real Slurm cluster (munged, slurmctld)
  whose nodes are declared up front (Slurm 22.05 schedules only nodes in slurm.conf) and
  join when Ansible starts their slurmd, and one SSH test host in a network namespace per
  instance, which is what the service's address resolver points Ansible at.

``SandboxStack(state_dir).start()`` records every process and namespace it makes in
``sandbox.json`` (see ``stack_state``) and writes ``service.yaml`` and ``env`` for
``gpu-autoscaler run``; ``stop()`` undoes all of it.
"""

from __future__ import annotations

import base64
import logging
import os
import shutil
from dataclasses import dataclass, field
from pathlib import Path
from typing import IO, Any, Literal

from autoscaler.catalog import Catalog, load_catalog
from autoscaler.policy import load_dir
from autoscaler.policy.models import TeamPolicy
from autoscaler.sandbox.fakes.dcgm_exporter import DcgmExporterServer, ExporterControl, SyntheticDcgm
from autoscaler.sandbox.fakes.dcgm_scenarios import Constant
from autoscaler.sandbox.hosts import netns, node_image
from autoscaler.sandbox.services.moto_server import SANDBOX_ENV, MotoSandbox
from autoscaler.sandbox.services.prometheus import PrometheusServer, write_file_sd
from autoscaler.sandbox.services.spot_notices import create_queues, queue_key
from autoscaler.sandbox.stack.config import (
    MUNGE_KEY_ENV,
    aws_regions,
    prometheus_section,
    render_env,
    render_service_config,
    slurm_node_specs,
    slurm_partitions,
    write_yaml,
)
from autoscaler.sandbox.stack.state import (
    CONTROLLER_ADDR,
    StackState,
    children_of,
    proc_of,
    write_state,
)
from autoscaler.sandbox.stack.targets import Followed, InstanceFollower
from autoscaler.signals.config import PrometheusConfig
from autoscaler.signals.rules import RuleSet, recording_rules

log = logging.getLogger(__name__)
PLACEHOLDER_ADDR = "169.254.77.253"  # NodeAddr of a declared node until it registers


class SandboxError(RuntimeError):
    pass


def privileged() -> bool:
    """As root the sandbox runs Slurm and boots a test host per instance (unless told not to)."""
    return os.geteuid() == 0


def require_tools() -> None:
    """Root without the packages is an error, never a quiet fallback to fewer components."""
    tools = ("ip", "nsenter", "munged", "slurmctld", "slurmd", "scontrol")
    missing = [t for t in tools if shutil.which(t) is None]
    if missing:
        raise SandboxError(f"missing {', '.join(missing)}: run ./scripts/install.sh "
                           "(or `sandbox up --unprivileged` for no Slurm and no test hosts)")
    node_image.check_requirements()


@dataclass
class StackOptions:
    policies_dir: Path | None = None
    prices_file: Path | None = None
    privileged: bool | None = None  # None: when root and the packages are there
    util: float = 0.0
    tick_interval: str = "5s"
    # dynamic: nodes register with slurmd -Z, nothing is declared; declared: slurm.conf
    # names slurm_names_per_pool nodes per pool up front (State=CLOUD sites, Slurm < 22.05).
    slurm_registration: Literal["dynamic", "declared"] = "dynamic"
    slurm_names_per_pool: int = 12
    http_port: int = 0
    executor: dict[str, Any] = field(default_factory=dict)
    # Every second suits a handful of nodes; a fleet of hundreds is scraped as in production
    # (15-30 s) and read through the recording rules, or Prometheus and the exporter take
    # the machine's two cores.
    scrape_interval: str = "1s"
    recording_rules: bool = False


def mig_layouts(policies: dict[str, TeamPolicy]) -> dict[tuple[str, str], tuple[str, ...]]:
    """(team, pool) -> each GPU's MIG profiles, for the pools with ``sharing: mig``."""
    return {(policy.team, pool.name): tuple(pool.bootstrap.mig_profiles)
            for policy in policies.values() for pool in policy.pools
            if pool.bootstrap.sharing == "mig" and pool.bootstrap.mig_profiles}


class SandboxStack:
    def __init__(self, state_dir: Path, options: StackOptions | None = None):
        self.dir = Path(state_dir).resolve()
        self.options = options or StackOptions()
        self.privileged = privileged() if self.options.privileged is None else self.options.privileged
        self.catalog: Catalog = load_catalog(self.options.prices_file)
        self.policies: dict[str, TeamPolicy] = {}
        if self.options.policies_dir is not None:
            self.policies, errors = load_dir(self.options.policies_dir, self.catalog)
            if errors:
                raise SandboxError("policies are invalid:\n" + "\n".join(str(e) for e in errors))
        self.state = StackState(supervisor=proc_of(os.getpid()))
        self.moto: MotoSandbox | None = None
        self.dcgm: DcgmExporterServer | None = None
        self.prometheus: PrometheusServer | None = None
        self.slurm: Any = None  # SlurmCluster when privileged and a pool uses Slurm
        self.kube: Any = None  # SandboxKube when privileged and a pool uses Kubernetes
        self.follower: InstanceFollower | None = None
        self._shared: list[tuple[netns.SharedSetting, IO[str]]] = []  # settings we use
        self.file_sd = self.dir / "prometheus" / "file_sd" / "dcgm.json"
        self.address_file = self.dir / "addresses.json"
        self.config_file = self.dir / "service.yaml"
        # Baked images' layers (stack/baked_images.py): in the stack dir, nowhere else.
        self.images_dir = self.dir / "baked-images"

    # -- lifecycle ------------------------------------------------------------------------
    def start(self) -> SandboxStack:
        self.dir.mkdir(parents=True, exist_ok=True)
        self._record()
        try:
            self._start_moto()
            self._start_exporter()
            self._start_prometheus()
            if self.privileged:
                require_tools()
                node_image.ensure_image(self.dir / "node-image-build.log")  # once, up front
                self._use(netns.UNREACHABLE_ROUTE)
                self.state.uses_route = True
                self._start_slurm()
                self._start_kube()
            self._start_follower()
            self._write_service_files()
        except BaseException as exc:
            self.stop()
            self.state.status, self.state.error = "failed", f"{type(exc).__name__}: {exc}"
            write_state(self.dir, self.state)
            raise
        self.state.status = "ready"
        self._record()
        log.info("sandbox ready in %s", self.dir)
        return self

    def stop(self) -> None:
        self.state.status = "stopping"
        self._record()
        for step in (self._stop_follower, self._stop_kube, self._stop_slurm, self._stop_prometheus,
                     self._stop_exporter, self._stop_moto):
            try:
                step()
            except Exception:
                log.exception("sandbox: error while stopping")
        while self._shared:
            setting, handle = self._shared.pop()
            setting.release(handle)
        self.state.uses_route = self.state.uses_controller_address = False
        self.state.status = "stopped"
        self.state.children, self.state.namespaces, self.state.nodes = [], [], {}
        write_state(self.dir, self.state)

    def __enter__(self) -> SandboxStack:
        return self.start()

    def __exit__(self, *exc: object) -> None:
        self.stop()

    # -- what others use ---------------------------------------------------------------------
    @property
    def exporter(self) -> ExporterControl:
        if self.dcgm is None:
            raise SandboxError("the DCGM exporter is not running")
        return ExporterControl(self.dcgm.url)

    def ec2(self) -> Any:
        if self.moto is None:
            raise SandboxError("moto is not running")
        return self.moto.client("ec2")

    def env(self) -> dict[str, str]:
        """What ``gpu-autoscaler run`` needs in its environment against this sandbox."""
        env = dict(SANDBOX_ENV)
        if self.slurm is not None:
            env[MUNGE_KEY_ENV] = base64.b64encode(self.slurm.munge_key.read_bytes()).decode()
        if self.kube is not None:
            from autoscaler.sandbox.stack.kube_cluster import TOKEN_ENV

            env[TOKEN_ENV] = self.kube.token
        return env

    def set_load(self, util: float) -> None:
        """GPU utilization of every node, present and future (the demo's scripted load)."""
        if self.dcgm is None:
            raise SandboxError("the DCGM exporter is not running")
        self.dcgm.dcgm.scenario = Constant(util)
        self.exporter.call("util", util=None)  # drop per-node pins: the scenario decides

    def running_instances(self) -> int:
        """Instances moto still runs for the autoscaler (the demo's end check)."""
        from autoscaler.sandbox.services.moto_server import running_instances

        return len(running_instances(self.ec2(), **{"managed-by": "gpu-autoscaler"}))

    def stop_prometheus(self) -> None:
        """Take Prometheus away (outage tests); ``start_prometheus`` brings it back."""
        self._stop_prometheus()

    def start_prometheus(self) -> None:
        """Back (or restarted) on the same port and data, with the options as they are now."""
        if self.prometheus is None:
            raise SandboxError("prometheus was never started")
        self.prometheus.stop()
        self._start_prometheus(self.prometheus.port)

    # -- components ----------------------------------------------------------------------------
    def _start_moto(self) -> None:
        self.moto = MotoSandbox(self.dir / "moto").start()
        self.state.endpoints["moto"] = self.moto.endpoint
        # What `gpu-autoscaler sandbox fault|scores` write (the server reads them per request).
        self.state.endpoints["moto_faults"] = str(self.moto.fault_file)
        self.state.endpoints["moto_spot_scores"] = str(self.moto.score_file)
        queues = create_queues(self.moto.endpoint, aws_regions(self.policies))
        self.state.endpoints |= {queue_key(r): url for r, url in queues.items()}
        self._record()

    def _stop_moto(self) -> None:
        if self.moto is not None:
            self.moto.stop()
            self.moto = None

    def _start_exporter(self) -> None:
        def changed(nodes: list[str]) -> None:
            if self.dcgm is not None:
                write_file_sd(self.file_sd, self.dcgm.address, nodes)

        self.dcgm = DcgmExporterServer(SyntheticDcgm(Constant(self.options.util),
                                                     on_nodes_changed=changed)).start()
        write_file_sd(self.file_sd, self.dcgm.address, [])
        self.state.endpoints["exporter"] = self.dcgm.url

    def _stop_exporter(self) -> None:
        if self.dcgm is not None:
            self.dcgm.stop()
            self.dcgm = None

    def _start_prometheus(self, port: int | None = None) -> None:
        rules = None
        if self.options.recording_rules:
            read = PrometheusConfig(**prometheus_section(self.options, "http://127.0.0.1"))
            pools = [p for t in self.policies.values() for p in t.pools]
            rules = recording_rules(RuleSet.of(pools, read.node_label, read.stale_after),
                                    self.options.scrape_interval)
        self.prometheus = PrometheusServer(
            self.dir / "prometheus", file_sd=[self.file_sd], port=port,
            scrape_interval=self.options.scrape_interval, rules=rules).start()
        self.state.endpoints["prometheus"] = self.prometheus.url
        self._record()

    def _stop_prometheus(self) -> None:
        if self.prometheus is not None:
            self.prometheus.stop()
            self._record()

    def _start_slurm(self) -> None:

        partitions = slurm_partitions(self.policies)
        if not partitions:
            return
        from autoscaler.sandbox.services.slurm import SlurmCluster

        self._use_controller_address()
        if self.options.slurm_registration == "declared":
            specs = slurm_node_specs(self.policies, self.catalog,
                                     self.options.slurm_names_per_pool, PLACEHOLDER_ADDR)
            self.slurm = SlurmCluster(self.dir / "slurm", specs, controller_addr=CONTROLLER_ADDR)
        else:
            self.slurm = SlurmCluster(self.dir / "slurm", [], controller_addr=CONTROLLER_ADDR,
                                      dynamic_partitions=partitions)
        self.slurm.start()
        self.state.endpoints["slurm_conf"] = str(self.slurm.slurm_conf)
        self._record()

    def _stop_slurm(self) -> None:
        if self.slurm is not None:
            self.slurm.stop()
            self.slurm = None

    def _start_kube(self) -> None:
        if not any(p.cluster.kind == "kubernetes" for t in self.policies.values() for p in t.pools):
            return
        from autoscaler.sandbox.stack.kube_cluster import SandboxKube

        self._use_controller_address()
        self.kube = SandboxKube(CONTROLLER_ADDR).start()
        self.state.endpoints["kubernetes"] = self.kube.url
        self._record()

    def _stop_kube(self) -> None:
        if self.kube is not None:
            self.kube.stop()
            self.kube = None

    def _start_follower(self) -> None:
        if self.moto is None or self.dcgm is None:
            raise SandboxError("moto and the exporter must run before the follower")
        self.follower = InstanceFollower(
            self.ec2(), self.exporter, self.address_file, self.catalog,
            hosts_dir=self.dir / "hosts" if self.privileged else None,
            images_dir=self.images_dir if self.privileged else None,
            routes=(CONTROLLER_ADDR,) if self.slurm is not None or self.kube is not None else (),
            on_change=self._followed_changed,
            keep=self._each_pass, mig_layouts=mig_layouts(self.policies)).start()
        if self.privileged:  # shown by `sandbox status`; `down` keeps it (a cache, in this dir)
            self.state.endpoints["baked_images"] = str(self.images_dir)

    def _each_pass(self) -> None:
        """Before every follower pass: record processes started since (a rebooted node's
        new nspawn) so a crash cleanup stops them by PID."""
        known = {(p.pid, p.start) for p in self.state.children}
        if any((p.pid, p.start) not in known for p in children_of(os.getpid())):
            self._record()

    def _use(self, setting: netns.SharedSetting) -> None:
        """Use a machine-wide setting until stop(); other sandboxes may use it too."""
        self._shared.append((setting, setting.acquire()))
        self._record()

    def _use_controller_address(self) -> None:
        """Namespaced slurmd and kubelets reach the controller on the shared address."""
        if not self.state.uses_controller_address:
            self.state.uses_controller_address = True
            self._use(netns.CONTROLLER_ON_LO)

    def _stop_follower(self) -> None:
        if self.follower is not None:
            self.follower.stop()
            self.follower = None

    def _followed_changed(self, followed: dict[str, Followed]) -> None:
        self.state.nodes = {n: {"instance_id": f.instance_id, "address": f.address or "",
                                "instance_type": f.instance_type, "image_id": f.image_id,
                                "state": "stopped" if f.stopped else "running"}
                            for n, f in followed.items()}
        names = []
        for item in followed.values():
            if item.host is not None:
                names += [h.slot.netns for h in item.host.hosts.values()]
        self.state.namespaces = sorted(set(self.state.namespaces) | set(names))
        self._record()

    def _record(self) -> None:
        """Write the state file: every live child process of this one is listed."""
        known = {(p.pid, p.start) for p in self.state.children}
        fresh = [p for p in children_of(os.getpid()) if (p.pid, p.start) not in known]
        self.state.children = [*self.state.children, *fresh]
        write_state(self.dir, self.state)

    def _write_service_files(self) -> None:
        config = render_service_config(self)
        write_yaml(self.config_file, config)
        env_file = self.dir / "env"
        env_file.write_text(render_env(self.env()))
        env_file.chmod(0o600)  # holds the sandbox munge key
        self.state.endpoints["service_config"] = str(self.config_file)
        self.state.endpoints["env_file"] = str(env_file)

"""Run the node bootstrap playbook for one batch of nodes with ansible-runner.

Each run gets a fresh private data directory (mode 0700, deleted afterwards): secrets are
written only there, as the extra-vars file ansible-runner passes with ``-e @file``, never
on a command line, in the environment or in the kept logs. What operators need is copied
to ``runs_dir/<run id>/``: the inventory, ansible's stdout, the job events, the status and
``results.json``, each passed through the redactor first as a second line of defence
behind the roles' ``no_log``.

Inventory and secrets are written by :mod:`unsafe` with every string tagged ``!unsafe``:
nothing from a policy, the cloud or a secret is ever rendered as a template (only the
operator's own ``extra_vars`` are passed as written).
Each node's SSH host key is pinned under its node name (``HostKeyAlias``) in the node's
own file of ``known_hosts_dir`` (:mod:`known_hosts`): recorded at first contact, and a node
that later shows another key is refused (unreachable, "host key verification failed"),
never connected to. :meth:`AnsibleActuator.forget` deletes the file of a node that is gone.
"""

from __future__ import annotations

import contextlib
import json
import os
import secrets as pysecrets
import shutil
import subprocess
import tempfile
import threading
import time
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass
from datetime import UTC, datetime
from pathlib import Path
from typing import Any, Protocol

import ansible_runner

from autoscaler.actuators.ansible.inventory import (
    AddressResolver,
    build_inventory,
    pool_of,
)
from autoscaler.actuators.ansible.known_hosts import KnownHosts
from autoscaler.actuators.ansible.results import (
    BootstrapRun,
    HostResult,
    HostStatus,
    Redactor,
    host_results,
)
from autoscaler.actuators.ansible.settings import AnsibleSettings
from autoscaler.actuators.ansible.unsafe import write_extravars, write_unsafe
from autoscaler.catalog.catalog import Catalog
from autoscaler.model.lifecycle import NodeState
from autoscaler.model.node import FleetView, Node
from autoscaler.policy.models import TeamPolicy
from autoscaler.secrets import CLOUD_CREDENTIALS, blanked, hold

# Artifacts worth keeping for operators; "command" is not among them: it holds the whole
# process environment (cloud credentials of the service included).
_KEPT_ARTIFACTS = ("stdout", "status", "rc")


# The tag of the playbook's node-time part (playbooks/gpu-node.yml): all a node launched
# from its pool's baked image still needs.
NODE_TIME_TAG = "node"
# Its image-time part: what a bake runs on the builder (actuators/image_bake.py).
IMAGE_TIME_TAG = "image"
# The start part: what a prepared node needs again at every boot (host name, persistence
# mode, services, MIG instances, health check, the join); the rest of the node-time part
# only writes files, which a stopped instance keeps.
START_TAG = "start"


@dataclass(frozen=True)
class Part:
    """The part of gpu-node.yml one run applies: ``tags`` and ``skip`` (beside the
    operator's ``skip_tags``), and ``hold``: keep the join service off for a stop."""

    name: str
    tags: str | None = None
    skip: tuple[str, ...] = ()
    hold: bool = False

    def describe(self) -> str:
        """How a log line names it: the ansible-playbook options it runs with."""
        return " ".join([*([f"--tags {self.tags}"] if self.tags else []),
                         *([f"--skip-tags {','.join(self.skip)}"] if self.skip else [])])


FULL = Part("full")
BAKED = Part("node", tags=NODE_TIME_TAG)  # a node launched from a baked image
# A warm-pool node before it is stopped: everything but the start part, so that a start
# runs only what does not survive the stop (as EC2 Auto Scaling runs its launch lifecycle
# hook when an instance enters the warm pool, not when it leaves it).
WARM_ENTRY = Part("warm", skip=(START_TAG,), hold=True)
WARM_START = Part("start", tags=START_TAG)  # a warm node started by a launch


class AnsibleError(RuntimeError):
    pass


class BootstrapCancelled(AnsibleError):
    """The run was stopped by :meth:`AnsibleActuator.cancel` (the service is stopping):
    nothing is known about its hosts; roles are idempotent, so it is simply run again."""


class Bootstrapper(Protocol):
    """What the executor needs; ``FakeAnsible`` implements it for unit tests."""

    def bootstrap(self, nodes: Sequence[Node], policies: Mapping[str, TeamPolicy], *,
                  secrets: Mapping[str, str] | None = None) -> BootstrapRun: ...

    def health_check(self, nodes: Sequence[Node], policies: Mapping[str, TeamPolicy]) -> BootstrapRun:
        """Run the GPU health check playbook on READY nodes: one result per node."""
        ...

    def cancel(self) -> None:
        """Stop the runs in progress and refuse new ones (they raise BootstrapCancelled)."""
        ...

    def forget(self, names: Iterable[str]) -> None:
        """These nodes are gone (TERMINATED): drop what is kept of them (pinned host keys)."""
        ...

    def forget_all_but(self, live: Iterable[str]) -> list[str]:
        """At start: drop what is kept of every node not in ``live`` (the store's nodes
        not TERMINATED); returns the names dropped."""
        ...


def node_part(node: Node) -> Part:
    """What one node's bootstrap runs: :data:`WARM_ENTRY` for a warm-pool node not started
    yet, :data:`WARM_START` for one a launch started, :data:`BAKED` for a node launched
    from a baked image (``progress.baked_image``), :data:`FULL` for the rest."""
    warm = node.progress.warm
    if warm is not None:
        return WARM_ENTRY if warm.in_pool else WARM_START
    if node.progress.baked_image is not None:
        return BAKED
    return FULL


def batch_part(nodes: Sequence[Node]) -> Part:
    """The part a batch's bootstrap runs (:func:`node_part`, the same for every node).
    A mixed batch is refused: one run is one part (the executor never makes one)."""
    parts = {node_part(n) for n in nodes}
    if len(parts) > 1:
        named = "; ".join(f"{part.name}: " + ", ".join(sorted(n.name for n in nodes
                                                              if node_part(n) == part))
                          for part in sorted(parts, key=lambda p: p.name))
        raise AnsibleError(f"a batch mixes nodes that run different parts of the playbook ({named})")
    return parts.pop() if parts else FULL


def ready_to_bootstrap(fleet: FleetView) -> list[Node]:
    """Nodes whose instance exists and that wait for Ansible."""
    return [n for n in fleet.nodes if n.state is NodeState.BOOTSTRAPPING]


class AnsibleActuator:
    def __init__(self, settings: AnsibleSettings, address_of: AddressResolver, *,
                 catalog: Catalog | None = None,
                 clock: Callable[[], datetime] = lambda: datetime.now(UTC),
                 play_vars: Mapping[str, object] | None = None):
        """``play_vars``: what the rest of the service config decides for every play (how
        a Slurm node registers), passed like the operator's ``extra_vars``."""
        self.settings = settings
        hold(settings.secret_env.values())  # read by the plays, never by Terraform
        self.play_vars = dict(play_vars or {})
        self.address_of = address_of
        self.catalog = catalog
        self.clock = clock
        self._cancelled = threading.Event()
        self.known_hosts = KnownHosts.of(settings)

    def cancel(self) -> None:
        self._cancelled.set()

    def forget(self, names: Iterable[str]) -> None:
        self.known_hosts.forget(names)

    def forget_all_but(self, live: Iterable[str]) -> list[str]:
        return self.known_hosts.keep_only(live)

    def bootstrap(self, nodes: Sequence[Node], policies: Mapping[str, TeamPolicy], *,
                  secrets: Mapping[str, str] | None = None) -> BootstrapRun:
        """Run the playbook once for ``nodes``; one result per node, never raises per host.
        Each batch runs one :class:`Part` (:func:`batch_part`): a node launched from a
        baked image only the node-time part, a warm node its entry or its start; a batch
        mixing parts raises AnsibleError."""
        return self._play(self.settings.playbook, nodes, policies, secrets,
                          part=batch_part(nodes))

    def health_check(self, nodes: Sequence[Node], policies: Mapping[str, TeamPolicy]) -> BootstrapRun:
        """Run the health check playbook once for ``nodes``; one result per node."""
        return self._play(self.settings.health_playbook, nodes, policies, None,
                          part=Part("health"))

    def bake(self, builder: Node, policies: Mapping[str, TeamPolicy]) -> BootstrapRun:
        """Run the image-time part of the playbook (``--tags image``) on a bake's builder,
        with its pool's variables. No secret is passed: nothing of a secret may end up in
        an image (the join, which needs them, is node time)."""
        return self._play(self.settings.playbook, [builder], policies, None,
                          part=Part("image", tags=IMAGE_TIME_TAG), env_secrets=False)

    def _play(self, playbook: Path, nodes: Sequence[Node], policies: Mapping[str, TeamPolicy],
              secrets: Mapping[str, str] | None, *, part: Part = FULL,
              env_secrets: bool = True) -> BootstrapRun:
        """One ansible-runner run of ``playbook`` for ``nodes``; ``part`` limits it to some
        of its tasks (``settings.skip_tags`` are skipped either way)."""
        if len({n.name for n in nodes}) != len(nodes):
            raise AnsibleError("a batch lists the same node twice")
        if self._cancelled.is_set():
            raise BootstrapCancelled("the Ansible actuator is stopping")
        known = self._env_secrets()
        all_secrets = {**(known if env_secrets else {}), **(secrets or {})}
        redact = Redactor([*known.values(), *all_secrets.values()])  # masked even if not passed
        inventory, unresolved = build_inventory(nodes, policies, self.settings,
                                                self.address_of, self.catalog)
        timeout = self.settings.run_timeout(
            [pool_of(n, policies).bootstrap.timeout for n in nodes]).total_seconds()
        # Sortable (rotation keeps the newest) and unique (several runs per second).
        run_id = f"{self.clock():%Y%m%dT%H%M%S.%fZ}-{pysecrets.token_hex(3)}"
        run_dir = self.settings.runs_dir / run_id
        self.settings.runs_dir.mkdir(parents=True, exist_ok=True)
        run_dir.mkdir(mode=0o750)
        started = time.monotonic()
        status, hosts = "successful", {}
        names = list(inventory["all"]["hosts"])
        if names:
            status, events = self._run(playbook, run_id, inventory, all_secrets, timeout,
                                       run_dir, redact, part)
            if status == "canceled":
                raise BootstrapCancelled(f"run {run_id} stopped: the service is stopping")
            hosts = host_results(names, events, status, timeout, redact)
        for miss in unresolved:
            hosts[miss.node] = HostResult(miss.node, HostStatus.UNREACHABLE, None, miss.reason)
        run = BootstrapRun(run_id, run_dir, status, time.monotonic() - started, hosts,
                           part.tags, part.name)
        _write_json(run_dir / "inventory.json", inventory, redact)
        _write_json(run_dir / "results.json", run.to_json(), redact)
        self._rotate()
        return run

    # ---- internals --------------------------------------------------------------------

    def _env_secrets(self) -> dict[str, str]:
        return {var: os.environ[env] for var, env in self.settings.secret_env.items()
                if os.environ.get(env)}

    def _envvars(self, private: Path) -> dict[str, str]:
        s = self.settings
        # Shared connections live in the run's private directory and are closed when the
        # run ends (close_masters), so none outlives the run or is reused for another host
        # that later gets the same address.
        master = ("-o ControlMaster=auto -o ControlPersist=120s" if s.control_persist
                  else "-o ControlMaster=no -o ControlPersist=no")
        # accept-new: a node's first key is recorded, a changed one is refused. Each host
        # is looked up by its node name, not its address (which clouds reuse), in its own
        # file: HostKeyAlias and UserKnownHostsFile are per host in the inventory (and must
        # not be here: ssh keeps the first value of an option, and these come first).
        self.known_hosts.prepare()
        return {
            # The plays get their secrets as extra vars; ansible-playbook needs none from
            # the environment, and ansible-runner writes the environment to disk.
            **blanked(CLOUD_CREDENTIALS),
            "ANSIBLE_SSH_ARGS": f"{master} -o StrictHostKeyChecking=accept-new -o HashKnownHosts=no "
                                "-o ServerAliveInterval=15 -o LogLevel=ERROR",
            "ANSIBLE_HOST_KEY_CHECKING": "True",
            "ANSIBLE_PIPELINING": "True",
            "ANSIBLE_TIMEOUT": str(s.connect_timeout_s),
            "ANSIBLE_PYTHON_INTERPRETER": "auto_silent",
            "ANSIBLE_RETRY_FILES_ENABLED": "False",
            "ANSIBLE_NOCOLOR": "1",
            "ANSIBLE_ROLES_PATH": str(s.roles_dir()),
            "ANSIBLE_LOCAL_TEMP": str(private / "tmp"),
            "ANSIBLE_SSH_CONTROL_PATH_DIR": str(private / "cp"),
        }

    def _run(self, playbook: Path, run_id: str, inventory: dict[str, Any],
             secrets: Mapping[str, str], timeout: float, run_dir: Path,
             redact: Redactor, part: Part) -> tuple[str, list[dict[str, Any]]]:
        s = self.settings
        if not playbook.is_file():
            raise AnsibleError(f"playbook {playbook} does not exist")
        with tempfile.TemporaryDirectory(prefix="gpu-autoscaler-ansible-") as tmp:
            private = Path(tmp)
            # ansible-runner reads env/extravars itself (-e @file). Inventory and secrets
            # have every string tagged !unsafe: never rendered as a template. The operator's
            # own extra_vars (service config) are passed as written.
            hold = {"cluster_join_hold": True} if part.hold else {}
            write_extravars(private / "env" / "extravars",
                            {**s.extra_vars, **self.play_vars, **hold}, secrets)
            hosts_file = write_unsafe(private / "inventory" / "hosts.yml", inventory)
            runner = ansible_runner.run(
                private_data_dir=str(private), ident=run_id, playbook=str(playbook.resolve()),
                inventory=str(hosts_file),
                envvars=self._envvars(private), forks=s.forks, tags=part.tags,
                skip_tags=",".join([*s.skip_tags, *part.skip]) or None,
                timeout=int(max(1, timeout)),
                quiet=True, rotate_artifacts=1,
                # Without a callback ansible-runner sets its own SIGTERM/SIGINT handlers in
                # the main thread and never restores them: the service (or any caller) would
                # no longer stop on SIGTERM. The run is bounded by its timeout, and stopped
                # by cancel() when the service stops.
                cancel_callback=self._cancelled.is_set,
            )
            close_masters(private / "cp")
            events = list(runner.events)
            artifacts = Path(runner.config.artifact_dir)
            for name in _KEPT_ARTIFACTS:
                if (artifacts / name).is_file():
                    (run_dir / name).write_text(redact((artifacts / name).read_text(errors="replace")))
            _write_events(run_dir / "events.jsonl", events, redact)
            return str(runner.status), events

    def _rotate(self) -> None:
        keys = self.known_hosts.dir.absolute()  # in runs_dir by default: not a run
        runs = sorted(p for p in self.settings.runs_dir.iterdir()
                      if p.is_dir() and p.absolute() != keys)
        for old in runs[:-self.settings.keep_runs]:
            shutil.rmtree(old, ignore_errors=True)


def close_masters(control_dir: Path) -> None:
    """Ask every SSH master of the run to exit (ControlPersist would keep them a while)."""
    if not control_dir.is_dir():
        return
    for sock in control_dir.iterdir():
        with contextlib.suppress(subprocess.SubprocessError, OSError):
            subprocess.run(["ssh", "-o", f"ControlPath={sock}", "-O", "exit", "gpu-node"],
                           capture_output=True, timeout=10, check=False)


def _write_json(path: Path, data: Any, redact: Redactor) -> None:
    path.write_text(redact(json.dumps(data, indent=2, sort_keys=True, default=str)) + "\n")


def _write_events(path: Path, events: list[dict[str, Any]], redact: Redactor) -> None:
    with open(path, "w") as fh:
        for event in events:
            fh.write(redact(json.dumps(event, sort_keys=True, default=str)) + "\n")

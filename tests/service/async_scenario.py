"""The "deciding never waits for doing" scenario on the sandbox, every component real:
moto + Terraform, a real Slurm cluster, SSH test hosts, ansible-runner, the service as
``build_service`` wires it (worker pools, the spot-notice loop on moto SQS, the API).

Three Slurm pools of team ``e2e``:

* ``fast``: one READY node running a job that records the checkpoint signal;
* ``slow``: its bootstrap is slowed by a pause task (a test playbook that runs
  ``sleep <pause>`` on hosts whose ``cluster_join_pool`` role variable is ``slow``, then the
  real playbook), started once ``fast`` is READY;
* ``third``: scales up for pending jobs only.

While ``slow`` bootstraps, a pending job for ``third`` must give a REQUESTED node within
one tick, and a spot notice for the ``fast`` node (sent to moto SQS) must reach INTERRUPTED
with its Slurm node draining within 5 s, the job getting its checkpoint signal.
Used by ``test_async_sandbox.py`` (pause 3 min) and ``benchmarks/bench_loop.py``.
"""

from __future__ import annotations

import itertools
import json
import os
import threading
import time
import urllib.request
from dataclasses import dataclass, field
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

from ruamel.yaml import YAML
from sqlalchemy import select

from autoscaler.actuators.ansible.settings import DEFAULT_PLAYBOOK
from autoscaler.fleet.tables import PlanRow
from autoscaler.model.lifecycle import NodeState
from autoscaler.sandbox.hosts.procs import wait_until
from autoscaler.sandbox.stack.local import SandboxStack, StackOptions
from autoscaler.service.app import Service
from autoscaler.service.config.load import load_config
from autoscaler.service.wiring import build_service

S = NodeState
TICK_S = 5.0
POOL = """\
  - name: {name}
    cloud: aws
    region: us-east-1
    instance_types: [p3.2xlarge]
    capacity: {{on_demand_base: 2, spot_percent: 0}}
    min_nodes: {floor}
    max_nodes: 2
    scale_up: {{pending_jobs: {pending}}}
    scale_down: {{gpu_utilization_below: 1, idle_for: 1h, cooldown: 1s}}
    bootstrap: {{timeout: 20m}}
    cluster: {{kind: slurm, partition: {name}}}
"""
# The job records the checkpoint signal in its own comment (scontrol works inside jobs).
SIGNAL_JOB = ("trap 'scontrol update jobid=$SLURM_JOB_ID comment=checkpointed' USR1; "
              "while true; do sleep 1; done")


def policy_text(slow_floor: int) -> str:
    pools = (POOL.format(name="fast", floor=1, pending="false")
             + POOL.format(name="slow", floor=slow_floor, pending="false")
             + POOL.format(name="third", floor=0, pending="true"))
    return f"apiVersion: gpu-autoscaler/v1\nteam: e2e\npriority: high\npools:\n{pools}"


def slow_playbook(directory: Path, pause_s: int) -> Path:
    """The real playbook after a pause on the slow pool's hosts (roles linked beside it:
    the actuator takes its roles path from the playbook's directory)."""
    directory.mkdir(parents=True, exist_ok=True)
    roles = directory / "roles"
    if not roles.exists():
        roles.symlink_to(DEFAULT_PLAYBOOK.parent / "roles")
    path = directory / "slow-then-gpu-node.yml"
    path.write_text(f"""\
- name: A long bootstrap on the slow pool (the stand-in for a driver build and reboot)
  hosts: all
  gather_facts: false
  tasks:
    - name: Pause
      ansible.builtin.command: sleep {int(pause_s)}
      changed_when: false
      when: cluster_join_pool == "slow"
- import_playbook: {DEFAULT_PLAYBOOK}
""")
    return path


@dataclass
class Measured:
    tick_intervals: list[float] = field(default_factory=list)
    notice_to_draining_s: float | None = None
    pending_to_requested_ticks: int | None = None
    checkpointed: bool = False
    status_age_s: float | None = None
    slow_still_bootstrapping: bool = False


class AsyncScenario:
    def __init__(self, root: Path, pause_s: int):
        self.root, self.pause_s = root, pause_s
        self.policies = root / "policies"
        self.policies.mkdir(parents=True, exist_ok=True)
        (self.policies / "e2e.yaml").write_text(policy_text(0))
        self.stack = SandboxStack(root / "sandbox", StackOptions(
            policies_dir=self.policies, slurm_names_per_pool=3, tick_interval=f"{TICK_S}s"))
        self.service: Service | None = None
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None
        self._env: dict[str, str | None] = {}
        self.measured = Measured()

    # -- setting up ---------------------------------------------------------------------
    def start(self) -> AsyncScenario:
        self.stack.start()
        for key, value in self.stack.env().items():
            self._env[key] = os.environ.get(key)
            os.environ[key] = value
        assert self.stack.moto is not None
        sqs = self.stack.moto.client("sqs")
        self.queue_url = sqs.create_queue(QueueName="e2e-interruptions")["QueueUrl"]
        self.sqs = sqs
        doc = YAML(typ="safe").load(self.stack.config_file.read_text())
        doc["clouds"]["aws"]["sqs_queue_urls"] = {"us-east-1": self.queue_url}
        doc["ansible"]["playbook"] = str(slow_playbook(self.root / "playbook", self.pause_s))
        config_file = self.root / "service.yaml"
        with open(config_file, "w") as fh:
            YAML(typ="safe").dump(doc, fh)
        self.service = build_service(load_config(config_file))
        self._thread = threading.Thread(target=self.service.run, args=(self._stop,),
                                        name="service", daemon=True)
        self._thread.start()
        wait_until(lambda: self.service is not None and self.service.api is not None, 30, "the API")
        return self

    def stop(self) -> None:
        self._stop.set()
        if self._thread is not None:
            self._thread.join(timeout=120)
        self.stack.stop()
        for key, value in self._env.items():
            if value is None:
                os.environ.pop(key, None)
            else:
                os.environ[key] = value

    # -- looking ------------------------------------------------------------------------
    @property
    def svc(self) -> Service:
        assert self.service is not None
        return self.service

    def nodes(self, pool: str) -> list[Any]:
        return [n for n in self.svc.store.nodes(include_terminated=True) if n.pool == pool]

    def state_of(self, name: str) -> NodeState:
        node = self.svc.store.get(name)
        assert node is not None, name
        return node.state

    def fleet(self) -> str:
        return ", ".join(f"{n.name}={n.state.value}" for n in self.svc.store.nodes())

    def plans_since(self, at: datetime) -> list[dict[str, Any]]:
        with self.svc.store.session() as s:
            rows = s.scalars(select(PlanRow).where(PlanRow.decided_at >= at).order_by(PlanRow.id))
            return [r.body for r in rows]

    def status(self) -> dict[str, Any]:
        api = self.svc.api
        assert api is not None
        with urllib.request.urlopen(f"{api.url}/status", timeout=5) as resp:
            return json.loads(resp.read().decode())

    # -- the scenario -------------------------------------------------------------------
    def fast_ready_with_job(self) -> str:
        wait_until(lambda: any(n.state is S.READY for n in self.nodes("fast")), 600,
                   "the fast pool's node READY")
        [name] = [n.name for n in self.nodes("fast") if n.state is S.READY]
        cluster = self.stack.slurm
        self.job = cluster.submit(SIGNAL_JOB, gpus=1, nodelist=name, partition="fast", name="ckpt")
        try:
            cluster.wait_job_state(self.job, {"RUNNING"}, 120)
        except Exception as exc:
            raise AssertionError(f"{exc}\n{cluster.scontrol('show', 'job', self.job).stdout}\n"
                                 f"{cluster.scontrol('show', 'node', name).stdout}") from exc
        return name

    def slow_bootstrap_running(self) -> str:
        (self.policies / "e2e.yaml").write_text(policy_text(1))
        executor = self.svc.loop.executor

        def booting() -> bool:
            return any(op.kind == "bootstrap" and any("slow" in k for k in op.keys)
                       for op in executor.running())  # type: ignore[union-attr]

        wait_until(booting, 300, f"the slow pool's bootstrap running ({self.fleet()})")
        [name] = [n.name for n in self.nodes("slow")]
        self.slow_started = time.monotonic()
        return name

    def pending_job_for_third(self) -> None:
        submitted = datetime.now(UTC)
        self.stack.slurm.submit("sleep 600", gpus=1, partition="third", name="pending")
        wait_until(lambda: bool(self.nodes("third")), 20 * TICK_S, "a REQUESTED node for third")
        plans = self.plans_since(submitted)
        launches = [i for i, p in enumerate(plans, 1) if any(
            a["kind"] == "launch" and a["pool"] == "e2e/third" for a in p["actions"])]
        self.measured.pending_to_requested_ticks = launches[0] if launches else None

    def spot_notice(self, name: str) -> None:
        from tests.clouds.helpers import spot_warning

        node = self.svc.store.get(name)
        assert node is not None and node.instance_id
        sent = time.monotonic()
        at = datetime.now(UTC).strftime("%Y-%m-%dT%H:%M:%SZ")
        self.sqs.send_message(QueueUrl=self.queue_url, MessageBody=spot_warning(node.instance_id, at))
        cluster = self.stack.slurm

        def draining() -> bool:
            return self.state_of(name) in (S.INTERRUPTED, S.TERMINATING, S.TERMINATED) \
                and "drain" in cluster.node_state(name)

        wait_until(draining, 30, f"{name} INTERRUPTED and draining in Slurm", interval=0.1)
        self.measured.notice_to_draining_s = round(time.monotonic() - sent, 2)
        wait_until(lambda: "Comment=checkpointed" in cluster.scontrol("show", "job", self.job).stdout,
                   30, "the job's checkpoint signal")
        self.measured.checkpointed = True

    def look_while_slow(self, slow: str) -> None:
        status = self.status()
        last = datetime.fromisoformat(status["loop"]["last_tick_at"])
        self.measured.status_age_s = round((datetime.now(UTC) - last).total_seconds(), 2)
        self.measured.slow_still_bootstrapping = (
            self.state_of(slow) is S.BOOTSTRAPPING
            and any(op.startswith("bootstrap") for op in status["loop"]["operations"]))

    def tick_intervals(self, since: datetime) -> list[float]:
        times = [datetime.fromisoformat(p["decided_at"]) for p in self.plans_since(since)]
        return [(b - a).total_seconds() for a, b in itertools.pairwise(times)]

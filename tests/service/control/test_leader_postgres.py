"""Two service processes on one PostgreSQL, the follower's clock 31 s ahead (more than the
TTL; that skew once gave two leaders): only the leader acts; SIGKILL it mid-apply and the
other takes over within the lease TTL, with no duplicate launch (real Terraform+moto,
state in moto's S3 as HA requires)."""

from __future__ import annotations

import json
import re
import sys
import time
import urllib.request
from collections.abc import Iterator
from datetime import UTC, datetime, timedelta
from pathlib import Path

import pytest

from autoscaler.fleet.store import FleetStore
from autoscaler.model.lifecycle import NodeState
from autoscaler.sandbox.hosts.procs import ManagedProcess, free_port, wait_until
from autoscaler.sandbox.services.moto_server import MOTO_AMI, SANDBOX_ENV, MotoSandbox, running_instances
from tests.service import postgres
from tests.service.service_fakes import write_policy

pytestmark = pytest.mark.slow
TTL_S = 6
SKEW_S = 31  # b's wall clock runs this far ahead; the lease must not care
REPO = Path(__file__).resolve().parents[3]
BUCKET = "fleet-state"
# ``debug`` runs on the controller: every host gets a result and nothing connects anywhere.
NOOP_PLAYBOOK = """\
- name: Nothing to set up in this test
  hosts: all
  gather_facts: false
  tasks:
    - name: Report the node as bootstrapped
      ansible.builtin.debug: {msg: bootstrapped}
"""


pg = pytest.fixture(scope="module")(postgres.running)


@pytest.fixture(scope="module")
def moto(tmp_path_factory) -> Iterator[MotoSandbox]:
    with MotoSandbox(tmp_path_factory.mktemp("moto")) as m:
        m.client("s3").create_bucket(Bucket=BUCKET)
        yield m


def config(tmp: Path, pg: postgres.Postgres, moto: MotoSandbox, holder: str, port: int) -> Path:
    path = tmp / f"service-{holder}.yaml"
    path.write_text(json.dumps({
        "policies_dir": "policies", "tick": {"interval": "2s"},
        "store": {"url": pg.url},
        "clouds": {"aws": {"regions": ["us-east-1"], "endpoint_url": moto.endpoint},
                   "market_prices": False},
        "terraform": {"workdir": f"terraform-{holder}", "aws_endpoint": moto.endpoint,
                      "backend": {"kind": "s3", "bucket": BUCKET, "endpoint": moto.endpoint},
                      "regions": {"aws/us-east-1": {"ami": MOTO_AMI}}},
        "ansible": {"playbook": "noop.yml", "runs_dir": f"runs-{holder}", "control_persist": False},
        # Nothing connects (the playbook's one task runs locally); the resolver must answer.
        "addresses": {"source": "file", "file": "addresses.json", "wait": "1s"},
        # The killed leader's terraform (own session) may hold the pool's lock for a while:
        # the new leader rides that out instead of failing the node.
        "executor": {"ready_requires_metrics": False, "bootstrap_retry_backoff": "2s",
                     "provision_attempts": 60},
        "http": {"listen": f"127.0.0.1:{port}"},
        "leader": {"enabled": True, "ttl": f"{TTL_S}s", "holder": holder},
    }))
    return path


def metric(port: int, name: str) -> float | None:
    with urllib.request.urlopen(f"http://127.0.0.1:{port}/metrics", timeout=5) as resp:
        text = resp.read().decode()
    match = re.search(rf"^{name} (\S+)$", text, re.MULTILINE)
    return float(match.group(1)) if match else None


def test_only_the_leader_acts_and_a_killed_leader_is_replaced_without_duplicates(
        tmp_path, pg, moto):
    write_policy(tmp_path / "policies", "lead", name="gpu", min_nodes=1, max_nodes=2,
                 instance_types=["p3.2xlarge"], cluster={"kind": "none"})
    (tmp_path / "noop.yml").write_text(NOOP_PLAYBOOK)
    (tmp_path / "addresses.json").write_text(json.dumps({"lead-gpu-1": "127.0.0.1"}))
    ports = {"a": free_port(), "b": free_port()}
    env = {**SANDBOX_ENV, "PYTHONPATH": str(REPO)}
    store = FleetStore(pg.url)
    procs: dict[str, ManagedProcess] = {}
    try:
        for holder in ("a", "b"):
            path = str(config(tmp_path, pg, moto, holder, ports[holder]))
            argv = ([sys.executable, "-m", "autoscaler.cli", "run", "--config", path]
                    if holder == "a" else
                    [sys.executable, "-m", "tests.service.skewed_service", str(SKEW_S), path])
            procs[holder] = ManagedProcess(f"service-{holder}", argv, tmp_path / f"{holder}.log",
                                           env=env, cwd=tmp_path)
            if holder == "a":  # a takes the lease first
                wait_until(lambda: store.lease("gpu-autoscaler") is not None, 60, "a's lease",
                           proc=procs["a"])
        wait_until(lambda: (metric(ports["b"], "gpu_autoscaler_ticks_total") or 0) >= 2, 60,
                   "b ticking", proc=procs["b"])
        # The leader launches the floor node and is killed while Terraform applies it.
        wait_until(lambda: any(n.state is NodeState.PROVISIONING for n in store.nodes()), 120,
                   "the floor node in PROVISIONING", proc=procs["a"])
        assert metric(ports["a"], "gpu_autoscaler_leader") == 1.0
        # b's clock says a's lease ran out 31 s ago; the database's says it did not.
        assert metric(ports["b"], "gpu_autoscaler_leader") == 0.0
        assert (metric(ports["b"], 'gpu_autoscaler_decisions_total{mode="live"}') or 0) == 0
        assert store.lease("gpu-autoscaler").holder == "a"
        time.sleep(3)  # let the apply get going
        # a's term: 1, unless a host pause (the wall clock jumps, the monotonic one does
        # not) ran its lease out on the database's clock and a took a new term since.
        held = store.lease("gpu-autoscaler")
        assert held.holder == "a"
        procs["a"].kill()
        killed = time.monotonic()
        wait_until(lambda: metric(ports["b"], "gpu_autoscaler_leader") == 1.0, 3 * TTL_S,
                   "b taking over", proc=procs["b"])
        took_over = time.monotonic() - killed
        assert took_over <= TTL_S + TTL_S / 6 + 2, f"takeover took {took_over:.1f}s"
        lease = store.lease("gpu-autoscaler")
        assert lease.holder == "b" and lease.epoch == held.epoch + 1  # one new term
        wait_until(lambda: store.last_plan()[1].decided_at - datetime.now(UTC)
                   > timedelta(seconds=SKEW_S - 5), 30, "a plan decided by b")  # b's clock is off
        wait_until(lambda: [n.state for n in store.nodes()] == [NodeState.READY], 240,
                   "the node READY under the new leader", proc=procs["b"])
        time.sleep(6)  # a few more ticks: still nothing doubled
        names = [n.name for n in store.nodes(include_terminated=True)]
        assert names == ["lead-gpu-1"], names
        live = running_instances(moto.client("ec2"), **{"managed-by": "gpu-autoscaler"})
        assert [i["InstanceId"] for i in live] == [store.get("lead-gpu-1").instance_id]
        assert f"leader lease: b is the leader (epoch {lease.epoch})" in (
            tmp_path / "b.log").read_text()
    finally:
        for proc in procs.values():
            proc.stop()
        store.close()

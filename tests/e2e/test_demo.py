"""The demo scenario end to end: sandbox (moto, Prometheus, DCGM exporter, Slurm, and a
fresh minimal Debian 12 booted with systemd per instance), the real service loop with the
real executor (Terraform, Ansible, Slurm drain), a scripted load; then the node states from
the store's transitions, each node's first boot (user_data) and driver reboot, the empty
fleet, zero moto instances and a teardown that leaves no process or namespace behind."""

from __future__ import annotations

import contextlib
import os
from collections import defaultdict

import pytest

from autoscaler.sandbox.hosts import netns
from autoscaler.sandbox.stack.demo import DemoRun
from autoscaler.sandbox.stack.local import privileged
from autoscaler.sandbox.stack.state import Proc, alive

pytestmark = [pytest.mark.slow, pytest.mark.timeout(1800)]
FULL_LIFE = ["REQUESTED", "PROVISIONING", "BOOTSTRAPPING", "READY", "DRAINING", "DRAINED",
             "TERMINATING", "TERMINATED"]


class Watcher:
    """What the run looked like while it ran (the sandbox is gone afterwards)."""

    def __init__(self) -> None:
        self.slurm_states: dict[str, set[str]] = defaultdict(set)
        # name -> an open descriptor of the namespace. Slot names are reused by runs in
        # parallel, and so are namespace inode numbers once a namespace is freed: holding it
        # open keeps its number from going to another run's namespace of the same name.
        self.namespaces: dict[str, int] = {}
        self.children: set[Proc] = set()
        self.booted: dict[str, tuple[int, str]] = {}  # node -> (boots, user_data marker)

    def __call__(self, run: DemoRun) -> None:
        stack = run.stack
        if stack is None or run.service is None:
            return
        for name in stack.state.namespaces:
            if name not in self.namespaces:
                with contextlib.suppress(FileNotFoundError):
                    self.namespaces[name] = os.open(netns.NETNS_DIR / name, os.O_RDONLY)
        self.children |= set(stack.state.children)
        for node in run.service.store.nodes():
            if stack.slurm is not None and node.state.value in ("READY", "DRAINING"):
                self.slurm_states[node.name].add(stack.slurm.node_state(node.name))
            followed = stack.follower.followed.get(node.name) if stack.follower else None
            if (node.state.value == "READY" and node.name not in self.booted
                    and followed is not None and followed.host):
                host = followed.host
                marker = host.run(node.name, ["cat", "/etc/gpu-autoscaler/user-data-ran"],
                                  check=False).stdout
                self.booted[node.name] = (host.boots(node.name), marker)

    def left_behind(self) -> list[str]:
        """Names still bound to the namespace this run created; closes the descriptors."""
        left = []
        for name, fd in self.namespaces.items():
            try:
                if (netns.NETNS_DIR / name).stat().st_ino == os.fstat(fd).st_ino:
                    left.append(name)
            except FileNotFoundError:
                pass
            finally:
                os.close(fd)
        return left


@pytest.mark.skipif(not privileged(), reason="needs root (Slurm, booted test hosts)")
def test_demo_scales_up_on_load_and_back_to_an_empty_fleet(tmp_path):
    watcher = Watcher()
    run = DemoRun(tmp_path / "demo", phase_timeout_s=480)
    try:
        run.start()
        result = run.run(on_wait=watcher)
        assert result.failed is None, (result, run.status().get("loop", {}).get("activity"))
        assert result.completed == ["warm-up", "load", "quiet"]
        store = run.service.store
        paths: dict[str, list[str]] = defaultdict(list)
        for t in store.transitions():
            paths[t.node].append(t.to_state)
        assert len(paths) >= 2, "the load added at least one node to the floor node"
        for node, path in paths.items():
            assert path == FULL_LIFE, f"{node}: {path}"
        nodes = store.nodes(include_terminated=True)
        assert {n.market.value for n in nodes} == {"spot"}
        assert all(n.state.value == "TERMINATED" for n in nodes)
        launches = [a for a in store.actions() if a.kind == "launch"]
        assert {a.body["trigger"] for a in launches} == {"floor", "utilization"}
        drains = [a for a in store.actions() if a.kind == "drain"]
        assert drains and all(a.body["trigger"] == "idle" for a in drains)
        assert store.nodes() == [] and run.stack.running_instances() == 0
        # Joined Slurm (slurmctld saw each node serve) before it was drained there.
        for node in paths:
            assert watcher.slurm_states[node] & {"idle", "mixed", "allocated", "idle+drain",
                                                 "drained", "draining"}, watcher.slurm_states
            # A fresh machine: its user_data ran at first boot, the driver role rebooted it.
            boots, marker = watcher.booted[node]
            assert boots == 2 and marker.startswith("first boot "), watcher.booted
        activity = "\n".join(run.status()["loop"]["activity"])
        assert "preview demo/v100: create" in activity and "(+0.918)" in activity
        assert "terraform apply demo/v100: created" in activity
        assert "ansible bootstrapped" in activity
        assert "destroyed" in activity
    finally:
        run.stop()
    assert watcher.namespaces, "the SSH hosts lived in network namespaces"
    assert watcher.left_behind() == [], "namespaces left behind"
    left = [p for p in watcher.children if alive(p)]
    assert left == [], f"processes left behind: {left}"

"""Follow the sandbox's moto instances: one GPU target and one SSH test host per instance.

Terraform creates instances in moto; nothing real boots. This follower polls moto (by the
``managed-by`` tag) and, for every instance that appears:

* adds a node named after the instance's ``node`` tag to the synthetic DCGM exporter, with
  the GPU count and model of its instance type (the exporter rewrites Prometheus' file_sd,
  so the node's metrics appear within a scrape or two);
* when SSH hosts are enabled (root), boots a test host for it (``SshHosts``: the node
  image with systemd, in its own network namespace), with the fake NVIDIA stack for the
  same GPUs, its host name and its user_data (run once at first boot, as cloud-init does;
  ``first_boot.py``) and a fake ``kubeadm`` (``fake_kubeadm.py``) placed in its overlay
  before the first boot;
* writes ``{node: address}`` to the address file the service's ``addresses: {source: file}``
  resolver reads. The address is the namespace host's, never moto's 172.31.x.x.

When the instance is terminated, all three are removed again.
"""

from __future__ import annotations

import json
import logging
import os
import tempfile
import threading
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from autoscaler.catalog import Catalog, CatalogError
from autoscaler.clouds.base import MANAGED_TAG_KEY, MANAGED_TAG_VALUE
from autoscaler.sandbox.fakes import kubeadm as fake_kubeadm
from autoscaler.sandbox.fakes.dcgm_exporter import GPU_MODELS, ExporterControl
from autoscaler.sandbox.fakes.nvidia_smi import FakeGpu, node_files
from autoscaler.sandbox.hosts import first_boot
from autoscaler.sandbox.services.moto_server import running_instances

log = logging.getLogger(__name__)


@dataclass
class Followed:
    node: str
    instance_id: str
    instance_type: str
    gpus: int
    model: str
    mig: tuple[str, ...] = ()  # each GPU's MIG instances, as its pool's bootstrap lays them out
    address: str | None = None
    host: Any = None  # SshHosts of this node (one host each, so they come and go alone)


def write_json_atomic(path: Path, data: Any) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    fd, tmp = tempfile.mkstemp(dir=path.parent, prefix=f".{path.name}.")
    with os.fdopen(fd, "w") as fh:
        json.dump(data, fh, indent=1, sort_keys=True)
    os.replace(tmp, path)


class InstanceFollower:
    """``sync()`` once, or ``start()`` a thread that syncs every ``interval`` seconds."""

    def __init__(self, ec2: Any, exporter: ExporterControl, address_file: Path, catalog: Catalog,
                 *, hosts_dir: Path | None = None, routes: tuple[str, ...] = (),
                 on_change: Callable[[dict[str, Followed]], None] | None = None,
                 keep: Callable[[], None] | None = None, interval: float = 1.0,
                 mig_layouts: Mapping[tuple[str, str], tuple[str, ...]] | None = None):
        self.ec2, self.exporter, self.catalog = ec2, exporter, catalog
        # (team, pool) -> the MIG profiles of each GPU: a host of that pool boots with its
        # fake GPUs in MIG mode, as the pool's bootstrap leaves a real node.
        self.mig_layouts = dict(mig_layouts or {})
        self.address_file = Path(address_file)
        self.hosts_dir = hosts_dir
        self.routes = routes
        self.on_change = on_change
        self.keep = keep  # run before every pass (e.g. re-add a shared address someone removed)
        self.interval = interval
        self.followed: dict[str, Followed] = {}
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None
        self._lock = threading.Lock()
        write_json_atomic(self.address_file, {})

    # -- one pass -----------------------------------------------------------------------
    def sync(self) -> list[str]:
        """Bring exporter, hosts and address file in line with moto; returns what changed."""
        with self._lock:
            if self.keep is not None:
                self.keep()
            live = self._live()
            changes: list[str] = []
            for name, item in list(self.followed.items()):
                if live.get(name, {}).get("InstanceId") != item.instance_id:
                    self._remove(item)
                    changes.append(f"-{name}")
            for name, inst in sorted(live.items()):
                if name not in self.followed:
                    self._add(name, inst)
                    changes.append(f"+{name}")
            if changes:
                write_json_atomic(self.address_file, {n: f.address for n, f in self.followed.items()
                                                      if f.address})
                if self.on_change is not None:
                    self.on_change(dict(self.followed))
            return changes

    def _live(self) -> dict[str, dict[str, Any]]:
        out = {}
        for inst in running_instances(self.ec2, **{MANAGED_TAG_KEY: MANAGED_TAG_VALUE}):
            tags = {t["Key"]: t["Value"] for t in inst.get("Tags", [])}
            if tags.get("node"):
                out[tags["node"]] = inst
        return out

    def _gpus(self, instance_type: str) -> tuple[int, str]:
        try:
            itype = self.catalog.get("aws", instance_type)
        except CatalogError:
            return 1, "V100"
        return itype.gpus, itype.gpu_model if itype.gpu_model in GPU_MODELS else "V100"

    def _add(self, name: str, inst: dict[str, Any]) -> None:
        gpus, model = self._gpus(inst["InstanceType"])
        tags = {t.get("Key"): t.get("Value") for t in inst.get("Tags", [])}
        mig = self.mig_layouts.get((tags.get("team"), tags.get("pool")), ())
        item = Followed(name, inst["InstanceId"], inst["InstanceType"], gpus, model, mig)
        self.followed[name] = item
        self.exporter.call("add", node=name, gpus=gpus, model=model)
        if self.hosts_dir is not None:
            try:
                item.host, item.address = self._host(item)
            except Exception:
                log.exception("sandbox: no SSH host for %s", name)
        log.info("sandbox: following %s (%s %s, %d x %s) at %s", name, item.instance_id,
                 item.instance_type, gpus, model, item.address or "no address")

    def _host(self, item: Followed) -> tuple[Any, str]:
        from autoscaler.sandbox.hosts.ssh_hosts import NodeFile, SshHosts

        if self.hosts_dir is None:
            raise RuntimeError("SSH hosts are disabled")
        gpu = FakeGpu(name=GPU_MODELS[item.model][0], memory_mib=GPU_MODELS[item.model][1],
                      mig=item.mig)
        files = [*node_files([gpu] * item.gpus), NodeFile("/etc/hostname", f"{item.node}\n"),
                 *fake_kubeadm.node_files(),  # what the image would hold for a Kubernetes join
                 *first_boot.node_files(first_boot.user_data_of(self.ec2, item.instance_id))]
        hosts = SshHosts([item.node], self.hosts_dir, routes=self.routes,
                         files={item.node: files}).start()
        return hosts, hosts.address_of(item.node)

    def _remove(self, item: Followed) -> None:
        self.followed.pop(item.node, None)
        try:
            self.exporter.call("remove", node=item.node)
        except OSError:
            log.warning("sandbox: exporter did not answer while removing %s", item.node)
        if item.host is not None:
            item.host.stop()
        log.info("sandbox: %s (%s) is gone; target and host removed", item.node, item.instance_id)

    # -- background thread ----------------------------------------------------------------
    def start(self) -> InstanceFollower:
        self._thread = threading.Thread(target=self._run, name="instance-follower", daemon=True)
        self._thread.start()
        return self

    def _run(self) -> None:
        while not self._stop.wait(self.interval):
            try:
                self.sync()
            except Exception:  # moto restarting, a namespace hiccup: try again next round
                log.exception("sandbox: following instances failed")

    def stop(self) -> None:
        """Stop following and remove every host (their namespaces) this follower made."""
        self._stop.set()
        if self._thread is not None:
            self._thread.join(timeout=30)
        with self._lock:
            for item in list(self.followed.values()):
                if item.host is not None:
                    item.host.stop()
                    item.host = None

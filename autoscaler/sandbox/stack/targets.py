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
* when the instance was launched from a baked image (an image tagged with a bootstrap
  hash), boots its host with that image's layer, ``<images_dir>/<hash>``, on the node image
  (``baked_images.py``; a missing layer is logged and the node boots the plain image);
* writes ``{node: address}`` to the address file the service's ``addresses: {source: file}``
  resolver reads. The address is the namespace host's, never moto's 172.31.x.x.

When the instance is stopped (StopInstances: Terraform's ``aws_ec2_instance_state`` with
``state = "stopped"``, a warm pool's node), it stays followed as EC2 keeps it: its target
goes (a stopped node has no metrics) and its host's container is shut down, but the host's
overlay (the EBS volume) and namespace (the private IP) stay, and so does its line in the
address file. Started again, the host boots from the same overlay at the same address (its
user_data does not run again: ``first_boot.py``'s marker is on that disk) and the target
comes back.

When the instance is terminated, all three are removed again. A bake's *builder* (tag
``gpu-autoscaler/role: builder``) leaves something behind first: for each image moto holds of
it (tag ``gpu-autoscaler/builder: <instance id>``) whose hash has no layer yet, what its host
wrote over the node image, less the instance's own files, becomes that hash's layer. Real
AWS snapshots the disk at CreateImage; here the copy is taken when the builder goes, which
gives the same disk, as the bake runs nothing on the builder between the image and the destroy.
"""

from __future__ import annotations

import json
import logging
import os
import tempfile
import threading
from collections.abc import Callable, Mapping
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from botocore.exceptions import BotoCoreError, ClientError

from autoscaler.actuators.terraform.bake import ROLE_TAG
from autoscaler.catalog import Catalog, CatalogError
from autoscaler.clouds.base import MANAGED_TAG_KEY, MANAGED_TAG_VALUE
from autoscaler.sandbox.fakes import kubeadm as fake_kubeadm
from autoscaler.sandbox.fakes.dcgm_exporter import GPU_MODELS, ExporterControl
from autoscaler.sandbox.fakes.nvidia_smi import FakeGpu, node_files
from autoscaler.sandbox.hosts import first_boot
from autoscaler.sandbox.services.moto_server import instances
from autoscaler.sandbox.stack import baked_images

log = logging.getLogger(__name__)
RUNNING = ("pending", "running")  # followed with a target and a booted host
STOPPED = ("stopping", "stopped")  # followed with the host's disk and address only


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
    image_id: str = ""  # the AMI it was launched from
    role: str = ""  # "builder" for a bake's builder instance
    layer: Path | None = None  # the baked image's layer its host boots with
    placed: tuple[str, ...] = ()  # node paths the sandbox placed in its host (not an image's)
    stopped: bool = False  # stopped in moto: no target, its host powered off (disk kept)


def state_of(inst: Mapping[str, Any]) -> str:
    return str((inst.get("State") or {}).get("Name", ""))


def write_json_atomic(path: Path, data: Any) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    fd, tmp = tempfile.mkstemp(dir=path.parent, prefix=f".{path.name}.")
    with os.fdopen(fd, "w") as fh:
        json.dump(data, fh, indent=1, sort_keys=True)
    os.replace(tmp, path)


class InstanceFollower:
    """``sync()`` once, or ``start()`` a thread that syncs every ``interval`` seconds."""

    def __init__(self, ec2: Any, exporter: ExporterControl, address_file: Path, catalog: Catalog,
                 *, hosts_dir: Path | None = None, images_dir: Path | None = None,
                 routes: tuple[str, ...] = (),
                 on_change: Callable[[dict[str, Followed]], None] | None = None,
                 keep: Callable[[], None] | None = None, interval: float = 1.0,
                 mig_layouts: Mapping[tuple[str, str], tuple[str, ...]] | None = None):
        self.ec2, self.exporter, self.catalog = ec2, exporter, catalog
        # (team, pool) -> the MIG profiles of each GPU: a host of that pool boots with its
        # fake GPUs in MIG mode, as the pool's bootstrap leaves a real node.
        self.mig_layouts = dict(mig_layouts or {})
        self.address_file = Path(address_file)
        self.hosts_dir = hosts_dir
        # Baked images' layers, by bootstrap hash (baked_images.py); only with hosts.
        self.images_dir = images_dir if images_dir is not None or hosts_dir is None \
            else Path(hosts_dir).parent / "baked-images"
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
                inst = live.get(name, {})
                if inst.get("InstanceId") != item.instance_id:
                    self._remove(item)
                    changes.append(f"-{name}")
                elif state_of(inst) in STOPPED and not item.stopped:
                    self._power_off(item)
                    changes.append(f"~{name} stopped")
                elif state_of(inst) in RUNNING and item.stopped:
                    self._power_on(item)
                    changes.append(f"~{name} started")
            for name, inst in sorted(live.items()):
                if name not in self.followed and state_of(inst) in RUNNING:
                    self._add(name, inst)
                    changes.append(f"+{name}")
            if changes:
                write_json_atomic(self.address_file, {n: f.address for n, f in self.followed.items()
                                                      if f.address})
                if self.on_change is not None:
                    self.on_change(dict(self.followed))
            return changes

    def _live(self) -> dict[str, dict[str, Any]]:
        """Each node's instance; a running one wins over a stopped one of the same name
        (the stopped one is then no longer followed: a node name has one host)."""
        out: dict[str, dict[str, Any]] = {}
        found = instances(self.ec2, (*RUNNING, *STOPPED), **{MANAGED_TAG_KEY: MANAGED_TAG_VALUE})
        for inst in found:
            node = {t["Key"]: t["Value"] for t in inst.get("Tags", [])}.get("node")
            if node and (node not in out or state_of(inst) in RUNNING):
                out[node] = inst
        return out

    def _gpus(self, instance_type: str) -> tuple[int, str]:
        try:
            itype = self.catalog.get("aws", instance_type)
        except CatalogError:
            return 1, "V100"
        return itype.gpus, itype.gpu_model if itype.gpu_model in GPU_MODELS else "V100"

    def _add(self, name: str, inst: dict[str, Any]) -> None:
        gpus, model = self._gpus(inst["InstanceType"])
        tags = {str(t.get("Key")): str(t.get("Value")) for t in inst.get("Tags", [])}
        mig = self.mig_layouts.get((tags.get("team", ""), tags.get("pool", "")), ())
        item = Followed(name, inst["InstanceId"], inst["InstanceType"], gpus, model, mig,
                        image_id=inst.get("ImageId") or "", role=tags.get(ROLE_TAG) or "")
        self.followed[name] = item
        self.exporter.call("add", node=name, gpus=gpus, model=model)
        if self.hosts_dir is not None:
            try:
                item.layer = self._layer(item)
                item.host, item.address = self._host(item)
                item.placed = item.host.placed(name)
            except Exception:
                log.exception("sandbox: no SSH host for %s", name)
        first = item.host.hosts[name].boot_seconds if item.host is not None else None
        log.info("sandbox: following %s (%s %s, %d x %s) at %s%s", name, item.instance_id,
                 item.instance_type, gpus, model, item.address or "no address",
                 f", sshd answered {first:.1f} s after its first boot began" if first else "")

    def _power_off(self, item: Followed) -> None:
        """A stopped instance: no metrics and no container, but EC2 keeps its EBS volume and
        private IP, so the host's overlay, namespace and address stay for a start."""
        item.stopped = True
        self._remove_target(item)
        took = ""
        if item.host is not None:
            try:
                took = f" in {item.host.power_off(item.node):.1f} s"
            except Exception:
                log.exception("sandbox: %s: its host did not power off", item.node)
        log.info("sandbox: %s (%s) is stopped in moto: target removed, host powered off%s; "
                 "its overlay and address %s are kept until it is started or terminated",
                 item.node, item.instance_id, took, item.address or "(none)")

    def _power_on(self, item: Followed) -> None:
        """Started again: the same disk boots at the same address, then metrics return."""
        item.stopped = False  # a failed boot is not retried every pass: it is logged
        took = ""
        if item.host is not None:
            try:
                first = item.host.hosts[item.node].boot_seconds or 0.0
                took = f"; sshd answered {item.host.power_on(item.node):.1f} s after its " \
                       f"boot began (first boot: {first:.1f} s)"
            except Exception:
                log.exception("sandbox: %s: its host did not boot again", item.node)
        self.exporter.call("add", node=item.node, gpus=item.gpus, model=item.model)
        log.info("sandbox: %s (%s) is started again in moto: host booted from its kept overlay "
                 "at %s%s; target back", item.node, item.instance_id, item.address or "(none)",
                 took)

    def _layer(self, item: Followed) -> Path | None:
        """The layer of the baked image the instance was launched from (None: plain image)."""
        try:
            hash_ = baked_images.hash_of_image(self.ec2, item.image_id)
        except (BotoCoreError, ClientError) as exc:  # deregistered meanwhile
            log.warning("sandbox: image %s of %s not found (%s); it boots the plain node image",
                        item.image_id, item.node, exc)
            return None
        if hash_ is None or self.images_dir is None:
            return None
        layer = baked_images.layer_path(self.images_dir, hash_)
        if not layer.is_dir():
            log.warning("sandbox: no layer for image %s (bootstrap hash %s) in %s: %s boots the "
                        "plain node image", item.image_id, hash_, self.images_dir, item.node)
            return None
        return layer

    def _capture(self, item: Followed) -> None:
        """A gone builder's images: its host's upper layer becomes each new hash's layer."""
        if item.host is None or self.images_dir is None:
            return
        upper = item.host.hosts[item.node].upper
        for hash_, image_ids in baked_images.hashes_of_builder(self.ec2, item.instance_id).items():
            if baked_images.layer_path(self.images_dir, hash_).is_dir():
                continue
            layer = baked_images.capture(upper, self.images_dir, hash_, item.placed)
            log.info("sandbox: builder %s (%s) captured as the layer of image %s (bootstrap hash "
                     "%s): %d files in %s", item.node, item.instance_id, ", ".join(image_ids),
                     hash_, baked_images.files_in(layer), layer)

    def _host(self, item: Followed) -> tuple[Any, str]:
        from autoscaler.sandbox.hosts.overlay import NodeFile
        from autoscaler.sandbox.hosts.ssh_hosts import SshHosts

        if self.hosts_dir is None:
            raise RuntimeError("SSH hosts are disabled")
        gpu = FakeGpu(name=GPU_MODELS[item.model][0], memory_mib=GPU_MODELS[item.model][1],
                      mig=item.mig)
        files = [*node_files([gpu] * item.gpus), NodeFile("/etc/hostname", f"{item.node}\n"),
                 *fake_kubeadm.node_files(),  # what the image would hold for a Kubernetes join
                 *first_boot.node_files(first_boot.user_data_of(self.ec2, item.instance_id))]
        hosts = SshHosts([item.node], self.hosts_dir, routes=self.routes, files={item.node: files},
                         layers={item.node: [item.layer]} if item.layer else None).start()
        return hosts, hosts.address_of(item.node)

    def _remove_target(self, item: Followed) -> None:
        try:
            self.exporter.call("remove", node=item.node)
        except OSError:
            log.warning("sandbox: exporter did not answer while removing %s", item.node)

    def _remove(self, item: Followed) -> None:
        self._remove_target(item)  # again for a stopped one: the exporter's remove is idempotent
        try:
            if item.role == "builder":
                try:
                    self._capture(item)
                except Exception:
                    log.exception("sandbox: builder %s: its image's layer was not captured",
                                  item.node)
            if item.host is not None:
                item.host.stop()
        finally:
            # Forgotten last: a node no longer followed has its layer captured and its host
            # gone (a test that waited for the first saw no layer yet under load).
            self.followed.pop(item.node, None)
        log.info("sandbox: %s (%s) is gone%s; target and host removed", item.node,
                 item.instance_id, " (it was stopped)" if item.stopped else "")

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
        """Stop following and remove every host (their namespaces) this follower made,
        the stopped instances' powered-off hosts too."""
        self._stop.set()
        if self._thread is not None:
            self._thread.join(timeout=30)
        with self._lock:
            items = [item for item in self.followed.values() if item.host is not None]
            # Side by side: each host is an SshHosts of its own, and a running one may take
            # its whole teardown deadline to power off.
            with ThreadPoolExecutor(max_workers=max(1, len(items))) as pool:
                for item, _ in zip(items, pool.map(lambda i: i.host.stop(), items), strict=True):
                    item.host = None

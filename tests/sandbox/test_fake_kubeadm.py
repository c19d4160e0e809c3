"""The sandbox's fake kubeadm: the role's real join configuration in, a Node in the fake
API server out (labels, taints, the GPUs nvidia-smi lists), idempotent on a rerun."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path
from typing import Any

import jinja2

from autoscaler.actuators.ansible.settings import DEFAULT_PLAYBOOK
from autoscaler.sandbox.fakes import kubeadm as fake_kubeadm
from autoscaler.sandbox.fakes.kube import FakeKube
from autoscaler.sandbox.fakes.nvidia_smi import LOADED_FLAG, FakeGpu, script

TEMPLATE = DEFAULT_PLAYBOOK.parent / "roles" / "cluster_join" / "templates" / "kubeadm-join.yaml.j2"


def render(endpoint: str) -> str:
    env = jinja2.Environment(undefined=jinja2.StrictUndefined)
    env.filters["to_json"] = json.dumps
    return env.from_string(TEMPLATE.read_text()).render(
        cluster_join_k8s_api_endpoint=endpoint, cluster_join_k8s_token="abcdef.0123456789abcdef",
        cluster_join_k8s_ca_cert_hash="sha256:" + "0" * 64, cluster_join_node_name="vision-gpu-1",
        cluster_join_k8s_node_labels={"gpu-autoscaler/team": "vision", "tier": "train",
                                      "node.kubernetes.io/instance-type": "p3.8xlarge"},
        cluster_join_taints=[{"key": "dedicated", "value": "ml", "effect": "NoSchedule"}])


MIG_TEMPLATE = DEFAULT_PLAYBOOK.parent / "roles" / "gpu_sharing" / "templates" / "mig-config.yaml.j2"


def join(tmp_path: Path, gpus: int, mig_profiles: list[str] | None = None,
         device_plugin: str | None = None) -> Any:
    """Run the fake kubeadm twice (the second finds the Node: 409, still fine); the Node."""
    bin_dir = tmp_path / "bin"
    bin_dir.mkdir()
    kubeadm = bin_dir / "kubeadm"
    kubeadm.write_text(fake_kubeadm.node_files()[0].content)
    # nvidia-smi with its driver "loaded" (the flag path is the node's; rewritten here)
    smi = script([FakeGpu()] * gpus).replace(LOADED_FLAG, str(tmp_path / "loaded"))
    (tmp_path / "loaded").touch()
    (bin_dir / "nvidia-smi").write_text(smi)
    for f in bin_dir.iterdir():
        f.chmod(0o755)
    env = {**os.environ, "PATH": f"{bin_dir}:{os.environ['PATH']}",
           "FAKE_KUBEADM_KUBELET_CONF": str(tmp_path / "kubelet.conf"),
           "FAKE_KUBEADM_MIG_CONFIG": str(tmp_path / "mig.yaml"),
           "FAKE_KUBEADM_DEVICE_PLUGIN_CONFIG": str(tmp_path / "plugin.yaml")}
    if device_plugin:
        (tmp_path / "plugin.yaml").write_text(device_plugin)
    if mig_profiles:
        (tmp_path / "mig.yaml").write_text(jinja2.Template(MIG_TEMPLATE.read_text()).render(
            gpu_sharing_mig_profiles=mig_profiles))
    with FakeKube() as kube:
        kube.join_token = "abcdef.0123456789abcdef"  # the token render() puts in the config
        config = tmp_path / "join.yaml"
        config.write_text(render(kube.url.removeprefix("http://")))
        for _ in range(2):
            done = subprocess.run([sys.executable, str(kubeadm), "join", "--config", str(config)],
                                  env=env, capture_output=True, text=True, timeout=60)
            assert done.returncode == 0, done.stderr
        assert f"{gpus} GPUs" in done.stdout and (tmp_path / "kubelet.conf").is_file()
        return kube.core_v1().read_node("vision-gpu-1")


def test_join_posts_the_node_with_labels_taints_and_gpus(tmp_path: Path) -> None:
    node = join(tmp_path, 4)
    assert node.metadata.labels["tier"] == "train"
    assert node.metadata.labels["node.kubernetes.io/instance-type"] == "p3.8xlarge"
    assert [(t.key, t.value, t.effect) for t in node.spec.taints] == [("dedicated", "ml", "NoSchedule")]
    assert node.status.allocatable["nvidia.com/gpu"] == "4"


def test_a_mig_layout_is_advertised_as_slices_per_profile(tmp_path: Path) -> None:
    node = join(tmp_path, 8, ["3g.40gb", "3g.40gb", "1g.10gb"])
    gpu = {k: v for k, v in node.status.allocatable.items() if k.startswith("nvidia.com/")}
    assert gpu == {"nvidia.com/mig-3g.40gb": "16", "nvidia.com/mig-1g.10gb": "8"}


def test_join_fails_loudly_when_the_api_server_is_away(tmp_path: Path) -> None:
    kubeadm = tmp_path / "kubeadm"
    kubeadm.write_text(fake_kubeadm.node_files()[0].content)
    config = tmp_path / "join.yaml"
    with FakeKube() as kube:
        address = kube.url.removeprefix("http://")
    config.write_text(render(address))  # the server is stopped: nothing listens there
    done = subprocess.run([sys.executable, str(kubeadm), "join", "--config", str(config)],
                          env={**os.environ, "FAKE_KUBEADM_KUBELET_CONF": str(tmp_path / "k.conf")},
                          capture_output=True, text=True, timeout=60)
    assert done.returncode == 1 and "cannot reach the API server" in done.stderr
    assert not (tmp_path / "k.conf").exists()


def test_join_with_the_wrong_token_is_refused(tmp_path: Path) -> None:
    kubeadm = tmp_path / "kubeadm"
    kubeadm.write_text(fake_kubeadm.node_files()[0].content)
    config = tmp_path / "join.yaml"
    with FakeKube() as kube:
        kube.join_token = "zzzzzz.0123456789abcdef"
        config.write_text(render(kube.url.removeprefix("http://")))
        done = subprocess.run([sys.executable, str(kubeadm), "join", "--config", str(config)],
                              env={**os.environ, "FAKE_KUBEADM_KUBELET_CONF": str(tmp_path / "k.conf")},
                              capture_output=True, text=True, timeout=60)
        assert "vision-gpu-1" not in kube.nodes
    assert done.returncode == 1 and "answered 401" in done.stderr


def test_time_slicing_is_advertised_as_shared_replicas(tmp_path: Path) -> None:
    # What the gpu_sharing role's time_slicing.yml writes (to_nice_yaml of its dict).
    plugin = ("sharing:\n    timeSlicing:\n        renameByDefault: true\n        resources:\n"
              "        -   name: nvidia.com/gpu\n            replicas: '4'\nversion: v1\n")
    node = join(tmp_path, 4, device_plugin=plugin)
    gpu = {k: v for k, v in node.status.allocatable.items() if k.startswith("nvidia.com/")}
    assert gpu == {"nvidia.com/gpu.shared": "16"}
    assert node.metadata.labels["nvidia.com/gpu.replicas"] == "4"

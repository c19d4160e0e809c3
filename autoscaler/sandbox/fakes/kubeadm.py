"""A fake ``kubeadm`` for sandbox nodes: ``kubeadm join`` registers the Node with the
project's fake API server, as kubelet would once kubeadm started it.

No kubelet or real API server runs here (RECIPES.md), so the sandbox places this script in
each node's overlay before its first boot (next to the fake nvidia-smi), and the
``cluster_join`` role's Kubernetes path runs unchanged: it writes the JoinConfiguration
from ``kubeadm-join.yaml.j2`` and runs ``kubeadm join --config FILE``. The script reads
that file (the role's template, so its layout is known: ``apiServerEndpoint``, ``token``,
``name``, ``node-labels`` as ``k=v,...`` and ``taints`` as JSON), counts the GPUs
``nvidia-smi -L`` lists, and POSTs a Ready Node with those labels and taints and, as the
device plugin would advertise them (folded in here), ``nvidia.com/gpu`` or, when
``gpu_sharing`` recorded a MIG layout (``/etc/nvidia-mig/config.yaml``), one
``nvidia.com/mig-<profile>`` per profile, or with a time-slicing configuration of the
device plugin, ``nvidia.com/gpu.shared`` (replicas x GPUs, labelled
``nvidia.com/gpu.replicas`` as GPU feature discovery does), over HTTP with the bootstrap token as bearer.
On success (or when the Node exists: a rerun) it writes ``/etc/kubernetes/kubelet.conf``,
which the role's ``creates:`` keys on. Everything it
reads is data: nothing is run through a shell.
"""

from __future__ import annotations

from autoscaler.sandbox.hosts.overlay import NodeFile

INSTALL_PATH = "/usr/local/bin/kubeadm"

_SCRIPT = r'''#!/usr/bin/python3
"""Fake kubeadm placed by gpu-autoscaler's sandbox: `join --config FILE` posts the Node."""
import json, os, re, subprocess, sys, urllib.error, urllib.request

def fail(msg):
    print("kubeadm (sandbox): " + msg, file=sys.stderr)
    sys.exit(1)

args = sys.argv[1:]
if args[:1] != ["join"] or "--config" not in args:
    fail("only `kubeadm join --config FILE` is supported in the sandbox")
text = open(args[args.index("--config") + 1]).read()

def field(key):
    m = re.search(r"(?m)^\s*" + re.escape(key) + r":\s*(.*)$", text)
    if not m:
        fail("the join configuration has no " + key)
    value = m.group(1).strip()
    return json.loads(value) if value[:1] in "\"[{" else value

endpoint, token, name = field("apiServerEndpoint"), field("token"), field("name")
labels = dict(kv.split("=", 1) for kv in field("node-labels").split(",") if "=" in kv)
taints = field("taints")
try:
    listed = subprocess.run(["nvidia-smi", "-L"], capture_output=True, text=True, timeout=30)
    gpus = sum(1 for line in listed.stdout.splitlines() if line.startswith("GPU "))
except OSError:
    gpus = 0
# The device plugin's part: MIG slices per the layout gpu_sharing recorded (the "mixed"
# strategy: one resource per profile), else whole GPUs.
try:
    layout = open(os.environ.get("FAKE_KUBEADM_MIG_CONFIG", "/etc/nvidia-mig/config.yaml")).read()
except OSError:
    layout = ""
slices = {m.group(1): int(m.group(2))
          for m in re.finditer(r'(?m)^\s*"([0-9a-z.+]+)":\s*([0-9]+)\s*$', layout)}
# Time-slicing: the device plugin's configuration gives the replicas per GPU, advertised
# as nvidia.com/gpu.shared with renameByDefault; GPU feature discovery labels the count.
try:
    plugin = open(os.environ.get("FAKE_KUBEADM_DEVICE_PLUGIN_CONFIG",
                                 "/etc/nvidia-device-plugin/config.yaml")).read()
except OSError:
    plugin = ""
replicas = re.search(r"(?m)^\s*replicas:\s*'?([0-9]+)'?\s*$", plugin)
resources = {"cpu": str(os.cpu_count() or 1), "memory": "32Gi", "pods": "110"}
if gpus and slices:
    resources.update({"nvidia.com/mig-" + p: str(n * gpus) for p, n in slices.items()})
elif gpus and replicas:
    shared = re.search(r"(?m)^\s*renameByDefault:\s*true\s*$", plugin)
    resources["nvidia.com/gpu.shared" if shared else "nvidia.com/gpu"] = str(gpus * int(replicas.group(1)))
    labels["nvidia.com/gpu.replicas"] = replicas.group(1)
elif gpus:
    resources["nvidia.com/gpu"] = str(gpus)
node = {
    "apiVersion": "v1", "kind": "Node",
    "metadata": {"name": name, "labels": {"kubernetes.io/hostname": name,
                                          "kubernetes.io/os": "linux", **labels}},
    "spec": {"taints": taints} if taints else {},
    "status": {"capacity": resources, "allocatable": resources,
               "conditions": [{"type": "Ready", "status": "True", "reason": "KubeletReady"}]},
}
req = urllib.request.Request("http://" + endpoint + "/api/v1/nodes", data=json.dumps(node).encode(),
                             method="POST", headers={"Content-Type": "application/json",
                                                     "Authorization": "Bearer " + token})
try:
    urllib.request.urlopen(req, timeout=30).close()
except urllib.error.HTTPError as exc:
    if exc.code != 409:
        fail("the API server answered %d to registering node %s" % (exc.code, name))
except OSError as exc:
    fail("cannot reach the API server at %s: %s" % (endpoint, exc))
conf = os.environ.get("FAKE_KUBEADM_KUBELET_CONF", "/etc/kubernetes/kubelet.conf")  # tests
os.makedirs(os.path.dirname(conf), exist_ok=True)
with open(conf, "w") as fh:
    fh.write("apiVersion: v1\nkind: Config\nclusters:\n- name: sandbox\n  cluster:\n"
             "    server: http://%s\n" % endpoint)
print("This node has joined the cluster (sandbox): Node %s, %d GPUs" % (name, gpus))
'''


def node_files() -> list[NodeFile]:
    """What a node's overlay needs for the Kubernetes join path."""
    return [NodeFile(INSTALL_PATH, _SCRIPT, 0o755)]

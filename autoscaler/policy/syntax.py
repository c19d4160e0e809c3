"""The closed syntax of every free string in a team policy.

A policy is written by a team, not by the operator, and its strings reach Ansible, Terraform,
Slurm, Kubernetes and cron. Each has a pattern here that admits what those systems accept
for it (usually a strict subset) and nothing else: no spaces, quotes, braces or '$'. This is
the first line of defence; the actuators pass values as data anyway (see
docs/operators/refusals.md).
"""

from __future__ import annotations

import re
from typing import Annotated, Literal

from pydantic import AfterValidator, Field, StringConstraints

# NVIDIA driver branches are three-digit numbers (535, 550, 570); the role pins "<branch>.*".
DriverBranch = Annotated[str, StringConstraints(pattern=r"^[1-9][0-9]{2}$")]
CudaVersion = Annotated[str, StringConstraints(pattern=r"^[1-9][0-9]?\.[0-9]{1,2}$")]
# Slurm separates partitions with ',' and fields with spaces and '='; names are kept to
# letters, digits, '_', '.', '-' (a subset of what slurm.conf's PartitionName accepts).
PartitionName = Annotated[str, StringConstraints(pattern=r"^[A-Za-z0-9_][A-Za-z0-9_.-]{0,63}$")]
# Slurm account, QOS and user names, as sacctmgr and passwd give them (a user may be
# "alice@corp" under SSSD); the same patterns check the names squeue reports.
SLURM_NAME = r"^[A-Za-z0-9_][A-Za-z0-9_.-]{0,63}$"
SLURM_USER = r"^[A-Za-z0-9_][A-Za-z0-9_.@-]{0,63}$"
SlurmName = Annotated[str, StringConstraints(pattern=SLURM_NAME)]
SlurmUser = Annotated[str, StringConstraints(pattern=SLURM_USER)]
MAX_SLURM_NAMES = 256
RegionName = Annotated[str, StringConstraints(pattern=r"^[a-z]{2}(-[a-z0-9]+){1,3}$")]
ZoneName = Annotated[str, StringConstraints(pattern=r"^[a-z]{2}(-[a-z0-9]+){1,4}$")]
TimeZoneName = Annotated[
    str, StringConstraints(pattern=r"^[A-Za-z][A-Za-z0-9_+-]{0,30}(/[A-Za-z0-9_+-]{1,30}){0,2}$")]
# Five cron fields of digits, names, '*', '/', ',' and '-' (checks.py counts the fields and
# makes sure the schedule fires).
CronText = Annotated[str, StringConstraints(pattern=r"^[0-9A-Za-z*/,\- ]{1,100}$")]
# What scancel --signal and kill accept by name; a job traps one of these to checkpoint.
Signal = Literal["USR1", "USR2", "TERM", "INT", "HUP", "QUIT", "ALRM", "CONT"]

# Kubernetes label syntax (k8s.io/apimachinery validation.IsQualifiedName / IsValidLabelValue).
_LABEL_NAME = r"[A-Za-z0-9]([-A-Za-z0-9_.]{0,61}[A-Za-z0-9])?"
_DNS_LABEL = r"[a-z0-9]([-a-z0-9]{0,61}[a-z0-9])?"
LABEL_KEY = re.compile(rf"^(?:(?P<prefix>{_DNS_LABEL}(\.{_DNS_LABEL})*)/)?{_LABEL_NAME}$")
LABEL_VALUE = re.compile(rf"^({_LABEL_NAME})?$")
# Set by the autoscaler itself (cluster_join role): a team must not move its nodes into
# another team's pool or claim GPUs it does not have.
RESERVED_PREFIXES = ("gpu-autoscaler",)
RESERVED_KEYS = ("nvidia.com/gpu.present",)
# Kubernetes' own prefixes: the kubelet refuses (or owns) node labels under them.
KUBERNETES_PREFIXES = ("kubernetes.io", "k8s.io")
MAX_LABELS = 64
# A Kubernetes taint "key=value:Effect" or "key:Effect": key as a label key, value as a label value.
TAINT_PATTERN = (rf"^({_DNS_LABEL}(\.{_DNS_LABEL})*/)?{_LABEL_NAME}(={_LABEL_NAME})?"
                 r":(NoSchedule|PreferNoSchedule|NoExecute)$")
Taint = Annotated[str, StringConstraints(pattern=TAINT_PATTERN, max_length=317)]


def _label_problem(key: str, value: str) -> str | None:
    match = LABEL_KEY.match(key)
    if match is None or len(key) > 253 + 1 + 63:
        return (f"label key {key!r} is not a Kubernetes label key ([prefix/]name: name up to "
                "63 letters, digits, '-', '_', '.'; prefix a DNS subdomain)")
    prefix = match.group("prefix") or ""
    if len(prefix) > 253:
        return f"label key {key!r}: the prefix is longer than 253 characters"
    if prefix in RESERVED_PREFIXES or key in RESERVED_KEYS:
        return f"label key {key!r} is reserved: the autoscaler sets it on every node it joins"
    if any(prefix == p or prefix.endswith("." + p) for p in KUBERNETES_PREFIXES):
        return f"label key {key!r} uses a prefix reserved for Kubernetes itself"
    if not isinstance(value, str) or not LABEL_VALUE.match(value):
        return (f"label {key!r}: value {value!r} is not a Kubernetes label value (empty, or up "
                "to 63 letters, digits, '-', '_', '.', starting and ending alphanumeric)")
    return None


def check_labels(labels: dict[str, str]) -> dict[str, str]:
    if len(labels) > MAX_LABELS:
        raise ValueError(f"at most {MAX_LABELS} labels")
    for key, value in labels.items():
        problem = _label_problem(key, value)
        if problem:
            raise ValueError(problem)
    return labels


Labels = Annotated[dict[str, str], AfterValidator(check_labels),
                   Field(description="Extra Kubernetes node labels (gpu-autoscaler/* are "
                         "reserved).")]

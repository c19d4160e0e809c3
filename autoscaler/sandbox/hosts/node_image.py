"""The sandbox's "baked AMI": a minimal Debian 12 tree every sandbox node boots.

Built once with ``mmdebstrap --variant=minbase`` (RECIPES.md, "Booted test hosts") into the
user's cache directory, under a name keyed by a hash of what goes into it (suite, variant,
package list and the build customisations below), so it is rebuilt only when that list
changes. Nodes never write to it: each boots it through its own overlay (``ssh_hosts``).

It holds what a GPU node image carries from the distribution: systemd, openssh-server,
python3 (for Ansible; with venv for the controller playbook), munge, slurmd and
slurm-client (the node runs ``scontrol`` when it joins), containerd (what
``bootstrap.prepull`` pulls into), kmod (``/etc/modprobe.d``) and the few tools the roles
call. Nothing can be installed in a node later: its network reaches 169.254.77.0/24 only.

``python -m autoscaler.sandbox.hosts.node_image`` builds it (``scripts/install.sh`` does) and
prints its path.
"""

from __future__ import annotations

import contextlib
import fcntl
import hashlib
import os
import shutil
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path

SUITE = "bookworm"
VARIANT = "minbase"
PACKAGES = (
    "systemd-sysv", "dbus", "openssh-server", "python3", "iproute2", "procps", "kmod",
    "munge", "slurmd", "slurm-client", "ca-certificates", "containerd",
    # The controller's virtual environment (playbooks/controller.yml): venv and ensurepip.
    "python3-venv",
)
# Run in the finished tree at build time ($1 is its root). mmdebstrap copies the building
# machine's hostname, hosts and resolv.conf in: replaced, so no node sees this machine's
# files (each node's /etc/hostname is placed by the sandbox, as cloud-init would). Each
# node gets its own SSH host key, so the image keeps none; its munge key would be shared
# by every node, so it goes too and munge/slurmd stay disabled until the roles configure
# and enable them (containerd too: only the pre-pull role starts it, so the nodes of other
# pools do not pay for it). Timers that reach for the network and units with nothing to do in a
# container are masked.
CUSTOMIZE = (
    'rm -f "$1"/etc/ssh/ssh_host_* "$1"/etc/munge/munge.key "$1"/etc/hostname',
    'printf "127.0.0.1 localhost\\n::1 localhost ip6-localhost ip6-loopback\\n" > "$1"/etc/hosts',
    ': > "$1"/etc/resolv.conf',
    'systemctl --root="$1" disable munge.service slurmd.service containerd.service',
    'for u in apt-daily.timer apt-daily-upgrade.timer e2scrub_all.timer fstrim.timer'
    ' e2scrub_reap.service systemd-timesyncd.service getty@tty1.service; do'
    ' ln -sf /dev/null "$1/etc/systemd/system/$u"; done',
    'echo "gpu-autoscaler sandbox node image" > "$1"/etc/gpu-autoscaler-image',
)
BUILD_TIMEOUT_S = 900.0
LOCK_WAIT_S = 1200.0
MIN_FREE_BYTES = 600 * 1024 * 1024  # the tree is ~300 MB; room for the build beside it


class NodeImageError(RuntimeError):
    pass


def image_key() -> str:
    """Hash of everything that shapes the image: a change means a new image."""
    text = "\n".join([SUITE, VARIANT, *PACKAGES, *CUSTOMIZE])
    return hashlib.sha256(text.encode()).hexdigest()[:16]


def cache_dir() -> Path:
    base = os.environ.get("XDG_CACHE_HOME") or str(Path.home() / ".cache")
    return Path(base) / "gpu-autoscaler" / "node-images"


def image_path() -> Path:
    return cache_dir() / f"debian-{SUITE}-{image_key()}"


def _ready(path: Path) -> bool:
    return (path / "etc" / "gpu-autoscaler-image").is_file() and (path / "usr" / "sbin" / "sshd").exists()


def check_requirements() -> None:
    """Root, systemd-nspawn and mmdebstrap: say which is missing, never work around it."""
    problems = []
    if os.geteuid() != 0:
        problems.append("sandbox nodes need root (network namespaces, systemd-nspawn)")
    if shutil.which("systemd-nspawn") is None:
        problems.append("systemd-nspawn is missing (apt-get install -y systemd-container)")
    if not _ready(image_path()) and shutil.which("mmdebstrap") is None:
        problems.append("mmdebstrap is missing to build the node image (apt-get install -y mmdebstrap)")
    if problems:
        raise NodeImageError("cannot boot sandbox nodes: " + "; ".join(problems))


@contextlib.contextmanager
def _build_lock(directory: Path) -> Iterator[None]:
    directory.mkdir(parents=True, exist_ok=True)
    with open(directory / ".build.lock", "a") as fh:
        deadline = time.monotonic() + LOCK_WAIT_S
        while True:
            try:
                fcntl.flock(fh, fcntl.LOCK_EX | fcntl.LOCK_NB)
                break
            except BlockingIOError:
                if time.monotonic() > deadline:
                    raise NodeImageError(f"another build of the node image held {directory} "
                                         f"for {LOCK_WAIT_S:.0f}s") from None
                time.sleep(1)
        try:
            yield
        finally:
            fcntl.flock(fh, fcntl.LOCK_UN)


def ensure_image(log: Path | None = None) -> Path:
    """The cached image, built first if missing (one build at a time, atomically renamed)."""
    path = image_path()
    if _ready(path):
        return path
    check_requirements()
    with _build_lock(path.parent):
        if _ready(path):  # built by someone else while we waited
            return path
        _build(path, log)
    return path


def _build(path: Path, log: Path | None) -> None:
    free = shutil.disk_usage(path.parent).free
    if free < MIN_FREE_BYTES:
        raise NodeImageError(f"the node image needs ~300 MB in {path.parent}; "
                             f"only {free // 2**20} MB free")
    tmp = path.with_name(path.name + ".building")
    shutil.rmtree(tmp, ignore_errors=True)
    argv = ["mmdebstrap", f"--variant={VARIANT}", "--include=" + ",".join(PACKAGES),
            *[f"--customize-hook={hook}" for hook in CUSTOMIZE], SUITE, str(tmp)]
    out = open(log, "ab") if log is not None else subprocess.DEVNULL  # noqa: SIM115
    try:
        proc = subprocess.run(argv, stdout=out, stderr=subprocess.STDOUT if log else subprocess.PIPE,
                              timeout=BUILD_TIMEOUT_S, check=False)
    finally:
        if log is not None:
            out.close()  # type: ignore[union-attr]
    if proc.returncode != 0 or not _ready(tmp):
        shutil.rmtree(tmp, ignore_errors=True)
        detail = (proc.stderr or b"").decode(errors="replace")[-2000:] if log is None else f"see {log}"
        raise NodeImageError(f"mmdebstrap failed ({proc.returncode}) building the node image: {detail}")
    tmp.rename(path)


def main() -> None:
    try:
        print(ensure_image())
    except NodeImageError as exc:
        sys.exit(f"error: {exc}")


if __name__ == "__main__":
    main()

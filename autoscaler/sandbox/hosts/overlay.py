"""A test host's upper layer, its disk: filled before the first boot, its journal rescued
before it goes.

Each host boots ``<image>:<layers>...:<upper>`` (``ssh_hosts.py``). What the sandbox places
(SSH identity, fake NVIDIA stack, user_data, a host name) is written into the upper layer
before the first boot, with directories given the modes of the layer below that has them:
an upper directory masks the lower one's, so a placed ``/root/.ssh`` must not leave ``/root``
world-readable. The upper layer is kept across reboots and a stop (a stopped instance keeps
its EBS volume) and removed with the host.
"""

from __future__ import annotations

import contextlib
import logging
import shutil
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path

log = logging.getLogger(__name__)
JOURNAL_DIR = "/var/log/journal"


class OverlayError(RuntimeError):
    pass


@dataclass(frozen=True)
class NodeFile:
    """A file the sandbox places in a node's overlay before it boots (absolute node path);
    with ``link`` a symbolic link whose target is ``content`` (e.g. enabling a unit)."""

    path: str
    content: str
    mode: int = 0o644
    link: bool = False


def prepare(upper: Path, lowers: Sequence[Path], files: Sequence[NodeFile]) -> tuple[str, ...]:
    """A fresh upper layer over ``lowers`` (topmost first) holding ``files``; returns their
    node paths."""
    shutil.rmtree(upper, ignore_errors=True)  # a fresh machine every start
    upper.mkdir(mode=0o755)
    for item in files:
        place(upper, lowers, item)
    # journald keeps every boot's journal when this directory exists, so a unit that
    # failed before a reboot can still be read after it (see keep_journal).
    make_parents(upper, lowers, Path(JOURNAL_DIR))
    return tuple(item.path for item in files)


def place(upper: Path, lowers: Sequence[Path], item: NodeFile) -> None:
    if not item.path.startswith("/") or ".." in item.path.split("/"):
        raise OverlayError(f"node file path must be absolute and plain: {item.path!r}")
    target = upper / item.path.lstrip("/")
    make_parents(upper, lowers, Path(item.path).parent)
    if item.link:
        target.symlink_to(item.content)
        return
    target.write_text(item.content)
    target.chmod(item.mode)


def make_parents(upper: Path, lowers: Sequence[Path], path: Path) -> None:
    """Directories in the upper layer mask the lower ones': give them the modes of the
    topmost lower layer that has them, else the image's (/root stays 0700, /etc 0755), or
    0755 for directories no lower layer has."""
    for part in [*reversed(path.parents[:-1]), path] if str(path) != "/" else []:
        rel = str(part).lstrip("/")
        made = upper / rel
        if made.is_dir():
            continue
        lower = next((d / rel for d in lowers if (d / rel).is_dir()), None)
        mode = lower.stat().st_mode & 0o7777 if lower is not None else 0o755
        made.mkdir()
        made.chmod(mode)


def keep_journal(name: str, directory: Path, upper: Path) -> None:
    """A unit failed to start in some boot of this host (the console says so): keep the
    host's journal beside its console log before its overlay goes, to read with
    ``journalctl -D DIR``. (That is how a fake driver unit's failure after a reboot under
    load was traced to hosts sharing one cgroup tree: hosts/cgroups.py.)"""
    try:
        failed = b"Failed to start" in (directory / "console.log").read_bytes()
    except OSError:
        return
    journal = upper / JOURNAL_DIR.lstrip("/")
    if failed and journal.is_dir():
        with contextlib.suppress(OSError, shutil.Error):
            shutil.copytree(journal, directory / "journal", dirs_exist_ok=True)
            log.warning("sandbox: a unit failed to start on %s; its journal is kept in %s",
                        name, directory / "journal")

"""Pinned SSH host keys: one known_hosts file per node, deleted when the node is gone.

ssh records a node's key at first contact (``StrictHostKeyChecking=accept-new``) under its
node name (``HostKeyAlias``) in that node's own file (``UserKnownHostsFile``, given per host
in the inventory), and refuses a node that later shows another key. One file per node, not
one for the fleet: node names are never reused, so a shared file would only grow (a line
per node ever launched, parsed by every connection), and rewriting it to drop a line would
race with the ssh of concurrent runs appending to it. Deleting the file of a TERMINATED node
races with nothing: no run connects to it any more.

The single file used before is still read, never written. The service's own
(``runs_dir/known_hosts``) is moved at start by :meth:`KnownHosts.keep_only`: the keys of
live nodes go to their own files and it is deleted, so no live node loses its pin on the
way. A file the operator named (``known_hosts_file``) may be shared: it is only read.
"""

from __future__ import annotations

import contextlib
import os
import re
import shlex
from collections.abc import Iterable
from pathlib import Path

from autoscaler.actuators.ansible.settings import AnsibleSettings

# Node names are host names (the fleet store makes them). They end up on ssh's command
# line and name a file here, so anything else (a space, a leading '-', a dot, a slash) is
# refused by the inventory, and never read or deleted in the directory.
NODE_NAME = re.compile(r"^[a-z0-9][a-z0-9-]{0,62}$")


class KnownHosts:
    def __init__(self, directory: Path, legacy: Path, *, legacy_ours: bool = True):
        self.dir = directory
        self.legacy = legacy
        self.legacy_ours = legacy_ours  # False: the operator's file, never changed

    @classmethod
    def of(cls, settings: AnsibleSettings) -> KnownHosts:
        return cls(settings.host_keys_dir(), settings.legacy_known_hosts(),
                   legacy_ours=settings.known_hosts_file is None)

    def file_of(self, node: str) -> Path:
        if not NODE_NAME.match(node):
            raise ValueError(f"node name {node!r} is not a host name")
        return self.dir / node

    def ssh_options(self, node: str) -> str:
        """The node's ssh options (for ``ansible_ssh_common_args``, which ssh, sftp and scp
        all get): its key looked up under its name in its own file, and in the old single
        file while one is left (read only: ssh writes new keys to the first file)."""
        files = [str(self.file_of(node).absolute())]
        if self.legacy.is_file():
            files.append(str(self.legacy.absolute()))
        return (f"-o HostKeyAlias={node} "
                f"-o {shlex.quote('UserKnownHostsFile=' + ' '.join(files))}")

    def prepare(self) -> None:
        self.dir.mkdir(mode=0o700, parents=True, exist_ok=True)

    def forget(self, names: Iterable[str]) -> None:
        """Delete the pinned keys of these nodes (they are gone)."""
        for name in names:
            if NODE_NAME.match(name):
                (self.dir / name).unlink(missing_ok=True)

    def keep_only(self, live: Iterable[str]) -> list[str]:
        """At start: delete the files of nodes not in ``live`` (those that ended while the
        service was down, or whose delete failed), after moving live nodes' keys out of the
        service's old single file, which is then deleted. Returns the names forgotten."""
        keep = set(live)
        self.prepare()
        self._migrate(keep)
        gone = sorted(p.name for p in self.dir.iterdir()
                      if NODE_NAME.match(p.name) and p.name not in keep)
        self.forget(gone)
        return gone

    def _migrate(self, live: set[str]) -> None:
        if not self.legacy_ours or not self.legacy.is_file():
            return
        lines: dict[str, list[str]] = {}
        with open(self.legacy, errors="replace") as fh:
            for line in fh:
                fields = line.split()
                if len(fields) < 3 or fields[0].startswith(("#", "@")):
                    continue  # markers (@revoked, @cert-authority) were never written here
                for name in fields[0].split(","):
                    if name in live and NODE_NAME.match(name):
                        lines.setdefault(name, []).append(" ".join([name, *fields[1:3]]))
        for name, pins in lines.items():
            # "x": a file ssh made meanwhile holds a key it checked against the old file.
            with contextlib.suppress(FileExistsError), open(self.dir / name, "x") as out:
                out.write("\n".join(pins) + "\n")
        os.unlink(self.legacy)

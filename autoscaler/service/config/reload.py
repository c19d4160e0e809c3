"""Hot reload of the policy directory, checked at the start of every tick (and at once on
SIGHUP, ``systemctl reload``: :meth:`PolicyReloader.reread`).

A file is re-parsed only when its content hash changes (stat first, so an unchanged
directory costs a few ``stat`` calls). A file that breaks keeps its team on the last good
policy, and the error is reported (log, ``/status``, the ``policy_errors`` metric) until
the file is fixed. A file that is removed removes its team: the engine then keeps that
team's nodes unless ``engine.drain_removed_pools`` is on (never by accident).
"""

from __future__ import annotations

import hashlib
import logging
from dataclasses import dataclass, field
from pathlib import Path

from autoscaler.catalog import Catalog
from autoscaler.policy.errors import PolicyError
from autoscaler.policy.loader import load_file, name_clash, policy_files
from autoscaler.policy.locate import format_path
from autoscaler.policy.models import TeamPolicy
from autoscaler.policy.untrusted import MAX_BYTES
from autoscaler.service.config.warm_pools import warm_pool_errors

log = logging.getLogger(__name__)


@dataclass
class _FileState:
    stat: tuple[int, int]  # (mtime_ns, size): cheap change detection
    digest: str
    team: str | None  # team of the last good parse of this file
    policy: TeamPolicy | None  # last good policy (kept while the file is broken)
    errors: list[PolicyError] = field(default_factory=list)


@dataclass(frozen=True)
class ReloadResult:
    changed: bool
    added: list[str]
    removed: list[str]
    updated: list[str]
    errors: list[PolicyError]


class PolicyReloader:
    """Current policies of ``directory``; call :meth:`refresh` once per tick."""

    def __init__(self, directory: Path, catalog: Catalog):
        self.directory = Path(directory)
        self.catalog = catalog
        self._files: dict[Path, _FileState] = {}
        self._dir_error: PolicyError | None = None
        self._duplicates: list[PolicyError] = []
        self._policies: dict[str, TeamPolicy] = {}
        self.generation = 0  # bumped on every change of the effective policies
        self._reread = False

    @property
    def policies(self) -> dict[str, TeamPolicy]:
        return dict(self._policies)

    def errors(self) -> list[PolicyError]:
        found = [e for state in self._files.values() for e in state.errors] + self._duplicates
        if self._dir_error is not None:
            found.append(self._dir_error)
        return sorted(found)

    def reread(self) -> None:
        """At the next refresh, hash every file, not only those whose (mtime, size) changed:
        a file copied over with its old mtime and the same size is seen too."""
        self._reread = True

    def refresh(self) -> ReloadResult:
        before = self._policies
        if self._reread:
            self._reread = False
            for state in self._files.values():
                state.stat = (-1, -1)
        paths = self._list()
        for gone in set(self._files) - set(paths):
            log.info("policy file %s removed", gone)
            del self._files[gone]
        for path in paths:
            self._check(path)
        self._policies = self._effective()
        added = sorted(set(self._policies) - set(before))
        removed = sorted(set(before) - set(self._policies))
        updated = sorted(t for t in set(before) & set(self._policies)
                         if before[t] != self._policies[t])
        changed = bool(added or removed or updated)
        if changed:
            self.generation += 1
            log.info("policies reloaded: added %s, removed %s, updated %s",
                     added or "-", removed or "-", updated or "-")
        return ReloadResult(changed, added, removed, updated, self.errors())

    def _list(self) -> list[Path]:
        if not self.directory.is_dir():
            if self._dir_error is None:
                log.error("policy directory %s does not exist; keeping the last good policies",
                          self.directory)
            self._dir_error = PolicyError(str(self.directory), 1, 1, "",
                                          "policy directory does not exist")
            return list(self._files)  # keep everything as it was
        self._dir_error = None
        return policy_files(self.directory)

    def _check(self, path: Path) -> None:
        try:
            st = path.stat()
            stat = (st.st_mtime_ns, st.st_size)
            prior = self._files.get(path)
            if prior is not None and prior.stat == stat:
                return
            # An oversized file is refused by the loader without being read; so here.
            digest = (f"oversized:{stat}" if st.st_size > MAX_BYTES
                      else hashlib.sha256(path.read_bytes()).hexdigest())
        except OSError:
            return  # vanished between listing and reading: the next tick sees it gone
        if prior is not None and prior.digest == digest:
            prior.stat = stat
            return
        try:
            policy, errors = load_file(path, self.catalog)
        except Exception as exc:  # a loader bug must cost one team its update, not every tick
            log.exception("cannot load %s; the team keeps its last good policy", path)
            policy, errors = None, [PolicyError(str(path), 1, 1, "", "this file could not be "
                                                f"read ({type(exc).__name__}); see the service log")]
        if policy is not None and not errors:
            errors = warm_pool_errors(str(path), policy)
        if errors:
            for err in errors:
                log.error("policy error (team keeps its last good policy): %s", err)
            self._files[path] = _FileState(stat, digest, prior.team if prior else None,
                                           prior.policy if prior else None, errors)
            return
        if policy is not None:
            self._files[path] = _FileState(stat, digest, policy.team, policy)

    def _effective(self) -> dict[str, TeamPolicy]:
        """One policy per team; a team claimed by two files keeps the first file's."""
        out: dict[str, TeamPolicy] = {}
        owner: dict[str, Path] = {}
        duplicates: list[PolicyError] = []
        for path in sorted(self._files):
            policy = self._files[path].policy
            if policy is None:
                continue
            if policy.team in owner:
                duplicates.append(PolicyError(
                    str(path), 1, 1, "team",
                    f"team '{policy.team}' is already defined in {owner[policy.team]}"))
                continue
            clash = name_clash(policy, out)
            if clash:
                duplicates.append(PolicyError(str(path), 1, 1, format_path(clash[0]),
                                              f"{clash[1]} (defined in {owner[clash[2]]})"))
                continue
            owner[policy.team] = path
            out[policy.team] = policy
        for dup in set(duplicates) - set(self._duplicates):
            log.error("policy error: %s", dup)
        self._duplicates = duplicates
        return out

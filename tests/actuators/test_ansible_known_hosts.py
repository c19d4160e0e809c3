"""Pinned host keys, one known_hosts file per node (autoscaler/actuators/ansible/known_hosts.py):
what ssh is told, what is forgotten and when, the move out of the old single file."""

from __future__ import annotations

import shlex
from pathlib import Path

import pytest
from pydantic import ValidationError

from autoscaler.actuators.ansible import AnsibleSettings
from autoscaler.actuators.ansible.known_hosts import KnownHosts

KEY_A = "ssh-ed25519 AAAAC3NzaC1lZDI1NTE5AAAAIAaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaa"
KEY_B = "ssh-ed25519 AAAAC3NzaC1lZDI1NTE5AAAAIBbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbb"


def _known(tmp_path: Path) -> KnownHosts:
    return KnownHosts.of(AnsibleSettings(runs_dir=tmp_path / "runs"))


def _option(options: str, name: str) -> list[str]:
    args = shlex.split(options)  # as ansible's ssh plugin splits them
    return [a.split("=", 1)[1] for a in args if a.startswith(f"{name}=")]


def test_each_node_is_checked_against_its_own_file_under_its_name(tmp_path: Path) -> None:
    known = _known(tmp_path)
    options = known.ssh_options("vision-gpu-1")
    assert _option(options, "HostKeyAlias") == ["vision-gpu-1"]
    assert _option(options, "UserKnownHostsFile") == [
        str((tmp_path / "runs" / "known_hosts.d" / "vision-gpu-1").absolute())]
    with pytest.raises(ValueError, match="not a host name"):
        known.ssh_options("../vision-gpu-1")


def test_the_old_single_file_is_read_too_while_it_is_left(tmp_path: Path) -> None:
    known = _known(tmp_path)
    known.legacy.parent.mkdir(parents=True)
    known.legacy.write_text(f"vision-gpu-1 {KEY_A}\n")
    # ssh reads every file listed (a pin there still holds) and writes to the first.
    [files] = _option(known.ssh_options("vision-gpu-1"), "UserKnownHostsFile")
    assert files.split() == [str(known.dir.absolute() / "vision-gpu-1"),
                             str(known.legacy.absolute())]


def test_forget_deletes_only_the_named_nodes_files(tmp_path: Path) -> None:
    known = _known(tmp_path)
    known.prepare()
    for name in ("vision-gpu-1", "vision-gpu-2"):
        (known.dir / name).write_text(f"{name} {KEY_A}\n")
    outside = tmp_path / "runs" / "keep-me"
    outside.write_text("x")
    known.forget(["vision-gpu-1", "vision-gpu-9", "../keep-me"])
    assert sorted(p.name for p in known.dir.iterdir()) == ["vision-gpu-2"]
    assert outside.exists()  # a name that is not a node name is never a path


def test_keep_only_sweeps_the_files_of_nodes_no_longer_live(tmp_path: Path) -> None:
    known = _known(tmp_path)
    known.prepare()
    for name in ("vision-gpu-1", "vision-gpu-2", "vision-gpu-3"):
        (known.dir / name).write_text(f"{name} {KEY_A}\n")
    (known.dir / "notes.txt").write_text("not a node's")
    assert known.keep_only(["vision-gpu-2", "vision-gpu-7"]) == ["vision-gpu-1", "vision-gpu-3"]
    assert sorted(p.name for p in known.dir.iterdir()) == ["notes.txt", "vision-gpu-2"]


def test_keep_only_moves_live_pins_out_of_the_old_file_and_deletes_it(tmp_path: Path) -> None:
    known = _known(tmp_path)
    known.prepare()
    known.legacy.write_text(
        "# a comment\n"
        f"vision-gpu-1 {KEY_A}\n"
        f"vision-gpu-2 {KEY_A} a comment\n"
        f"vision-gpu-2 {KEY_B}\n"
        f"vision-gpu-3,10.0.0.3 {KEY_B}\n"
        f"@revoked vision-gpu-1 {KEY_B}\n"
        "vision-gpu-4 truncated\n")
    (known.dir / "vision-gpu-3").write_text(f"vision-gpu-3 {KEY_A}\n")  # ssh's own: kept
    assert known.keep_only(["vision-gpu-2", "vision-gpu-3", "vision-gpu-4"]) == []
    assert not known.legacy.exists()
    assert sorted(p.name for p in known.dir.iterdir()) == ["vision-gpu-2", "vision-gpu-3"]
    assert (known.dir / "vision-gpu-2").read_text() == \
        f"vision-gpu-2 {KEY_A}\nvision-gpu-2 {KEY_B}\n"
    assert (known.dir / "vision-gpu-3").read_text() == f"vision-gpu-3 {KEY_A}\n"


def test_a_known_hosts_file_the_operator_named_is_read_and_never_changed(tmp_path: Path) -> None:
    """It may be shared (~/.ssh/known_hosts): only the service's own old file is moved."""
    shared = tmp_path / "ssh" / "known_hosts"
    shared.parent.mkdir()
    shared.write_text(f"vision-gpu-1 {KEY_A}\nsomewhere-else {KEY_B}\n")
    known = KnownHosts.of(AnsibleSettings(runs_dir=tmp_path / "runs", known_hosts_file=shared))
    assert _option(known.ssh_options("vision-gpu-1"), "UserKnownHostsFile") == [
        f"{(known.dir / 'vision-gpu-1').absolute()} {shared.absolute()}"]
    assert known.keep_only(["vision-gpu-1"]) == []
    assert shared.read_text() == f"vision-gpu-1 {KEY_A}\nsomewhere-else {KEY_B}\n"
    assert list(known.dir.iterdir()) == []


@pytest.mark.parametrize("settings", [{"runs_dir": "/var/lib/gas runs"},
                                      {"known_hosts_dir": "/var/lib/keys%d"},
                                      {"known_hosts_file": "/var/lib/old known_hosts"}])
def test_a_known_hosts_path_ssh_would_read_otherwise_is_refused(settings: dict[str, str]) -> None:
    with pytest.raises(ValidationError, match="no space and no '%'"):
        AnsibleSettings(**settings)  # type: ignore[arg-type]


def test_the_keys_directory_defaults_to_the_runs_directory_and_may_be_set(tmp_path: Path) -> None:
    assert AnsibleSettings(runs_dir=tmp_path).host_keys_dir() == tmp_path / "known_hosts.d"
    assert AnsibleSettings(runs_dir=tmp_path, known_hosts_dir=tmp_path / "k").host_keys_dir() == \
        tmp_path / "k"
    assert AnsibleSettings(runs_dir=tmp_path).legacy_known_hosts() == tmp_path / "known_hosts"

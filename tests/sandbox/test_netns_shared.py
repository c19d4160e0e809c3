"""SharedSetting: the blackhole route and the controller address are used by several
sandboxes at once (the suite runs in parallel); only the last user removes them, and a
crashed user's share is released by the kernel."""

from __future__ import annotations

import sys
from pathlib import Path

from autoscaler.sandbox.hosts.netns import SharedSetting
from autoscaler.sandbox.hosts.procs import ManagedProcess, wait_until


class Flag:
    """A stand-in for `ip route`/`ip addr`: records adds and removes."""

    def __init__(self) -> None:
        self.on = False
        self.log: list[str] = []

    def add(self) -> None:
        self.on = True
        self.log.append("add")

    def remove(self) -> None:
        self.on = False
        self.log.append("remove")


def setting(tmp_path: Path, flag: Flag) -> SharedSetting:
    return SharedSetting("test", lambda: flag.on, flag.add, flag.remove, lock_dir=tmp_path)


def test_only_the_last_user_removes_it(tmp_path: Path) -> None:
    flag = Flag()
    shared = setting(tmp_path, flag)
    first = shared.acquire()
    second = shared.acquire()
    assert flag.log == ["add"]  # the second user found it there
    shared.release(first)
    assert flag.on and flag.log == ["add"]
    shared.release(second)
    assert not flag.on and flag.log == ["add", "remove"]
    with shared.used():
        assert flag.on
    assert flag.log == ["add", "remove", "add", "remove"]


def test_a_crashed_users_share_is_gone_and_cleanup_removes_it_only_then(tmp_path: Path) -> None:
    flag = Flag()
    shared = setting(tmp_path, flag)
    mine = shared.acquire()
    # Another process holds a share, as a second sandbox would.
    code = (f"import fcntl, time; f = open({str(shared.lock_file)!r}, 'a'); "
            "fcntl.flock(f, fcntl.LOCK_SH); print('ready', flush=True); time.sleep(60)")
    holder = ManagedProcess("holder", [sys.executable, "-c", code], tmp_path / "holder.log")
    try:
        wait_until(lambda: "ready" in holder.log_tail(), 10, "the holder's share", proc=holder)
        shared.release(mine)
        assert flag.on, "another process still uses it"
        assert shared.remove_if_unused() is False and flag.on
    finally:
        holder.stop()  # SIGTERM: its lock goes with it, as after a crash
    assert shared.remove_if_unused() is True and not flag.on

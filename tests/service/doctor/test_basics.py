"""The doctor's checks that need no other system: the SSH user Ansible logs in as."""

from __future__ import annotations

from types import SimpleNamespace

import pytest

from autoscaler.actuators.ansible.settings import AnsibleSettings
from autoscaler.service.doctor.basics import ssh_user
from autoscaler.service.doctor.report import Status, passed


def _rows(**settings: object):  # type: ignore[no-untyped-def]
    ctx = SimpleNamespace(config=SimpleNamespace(ansible=AnsibleSettings(**settings)))  # type: ignore[arg-type]
    return ssh_user(ctx)  # type: ignore[arg-type]


def test_root_logins_on_nodes_are_a_warning_that_names_the_fix_and_fails_nothing() -> None:
    rows = _rows()  # the default
    assert [(r.name, r.status) for r in rows] == [("ssh user", Status.WARN)]
    assert "ansible.ssh_user is root (the default)" in rows[0].reason
    assert "admin on Debian" in rows[0].reason
    assert passed(rows)


@pytest.mark.parametrize(("become", "says"), [(None, "admin@node:2222, with sudo (become)"),
                                              (False, "admin@node:2222, without sudo (become: false)")])
def test_the_images_own_user_is_ok_and_says_whether_the_plays_use_sudo(
        become: bool | None, says: str) -> None:
    rows = _rows(ssh_user="admin", ssh_port=2222, become=become)
    assert [(r.status, r.reason) for r in rows] == [(Status.OK, says)]

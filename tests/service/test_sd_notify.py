"""sd_notify: the datagram systemd's Type=notify reads, on a real unix socket."""

from __future__ import annotations

import socket

from autoscaler.service import sd_notify


def test_ready_reaches_the_socket_and_nothing_is_sent_outside_systemd(tmp_path, monkeypatch):
    path = tmp_path / "notify"
    with socket.socket(socket.AF_UNIX, socket.SOCK_DGRAM) as server:
        server.bind(str(path))
        server.settimeout(5)
        monkeypatch.setenv("NOTIFY_SOCKET", str(path))
        assert sd_notify.notify("READY=1")
        assert server.recv(64) == b"READY=1"
    monkeypatch.delenv("NOTIFY_SOCKET")
    assert not sd_notify.notify("READY=1")


def test_a_socket_that_is_gone_is_logged_not_raised(tmp_path, monkeypatch, caplog):
    monkeypatch.setenv("NOTIFY_SOCKET", str(tmp_path / "gone"))
    assert not sd_notify.notify("READY=1")
    assert "could not tell systemd READY=1" in caplog.text


def test_an_abstract_socket_address(monkeypatch):
    name = f"gpu-autoscaler-test-{id(monkeypatch)}"
    with socket.socket(socket.AF_UNIX, socket.SOCK_DGRAM) as server:
        server.bind("\0" + name)
        server.settimeout(5)
        monkeypatch.setenv("NOTIFY_SOCKET", "@" + name)
        assert sd_notify.notify("STOPPING=1")
        assert server.recv(64) == b"STOPPING=1"

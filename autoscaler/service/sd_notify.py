"""systemd's notify protocol (sd_notify(3)) for the unit's ``Type=notify``.

``READY=1`` is sent once the service handles its signals and answers HTTP: systemd holds a
``systemctl reload`` (SIGHUP) until then, so a reload right after a start cannot reach the
process before its handler exists (SIGHUP's default would end it, and systemd counts that
as a clean exit, so ``Restart=on-failure`` would not start it again). ``STOPPING=1`` at
shutdown. Outside systemd (no ``$NOTIFY_SOCKET``) nothing is sent.
"""

from __future__ import annotations

import logging
import os
import socket

log = logging.getLogger(__name__)


def notify(state: str) -> bool:
    """Send ``state`` (e.g. ``READY=1``) to systemd; False when not run by systemd or the
    socket refused it (logged: the unit would then time out starting, which says why)."""
    address = os.environ.get("NOTIFY_SOCKET")
    if not address:
        return False
    if address.startswith("@"):  # an abstract socket
        address = "\0" + address[1:]
    try:
        with socket.socket(socket.AF_UNIX, socket.SOCK_DGRAM | socket.SOCK_CLOEXEC) as sock:
            sock.connect(address)
            sock.sendall(state.encode())
    except OSError as exc:
        log.warning("could not tell systemd %s: %s", state, exc)
        return False
    return True

"""Log records that stay one line each.

Reasons quote what schedulers, clouds and hosts said (a Slurm ``Reason=``, a Kubernetes
condition, Ansible's stderr). A newline in that text would start a line that reads like a
record of its own ("... -> READY"), and terminal escapes can rewrite what an operator sees,
so the message's control characters are written as escapes. Tracebacks keep their lines:
they are appended after the message and come from our own code.
"""

from __future__ import annotations

import logging
from typing import IO

LOG_FORMAT = "%(asctime)s %(levelname)s %(name)s: %(message)s"

_ESCAPES = {c: f"\\x{c:02x}" for c in [*range(0x20), 0x7F, *range(0x80, 0xA0)] if c != 0x09}
_ESCAPES |= {0x0A: "\\n", 0x0D: "\\r"}
# Line and paragraph separators end a line in some viewers; bidi controls reorder it.
_ESCAPES |= {c: f"\\u{c:04x}" for c in [0x2028, 0x2029, *range(0x202A, 0x202F),
                                         *range(0x2066, 0x206A)]}


def one_line(text: str) -> str:
    return text.translate(_ESCAPES)


class OneLineFormatter(logging.Formatter):
    def formatMessage(self, record: logging.LogRecord) -> str:
        record.message = one_line(record.message)
        return super().formatMessage(record)


def configure(level: str | int, fmt: str = LOG_FORMAT, *, stream: IO[str] | None = None,
              filename: str | None = None) -> None:
    """``logging.basicConfig`` (replacing any handler) with the one-line formatter."""
    handler: logging.Handler = (logging.FileHandler(filename) if filename is not None
                                else logging.StreamHandler(stream))
    handler.setFormatter(OneLineFormatter(fmt))
    logging.basicConfig(level=level, handlers=[handler], force=True)

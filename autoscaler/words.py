"""Lists in reasons, logs and errors: the first few items, then how many more."""

from __future__ import annotations

from collections.abc import Sequence


def first_few(items: Sequence[str], shown: int = 5, sep: str = ", ") -> str:
    """``a, b, c and 4 more``: at most ``shown`` items, joined by ``sep``."""
    more = f" and {len(items) - shown} more" if len(items) > shown else ""
    return sep.join(items[:shown]) + more

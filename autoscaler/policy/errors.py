"""A policy problem pinned to ``file:line:column`` and a key path."""

from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True, order=True)
class PolicyError:
    file: str
    line: int
    column: int
    path: str
    message: str

    def __str__(self) -> str:
        where = f"{self.file}:{self.line}:{self.column}"
        return f"{where}: {self.path}: {self.message}" if self.path else f"{where}: {self.message}"


class PolicyLoadError(Exception):
    """Raised by :func:`load_policies` when any file in the directory is invalid."""

    def __init__(self, errors: list[PolicyError]):
        self.errors = sorted(errors)
        super().__init__("\n".join(str(e) for e in self.errors))

"""Paths written in a config file are relative to the file's directory: :data:`ConfigPath`.

A loader validates with ``context=relative_to(directory)``, and each ``ConfigPath`` the file
gives is made absolute against that directory as it is validated. Defaults are not given in
the file and stay as they are; absolute paths stay; a model validated without that context
(built in code, or by another loader) keeps its paths as written.
"""

from __future__ import annotations

import os
from pathlib import Path
from typing import Annotated

from pydantic import AfterValidator, ValidationInfo

_DIRECTORY = "config_directory"


def relative_to(directory: Path) -> dict[str, Path]:
    """The validation context under which a given ``ConfigPath`` is relative to ``directory``."""
    return {_DIRECTORY: directory}


def _from_file(path: Path, info: ValidationInfo) -> Path:
    context = info.context
    directory = context.get(_DIRECTORY) if isinstance(context, dict) else None
    if directory is None or path.is_absolute():
        return path
    return Path(os.path.normpath(directory / path))


ConfigPath = Annotated[Path, AfterValidator(_from_file)]

__all__ = ["ConfigPath", "relative_to"]

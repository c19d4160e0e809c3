"""YAML files whose every problem is reported as ``file:line:column``, key path, reason.

Shared by team policy files and the service config file: read with ruamel.yaml (which
keeps positions), validate with a pydantic model, and turn each pydantic error into a
:class:`PolicyError` pointing at the key an operator has to fix.
"""

from __future__ import annotations

import difflib
import os
import stat
import types
import typing
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from pydantic import BaseModel, ValidationError
from ruamel.yaml.error import MarkedYAMLError, YAMLError

from autoscaler.policy.errors import PolicyError
from autoscaler.policy.locate import format_path, locate
from autoscaler.policy.models import NAME_PATTERN
from autoscaler.policy.plain_yaml import PlainYamlError, plain_yaml
from autoscaler.policy.untrusted import MAX_BYTES, decode, shape_problem

MAX_READ = MAX_BYTES + 1
_NAME_HINT = (
    "must start with a lowercase letter and use only a-z, 0-9 and '-', at most 39 characters "
    "(it becomes a Terraform key and a hostname)"
)


def read_yaml(path: Path) -> tuple[Any, list[PolicyError]]:
    """The round-trip document (with positions), or the error that stops reading it."""
    name = str(path)
    try:
        data = _read_regular(path)
    except OSError as exc:
        return None, [PolicyError(name, 1, 1, "", f"cannot read file: {exc.strerror}")]
    if data is None:
        return None, [PolicyError(name, 1, 1, "", "not a regular file (a directory, a FIFO, a "
                                  "device or a socket)")]
    text, refused = decode(data)
    if refused is not None or text is None:
        line, col, reason = refused or (1, 1, "unreadable")
        return None, [PolicyError(name, line, col, "", reason)]
    doc, errors = parse_yaml(name, text)
    if errors:
        return None, errors
    shape = shape_problem(doc)
    if shape is not None:
        return None, [PolicyError(name, *locate(doc, shape[0]), format_path(shape[0]), shape[1])]
    return doc, []


def _read_regular(path: Path) -> bytes | None:
    """At most MAX_READ bytes of ``path`` (one past the cap is enough to refuse it), or None
    when it is not a regular file. Opened without blocking, so a FIFO with no writer is
    refused rather than waited on, and checked on the open file, so it cannot be swapped."""
    fd = os.open(path, os.O_RDONLY | os.O_NONBLOCK | getattr(os, "O_CLOEXEC", 0))
    with os.fdopen(fd, "rb") as fh:
        if not stat.S_ISREG(os.fstat(fd).st_mode):
            return None
        return fh.read(MAX_READ)


def parse_yaml(name: str, text: str) -> tuple[Any, list[PolicyError]]:
    """Parse already-checked text; every parser failure becomes a positioned error."""
    try:
        return plain_yaml().load(text), []
    except PlainYamlError as exc:
        mark = exc.problem_mark
        line, col = (mark.line + 1, mark.column + 1) if mark else (1, 1)
        return None, [PolicyError(name, line, col, "", str(exc.problem))]
    except MarkedYAMLError as exc:
        mark = exc.problem_mark or exc.context_mark
        line, col = (mark.line + 1, mark.column + 1) if mark else (1, 1)
        return None, [PolicyError(name, line, col, "", f"not valid YAML: {exc.problem}")]
    except RecursionError:
        return None, [PolicyError(name, 1, 1, "", "not valid YAML: nested too deeply")]
    except (YAMLError, ValueError, TypeError, OverflowError, LookupError, AttributeError) as exc:
        # ruamel raises a few unmarked errors (reader errors, bad timestamps or numbers,
        # IndexError/KeyError from constructors given odd text); the text is untrusted, so
        # none of them may escape as a traceback.
        return None, [PolicyError(name, 1, 1, "", f"not valid YAML: {_first_line(exc)}")]


def _first_line(exc: Exception) -> str:
    text = str(exc).strip().splitlines()
    return text[0][:200] if text else type(exc).__name__


def validation_errors(name: str, doc: Any, exc: ValidationError,
                      root: type[BaseModel]) -> list[PolicyError]:
    errors = []
    for err in exc.errors():
        loc = err["loc"]
        line, col = locate(doc, loc, key=err["type"] == "extra_forbidden")
        errors.append(PolicyError(name, line, col, format_path(loc), message(err, root)))
    return errors


def message(err: Any, root: type[BaseModel]) -> str:
    """A plain reason; unknown keys get a 'did you mean' from the model at that place."""
    kind, loc = err["type"], err["loc"]
    if kind == "extra_forbidden":
        model = model_at(root, loc[:-1])
        known = list(model.model_fields) if model else []
        close = difflib.get_close_matches(str(loc[-1]), known, n=1, cutoff=0.5)
        hint = (f"; did you mean '{close[0]}'?" if close
                else f"; known keys: {', '.join(known)}" if known else "")
        return f"unknown key '{loc[-1]}'{hint}"
    if kind == "missing":
        return "required key is missing"
    if kind == "string_pattern_mismatch" and err.get("ctx", {}).get("pattern") == NAME_PATTERN:
        return f"{_shown(err['input'])} {_NAME_HINT}"
    if kind == "string_pattern_mismatch":
        return f"{_shown(err['input'])} does not match {err['ctx']['pattern']}"
    return str(err["msg"]).removeprefix("Value error, ")


def _shown(value: Any) -> str:
    """A refused value as it may be printed: quoted, escaped, and short."""
    text = repr(value)
    return text if len(text) <= 80 else text[:77] + "..."


def _unwrap(annotation: Any) -> Any:
    """The model, dict or list type inside Optional/Annotated/unions."""
    origin = typing.get_origin(annotation)
    if origin in (typing.Union, types.UnionType, typing.Annotated):
        for arg in typing.get_args(annotation):
            found = _unwrap(arg)
            if found is not None:
                return found
        return None
    if origin in (list, dict) or (isinstance(annotation, type) and issubclass(annotation, BaseModel)):
        return annotation
    return None


def model_at(root: type[BaseModel], loc: Sequence[int | str]) -> type[BaseModel] | None:
    """The model whose fields are the valid keys at ``loc`` (None if unknown)."""
    current: Any = root
    for part in loc:
        origin = typing.get_origin(current)
        if origin is list and isinstance(part, int):
            current = _unwrap(typing.get_args(current)[0])
        elif origin is dict:
            current = _unwrap(typing.get_args(current)[1])
        elif isinstance(current, type) and issubclass(current, BaseModel):
            field = current.model_fields.get(str(part))
            current = _unwrap(field.annotation) if field is not None else None
        else:
            return None
        if current is None:
            return None
    return current if isinstance(current, type) and issubclass(current, BaseModel) else None

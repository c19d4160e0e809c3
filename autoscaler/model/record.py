"""Slotted records: the per-node inputs decide() reads thousands of times a tick.

They are pydantic dataclasses, frozen and slotted, validated on construction as the models
are. A ``BaseModel`` defines ``__getattr__``, which keeps CPython 3.11 from specialising
reads of its fields, and each instance carries a ``__dict__`` and three bookkeeping slots:
on 10,000 nodes that was about a third of decide()'s time.

A field's default is given as ``Field(default=...)``, never positionally: type checkers
read the dataclass through ``dataclass_transform``, which knows only the keyword.
"""

from __future__ import annotations

import dataclasses
from typing import Any, TypeVar

from pydantic import ConfigDict
from pydantic.fields import FieldInfo

RECORD = ConfigDict(extra="forbid")

T = TypeVar("T")

_DEFAULTS: dict[type, tuple[dict[str, Any], dict[str, Any]]] = {}


def construct(cls: type[T], **values: Any) -> T:
    """A record of ``cls`` from values its producer already holds to be valid (the
    simulator's own state), without validation, as ``BaseModel.model_construct``: fields
    not given take their defaults."""
    found = _DEFAULTS.get(cls)
    if found is None:
        found = _DEFAULTS[cls] = _defaults(cls)
    plain, factories = found
    obj = object.__new__(cls)
    set_ = object.__setattr__
    for name, value in plain.items():
        set_(obj, name, values.pop(name, value))
    for name, factory in factories.items():
        set_(obj, name, values.pop(name) if name in values else factory())
    if values:
        raise TypeError(f"{cls.__name__} has no field {', '.join(sorted(values))}")
    return obj


def _defaults(cls: type) -> tuple[dict[str, Any], dict[str, Any]]:
    """Each field's default, or its factory; a required field's factory raises."""
    plain: dict[str, Any] = {}
    factories: dict[str, Any] = {}
    for f in dataclasses.fields(cls):
        default: Any = f.default
        factory: Any = None if f.default_factory is dataclasses.MISSING else f.default_factory
        required = default is dataclasses.MISSING and factory is None
        if isinstance(default, FieldInfo):  # Field(...) as the dataclass default
            required = default.is_required()
            factory, default = default.default_factory, default.default
        if required:
            factories[f.name] = _required(cls, f.name)
        elif factory is not None:
            factories[f.name] = factory
        else:
            plain[f.name] = default
    return plain, factories


def _required(cls: type, name: str) -> Any:
    def missing() -> Any:
        raise TypeError(f"{cls.__name__}.{name} is required")
    return missing

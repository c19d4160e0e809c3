"""The YAML a policy or config file may use: plain data, one way to read each value.

ruamel.yaml's round-trip loader (it keeps the line of every value) reads more than data:

* explicit tags (``!!int ""``, ``!!bool x``, ``!!binary``, ``!foo``) choose a constructor,
  and several of ruamel's crash on odd text with IndexError or KeyError rather than a
  positioned error. No policy or config value needs a tag, so every explicit tag is
  refused at its line.
* integers in other notations: ``0x10``, ``0o17``, ``0b101``, ``1_000``, and, under a
  ``%YAML 1.1`` directive, ``017`` (octal 15, decimal 17 in YAML 1.2) and ``1:30``
  (sexagesimal 90). The same characters mean different numbers to different readers, and
  a reviewer of a team's file reads decimal, so integers are written in decimal only.

Both are refused with :class:`PlainYamlError`, a marked error whose ``problem`` is the reason.
"""

from __future__ import annotations

import re
from typing import Any

from ruamel.yaml import YAML
from ruamel.yaml.composer import Composer
from ruamel.yaml.constructor import RoundTripConstructor
from ruamel.yaml.error import MarkedYAMLError
from ruamel.yaml.events import CollectionStartEvent, ScalarEvent

_DECIMAL = re.compile(r"[-+]?(0|[1-9][0-9]*)")
INT_TAG = "tag:yaml.org,2002:int"


class PlainYamlError(MarkedYAMLError):
    """Valid YAML that a policy or config file must not use; ``problem`` says why."""


class _Composer(Composer):
    def compose_node(self, parent: Any, index: Any) -> Any:
        event = self.parser.peek_event()
        if isinstance(event, ScalarEvent | CollectionStartEvent):
            tag = getattr(event, "ctag", None)
            if tag is not None and str(tag) != "!":  # '!' only says "not a plain scalar"
                raise PlainYamlError(
                    problem=f"explicit tag {str(tag)[:40]!r} is not allowed: write plain "
                    "values (a string, a number, a list, a mapping)",
                    problem_mark=event.start_mark)
        return super().compose_node(parent, index)


class _Constructor(RoundTripConstructor):
    def construct_yaml_int(self, node: Any) -> Any:
        text = str(node.value)
        if not _DECIMAL.fullmatch(text):
            raise PlainYamlError(
                problem=f"{text[:40]!r} is not a decimal integer: hex, octal, binary, '_' and "
                "'a:b' forms read differently in YAML 1.1 and 1.2; write the number in decimal",
                problem_mark=node.start_mark)
        return super().construct_yaml_int(node)


_Constructor.add_constructor(INT_TAG, _Constructor.construct_yaml_int)


def plain_yaml() -> YAML:
    """A round-trip loader that refuses duplicate keys, explicit tags and non-decimal ints."""
    yaml = YAML(typ="rt")
    yaml.allow_duplicate_keys = False
    yaml.Composer = _Composer
    yaml.Constructor = _Constructor
    return yaml

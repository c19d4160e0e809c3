"""Policy and config YAML is plain data: decimal integers only, no explicit tags, and
nothing the parser can be made to crash on."""

from __future__ import annotations

import pytest

from autoscaler.policy.yaml_errors import parse_yaml

V11 = "%YAML 1.1\n---\n"


@pytest.mark.parametrize(("text", "value"), [
    ("0", 0), ("12", 12), ("-3", -3), ("+7", 7), ("10000", 10000), ("1.5", 1.5), ("1e3", 1000.0),
    ("'0x10'", "0x10"), ("1:30", "1:30"),  # a string in YAML 1.2
])
def test_decimal_numbers_and_strings_are_read(text: str, value: object) -> None:
    doc, errors = parse_yaml("f.yaml", f"a: {text}\n")
    assert errors == [] and doc["a"] == value and isinstance(doc["a"], type(value))


@pytest.mark.parametrize(("text", "why"), [
    ("a: 0x10", "hex"), ("a: 0o17", "octal (YAML 1.2)"), ("a: 0b101", "binary"),
    ("a: 1_000", "underscores"), ("a: 017", "17 in YAML 1.2, 15 in YAML 1.1"), ("a: 00", "zero padded"),
    ("a: [1, 0x1]", "inside a list"), (V11 + "a: 017", "octal (YAML 1.1)"),
    (V11 + "a: 1:30", "sexagesimal (YAML 1.1)"),
])
def test_other_integer_notations_are_refused_at_their_line(text: str, why: str) -> None:
    doc, errors = parse_yaml("f.yaml", text + "\n")
    (err,) = errors
    assert doc is None and err.line == text.count("\n") + 1, why
    assert "is not a decimal integer" in err.message and "write the number in decimal" in err.message


TAGS = ["!!int", "!!float", "!!bool", "!!null", "!!str", "!!timestamp", "!!binary", "!!set",
        "!!omap", "!!pairs", "!!map", "!!seq", "!!merge", "!foo", "!<tag:yaml.org,2002:int>",
        "!!python/name:os.system"]
VALUES = ['""', "x", "0x", "+", "_", "1e", "[]", "{}", "[a]", "{a: 1}", "2001-13-45", "5"]


@pytest.mark.parametrize("tag", TAGS)
def test_explicit_tags_are_refused_at_their_line_whatever_the_value(tag: str) -> None:
    for value in VALUES:
        for head in ("", V11):
            doc, errors = parse_yaml("f.yaml", f"{head}team: x\na: {tag} {value}\n")
            (err,) = errors
            assert doc is None and err.line == head.count("\n") + 2, (tag, value)
            assert err.message.startswith("explicit tag"), err.message


def test_the_non_specific_tag_only_marks_a_plain_scalar() -> None:
    doc, errors = parse_yaml("f.yaml", "a: ! 5\nb: ! x\n")
    assert errors == [] and doc == {"a": 5, "b": "x"}

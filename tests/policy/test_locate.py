"""Key paths mapped back to lines, whatever the document's shape: merged keys (``<<``) point
at the mapping that writes them, and no path makes ``locate`` raise."""

from __future__ import annotations

from typing import Any

from hypothesis import given, settings
from hypothesis import strategies as st

from autoscaler.policy.locate import locate
from autoscaler.policy.plain_yaml import plain_yaml


def test_a_merged_key_points_at_the_mapping_that_writes_it() -> None:
    doc = plain_yaml().load(
        "base: &base {x: 1, y: 2}\n"          # 1
        "mid: &mid\n"                          # 2
        "  <<: *base\n"                        # 3
        "  z: [1,\n"                           # 4
        "      2]\n"                           # 5
        "top:\n"                               # 6
        "  <<: [*mid, {q: 1}]\n"               # 7
        "  y: 3\n")                            # 8
    assert locate(doc, ["top", "x"]) == (1, 17)  # through two merges
    assert locate(doc, ["top", "x"], key=True) == (1, 14)
    assert locate(doc, ["top", "y"]) == (8, 6)  # its own key wins over the merged one
    assert locate(doc, ["top", "z", 1]) == (5, 7)
    assert locate(doc, ["top", "q"]) == (7, 18)
    assert locate(doc, ["top", "absent"]) == (7, 3)  # the parent: where to add it


def test_a_chain_of_200_merges_is_followed_to_its_end() -> None:
    text = "m0: &m0 {x: 1}\n" + "".join(f"m{i}: &m{i} {{<<: *m{i - 1}, k{i}: 1}}\n"
                                         for i in range(1, 200))
    doc = plain_yaml().load(text)
    assert locate(doc, ["m199", "x"]) == (1, 13)
    assert locate(doc, ["m199", "k100"]) == (101, 30)


@st.composite
def merged_documents(draw: st.DrawFn) -> str:
    """Anchored mappings, each merging any earlier ones, some with nested lists."""
    lines = []
    for i in range(draw(st.integers(1, 12))):
        keys = draw(st.lists(st.sampled_from("abcdefg"), max_size=4, unique=True))
        parts = [f"{k}: {draw(st.sampled_from(['1', '[1, 2]', '{x: 1}', '[{y: 2}]', 'null']))}"
                 for k in keys]
        if i:
            merged = draw(st.lists(st.integers(0, i - 1), max_size=3, unique=True))
            if merged:
                parts.insert(draw(st.integers(0, len(parts))),
                             "<<: [" + ", ".join(f"*m{j}" for j in merged) + "]")
        lines.append(f"m{i}: &m{i} {{{', '.join(parts)}}}")
    return "\n".join(lines) + "\n"


def _paths(node: Any, path: list[int | str]) -> list[list[int | str]]:
    out = [path]
    if isinstance(node, dict):
        for key, value in node.items():
            out += _paths(value, [*path, str(key)])
    elif isinstance(node, list):
        for i, value in enumerate(node):
            out += _paths(value, [*path, i])
    return out


JUNK = st.lists(st.one_of(st.integers(-3, 5), st.sampled_from(["a", "x", "<<", "m0", ""])),
                max_size=4)


@settings(max_examples=150, deadline=None)
@given(text=merged_documents(), junk=JUNK, key=st.booleans())
def test_every_path_of_any_document_has_a_line_in_it(text: str, junk: list[int | str],
                                                     key: bool) -> None:
    doc = plain_yaml().load(text)
    lines = text.count("\n")
    for path in [*_paths(doc, []), junk]:
        line, col = locate(doc, path, key=key)
        assert 1 <= line <= lines and col >= 1, (path, text)

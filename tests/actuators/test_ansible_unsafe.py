"""Inventory and extra variables as !unsafe YAML: same data back, every string tagged, and
names or addresses that would reach ssh's command line as options are refused."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import yaml

from autoscaler.actuators.ansible import AnsibleSettings, build_inventory
from autoscaler.actuators.ansible.unsafe import dump_unsafe, write_extravars
from tests.builders import make_node, make_policy
from tests.hostile import jinja


class _Tagged(str):
    pass


class _Loader(yaml.SafeLoader):
    pass


_Loader.add_constructor("!unsafe", lambda loader, node: _Tagged(loader.construct_scalar(node)))


def _strings(value: Any) -> list[Any]:
    if isinstance(value, dict):
        return [s for k, v in value.items() for s in (k, *_strings(v))]
    if isinstance(value, list):
        return [s for v in value for s in _strings(v)]
    return [value] if isinstance(value, str) else []


def test_every_string_is_tagged_and_the_data_comes_back_unchanged() -> None:
    data = {"all": {"hosts": {"n-1": {"v": jinja("x"), "quote": 'a"b\\c\n\t', "n": 3,
                                      "f": 1.5, "b": True, "none": None,
                                      "labels": {jinja("k"): "é ✓ 🚀"}, "list": ["a", 1]}}}}
    loaded = yaml.load(dump_unsafe(data), Loader=_Loader)
    assert loaded == data
    strings = _strings(loaded)
    assert strings and all(isinstance(s, _Tagged) for s in strings)


def test_a_node_name_or_address_that_is_not_a_host_name_is_left_out() -> None:
    policies = {"vision": make_policy()}
    nodes = [make_node("vision-gpu-1"), make_node("vision-gpu-2 -oProxyCommand=x"),
             make_node("vision-gpu-3")]
    addresses = {"vision-gpu-1": "169.254.77.2", "vision-gpu-2 -oProxyCommand=x": "169.254.77.6",
                 "vision-gpu-3": "-oProxyCommand=touch /tmp/x"}
    inventory, skipped = build_inventory(nodes, policies, AnsibleSettings(runs_dir=Path("r")),
                                         lambda n: addresses[n.name])
    assert list(inventory["all"]["hosts"]) == ["vision-gpu-1"]
    assert inventory["all"]["hosts"]["vision-gpu-1"]["ansible_ssh_common_args"] == \
        "-o HostKeyAlias=vision-gpu-1 -o UserKnownHostsFile=" \
        f"{Path('r/known_hosts.d/vision-gpu-1').absolute()}"
    reasons = {s.node: s.reason for s in skipped}
    assert "not a host name" in reasons["vision-gpu-2 -oProxyCommand=x"]
    assert "not an IP address or host name" in reasons["vision-gpu-3"]


def test_extravars_keep_the_operators_templates_and_tag_the_secrets(tmp_path: Path) -> None:
    path = write_extravars(tmp_path / "env" / "extravars",
                           {"dev": "/dev/{{ inventory_hostname }}", "key": "operator"},
                           {"key": jinja("secret"), "token": jinja("token")})
    loaded = yaml.load(path.read_text(), Loader=_Loader)
    assert loaded == {"dev": "/dev/{{ inventory_hostname }}", "key": jinja("secret"),
                      "token": jinja("token")}
    assert type(loaded["dev"]) is str  # a template the operator wrote on purpose
    assert isinstance(loaded["key"], _Tagged) and isinstance(loaded["token"], _Tagged)
    assert oct(path.stat().st_mode & 0o777) == "0o600"

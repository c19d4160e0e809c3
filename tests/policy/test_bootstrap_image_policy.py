"""bootstrap.image, images_kept and when_stale: defaults (today's behaviour), what each
accepts, and that baked images are refused where no pool module can look them up."""

from __future__ import annotations

from pathlib import Path

import pytest

from tests.hostile_files import GOOD_POLICY
from tests.policy.loading import load_text

AWS = GOOD_POLICY
ALICLOUD = AWS.replace("aws", "alicloud").replace("us-east-1", "cn-hangzhou") \
    .replace("p3.2xlarge", "ecs.gn6i-c4g1.xlarge")


def test_defaults_are_todays_base_image_bootstrap(tmp_path: Path) -> None:
    policy, errors = load_text(tmp_path, AWS)
    assert errors == []
    boot = policy.pools[0].bootstrap  # type: ignore[attr-defined]
    assert (boot.image, boot.images_kept, boot.when_stale) == ("base", 3, "full")


def test_baked_settings_are_read(tmp_path: Path) -> None:
    policy, errors = load_text(tmp_path, AWS + "    bootstrap: {image: baked, images_kept: 5, "
                               "when_stale: hold, prepull: [nvcr.io/nvidia/pytorch:24.05-py3, "
                               "registry.internal:5000/ml/train@sha256:" + "0" * 64 + "]}\n")
    assert errors == []
    boot = policy.pools[0].bootstrap  # type: ignore[attr-defined]
    assert (boot.image, boot.images_kept, boot.when_stale) == ("baked", 5, "hold")
    assert boot.prepull == ["nvcr.io/nvidia/pytorch:24.05-py3",
                            "registry.internal:5000/ml/train@sha256:" + "0" * 64]


@pytest.mark.parametrize(("extra", "path", "needle"), [
    ("{image: newest}", "pools[0].bootstrap.image", "'base' or 'baked'"),
    ("{when_stale: wait}", "pools[0].bootstrap.when_stale", "'full' or 'hold'"),
    ("{images_kept: 0}", "pools[0].bootstrap.images_kept", "greater than or equal to 1"),
    ("{images_kept: '3'}", "pools[0].bootstrap.images_kept", "integer"),
    ("{imge: baked}", "pools[0].bootstrap.imge", "did you mean 'image'?"),
    ("{prepull: [ubuntu:22.04]}", "pools[0].bootstrap.prepull[0]", "not a fully qualified image "
     "reference with a tag or digest, e.g. nvcr.io/nvidia/pytorch:24.05-py3"),
    ("{prepull: [nvcr.io/nvidia/pytorch]}", "pools[0].bootstrap.prepull[0]", "with a tag or digest"),
    ("{prepull: ['x.io/a;reboot:1']}", "pools[0].bootstrap.prepull[0]", "not a fully qualified"),
    ("{prepull: [x.io/a:1, x.io/a:1]}", "pools[0].bootstrap", "prepull lists an image twice"),
    ("{prepull: [x.io/a:1], container_runtime: docker}", "pools[0].bootstrap",
     "prepull pulls into containerd"),
    ("{prepull: [" + ", ".join(f"x.io/a:{n}" for n in range(21)) + "]}",
     "pools[0].bootstrap.prepull", "at most 20 items"),
])
def test_bad_values_are_errors_with_their_path(tmp_path: Path, extra: str, path: str,
                                               needle: str) -> None:
    _, errors = load_text(tmp_path, AWS + f"    bootstrap: {extra}\n")
    assert [(p, needle in m) for p, m in errors] == [(path, True)], errors


def test_baked_is_refused_on_alicloud_until_its_module_can_look_images_up(tmp_path: Path) -> None:
    _, errors = load_text(tmp_path, ALICLOUD + "    bootstrap: {image: baked}\n")
    assert [p for p, _ in errors] == ["pools[0].bootstrap.image"]
    assert "aws only" in errors[0][1]
    assert load_text(tmp_path, ALICLOUD + "    bootstrap: {image: base}\n")[1] == []

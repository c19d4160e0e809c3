"""autoscaler/actuators/terraform/settings.py load_settings: refusals are one line."""

from __future__ import annotations

from pathlib import Path

import pytest

from autoscaler.actuators.terraform.settings import load_settings


def test_a_service_config_without_terraform_is_one_clear_line(tmp_path: Path) -> None:
    path = tmp_path / "service.yaml"
    path.write_text("policies_dir: policies\ntick: {interval: 30s}\nhttp: {listen: '127.0.0.1:1'}\n")
    with pytest.raises(ValueError) as caught:
        load_settings(path)
    assert str(caught.value) == ("a service config without a terraform: section (workdir, "
                                 "backend, regions); add one, or give a Terraform settings file")


def test_a_service_configs_terraform_section_is_read(tmp_path: Path) -> None:
    path = tmp_path / "service.yaml"
    path.write_text("policies_dir: policies\nterraform: {parallelism: 7}\n")
    assert load_settings(path).parallelism == 7


def test_invalid_settings_are_one_line_of_key_paths(tmp_path: Path) -> None:
    path = tmp_path / "tf.yaml"
    path.write_text("regions: {aws/us-east-1: {amii: x}}\nparallelism: 0\n")
    with pytest.raises(ValueError) as caught:
        load_settings(path)
    text = str(caught.value)
    assert "\n" not in text and "errors.pydantic.dev" not in text
    assert "regions.aws/us-east-1.amii: Extra inputs are not permitted" in text
    assert "parallelism: Input should be greater than or equal to 1" in text

"""The bake's Terraform: a builder instance from the pool's base image, an image made of it
(``aws_ami_from_instance``) tagged with the pool's bootstrap hash, and the builder destroyed.

Its own root module and local state in ``settings.workdir/<team>/<pool>/bake/``: a bake never
touches the pool's state or lock. Three steps, each one Terraform run:

1. :meth:`BakeWorkspace.launch_builder`: the builder instance (``make_image = false``).
   The image-time part of gpu-node.yml (``--tags image``) is to run on it here; that
   step is not wired yet, so nothing calls these steps outside the tests.
2. :meth:`BakeWorkspace.make_image`: the image of the builder (``make_image = true``),
   tagged ``gpu-autoscaler/bootstrap-hash=<hash>``; it then leaves the state
   (``terraform state rm``), so that
3. :meth:`BakeWorkspace.destroy_builder` destroys the builder and nothing else: the image
   outlives the bake. Safe to run after a failure at any step, and twice.

AWS only (the Alibaba Cloud custom image is not written).
"""

from __future__ import annotations

import json
from datetime import datetime
from pathlib import Path
from typing import Any

from autoscaler.actuators.terraform import rootmodule
from autoscaler.actuators.terraform.runner import FLAG, Runner
from autoscaler.actuators.terraform.settings import RegionInputs, TerraformSettings
from autoscaler.model.clock import Clock, utc_now

_IMAGE = "aws_ami_from_instance.image[0]"


def bake_tf(settings: TerraformSettings, team: str, pool: str, region: str,
            inputs: RegionInputs, hash_: str, instance_type: str, name: str) -> dict[str, Any]:
    """The bake's root module (every written value literal, as in rootmodule.py)."""
    tags = {"team": team, "pool": pool, "managed-by": "gpu-autoscaler",
            rootmodule.HASH_TAG: hash_}
    builder: dict[str, Any] = {
        "ami": inputs.ami, "instance_type": instance_type,
        "subnet_id": inputs.subnet_ids[0] if inputs.subnet_ids else None,
        "vpc_security_group_ids": inputs.security_group_ids or None,
        "key_name": inputs.key_name, "iam_instance_profile": inputs.iam_instance_profile,
        "root_block_device": [{"volume_size": inputs.root_volume_gb, "volume_type": "gp3",
                               "delete_on_termination": True}],
        "metadata_options": [{"http_tokens": "required"}],
        "tags": {**tags, "Name": f"{team}-{pool}-builder", "gpu-autoscaler/role": "builder"},
    }
    image = {"name": name, "tags": {**tags, "Name": name}}
    return {
        "terraform": {"required_providers": {"aws": rootmodule.PROVIDERS["aws"]},
                      "backend": {"local": {"path": rootmodule.LOCAL_STATE}}},
        "provider": {"aws": rootmodule.literal(rootmodule.provider_config(settings, "aws", region))},
        "variable": {"make_image": {"type": "bool", "default": False}},
        "resource": {
            "aws_instance": {"builder": rootmodule.literal(builder)},
            "aws_ami_from_instance": {"image": {
                **rootmodule.literal(image), "count": "${var.make_image ? 1 : 0}",
                "source_instance_id": "${aws_instance.builder.id}"}},
        },
        "output": {"builder": {"value": "${aws_instance.builder.id}"},
                   "image": {"value": '${try(aws_ami_from_instance.image[0].id, "")}'}},
    }


class BakeWorkspace:
    def __init__(self, settings: TerraformSettings, team: str, pool: str, region: str, *,
                 hash_: str, instance_type: str, inputs: RegionInputs | None = None,
                 clock: Clock = utc_now):
        found = inputs or settings.inputs_for("aws", region)
        if found is None:
            raise ValueError(f"no Terraform inputs for aws/{region}")
        started: datetime = clock()
        name = f"gpu-autoscaler-{team}-{pool}-{hash_}-{started:%Y%m%d%H%M%S}"
        self.settings = settings
        self.dir = (Path(settings.workdir) / team / pool / "bake").resolve()
        self.main = bake_tf(settings, team, pool, region, found, hash_, instance_type, name)
        self.runner = Runner(self.dir, self.dir / "terraformrc", settings.terraform_bin,
                             settings.command_timeout_s)
        self._initialized = False

    def _init(self) -> None:
        if self._initialized:
            return
        self.dir.mkdir(parents=True, exist_ok=True)
        (self.dir / "main.tf.json").write_text(json.dumps(self.main, indent=2) + "\n")
        (self.dir / "terraformrc").write_text(rootmodule.cli_config(self.settings))
        self.runner.run("init", input=False)
        self._initialized = True

    def _apply(self, make_image: bool) -> dict[str, str]:
        self._init()
        self._set(make_image)
        self.runner.run("apply", auto_approve=FLAG, input=False)
        shown = self.runner.run("output", json=FLAG)
        return {k: v["value"] for k, v in json.loads(shown.stdout).items()}

    def launch_builder(self) -> str:
        """The builder's instance id."""
        return self._apply(make_image=False)["builder"]

    def make_image(self) -> str:
        """The new image's id; the image is no longer in the bake's state afterwards."""
        image = self._apply(make_image=True)["image"]
        self.runner.run("state rm", _IMAGE)
        return image

    def destroy_builder(self) -> None:
        self._init()
        self._set(make_image=False)
        self.runner.run("destroy", auto_approve=FLAG, input=False)

    def _set(self, make_image: bool) -> None:
        (self.dir / "terraform.tfvars.json").write_text(json.dumps({"make_image": make_image}))

"""The bake's Terraform: a builder instance from the pool's base image, images made of it
(``aws_ami_from_instance``) tagged with the pool's bootstrap hash, and the builder destroyed.

Its own root module and local state in ``settings.workdir/<team>/<pool>/bake/``: a bake never
touches the pool's state or lock. The state holds the builder (``var.builder``) and every
image the pool's bakes made and keep (``var.images``: name -> the builder it was made of and
its hash), so images are made and deregistered through Terraform like everything else:

1. :meth:`BakeWorkspace.launch_builder`: the builder instance. The image-time part of
   gpu-node.yml (``--tags image``) runs on it next (``actuators/image_bake.py``).
2. :meth:`BakeWorkspace.make_image`: one more image, of the builder, tagged
   ``gpu-autoscaler/bootstrap-hash=<hash>`` and ``gpu-autoscaler/builder=<instance id>``.
3. :meth:`BakeWorkspace.finish`: the builder destroyed and, given ``keep``, only the
   newest ``keep`` images kept: the older ones leave the map and are deregistered (with
   their snapshots) by the same apply. Safe after a failure at any step, and twice.

An image of the pool that no state holds (tagged with its team, pool and a builder) is
adopted by ``finish`` before it counts: imported into ``aws_ami.adopted`` (var.adopted, by
id; ``aws_ami_from_instance`` has no importer) and from then on kept or deregistered by the
same count, by the time in its name. Such an image is left when CreateImage succeeded but
its answer was lost: the provider's SDK retries, EC2 refuses the repeat as a duplicate
name, the apply fails and the first image is in no state. Without adoption it would be
paid for and never deregistered.

The images the state keeps are read back from its ``images`` output at each step, so a
bake killed between two steps loses no image and the next bake finishes its builder.
AWS only (the Alibaba Cloud custom image is not written).
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from datetime import datetime
from pathlib import Path
from typing import Any

from autoscaler.actuators.terraform import rootmodule
from autoscaler.actuators.terraform.runner import FLAG, Runner
from autoscaler.actuators.terraform.settings import RegionInputs, TerraformSettings
from autoscaler.model.clock import Clock, utc_now

ROLE_TAG = "gpu-autoscaler/role"
BUILDER_TAG = "gpu-autoscaler/builder"  # on an image: the builder instance it was made of
IMAGES_TYPE = "map(object({source = string, hash = string}))"


@dataclass(frozen=True)
class Builder:
    instance_id: str
    private_ip: str | None


@dataclass(frozen=True)
class KeptImage:
    name: str  # gpu-autoscaler-<team>-<pool>-<hash>-<UTC time of the bake>
    id: str
    source: str  # the builder instance it was made of
    hash: str
    adopted: bool = False  # found untracked and imported (aws_ami.adopted), not made here


def builder_name(team: str, pool: str, started: datetime) -> str:
    """The builder's node name (its ``node`` tag and SSH host key alias): never a node's,
    whose names end in a number, and new for each bake, as its host key is."""
    return f"{team}-{pool}-builder-{started:%Y%m%d%H%M%S}"


def bake_tf(settings: TerraformSettings, team: str, pool: str, region: str,
            inputs: RegionInputs, hash_: str, instance_type: str, name: str) -> dict[str, Any]:
    """The bake's root module (every written value literal, as in rootmodule.py); ``name``
    is the builder's node name."""
    tags = {"team": team, "pool": pool, "managed-by": "gpu-autoscaler"}
    builder: dict[str, Any] = {
        "ami": inputs.ami, "instance_type": instance_type,
        "subnet_id": inputs.subnet_ids[0] if inputs.subnet_ids else None,
        "vpc_security_group_ids": inputs.security_group_ids or None,
        "key_name": inputs.key_name, "iam_instance_profile": inputs.iam_instance_profile,
        "root_block_device": [{"volume_size": inputs.root_volume_gb, "volume_type": "gp3",
                               "delete_on_termination": True}],
        "metadata_options": [{"http_tokens": "required"}],
        "tags": {**tags, "Name": name, "node": name, ROLE_TAG: "builder",
                 rootmodule.HASH_TAG: hash_},
    }
    image_tags = {**rootmodule.literal(tags), "Name": "${each.key}",
                  rootmodule.HASH_TAG: "${each.value.hash}", BUILDER_TAG: "${each.value.source}"}
    # Every image a bake of this pool made, in a state or not. Read after the images
    # changed (depends_on), so an apply's own new and deregistered images are not strays.
    made_here = {"owners": ["self"], "depends_on": ["aws_ami_from_instance.image", "aws_ami.adopted"],
                 "filter": [
        {"name": f"tag:{k}", "values": [rootmodule.literal(v)]} for k, v in tags.items()] + [
        {"name": "tag-key", "values": [BUILDER_TAG]}]}
    return {
        "terraform": {"required_providers": {"aws": rootmodule.PROVIDERS["aws"]},
                      "backend": {"local": {"path": rootmodule.LOCAL_STATE}}},
        "provider": {"aws": rootmodule.literal(rootmodule.provider_config(settings, "aws", region))},
        "variable": {"builder": {"type": "bool", "default": False},
                     "images": {"type": IMAGES_TYPE, "default": {}},
                     "adopted": {"type": "set(string)", "default": []}},
        "data": {"aws_ami_ids": {"made": made_here}},
        "import": [{"for_each": "${var.adopted}", "to": "aws_ami.adopted[each.key]",
                    "id": "${each.value}"}],
        "resource": {
            "aws_instance": {"builder": {**rootmodule.literal(builder),
                                         "count": "${var.builder ? 1 : 0}"}},
            "aws_ami_from_instance": {"image": {
                "for_each": "${var.images}", "name": "${each.key}",
                "source_instance_id": "${each.value.source}", "tags": image_tags}},
            # The state holds what the import read; the configuration is never applied.
            "aws_ami": {"adopted": {"for_each": "${var.adopted}", "name": "${each.key}",
                                    "lifecycle": {"ignore_changes": "all"}}},
        },
        "output": {
            "builder": {"value": '${try(aws_instance.builder[0].id, "")}'},
            "builder_ip": {"value": '${try(aws_instance.builder[0].private_ip, "")}'},
            "images": {"value": "${{for k, v in aws_ami_from_instance.image : k => "
                                "{id = v.id, source = var.images[k].source, "
                                "hash = var.images[k].hash}}}"},
            "adopted": {"value": "${{for k, v in aws_ami.adopted : k => {name = v.name, "
                                 f'source = lookup(v.tags, "{BUILDER_TAG}", ""), '
                                 f'hash = lookup(v.tags, "{rootmodule.HASH_TAG}", "")}}}}}}'},
            "untracked": {"value": "${sort(setsubtract(data.aws_ami_ids.made.ids, concat("
                                   "values(aws_ami_from_instance.image)[*].id, "
                                   "values(aws_ami.adopted)[*].id)))}"},
        },
    }


class BakeWorkspace:
    def __init__(self, settings: TerraformSettings, team: str, pool: str, region: str, *,
                 hash_: str, instance_type: str, inputs: RegionInputs | None = None,
                 clock: Clock = utc_now):
        found = inputs or settings.inputs_for("aws", region)
        if found is None:
            raise ValueError(f"no Terraform inputs for aws/{region}")
        started: datetime = clock()
        self.hash = hash_
        self.builder_name = builder_name(team, pool, started)
        self.image_name = f"gpu-autoscaler-{team}-{pool}-{hash_}-{started:%Y%m%d%H%M%S}"
        self.settings = settings
        self.dir = (Path(settings.workdir) / team / pool / "bake").resolve()
        self.main = bake_tf(settings, team, pool, region, found, hash_, instance_type,
                            self.builder_name)
        self.runner = Runner(self.dir, self.dir / "terraformrc", settings.terraform_bin,
                             settings.command_timeout_s)
        self._initialized = False
        self.adopted: list[KeptImage] = []  # by the last finish()

    def _init(self) -> None:
        if self._initialized:
            return
        self.dir.mkdir(parents=True, exist_ok=True)
        (self.dir / "main.tf.json").write_text(json.dumps(self.main, indent=2) + "\n")
        (self.dir / "terraformrc").write_text(rootmodule.cli_config(self.settings))
        self.runner.run("init", input=False)
        self._initialized = True

    def _outputs(self) -> dict[str, Any]:
        shown = self.runner.run("output", json=FLAG)
        return {k: v["value"] for k, v in json.loads(shown.stdout or "{}").items()}

    def images(self) -> list[KeptImage]:
        """The images the pool's bakes made and keep, adopted ones included, oldest first
        (by the bake's time, the end of the name)."""
        self._init()
        return _kept(self._outputs())

    def untracked(self) -> list[str]:
        """Ids of the pool's images in no state, as the last apply left them."""
        self._init()
        return _untracked(self._outputs())

    def _apply(self, builder: bool, images: list[KeptImage]) -> dict[str, Any]:
        self._init()
        tfvars = {"builder": builder,
                  "images": {i.name: {"source": i.source, "hash": i.hash}
                             for i in images if not i.adopted},
                  "adopted": sorted(i.id for i in images if i.adopted)}
        (self.dir / "terraform.tfvars.json").write_text(json.dumps(tfvars, indent=2))
        self.runner.run("apply", auto_approve=FLAG, input=False)
        return self._outputs()

    def launch_builder(self) -> Builder:
        out = self._apply(True, self.images())
        return Builder(out["builder"], out.get("builder_ip") or None)

    def make_image(self, builder: Builder) -> str:
        """The id of a new image of ``builder``, tagged with the hash."""
        new = KeptImage(self.image_name, "", builder.instance_id, self.hash)
        kept = [i for i in self.images() if i.name != new.name]
        return str(self._apply(True, [*kept, new])["images"][new.name]["id"])

    def finish(self, keep: int | None = None) -> list[KeptImage]:
        """Destroy the builder; with ``keep``, deregister all but the newest ``keep``
        images. Then adopt the pool's untracked images, if the apply's plan saw any, and
        count them too (so a failed bake adopts what it left, and the next one counts it).
        Returns the images deregistered; ``self.adopted``: those adopted."""
        images = self.images()
        kept = _newest(images, keep)
        out = self._apply(False, kept)
        gone = [i for i in images if i not in kept]
        strays = _untracked(out)
        self.adopted = []
        if strays:
            images = _kept(self._apply(False, [*kept, *(KeptImage("", id_, "", "", adopted=True)
                                                        for id_ in strays)]))
            self.adopted = [i for i in images if i.id in strays]
            kept = _newest(images, keep)
            if kept != images:
                self._apply(False, kept)
                gone += [i for i in images if i not in kept]
        return gone


def _kept(outputs: dict[str, Any]) -> list[KeptImage]:
    """The kept images in a workspace's outputs, oldest first (by the bake's time, the end
    of the name)."""
    found = [KeptImage(name, v["id"], v["source"], v["hash"])
             for name, v in (outputs.get("images") or {}).items()]
    found += [KeptImage(v["name"], id_, v["source"], v["hash"], adopted=True)
              for id_, v in (outputs.get("adopted") or {}).items()]
    return sorted(found, key=lambda i: (i.name.rsplit("-", 1)[-1], i.name))


def _untracked(outputs: dict[str, Any]) -> list[str]:
    return [str(i) for i in outputs.get("untracked") or []]


def _newest(images: list[KeptImage], keep: int | None) -> list[KeptImage]:
    """All of ``images`` (oldest first) without ``keep``, else the newest ``keep``."""
    return images if keep is None else images[max(0, len(images) - keep):]

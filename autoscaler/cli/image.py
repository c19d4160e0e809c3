"""``gpu-autoscaler image bake|list TEAM/POOL --config FILE``: a pool's baked images.

``bake`` makes one with the service's own Terraform settings, playbook and address resolver
(``actuators/image_bake.py`` says how); ``list`` shows the pool's bootstrap hash and the
images its bakes keep, and whether its nodes would launch from one of them.
"""

from __future__ import annotations

import logging
from pathlib import Path
from typing import Annotated

import typer

from autoscaler.actuators.ansible import AnsibleActuator, AnsibleError
from autoscaler.actuators.bootstrap_hash import baked_images
from autoscaler.actuators.image_bake import BakeError, bake_pool
from autoscaler.actuators.terraform import TerraformError
from autoscaler.actuators.terraform.bake import BakeWorkspace
from autoscaler.catalog import Catalog
from autoscaler.cli.common import catalog_from, console, fail
from autoscaler.cli.run import CONFIG_HELP, read_config
from autoscaler.policy import PolicyLoadError, load_policies
from autoscaler.policy.models import Pool, TeamPolicy, find_pool
from autoscaler.service.config.addresses import make_resolver
from autoscaler.service.config.models import ServiceConfig

image_app = typer.Typer(help="Baked images of pools with bootstrap.image: baked: make one, "
                        "list them.", no_args_is_help=True)
ConfigOption = Annotated[Path, typer.Option("--config", "-c", help=CONFIG_HELP, exists=True,
                                            dir_okay=False)]
PoolArg = Annotated[str, typer.Argument(help="The pool, as TEAM/POOL.", metavar="TEAM/POOL")]


def _load(config: Path, pool_ref: str) -> tuple[ServiceConfig, Catalog, dict[str, TeamPolicy],
                                                 str, Pool]:
    cfg = read_config(config)
    team, sep, name = pool_ref.partition("/")
    if not sep or not team or not name or "/" in name:
        fail(f"{pool_ref!r} is not TEAM/POOL")
    catalog = catalog_from(cfg.prices_file)
    try:
        policies = load_policies(cfg.policies_dir, catalog)
    except PolicyLoadError as exc:
        fail(f"policies in {cfg.policies_dir} are invalid:\n{exc}")
    pool = find_pool(policies, team, name)
    if pool is None:
        fail(f"no pool {pool_ref} in {cfg.policies_dir}")
    return cfg, catalog, policies, team, pool


@image_app.command("bake")
def bake(pool_ref: PoolArg, config: ConfigOption,
         instance_type: Annotated[str | None, typer.Option(
             "--instance-type", help="The builder's type; default: the pool's first. The "
             "image-time part checks the driver on its GPUs.")] = None) -> None:
    """Bake the pool's image with its own bootstrap playbook.

    A builder from the base image, the image-time part of the playbook on it (--tags
    image), an image tagged with the pool's bootstrap hash, the builder destroyed (also on
    failure) and images past bootstrap.images_kept deregistered. The pool's next launches
    use it; its nodes then run only --tags node. Takes minutes on a real cloud (a driver
    install and a reboot). Killed midway, run it again: it finishes the builder it left."""
    cfg, catalog, policies, team, pool = _load(config, pool_ref)
    if instance_type is not None and instance_type not in pool.instance_types:
        fail(f"--instance-type {instance_type} is not one of the pool's types "
             f"({', '.join(pool.instance_types)})")
    logging.basicConfig(level=logging.WARNING, format="%(levelname)s %(name)s: %(message)s")
    actuator = AnsibleActuator(cfg.ansible, make_resolver(cfg.addresses), catalog=catalog)
    try:
        result = bake_pool(policies, team, pool.name, terraform=cfg.terraform,
                           ansible=actuator, address_of=make_resolver(cfg.addresses),
                           instance_type=instance_type,
                           say=lambda line: console.print(line, highlight=False))
    except (BakeError, TerraformError, AnsibleError) as exc:
        fail(f"bake of {pool_ref} failed: {exc}")
    steps = ", ".join(f"{k} {v:.0f} s" for k, v in result.seconds.items())
    console.print(f"baked {result.image} for {result.pool} (bootstrap hash {result.hash}); "
                  f"{steps}", highlight=False)


@image_app.command("list")
def list_images(pool_ref: PoolArg, config: ConfigOption) -> None:
    """The pool's bootstrap hash and the images its bakes keep.

    Newest last. The pool's nodes launch from the newest image with the current hash; with
    none, the pool is stale and does what bootstrap.when_stale says. Also lists the pool's
    images that no state held when its last bake ended (a CreateImage whose answer was
    lost): the next bake adopts them and counts them in bootstrap.images_kept. Reads the
    bake's Terraform state (terraform output): no cloud call."""
    cfg, _, policies, team, pool = _load(config, pool_ref)
    image = baked_images({team: policies[team]}, cfg.terraform, cfg.ansible).get(
        f"{team}/{pool.name}")
    if pool.bootstrap.image != "baked":
        fail(f"pool {pool_ref} has bootstrap.image: base: it launches from the base image")
    if image is None:
        fail(f"no Terraform inputs for {pool.cloud.value}/{pool.region} (terraform.regions)")
    ws = BakeWorkspace(cfg.terraform, team, pool.name, pool.region, hash_=image.hash,
                       instance_type=pool.instance_types[0])
    try:
        kept, untracked = ws.images(), ws.untracked()
    except TerraformError as exc:
        fail(f"cannot read the bake state of {pool_ref}: {exc}")
    console.print(f"{pool_ref}: bootstrap hash {image.hash}, images kept "
                  f"{pool.bootstrap.images_kept}, when stale: {pool.bootstrap.when_stale}",
                  highlight=False)
    if pool.bootstrap.prepull:
        console.print(f"pre-pulls (bootstrap.prepull, in the hash): "
                      f"{', '.join(pool.bootstrap.prepull)}", highlight=False)
    for item in kept:
        mark = "current" if item.hash == image.hash else "stale"
        mark += ", adopted: no state held it" if item.adopted else ""
        console.print(f"  {item.id}  {item.name}  hash {item.hash}  ({mark})", highlight=False)
    if untracked:
        console.print(f"untracked (in no state when the last bake ended; the next bake adopts "
                      f"them): {', '.join(untracked)}", highlight=False)
    if not any(i.hash == image.hash for i in kept):
        console.print(f"stale: no image of this pool's bakes has hash {image.hash}; run "
                      f"`gpu-autoscaler image bake {pool_ref}`", highlight=False)


def register(app: typer.Typer) -> None:
    app.add_typer(image_app, name="image")

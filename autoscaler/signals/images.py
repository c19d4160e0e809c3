"""Baked pools' images: the snapshot's ``PoolObservation.image`` (model/snapshot.py).

For each pool with ``bootstrap.image: baked`` (aws only), the cloud is asked for the
account's own available images tagged with the pool's bootstrap hash; the newest is the
one its next launch uses, none means the pool's image is stale (engine/stale_image.py holds
its launches when ``when_stale`` is hold).

==========================  ==========================================================
what the cloud said         the pool's ``image``
==========================  ==========================================================
images with the hash        ``ImageObservation(hash, image_id=the newest)``
no image with the hash      ``ImageObservation(hash, image_id=None)``: stale
an error, no AWS adapter    absent (not known): the engine decides as usual; the error is
                            logged once until it changes, never a hold
==========================  ==========================================================

Each (region, hash) is asked once per ``interval`` (failures too), so a tick every few
seconds does not cost a DescribeImages call each. Pools of the same hash share the answer.
The hashes themselves come from the tick's policies (the service passes
``bootstrap_hash.baked_images``): with a baked pool that reads the image-time roles' files
each tick (a few milliseconds), so a reload that changes a hash is seen at once.
"""

from __future__ import annotations

import logging
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from datetime import timedelta
from typing import Protocol, runtime_checkable

from pydantic import ValidationError

from autoscaler.clouds.base import CloudError, MachineImage, TtlCache
from autoscaler.model.clock import Clock, utc_now
from autoscaler.model.snapshot import ImageObservation
from autoscaler.policy.models import TeamPolicy, pool_key

log = logging.getLogger(__name__)

# policies -> pool key -> bootstrap hash, for the baked pools (actuators/bootstrap_hash.py)
Hashes = Callable[[Mapping[str, TeamPolicy]], Mapping[str, str]]
# region -> the AWS adapter of that region (the service's Markets, kept between ticks)
SourceFor = Callable[[str], object]


@runtime_checkable
class ImageSource(Protocol):
    def images_tagged(self, key: str, value: str) -> list[MachineImage]: ...


@dataclass(frozen=True)
class _Read:
    image: ImageObservation | None  # None: the read failed


class BakedImageReader:
    """Pool key -> :class:`ImageObservation` of every baked pool whose image is known."""

    def __init__(self, hashes: Hashes, source_for: SourceFor, *, tag: str,
                 interval: timedelta, clock: Clock = utc_now):
        self.hashes, self.source_for, self.tag = hashes, source_for, tag
        self._cache: TtlCache[tuple[str, str], _Read] = TtlCache(interval, clock)
        self._logged: dict[tuple[str, str], str] = {}  # the last error logged per (region, hash)

    def observe(self, policies: Mapping[str, TeamPolicy]) -> dict[str, ImageObservation]:
        hashes = self.hashes(policies)
        out: dict[str, ImageObservation] = {}
        asked: set[tuple[str, str]] = set()
        for policy in policies.values():
            for pool in policy.pools:
                key = pool_key(policy.team, pool.name)
                digest = hashes.get(key)
                if digest is None or pool.bootstrap.image != "baked" or pool.cloud.value != "aws":
                    continue
                asked.add((pool.region, digest))
                image = self._read(pool.region, digest)
                if image is not None:
                    out[key] = image
        # Only the (region, hash) pairs of this tick's pools: each image change adds a new one.
        self._logged = {where: text for where, text in self._logged.items() if where in asked}
        return out

    def _read(self, region: str, digest: str) -> ImageObservation | None:
        where = (region, digest)
        cached = self._cache.get(where)
        if cached is not None:
            return cached.image
        try:
            image = self._ask(region, digest)
        except (CloudError, ValidationError) as exc:
            text = str(exc)
            if self._logged.get(where) != text:
                self._logged[where] = text
                log.warning("baked images of %s=%s in aws %s not read (the engine decides as "
                            "if not known): %s (logged once until it changes)",
                            self.tag, digest, region, text)
            image = None
        else:
            if self._logged.pop(where, None) is not None:
                log.info("baked images of %s=%s in aws %s read again", self.tag, digest, region)
        self._cache.put(where, _Read(image))
        return image

    def _ask(self, region: str, digest: str) -> ImageObservation:
        source = self.source_for(region)
        if not isinstance(source, ImageSource):
            raise CloudError(f"the adapter of aws {region} cannot list images")
        images = source.images_tagged(self.tag, digest)
        return ImageObservation(hash=digest, image_id=images[0].image_id if images else None)


__all__ = ["BakedImageReader", "Hashes", "ImageSource", "SourceFor"]

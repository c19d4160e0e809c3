"""Checks that need no other system: the secrets the config names, the HTTP token rule,
the user Ansible logs in to nodes as, and a price for every instance type of every pool."""

from __future__ import annotations

from autoscaler.catalog import CatalogError
from autoscaler.clouds import CloudError
from autoscaler.service.config.models import ServiceConfig
from autoscaler.service.doctor.context import Context
from autoscaler.service.doctor.report import Result, fail, ok, warn
from autoscaler.service.http.api import is_loopback
from autoscaler.service.wiring import Markets
from autoscaler.signals.prices import region_offerings, wants


def secrets(ctx: Context) -> list[Result]:
    """Every secret the file names can be read (never printed), and an API beyond
    loopback has a token (the same rule ``run`` refuses to start without)."""
    problems = ctx.config.check_secrets()
    if problems:
        return [fail("secrets", "; ".join(problems))]
    return [ok("secrets", _http_summary(ctx.config))]


def _http_summary(config: ServiceConfig) -> str:
    http = config.http
    if not http.enabled:
        return "http off; every named secret readable"
    token = "a token" if http.token_env or http.token_file else "no token"
    where = "loopback" if is_loopback(http.host) else "not loopback"
    return f"http.listen {http.listen} ({where}) with {token}; every named secret readable"


def ssh_user(ctx: Context) -> list[Result]:
    """Logging in to nodes as root is a warning, not a failure: it works where the image
    allows it (the sandbox's test hosts do), but cloud images refuse root over SSH, and a
    user of the image's own with sudo (``become``) leaves root logins off on every node."""
    a = ctx.config.ansible
    if a.ssh_user == "root":
        return [warn("ssh user", "ansible.ssh_user is root (the default): nodes must allow "
                                 "root logins over SSH; set the image's own user (admin on "
                                 "Debian, ubuntu, ec2-user), which the plays use with sudo")]
    become = a.become if a.become is not None else True
    return [ok("ssh user", f"{a.ssh_user}@node:{a.ssh_port}, "
                           f"{'with sudo (become)' if become else 'without sudo (become: false)'}")]


def prices(ctx: Context) -> list[Result]:
    """Each (cloud, region, type) of the pools has a price: from the market when
    ``clouds.market_prices`` is on, else (or as the fallback) the catalog's."""
    observed: set[tuple[str, str, str]] = set()
    notes: list[str] = []
    if ctx.config.clouds.market_prices:
        markets = Markets(ctx.config, ctx.catalog)
        for want in wants(ctx.policies):
            try:
                found, gaps = region_offerings(markets(want.cloud, want.region), want)
            except CloudError as exc:
                notes.append(str(exc))
                continue
            notes += gaps
            observed |= {(o.cloud, o.region, o.instance_type) for o in found
                         if o.on_demand_usd is not None or o.spot_usd is not None}
    unpriced, priced = [], set()
    for team, pool in ctx.pools():
        for name in pool.instance_types:
            key = (pool.cloud.value, pool.region, name)
            if key not in observed:
                try:
                    ctx.catalog.on_demand_usd(pool.cloud.value, name, pool.region)
                except CatalogError:
                    unpriced.append(f"{team}/{pool.name} {name}")
                    continue
            priced.add(key)
    if unpriced:
        return [fail("prices", f"no price for {', '.join(unpriced)}: add it to the price "
                               "file (prices_file)")]
    source = "market and catalog" if ctx.config.clouds.market_prices else "catalog"
    # Market gaps are not failures (the catalog's price is used), but worth a look.
    note = f"; {len(notes)} market gap(s), first: {notes[0]}" if notes else ""
    return [ok("prices", f"{len(priced)} type(s) across {len(ctx.pools())} pool(s) priced "
                         f"({source}){note}")]

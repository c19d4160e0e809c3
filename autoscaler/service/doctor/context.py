"""What every check reads: the loaded config, its catalog and policies, and the store's
nodes. Loading them is the first check; when it fails nothing else can be checked."""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path

from autoscaler.catalog import Catalog, CatalogError, load_catalog
from autoscaler.model.lifecycle import METERED
from autoscaler.model.node import Node
from autoscaler.policy import load_dir
from autoscaler.policy.models import Pool, TeamPolicy
from autoscaler.secrets import SecretError
from autoscaler.service.app import ServiceError
from autoscaler.service.config.load import ConfigError, load_config
from autoscaler.service.config.models import ServiceConfig
from autoscaler.service.doctor.report import Result, fail, ok
from autoscaler.service.wiring import open_store


@dataclass
class Context:
    path: Path
    config: ServiceConfig
    catalog: Catalog
    policies: dict[str, TeamPolicy]
    nodes: list[Node] | None = None  # None: the store could not be read
    rows: list[Result] = field(default_factory=list)  # what loading found

    def pools(self) -> list[tuple[str, Pool]]:
        return [(team, pool) for team, policy in sorted(self.policies.items())
                for pool in policy.pools]

    def uses(self, kind: str) -> list[str]:
        """``team/pool`` of the pools whose cluster is ``kind`` (slurm, kubernetes)."""
        return [f"{team}/{pool.name}" for team, pool in self.pools() if pool.cluster.kind == kind]


def load(path: Path) -> tuple[Context | None, list[Result]]:
    """The context, or None with the row that says why the config cannot be used."""
    try:
        config = load_config(path)
    except ConfigError as exc:
        first = exc.errors[0] if exc.errors else exc
        more = f" (and {len(exc.errors) - 1} more)" if len(exc.errors) > 1 else ""
        return None, [fail("config", f"{first}{more}")]
    except OSError as exc:
        return None, [fail("config", f"cannot read {path}: {exc.strerror}")]
    rows = [ok("config", f"{path}: valid")]
    try:
        catalog = load_catalog(config.prices_file)
    except CatalogError as exc:
        return None, [*rows, fail("policies", f"price file: {exc}")]
    policies, errors = load_dir(config.policies_dir, catalog)
    pools = sum(len(p.pools) for p in policies.values())
    if errors:
        more = f" (and {len(errors) - 1} more)" if len(errors) > 1 else ""
        rows.append(fail("policies", f"{errors[0]}{more}"))
    elif not policies:
        rows.append(fail("policies", f"no team policy in {config.policies_dir}"))
    else:
        rows.append(ok("policies", f"{len(policies)} team(s), {pools} pool(s) in "
                                   f"{config.policies_dir}"))
    context = Context(Path(path), config, catalog, policies)
    rows.append(_store(context))
    context.rows = rows
    return context, rows


def _store(context: Context) -> Result:
    """Open the store as ``run`` does (an empty one is created at the schema's head)."""
    try:
        store = open_store(context.config)
    except (ServiceError, SecretError) as exc:
        return fail("store", str(exc))
    try:
        context.nodes = store.nodes()
    finally:
        store.close()
    live = sum(1 for n in context.nodes if n.state in METERED)
    return ok("store", f"{context.config.store.display_url()}: {len(context.nodes)} node(s), "
                       f"{live} ready or draining")

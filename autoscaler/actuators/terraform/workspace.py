"""One pool's Terraform workspace: its own root module, state, lock and saved plan.

Layout under ``settings.workdir/<team>/<pool>/`` (shard 0; shard k of the pool in its
``shards/k/``, see shards.py)::

    main.tf.json            root module (provider, backend, module call)
    terraform.tfvars.json   node map + user data (0600)
    terraformrc             CLI config: filesystem mirror only, no checkpoint
    applied-nodes.json      node map of the last successful apply
    plan/pending.tfplan     saved plan + plan/pending.json (its PoolPlan)
    logs/<command>.log      last output of each terraform command
"""

from __future__ import annotations

import contextlib
import hashlib
import json
from pathlib import Path
from typing import Any

from pydantic import BaseModel, ConfigDict, Field

from autoscaler.actuators.node_map import NodeMap, NodeSpec
from autoscaler.actuators.terraform import rootmodule, shards
from autoscaler.actuators.terraform.errors import (
    Diagnostic,
    NodeTarget,
    PlanNotFoundError,
    ProviderUnavailableError,
    StalePlanError,
    TerraformError,
    capacity_errors,
    classify,
)
from autoscaler.actuators.terraform.planfile import (
    ImageChoice,
    PoolPlan,
    image_choice,
    node_changes,
    state_nodes,
)
from autoscaler.actuators.terraform.runner import FLAG, Result, Runner
from autoscaler.actuators.terraform.settings import LocalBackend, RegionInputs, TerraformSettings
from autoscaler.model.clock import Clock, utc_now
from autoscaler.model.snapshot import CapacityError
from autoscaler.policy.models import pool_key


class NodeOutput(BaseModel):
    """One node's instance, from the pool module's ``nodes`` output or the state."""

    model_config = ConfigDict(frozen=True, extra="forbid")

    id: str
    private_ip: str | None = None
    lifecycle: str
    image: str | None = Field(None, description="The AMI (aws) or ECS image id (alicloud) the "
                              "instance was launched from; None where it is not known.")
    baked: bool = Field(False, description="Launched from its pool's baked image: set by the "
                        "provisioner (TerraformProvisioner), never by the module; such a node "
                        "runs only the node-time part of the bootstrap (``--tags node``).")


class ApplyResult(BaseModel):
    """What an apply did. On failure the pool may be half-applied: ``nodes`` is what the
    state holds afterwards, ``failed`` the nodes that could not be created or changed."""

    model_config = ConfigDict(frozen=True, extra="forbid")

    pool: str
    ok: bool
    nodes: dict[str, NodeOutput] = Field(default_factory=dict)
    created: list[str] = Field(default_factory=list)
    destroyed: list[str] = Field(default_factory=list)
    failed: dict[str, str] = Field(default_factory=dict, description="node -> error text")
    capacity_errors: list[CapacityError] = Field(default_factory=list)
    errors: list[str] = Field(default_factory=list, description="Errors not tied to a node.")
    seconds: float = 0.0


class PoolWorkspace:
    def __init__(self, settings: TerraformSettings, team: str, pool: str, cloud: str,
                 region: str, *, inputs: RegionInputs | None = None, clock: Clock = utc_now,
                 shard: int = 0, image: rootmodule.BakedImage | None = None):
        self.settings = settings
        self.image = image  # None: bootstrap.image base (the region's ami, as always)
        self.team, self.pool, self.cloud, self.region = team, pool, cloud, region
        self.shard = shard
        found = inputs or settings.inputs_for(cloud, region)
        if found is None:
            raise TerraformError(f"no Terraform inputs for {cloud}/{region}: add "
                                 f"regions: {{{cloud}/{region}: {{ami: ...}}}} to the settings")
        self.inputs = found
        self.clock = clock
        self.dir = shards.directory((Path(settings.workdir) / team / pool).resolve(), shard)
        self.runner = Runner(self.dir, self.dir / "terraformrc", settings.terraform_bin,
                             settings.command_timeout_s)
        self._initialized = False

    @property
    def key(self) -> str:
        return pool_key(self.team, self.pool)

    @property
    def label(self) -> str:
        """The pool key, with ``#k`` for shard k > 0: what messages name."""
        return self.key if self.shard == 0 else f"{self.key}#{self.shard}"

    @property
    def plan_json_path(self) -> Path:
        return self.dir / "plan" / "pending.json"

    # -- files -------------------------------------------------------------------------
    def write_config(self, nodes: NodeMap | None = None) -> None:
        self.dir.mkdir(parents=True, exist_ok=True)
        main = rootmodule.main_tf(self.settings, self.dir, self.team, self.pool, self.cloud,
                                  self.region, self.inputs, self.shard, self.image)
        _write_if_changed(self.dir / "main.tf.json", json.dumps(main, indent=2) + "\n")
        _write_if_changed(self.dir / "terraformrc", rootmodule.cli_config(self.settings))
        tfvars = self.dir / "terraform.tfvars.json"
        if nodes is not None or not tfvars.exists():
            launching = bool(set(nodes or {}) - set(self.applied_nodes()))
            rootmodule.write_private(tfvars, json.dumps(
                rootmodule.tfvars(nodes or {}, self.inputs, self.image, launching),
                indent=2) + "\n")
        elif self.image is not None:
            # A refresh or destroy launches nothing: a hold left by the last plan must not
            # fail it (when_stale: hold).
            values = json.loads(tfvars.read_text())
            if values.get("hold_if_stale"):
                values["hold_if_stale"] = False
                rootmodule.write_private(tfvars, json.dumps(values, indent=2) + "\n")

    def applied_nodes(self) -> NodeMap:
        path = self.dir / "applied-nodes.json"
        if not path.exists():
            return {}
        return {k: NodeSpec.model_validate(v) for k, v in json.loads(path.read_text()).items()}

    def _record_applied(self, nodes: NodeMap) -> None:
        data = {k: v.model_dump(mode="json") for k, v in sorted(nodes.items())}
        rootmodule.write_private(self.dir / "applied-nodes.json", json.dumps(data, indent=2))

    # -- commands ----------------------------------------------------------------------
    def init(self, *, again: bool = False) -> None:
        """``terraform init`` once per workspace (again only if the root module changed, or
        when asked: the doctor checks the provider mirror, which the root module does not
        name)."""
        self.write_config()
        stamp = self.dir / ".terraform" / "gpu-autoscaler-init"
        digest = _sha256(self.dir / "main.tf.json")
        if not again and (self._initialized or (stamp.exists() and stamp.read_text() == digest)):
            self._initialized = True
            return
        try:
            self.runner.run("init", reconfigure=FLAG, input=False, lock_timeout=self.settings.lock_timeout)
        except TerraformError as exc:
            if "Failed to query available provider packages" in str(exc) or \
                    "Failed to resolve provider packages" in str(exc):
                raise ProviderUnavailableError(
                    f"pool {self.label}: the {self.cloud} provider is not in the mirror "
                    f"{self.settings.plugin_mirror}", exc.detail) from exc
            raise
        stamp.write_text(digest)
        self._initialized = True

    def plan(self, nodes: NodeMap) -> PoolPlan:
        """``terraform plan -out`` for ``nodes``; saved with its state serial for apply."""
        self.init()
        self.write_config(nodes)
        out = self.dir / "plan" / "pending.tfplan"
        out.parent.mkdir(exist_ok=True)
        state = self.pull_state()
        result = self.runner.run(
            "plan", json_lines=True, ok_codes=(0, 2), detailed_exitcode=FLAG, input=False,
            out=str(out), refresh=self.settings.refresh, parallelism=self.settings.parallelism,
            lock_timeout=self.settings.lock_timeout)
        changes = node_changes(result.events, nodes, state_nodes(state))
        pool_plan = PoolPlan(
            pool=self.key, shard=self.shard, cloud=self.cloud, region=self.region, plan_file=out,
            plan_sha256=_sha256(out), nodes=nodes, changes=changes,
            state_serial=state.get("serial"), state_lineage=state.get("lineage"),
            planned_at=self.clock(), seconds=result.seconds, image=self._image_choice(out))
        rootmodule.write_private(self.plan_json_path, pool_plan.model_dump_json(indent=2))
        return pool_plan

    def _image_choice(self, plan_file: Path) -> ImageChoice | None:
        """Baked pools: which image the plan launches from. The plan's JSON events do not
        carry output values, so this costs one ``terraform show`` (baked pools only)."""
        if self.image is None:
            return None
        shown = self.runner.run("show", str(plan_file), json=FLAG)
        return image_choice(json.loads(shown.stdout), self.image.when_stale)

    def pending_plan(self) -> PoolPlan:
        if not self.plan_json_path.exists():
            raise PlanNotFoundError(f"pool {self.label}: no saved plan; run `gpu-autoscaler plan`")
        return PoolPlan.model_validate_json(self.plan_json_path.read_text())

    def discard_plan(self) -> None:
        self.plan_json_path.unlink(missing_ok=True)
        (self.dir / "plan" / "pending.tfplan").unlink(missing_ok=True)

    def apply(self, pool_plan: PoolPlan) -> ApplyResult:
        """Apply exactly the saved plan file; refuse it if the state moved on since."""
        self._check_fresh(pool_plan)
        previous = self.applied_nodes()
        result = self.runner.run("apply", str(pool_plan.plan_file), json_lines=True,
                                 ok_codes=(0, 1), input=False,
                                 parallelism=self.settings.parallelism,
                                 lock_timeout=self.settings.lock_timeout)
        self.discard_plan()
        return self._applied(result, pool_plan.nodes, previous)

    def converge(self, nodes: NodeMap) -> ApplyResult:
        """Make the pool hold exactly ``nodes`` in one ``terraform apply``: the executor's
        way. It plans and applies under one state lock, so no saved plan can go stale in
        between, and the provider is started once instead of twice (~5 s of CPU each).
        What an operator previews and then applies goes through plan() and apply()."""
        self.init()
        previous = self.applied_nodes()
        self.write_config(nodes)
        result = self.runner.run("apply", json_lines=True, ok_codes=(0, 1), input=False,
                                 auto_approve=FLAG, refresh=self.settings.refresh,
                                 parallelism=self.settings.parallelism,
                                 lock_timeout=self.settings.lock_timeout)
        return self._applied(result, nodes, previous)

    def _applied(self, result: Result, nodes: NodeMap, previous: NodeMap) -> ApplyResult:
        """What an apply of ``nodes`` did, from its JSON events; the applied map recorded."""
        if result.returncode != 0:
            self._raise_unless_node_errors(result.diagnostics)
        applied = _applied_outputs(result.events)
        outputs = self.outputs() if applied is None else applied
        done = _completed(result.events)
        failed = {d.node: d.text for d in result.diagnostics if d.severity == "error" and d.node}
        targets = {n: NodeTarget(s.instance_type, s.market, s.zone) for n, s in nodes.items()}
        caps = capacity_errors(result.diagnostics, targets, self.cloud, self.region, self.clock())
        ok = result.returncode == 0
        if ok:
            self._record_applied(nodes)
        else:
            # Record only what exists, so the next tick plans the pool again.
            self._record_applied({n: nodes.get(n) or previous[n] for n in outputs
                                  if n in nodes or n in previous})
        return ApplyResult(
            pool=self.key, ok=ok, nodes=outputs,
            created=sorted({*done.get("create", []), *done.get("replace", [])}),
            destroyed=sorted({*done.get("delete", []), *done.get("replace", [])}), failed=failed,
            capacity_errors=list(caps.values()),
            errors=[d.text for d in result.diagnostics if d.severity == "error" and not d.node],
            seconds=result.seconds)

    def outputs(self) -> dict[str, NodeOutput]:
        result = self.runner.run("output", "nodes", json=FLAG, ok_codes=(0, 1))
        if result.returncode != 0 or not result.stdout.strip():
            return {}  # no state yet
        return _node_outputs(json.loads(result.stdout))

    def refresh(self) -> dict[str, NodeOutput]:
        """Read every instance from the cloud into the state (``apply -refresh-only``);
        returns the nodes that still exist."""
        self.init()
        self.runner.run("apply", json_lines=True, refresh_only=FLAG, auto_approve=FLAG,
                        input=False, parallelism=self.settings.parallelism,
                        lock_timeout=self.settings.lock_timeout)
        return self.outputs()

    def destroy_all(self) -> None:
        self.init()
        self.runner.run("destroy", auto_approve=FLAG, input=False,
                        parallelism=self.settings.parallelism,
                        lock_timeout=self.settings.lock_timeout)
        self._record_applied({})
        self.discard_plan()

    def pull_state(self) -> dict[str, Any]:
        """The pool's current state ({} before the first apply). A local state is read
        from its file, which is what ``terraform state pull`` prints for it: that command
        costs ~0.7 s of CPU, and the reconciler and every apply read each shard's state.
        Any other backend, or a local file caught mid-write, goes through Terraform."""
        if isinstance(self.settings.backend, LocalBackend):
            try:
                text = (self.dir / rootmodule.LOCAL_STATE).read_text()
            except FileNotFoundError:
                return {}
            with contextlib.suppress(json.JSONDecodeError):
                state = json.loads(text) if text.strip() else {}
                if isinstance(state, dict):
                    return state
        result = self.runner.run("state pull")
        return json.loads(result.stdout) if result.stdout.strip() else {}

    def state_version(self) -> tuple[int | None, str | None]:
        state = self.pull_state()
        return state.get("serial"), state.get("lineage")

    # -- helpers -----------------------------------------------------------------------
    def _check_fresh(self, pool_plan: PoolPlan) -> None:
        if (pool_plan.pool, pool_plan.shard) != (self.key, self.shard):
            raise TerraformError(f"plan for {pool_plan.label} given to workspace {self.label}")
        if not pool_plan.plan_file.exists():
            raise PlanNotFoundError(f"pool {self.label}: plan file {pool_plan.plan_file} is gone")
        if _sha256(pool_plan.plan_file) != pool_plan.plan_sha256:
            raise StalePlanError(f"pool {self.label}: plan file changed since it was previewed")
        self.init()
        serial, lineage = self.state_version()
        if (serial, lineage) != (pool_plan.state_serial, pool_plan.state_lineage):
            raise StalePlanError(
                f"pool {self.label}: the plan from {pool_plan.planned_at:%Y-%m-%d %H:%M:%S} was "
                f"made against state serial {pool_plan.state_serial}, the state is now at "
                f"serial {serial}; run `gpu-autoscaler plan` again")

    def _raise_unless_node_errors(self, diagnostics: list[Diagnostic]) -> None:
        """An apply that failed only on some nodes is a half-applied pool, not an error;
        anything else (lock, stale plan, provider) is raised."""
        errors = [d for d in diagnostics if d.severity == "error"]
        if not errors or any(d.node is None for d in errors):
            raise classify(f"terraform apply failed for pool {self.label}", errors)


def _node_outputs(value: Any) -> dict[str, NodeOutput]:
    return {name: NodeOutput.model_validate(v) for name, v in (value or {}).items()}


def _applied_outputs(events: list[dict[str, Any]]) -> dict[str, NodeOutput] | None:
    """The ``nodes`` output from the apply's own closing ``outputs`` message, which a
    completed apply prints with its values; None when it did not (a failed apply), so the
    caller asks ``terraform output`` (one process less per apply otherwise: ~0.75 s of CPU)."""
    closing = [e for e in events if e.get("type") == "outputs"]
    nodes = closing[-1].get("outputs", {}).get("nodes") if closing else None
    if not isinstance(nodes, dict) or "value" not in nodes or nodes.get("sensitive"):
        return None
    return _node_outputs(nodes["value"])


def _completed(events: list[dict[str, Any]]) -> dict[str, list[str]]:
    """Node names per completed action ("create", "delete", ...) from apply -json."""
    out: dict[str, list[str]] = {}
    for e in events:
        if e.get("type") != "apply_complete":
            continue
        hook = e.get("hook", {})
        node = Diagnostic("info", "", address=hook.get("resource", {}).get("addr", "")).node
        if node:
            out.setdefault(hook.get("action", ""), []).append(node)
    return out


def _sha256(path: Path) -> str:
    return hashlib.sha256(path.read_bytes()).hexdigest()


def _write_if_changed(path: Path, text: str) -> None:
    if not path.exists() or path.read_text() != text:
        path.write_text(text)

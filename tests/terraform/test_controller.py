"""The controller module applied against moto, and its IAM policy proven under enforcement.

One moto server and one apply of ``terraform/modules/controller`` serve the whole module:
first what the apply created is checked (rules -> queue, the queue policy's sender, the
bucket, the instance profile carrying the policy, the controller instance on it); then an
IAM user bound to that policy runs the service's launch, spot notice, reconcile and
terminate path (the real executor, reconciler, notice intake and Terraform with its S3
backend and lock file) with moto's IAM enforcement on, and reads Spot placement scores;
then calls outside the policy are refused; then the module is destroyed.

What moto's enforcement does not prove (moto/iam/access_control.py, 5.2): conditions are
not evaluated (an Allow with a condition counts as granted), and EC2 calls are checked
against resource ``*`` only. So the ``managed-by`` tag scoping of TerminateInstances and
the tag requirement on RunInstances are not proven here; denial is proven with actions
the policy does not grant at all.
"""

from __future__ import annotations

import json
import shutil
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import boto3
import pytest
from botocore.exceptions import ClientError

from autoscaler.actuators.terraform import TerraformSettings
from autoscaler.actuators.terraform.rootmodule import cli_config
from autoscaler.actuators.terraform.runner import FLAG, Runner
from autoscaler.actuators.terraform.settings import DEFAULT_MODULES_DIR
from autoscaler.clouds.aws import AwsCloud, AwsSettings
from autoscaler.model.lifecycle import NodeState
from autoscaler.policy.models import Market
from autoscaler.sandbox.services.moto_server import (
    MOTO_AMI,
    MotoSandbox,
    SpotScoreRule,
    running_instances,
)
from tests.actuators.terraform_fixtures import moto, needs_terraform, sandbox_settings  # noqa: F401
from tests.builders import NOW, make_policy
from tests.clouds.helpers import spot_warning
from tests.service.crash_harness import Faults, Scenario
from tests.service.terraform_world import POOL, make_world

pytestmark = [pytest.mark.slow, needs_terraform]

MODULE = DEFAULT_MODULES_DIR / "controller"
POLICY_FILE = Path(__file__).resolve().parents[2] / "deploy" / "iam" / "controller-policy.json"
ACCOUNT, REGION = "123456789012", "us-east-1"
S = NodeState


def test_deploy_policy_file_is_the_modules_policy() -> None:
    assert POLICY_FILE.read_bytes() == (MODULE / "controller-policy.json").read_bytes()


@dataclass
class Controller:
    moto: MotoSandbox
    outputs: dict[str, Any]
    runner: Runner

    def out(self, name: str) -> Any:
        return self.outputs.get(name, {}).get("value")  # null outputs are left out


def root_module(moto: MotoSandbox) -> dict[str, Any]:  # noqa: F811
    services = ("ec2", "sts", "iam", "s3", "sqs", "events")
    return {
        "terraform": {"required_providers": {"aws": {"source": "hashicorp/aws",
                                                      "version": ">= 5.0, < 6.0"}}},
        "provider": {"aws": {
            "region": REGION, "s3_use_path_style": True, "skip_credentials_validation": True,
            "skip_metadata_api_check": True, "skip_region_validation": True,
            "endpoints": [{svc: moto.endpoint for svc in services}]}},
        # With the controller instance: the reconciler must not count it among the fleet's.
        "module": {"controller": {"source": f"./{MODULE.name}", "name": "gpu-autoscaler",
                                  "create_instance": True, "instance_ami": MOTO_AMI}},
        "output": {name: {"value": f"${{module.controller.{name}}}"} for name in (
            "queue_url", "dead_letter_url", "state_bucket", "instance_profile", "role_arn",
            "policy_arn", "instance_id")},
    }


@pytest.fixture(scope="module")
def controller(moto: MotoSandbox, tmp_path_factory: pytest.TempPathFactory) -> Iterator[Controller]:  # noqa: F811
    work = tmp_path_factory.mktemp("controller")
    # The module is copied next to the root so the test never writes into the source tree.
    shutil.copytree(MODULE, work / MODULE.name)
    (work / "main.tf.json").write_text(json.dumps(root_module(moto), indent=2))
    (work / "terraformrc").write_text(cli_config(TerraformSettings()))
    runner = Runner(work, work / "terraformrc", timeout_s=300)
    runner.run("init", input=False)
    runner.run("apply", auto_approve=FLAG, input=False)
    outputs = json.loads(runner.run("output", json=FLAG).stdout)
    try:
        yield Controller(moto, outputs, runner)
    finally:
        moto.enforce_iam(unchecked_calls=10**9)  # the destroy runs as the admin again
        empty_bucket(moto.client("s3"), outputs["state_bucket"]["value"])
        runner.run("destroy", auto_approve=FLAG, input=False)


def empty_bucket(s3: Any, bucket: str) -> None:
    """Pool state left by the service test (a state bucket is never force-destroyed)."""
    listing = s3.list_object_versions(Bucket=bucket)
    for v in listing.get("Versions", []) + listing.get("DeleteMarkers", []):
        s3.delete_object(Bucket=bucket, Key=v["Key"], VersionId=v["VersionId"])


class TestModule:
    def test_three_rules_feed_the_queue(self, controller: Controller) -> None:
        events, sqs = controller.moto.client("events"), controller.moto.client("sqs")
        queue_arn = sqs.get_queue_attributes(QueueUrl=controller.out("queue_url"),
                                             AttributeNames=["QueueArn"])["Attributes"]["QueueArn"]
        rules = {r["Name"]: json.loads(r["EventPattern"])
                 for r in events.list_rules(NamePrefix="gpu-autoscaler-")["Rules"]}
        assert {name: p["detail-type"] for name, p in rules.items()} == {
            "gpu-autoscaler-spot-interruption": ["EC2 Spot Instance Interruption Warning"],
            "gpu-autoscaler-rebalance": ["EC2 Instance Rebalance Recommendation"],
            "gpu-autoscaler-instance-state": ["EC2 Instance State-change Notification"]}
        for name in rules:
            [target] = events.list_targets_by_rule(Rule=name)["Targets"]
            assert target["Arn"] == queue_arn

    def test_only_this_accounts_rules_may_send(self, controller: Controller) -> None:
        sqs = controller.moto.client("sqs")
        attrs = sqs.get_queue_attributes(QueueUrl=controller.out("queue_url"),
                                         AttributeNames=["Policy"])["Attributes"]
        [statement] = json.loads(attrs["Policy"])["Statement"]
        assert statement["Effect"] == "Allow"
        assert statement["Principal"] == {"Service": "events.amazonaws.com"}
        assert statement["Action"] == "sqs:SendMessage"
        rule_arns = statement["Condition"]["ArnEquals"]["aws:SourceArn"]
        assert sorted(rule_arns) == sorted(
            f"arn:aws:events:{REGION}:{ACCOUNT}:rule/gpu-autoscaler-{r}"
            for r in ("spot-interruption", "rebalance", "instance-state"))
        assert statement["Condition"]["StringEquals"] == {"aws:SourceAccount": ACCOUNT}

    def test_state_bucket_is_versioned_and_private(self, controller: Controller) -> None:
        s3 = controller.moto.client("s3")
        bucket = controller.out("state_bucket")
        assert bucket == f"gpu-autoscaler-state-{ACCOUNT}-{REGION}"
        assert s3.get_bucket_versioning(Bucket=bucket)["Status"] == "Enabled"
        block = s3.get_public_access_block(Bucket=bucket)["PublicAccessBlockConfiguration"]
        assert all(block.values())

    def test_instance_profile_carries_the_policy_file(self, controller: Controller) -> None:
        iam = controller.moto.client("iam")
        profile = iam.get_instance_profile(InstanceProfileName=controller.out("instance_profile"))
        [role] = profile["InstanceProfile"]["Roles"]
        attached = iam.list_attached_role_policies(RoleName=role["RoleName"])["AttachedPolicies"]
        assert [p["PolicyArn"] for p in attached] == [controller.out("policy_arn")]
        assert granted(iam, controller.out("policy_arn")) == rendered_policy(controller)

    def test_controller_instance_runs_on_that_profile_and_cannot_end_itself(
            self, controller: Controller) -> None:
        ec2 = controller.moto.client("ec2")
        [reservation] = ec2.describe_instances(InstanceIds=[controller.out("instance_id")])["Reservations"]
        [instance] = reservation["Instances"]
        assert instance["IamInstanceProfile"]["Arn"].endswith(
            "/" + controller.out("instance_profile"))
        assert instance["MetadataOptions"]["HttpTokens"] == "required"  # IMDSv2 only
        tags = {t["Key"]: t["Value"] for t in instance.get("Tags", [])}
        # Not managed-by=gpu-autoscaler: its own policy cannot terminate it.
        assert tags["Name"] == "gpu-autoscaler-controller" and "managed-by" not in tags


def granted(iam: Any, policy_arn: str) -> dict[str, Any]:
    version = iam.get_policy(PolicyArn=policy_arn)["Policy"]["DefaultVersionId"]
    doc = iam.get_policy_version(PolicyArn=policy_arn, VersionId=version)["PolicyVersion"]["Document"]
    return doc if isinstance(doc, dict) else json.loads(doc)


def rendered_policy(controller: Controller) -> dict[str, Any]:
    """deploy/iam/controller-policy.json with this deployment's values filled in."""
    sqs = controller.moto.client("sqs")

    def arn(url: str) -> str:
        return sqs.get_queue_attributes(QueueUrl=url, AttributeNames=["QueueArn"])[
            "Attributes"]["QueueArn"]

    text = POLICY_FILE.read_text()
    for key, value in {"partition": "aws", "region": REGION, "account_id": ACCOUNT,
                       "queue_arn": arn(controller.out("queue_url")),
                       "dead_letter_arn": arn(controller.out("dead_letter_url")),
                       "state_bucket": controller.out("state_bucket"),
                       "state_prefix": "gpu-autoscaler"}.items():
        text = text.replace("${" + key + "}", value)
    return json.loads(text)


# -- the service under the policy -----------------------------------------------------------

@dataclass
class Keys:
    access_key: str
    secret_key: str

    def env(self) -> dict[str, str]:
        return {"AWS_ACCESS_KEY_ID": self.access_key, "AWS_SECRET_ACCESS_KEY": self.secret_key}

    def client(self, moto: MotoSandbox, service: str) -> Any:  # noqa: F811
        return boto3.client(service, region_name=REGION, endpoint_url=moto.endpoint,
                            aws_access_key_id=self.access_key,
                            aws_secret_access_key=self.secret_key)


def user_with(iam: Any, name: str, policy_arn: str) -> Keys:
    iam.create_user(UserName=name)
    iam.attach_user_policy(UserName=name, PolicyArn=policy_arn)
    key = iam.create_access_key(UserName=name)["AccessKey"]
    return Keys(key["AccessKeyId"], key["SecretAccessKey"])


@pytest.fixture(scope="module")
def enforced(controller: Controller) -> tuple[Keys, Keys]:
    """(controller keys bound to the module's policy, admin keys); IAM enforced from here."""
    iam = controller.moto.client("iam")
    admin_policy = iam.create_policy(PolicyName="test-admin", PolicyDocument=json.dumps({
        "Version": "2012-10-17",
        "Statement": [{"Effect": "Allow", "Action": "*", "Resource": "*"}]}))["Policy"]["Arn"]
    admin = user_with(iam, "test-admin", admin_policy)
    keys = user_with(iam, "gpu-autoscaler-controller", controller.out("policy_arn"))
    controller.moto.enforce_iam()
    return keys, admin


def spot_policy() -> Any:
    return make_policy(team="vision", name=POOL, min_nodes=1, max_nodes=1,
                       instance_types=["g4dn.xlarge"],
                       capacity={"on_demand_base": 0, "spot_percent": 100,
                                 "on_interruption": "on-demand"},
                       scale_down={"max_draining_percent": 100}, cluster={"kind": "none"})


@pytest.mark.timeout(300)
def test_launch_notice_reconcile_terminate_under_the_policy(
        controller: Controller, enforced: tuple[Keys, Keys], tmp_path: Path,
        monkeypatch: pytest.MonkeyPatch) -> None:
    keys, admin = enforced
    moto = controller.moto  # noqa: F811
    monkeypatch.delenv("AWS_SESSION_TOKEN", raising=False)
    for key, value in keys.env().items():  # what boto3 and Terraform read
        monkeypatch.setenv(key, value)
    # refresh on: the provider's reads of every instance are part of the proven path.
    settings = sandbox_settings(moto, tmp_path / "tf", refresh=True, backend={
        "kind": "s3", "bucket": controller.out("state_bucket"), "endpoint": moto.endpoint})
    world = make_world(f"sqlite:///{tmp_path / 'fleet.db'}", settings, moto.endpoint)
    world.policies = {"vision": spot_policy()}
    cloud = AwsCloud(REGION, settings=AwsSettings(
        endpoint_url=moto.endpoint, queue_url=controller.out("queue_url"),
        dead_letter_url=controller.out("dead_letter_url")))
    queue = cloud.interruption_queue()
    assert queue is not None
    world.sources = [queue]
    scn = Scenario(world, Faults(), NOW)

    # Launch: Terraform (S3 state + lock file) creates the spot node; the reconciler sees it.
    scn.run_until(lambda: list(scn.states().values()) == [S.READY], max_ticks=8)
    [spot] = scn.raw_store.nodes()
    assert spot.market is Market.SPOT and spot.instance_id
    # The notice, sent as EventBridge would (the admin stands in for the rule).
    admin.client(moto, "sqs").send_message(QueueUrl=controller.out("queue_url"),
                                           MessageBody=spot_warning(spot.instance_id))
    # Notice -> INTERRUPTED -> on-demand replacement -> the spot node destroyed by Terraform.
    scn.run_until(lambda: scn.states().get(spot.name) is S.TERMINATED and S.READY in [
        n.state for n in scn.raw_store.nodes()], max_ticks=12)
    live = running_instances(admin.client(moto, "ec2"), pool=POOL)
    assert [i["InstanceId"] for i in live] != [spot.instance_id] and len(live) == 1
    assert live[0].get("InstanceLifecycle") != "spot"
    state_keys = [o["Key"] for o in admin.client(moto, "s3").list_objects_v2(
        Bucket=controller.out("state_bucket"))["Contents"]]
    assert state_keys == [f"gpu-autoscaler/vision/{POOL}/terraform.tfstate"]  # lock released

    # Spot placement scores (clouds.aws.spot_placement_scores) are read under the policy.
    moto.set_spot_scores([SpotScoreRule(REGION, f"{REGION}a", 8)])
    scored = AwsCloud(REGION, settings=AwsSettings(endpoint_url=moto.endpoint, spot_scores=True))
    assert scored.spot_placement_scores(["p3.2xlarge", "p3.8xlarge", "p3.16xlarge"]) == {
        f"{REGION}a": 8}

    # Outside the policy: refused.
    ec2 = keys.client(moto, "ec2")
    for denied in (
            lambda: ec2.stop_instances(InstanceIds=[live[0]["InstanceId"]]),
            lambda: ec2.create_security_group(GroupName="x", Description="x"),
            lambda: keys.client(moto, "sqs").delete_queue(QueueUrl=controller.out("queue_url")),
            lambda: keys.client(moto, "sqs").send_message(QueueUrl=controller.out("queue_url"),
                                                          MessageBody="{}"),
            lambda: keys.client(moto, "s3").delete_bucket(Bucket=controller.out("state_bucket")),
            lambda: keys.client(moto, "iam").create_user(UserName="escalate")):
        with pytest.raises(ClientError) as exc:
            denied()
        # S3 answers a bare 403 (no code in the body) to a denied DeleteBucket.
        assert exc.value.response["ResponseMetadata"]["HTTPStatusCode"] == 403


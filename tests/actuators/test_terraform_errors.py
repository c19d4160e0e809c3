"""Capacity-error parsing and error classification, on real Terraform/provider wording."""

from __future__ import annotations

from datetime import UTC, datetime

import pytest

from autoscaler.actuators.terraform.errors import (
    CAPACITY_CODES,
    Diagnostic,
    NodeTarget,
    StalePlanError,
    StateLockedError,
    TerraformError,
    capacity_code,
    capacity_errors,
    classify,
    diagnostics_from_text,
)
from autoscaler.policy.models import Market

AT = datetime(2026, 11, 30, 12, 0, tzinfo=UTC)
ADDR = 'module.pool.aws_instance.node["{}"]'

# The AWS provider's wording for a failed RunInstances (one line per code).
AWS_SUMMARY = ("creating EC2 Instance: operation error EC2: RunInstances, https response error "
               "StatusCode: 500, RequestID: 5e1f, api error {code}: We currently do not have "
               "sufficient p3.2xlarge capacity in the Availability Zone you requested (us-east-1a).")
ALI_SUMMARY = ("[ERROR] terraform-provider-alicloud/alicloud/resource_alicloud_instance.go:874: "
               "Resource alicloud_instance RunInstances Failed!!! [SDK alibaba-cloud-sdk-go ERROR]:"
               "\nSDKError:\n   StatusCode: 403\n   Code: OperationDenied.NoStock\n   Message: "
               "code: 403, The requested resource is sold out in the specified zone")


@pytest.mark.parametrize("code", [c for c in CAPACITY_CODES if "." not in c])
def test_every_aws_capacity_code_is_recognised(code: str) -> None:
    assert capacity_code(AWS_SUMMARY.format(code=code)) == code


def test_alibaba_no_stock_is_recognised() -> None:
    assert capacity_code(ALI_SUMMARY) == "OperationDenied.NoStock"


def test_other_errors_are_not_capacity_errors() -> None:
    assert capacity_code("api error InvalidAMIID.NotFound: The image id does not exist") is None
    assert capacity_code("api error UnsupportedOperation: no") is None  # not 'Unsupported'
    assert capacity_code("InsufficientInstanceCapacityX") is None


def test_capacity_errors_become_structured_engine_input() -> None:
    diags = [
        Diagnostic("error", AWS_SUMMARY.format(code="InsufficientInstanceCapacity"),
                   address=ADDR.format("v-4")),
        Diagnostic("error", AWS_SUMMARY.format(code="SpotMaxPriceTooLow"),
                   address=ADDR.format("v-5")),
        Diagnostic("error", "creating EC2 Instance: api error InvalidAMIID.NotFound",
                   address=ADDR.format("v-6")),
        Diagnostic("warning", AWS_SUMMARY.format(code="Unsupported"), address=ADDR.format("v-7")),
    ]
    targets = {
        "v-4": NodeTarget("p3.2xlarge", Market.SPOT, "us-east-1a"),
        "v-5": NodeTarget("g4dn.xlarge", Market.SPOT, ""),
        "v-6": NodeTarget("g4dn.xlarge", Market.ON_DEMAND, ""),
        "v-7": NodeTarget("g4dn.xlarge", Market.ON_DEMAND, ""),
    }
    errs = capacity_errors(diags, targets, "aws", "us-east-1", AT)
    assert sorted(errs) == ["v-4", "v-5"]
    assert errs["v-4"].model_dump(exclude={"message"}) == {
        "cloud": "aws", "region": "us-east-1", "instance_type": "p3.2xlarge",
        "zone": "us-east-1a", "market": Market.SPOT, "code": "InsufficientInstanceCapacity",
        "at": AT, "until": None}  # None: avoided for the pool's capacity_error_backoff
    assert errs["v-5"].zone is None and errs["v-5"].code == "SpotMaxPriceTooLow"
    assert "\n" not in errs["v-4"].message


def test_alibaba_diagnostic_from_text_output() -> None:
    text = (f"╷\n│ Error: {ALI_SUMMARY.splitlines()[0]}\n│ \n"
            '│   with module.pool.alicloud_instance.node["r-1"],\n'
            "│   on .terraform/modules/pool/main.tf line 22, in resource:\n"
            "│ Code: OperationDenied.NoStock\n╵\n")
    [diag] = diagnostics_from_text(text)
    assert diag.node == "r-1"
    errs = capacity_errors([diag], {"r-1": NodeTarget("ecs.gn6i-c4g1.xlarge", Market.SPOT,
                                                      "cn-hangzhou-h")},
                           "alicloud", "cn-hangzhou", AT)
    assert errs["r-1"].code == "OperationDenied.NoStock"
    assert errs["r-1"].zone == "cn-hangzhou-h"


LOCK_DETAIL = """Error message: operation error S3: PutObject, https response error StatusCode: 412
Lock Info:
  ID:        0a6fa0ae-1b5c-8d35-0ad6-2f7c1c4b4fd1
  Path:      tf-state/pools/search/t4/terraform.tfstate
  Operation: OperationTypePlan
  Who:       root@host
  Created:   2026-11-30 12:00:00.1 +0000 UTC

Terraform acquires a state lock to protect the state from being written
by multiple users at the same time."""


def test_lock_error_is_a_state_locked_error_with_holder() -> None:
    err = classify("terraform plan failed", [
        Diagnostic("error", "Error acquiring the state lock", LOCK_DETAIL)])
    assert isinstance(err, StateLockedError)
    assert "locked by another run" in str(err)
    assert "OperationTypePlan" in err.detail and "protect the state" not in err.detail


def test_stale_saved_plan_is_a_stale_plan_error() -> None:
    err = classify("terraform apply failed", [Diagnostic(
        "error", "Saved plan is stale",
        "The given plan file can no longer be applied because the state was changed")])
    assert isinstance(err, StalePlanError)


def test_other_failures_keep_their_diagnostics() -> None:
    err = classify("terraform plan failed", [Diagnostic("error", "Invalid value", "bad ami")])
    assert type(err) is TerraformError and "bad ami" in str(err)


def test_a_refused_start_of_a_warm_node_names_the_node():
    start = Diagnostic("error", "starting EC2 Instance: InsufficientInstanceCapacity",
                       address='module.pool.aws_ec2_instance_state.power["vision-gpu-3"]')
    assert start.node == "vision-gpu-3"
    assert Diagnostic("error", "x", address='module.pool.aws_instance.node["a-b-1"]').node == "a-b-1"
    assert Diagnostic("error", "x", address="module.pool.data.aws_subnet.pool").node is None

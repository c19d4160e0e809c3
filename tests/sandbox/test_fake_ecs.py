"""The fake ECS endpoint: its signature check (against the documented example and against
raw requests) and its answer shapes."""

from __future__ import annotations

import json
import urllib.error
import urllib.parse
import urllib.request
import uuid
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

import pytest

from autoscaler.sandbox.fakes.ecs import FakeEcsServer, sign, string_to_sign
from autoscaler.sandbox.fakes.ecs_state import EcsState
from autoscaler.sandbox.hosts.procs import ManagedProcess, free_port, port_open, wait_until

KEY_ID, SECRET = "LTAItestid", "testsecret"

# The worked example of Alibaba Cloud's RPC signature documentation (DescribeRegions).
DOC_PARAMS = {
    "Timestamp": "2016-02-23T12:46:24Z", "Format": "XML", "AccessKeyId": "testid",
    "Action": "DescribeRegions", "SignatureMethod": "HMAC-SHA1",
    "SignatureNonce": "3ee8c1b8-83d3-44af-a94f-4e0ad82fd6cf", "Version": "2014-05-26",
    "SignatureVersion": "1.0",
}


def test_signature_matches_the_documented_example() -> None:
    assert string_to_sign("GET", DOC_PARAMS) == (
        "GET&%2F&AccessKeyId%3Dtestid%26Action%3DDescribeRegions%26Format%3DXML"
        "%26SignatureMethod%3DHMAC-SHA1%26SignatureNonce%3D3ee8c1b8-83d3-44af-a94f-4e0ad82fd6cf"
        "%26SignatureVersion%3D1.0%26Timestamp%3D2016-02-23T12%253A46%253A24Z"
        "%26Version%3D2014-05-26")
    assert sign("GET", DOC_PARAMS, "testsecret") == "OLeaidS1JvxuMvnyHOwuJ+uX5qY="


@pytest.fixture
def server() -> Any:
    state = EcsState("cn-hangzhou")
    state.add_key(KEY_ID, SECRET)
    state.set_on_demand("ecs.gn6i-c4g1.xlarge", 1.1)
    with FakeEcsServer(state) as srv:
        yield srv


def signed(action: str, secret: str = SECRET, method: str = "GET", **extra: str) -> dict[str, str]:
    params = {
        "Action": action, "Version": "2014-05-26", "Format": "JSON", "RegionId": "cn-hangzhou",
        "AccessKeyId": KEY_ID, "SignatureMethod": "HMAC-SHA1", "SignatureVersion": "1.0",
        "SignatureNonce": uuid.uuid4().hex,
        "Timestamp": datetime.now(UTC).strftime("%Y-%m-%dT%H:%M:%SZ"), **extra,
    }
    params["Signature"] = sign(method, params, secret)
    return params


def call(srv: FakeEcsServer, params: dict[str, str], method: str = "GET") -> tuple[int, dict[str, Any]]:
    query = urllib.parse.urlencode(params, quote_via=urllib.parse.quote)
    if method == "GET":
        req = urllib.request.Request(f"{srv.endpoint}/?{query}")
    else:
        req = urllib.request.Request(f"{srv.endpoint}/", data=query.encode(), method="POST",
                                     headers={"Content-Type": "application/x-www-form-urlencoded"})
    try:
        with urllib.request.urlopen(req, timeout=5) as resp:
            return resp.status, json.loads(resp.read())
    except urllib.error.HTTPError as exc:
        return exc.code, json.loads(exc.read())


def test_a_correctly_signed_request_is_answered(server: FakeEcsServer) -> None:
    status, body = call(server, signed("DescribePrice", InstanceType="ecs.gn6i-c4g1.xlarge"))
    assert status == 200 and body["RequestId"]
    assert body["PriceInfo"]["Price"]["Currency"] == "USD"
    # Form-encoded POST parameters are signed too (the SDK's ECS requests are POSTs).
    post = signed("DescribePrice", method="POST", InstanceType="ecs.gn6i-c4g1.xlarge")
    assert call(server, post, method="POST")[0] == 200


@pytest.mark.parametrize("mutate, status, code", [
    (lambda p: p.update(Signature=sign("GET", p, "wrong")), 400, "SignatureDoesNotMatch"),
    (lambda p: p.update(InstanceType="ecs.other"), 400, "SignatureDoesNotMatch"),
    (lambda p: p.update(AccessKeyId="LTAInobody"), 404, "InvalidAccessKeyId.NotFound"),
    (lambda p: p.pop("SignatureNonce"), 400, "IncompleteSignature"),
    (lambda p: p.update(
        Timestamp=(datetime.now(UTC) - timedelta(hours=1)).strftime("%Y-%m-%dT%H:%M:%SZ"),
        Signature=sign("GET", {**p, "Timestamp": (datetime.now(UTC) - timedelta(hours=1))
                               .strftime("%Y-%m-%dT%H:%M:%SZ")}, SECRET)),
     400, "InvalidTimeStamp.Expired"),
])
def test_bad_requests_get_the_real_error(server: FakeEcsServer, mutate: Any, status: int,
                                         code: str) -> None:
    params = signed("DescribePrice", InstanceType="ecs.gn6i-c4g1.xlarge")
    mutate(params)
    got_status, body = call(server, params)
    assert (got_status, body["Code"]) == (status, code)
    assert body["RequestId"] and body["HostId"] and body["Message"]
    if code == "SignatureDoesNotMatch":
        assert "string to sign is:GET&%2F&" in body["Message"]


def test_a_replayed_nonce_is_refused(server: FakeEcsServer) -> None:
    params = signed("DescribePrice", InstanceType="ecs.gn6i-c4g1.xlarge")
    assert call(server, params)[0] == 200
    status, body = call(server, params)
    assert (status, body["Code"]) == (400, "SignatureNonceUsed")


def test_unknown_action_region_and_parameters(server: FakeEcsServer) -> None:
    assert call(server, signed("RunInstances"))[1]["Code"] == "InvalidAction.NotFound"
    assert call(server, signed("DescribePrice", RegionId="eu-central-1",
                               InstanceType="x"))[1]["Code"] == "InvalidRegionId.NotFound"
    assert call(server, signed("DescribePrice"))[1]["Code"] == "MissingParameter"
    assert call(server, signed("DescribeInstances", PageSize="500"))[1]["Code"] == "InvalidParameter"


def test_describe_instances_pages_with_total_count(server: FakeEcsServer) -> None:
    for n in range(3):
        server.state.add_instance("ecs.gn6i-c4g1.xlarge", "cn-hangzhou-h", {"node": f"n{n}"})
    status, body = call(server, signed("DescribeInstances", PageSize="2", PageNumber="2"))
    assert status == 200
    assert (body["TotalCount"], body["PageNumber"], body["PageSize"]) == (3, 2, 2)
    [inst] = body["Instances"]["Instance"]
    assert inst["Tags"]["Tag"] == [{"TagKey": "node", "TagValue": "n2"}]
    assert inst["OperationLocks"]["LockReason"] == []
    assert inst["VpcAttributes"]["PrivateIpAddress"]["IpAddress"]


def test_the_command_line_serves_a_state_file(tmp_path: Path) -> None:
    state = tmp_path / "ecs.json"
    state.write_text(json.dumps({
        "region": "cn-hangzhou", "access_keys": {KEY_ID: SECRET},
        "on_demand": {"ecs.gn6i-c4g1.xlarge": 1.1},
        "stock": [{"type": "ecs.gn6i-c4g1.xlarge", "zone": "cn-hangzhou-h"}]}))
    port = free_port()
    proc = ManagedProcess("fake-ecs", ["python3", "-m", "autoscaler.sandbox.fakes.ecs", "--port",
                                       str(port), "--state", str(state)], tmp_path / "ecs.log")
    try:
        wait_until(lambda: port_open("127.0.0.1", port), 20, "fake ECS port", proc=proc)
        url = f"http://127.0.0.1:{port}"
        query = urllib.parse.urlencode(signed("DescribeAvailableResource",
                                              DestinationResource="InstanceType"),
                                       quote_via=urllib.parse.quote)
        with urllib.request.urlopen(f"{url}/?{query}", timeout=5) as resp:
            body = json.loads(resp.read())
        zone = body["AvailableZones"]["AvailableZone"][0]
        assert zone["ZoneId"] == "cn-hangzhou-h" and zone["Status"] == "Available"
    finally:
        proc.stop()

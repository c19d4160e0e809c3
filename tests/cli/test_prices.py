"""``gpu-autoscaler prices`` against moto and the fake ECS endpoint."""

from __future__ import annotations

import json
import os
import subprocess

import pytest
from typer.testing import CliRunner

from autoscaler.cli import app
from autoscaler.sandbox.fakes.ecs import FakeEcsServer
from autoscaler.sandbox.hosts.procs import free_port
from tests.clouds import helpers
from tests.clouds.helpers import ECS_KEY_ID, ECS_SECRET, ScoreBook, SpotBook

moto_url, moto, spot_book, ecs = helpers.moto_url, helpers.moto, helpers.spot_book, helpers.ecs
score_book = helpers.score_book

T4, V100X4 = "ecs.gn6i-c4g1.xlarge", "ecs.gn6v-c8g1.8xlarge"
ALI_ENV = {"ALIBABA_CLOUD_ACCESS_KEY_ID": ECS_KEY_ID, "ALIBABA_CLOUD_ACCESS_KEY_SECRET": ECS_SECRET,
           "COLUMNS": "200"}
runner = CliRunner()


def stock_ecs(server: FakeEcsServer) -> None:
    state = server.state
    state.set_on_demand(T4, 1.10)
    state.set_on_demand(V100X4, 10.40)
    state.set_spot(T4, "cn-hangzhou-h", 0.33)
    state.set_spot(V100X4, "cn-hangzhou-h", 3.12)
    state.set_stock(T4, "cn-hangzhou-h")
    state.set_stock(T4, "cn-hangzhou-i", "WithoutStock")
    state.set_stock(V100X4, "cn-hangzhou-h")


def ali(server: FakeEcsServer, *extra: str) -> list[str]:
    return ["prices", "--cloud", "alicloud", "--region", "cn-hangzhou", "--types",
            f"{T4},{V100X4}", "--endpoint", server.endpoint, *extra]


def test_alicloud_rows_as_json(ecs: FakeEcsServer) -> None:
    stock_ecs(ecs)
    result = runner.invoke(app, ali(ecs, "--json"), env=ALI_ENV)
    assert result.exit_code == 0, result.output
    rows = {(r["instance_type"], r["zone"]): r for r in json.loads(result.stdout)}
    v100 = rows[(V100X4, "cn-hangzhou-h")]
    assert v100["gpus"] == 4 and v100["on_demand_usd"] == 10.40 and v100["spot_usd"] == 3.12
    assert v100["spot_usd_per_gpu"] == pytest.approx(0.78) and v100["discount"] == pytest.approx(0.7)
    assert rows[(T4, "cn-hangzhou-i")]["in_stock"] is False
    assert rows[(T4, "cn-hangzhou-h")]["in_stock"] is True


def test_alicloud_table(ecs: FakeEcsServer) -> None:
    stock_ecs(ecs)
    result = runner.invoke(app, ali(ecs), env=ALI_ENV)
    assert result.exit_code == 0, result.output
    line = next(ln for ln in result.output.splitlines() if V100X4 in ln and "cn-hangzhou-h" in ln)
    for cell in ("$10.4000", "$3.1200", "$0.7800", "70%", "yes"):
        assert cell in line


def test_missing_credentials_name_the_variables(ecs: FakeEcsServer,
                                                monkeypatch: pytest.MonkeyPatch) -> None:
    for var in ("ALIBABA_CLOUD_ACCESS_KEY_ID", "ALIBABA_CLOUD_ACCESS_KEY_SECRET",
                "ALICLOUD_ACCESS_KEY", "ALICLOUD_SECRET_KEY"):
        monkeypatch.delenv(var, raising=False)
    result = runner.invoke(app, ali(ecs), env={"COLUMNS": "200"})
    assert result.exit_code == 1
    assert "ALIBABA_CLOUD_ACCESS_KEY_ID and ALIBABA_CLOUD_ACCESS_KEY_SECRET" in result.output


def test_wrong_secret_is_a_credentials_error(ecs: FakeEcsServer) -> None:
    stock_ecs(ecs)
    result = runner.invoke(app, ali(ecs), env={**ALI_ENV, "ALIBABA_CLOUD_ACCESS_KEY_SECRET": "nope"})
    assert result.exit_code == 1 and "credentials" in result.output
    assert ECS_KEY_ID not in result.output


def test_aws_rows_use_catalog_on_demand_and_observed_spot(moto: str, spot_book: SpotBook) -> None:
    spot_book.add("g4dn.12xlarge", "us-east-1a", 1.3692)
    result = runner.invoke(app, ["prices", "--cloud", "aws", "--region", "us-east-1", "--types",
                                 "g4dn.12xlarge", "--zones", "us-east-1a,us-east-1e",
                                 "--endpoint", moto, "--json"])
    assert result.exit_code == 0, result.output
    rows = {r["zone"]: r for r in json.loads(result.stdout)}
    assert set(rows) == {"us-east-1a", "us-east-1e"}
    assert rows["us-east-1a"]["on_demand_usd"] == 3.912 and rows["us-east-1a"]["discount"] == 0.65
    assert rows["us-east-1a"]["spot_usd_per_gpu"] == pytest.approx(0.3423)
    assert rows["us-east-1e"]["in_stock"] is False


def test_unreachable_endpoint(moto: str) -> None:
    dead = f"http://127.0.0.1:{free_port()}"
    result = runner.invoke(app, ["prices", "--cloud", "aws", "--region", "us-east-1", "--types",
                                 "g4dn.xlarge", "--endpoint", dead])
    assert result.exit_code == 1 and "endpoint unreachable" in result.output


def test_installed_command_runs_as_a_process(ecs: FakeEcsServer) -> None:
    stock_ecs(ecs)
    out = subprocess.run(["gpu-autoscaler", *ali(ecs, "--json")], capture_output=True, text=True,
                         timeout=60, env={**os.environ, **ALI_ENV}, check=False)
    assert out.returncode == 0, out.stderr
    assert {r["instance_type"] for r in json.loads(out.stdout)} == {T4, V100X4}
    assert ECS_SECRET not in out.stdout + out.stderr


def test_write_fills_a_price_file_from_the_aws_price_list(tmp_path) -> None:
    """`prices --cloud aws --write` reads a recorded offer file (served on 127.0.0.1) into the
    file's prices.aws.<region>, keeps its other entries, and refuses an answer with no price."""
    from autoscaler.catalog import load_catalog
    from tests.clouds.pricelist_fixture import REGION, price_server, realistic, serve_bytes, text

    path = f"/offers/v1.0/aws/AmazonEC2/current/{REGION}/index.json"
    out = tmp_path / "prices.yaml"
    out.write_text("# ours\nprices:\n  alicloud:\n    ecs.gn6v-c8g1.2xlarge: {on_demand: 2.6}\n")
    with price_server({path: serve_bytes(text(realistic()).encode()),
                       "/bad/us-west-2/index.json": serve_bytes(b'{"products": {}, "terms": {}}')}) as s:
        url = s.url + "/offers/v1.0/aws/AmazonEC2/current/{region}/index.json"
        done = runner.invoke(app, ["prices", "--cloud", "aws", "--region", REGION, "--write", str(out),
                                   "--price-list-url", url])
        assert done.exit_code == 0, done.output
        assert f"wrote 3 {REGION} on-demand prices to {out}" in done.output
        catalog = load_catalog(out)
        assert catalog.price("aws", REGION, "g6.xlarge").on_demand_usd == 0.8048
        assert catalog.price("alicloud", "cn-hangzhou", "ecs.gn6v-c8g1.2xlarge").on_demand_usd == 2.6
        assert out.read_text().startswith("# ours")
        empty = runner.invoke(app, ["prices", "--cloud", "aws", "--region", REGION, "--write",
                                    str(out), "--price-list-url", s.url + "/bad/{region}/index.json"])
        assert empty.exit_code == 1 and "had no price for any catalog GPU type" in empty.output
    ali = runner.invoke(app, ["prices", "--cloud", "alicloud", "--region", "cn-hangzhou", "--write", str(out)])
    assert ali.exit_code == 1 and "--write reads the AWS Price List" in ali.output


def test_write_reads_the_price_list_query_api_page_by_page(tmp_path, monkeypatch) -> None:
    """The default --write source is GetProducts (boto3 `pricing`), here a recorded answer
    served on 127.0.0.1: one sku per page, hostile items among them."""
    import threading
    from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

    from autoscaler.catalog import load_catalog
    from tests.clouds.pricelist_fixture import REGION, realistic

    doc = realistic()
    skus: dict[str, list[str]] = {}
    for sku, prod in doc["products"].items():
        name = prod.get("attributes", {}).get("instanceType")
        if name:
            skus.setdefault(name, []).append(json.dumps(
                {"product": prod, "serviceCode": "AmazonEC2", "terms": {"OnDemand": doc["terms"]["OnDemand"][sku]}}))
    skus["p3.2xlarge"] += ["not json", json.dumps({"product": doc["products"]["P3LINUX"],
                                                   "terms": {"OnDemand": {"x": {"priceDimensions": {"d": {
                                                       "unit": "Hrs", "pricePerUnit": {"USD": "NaN"}}}}}}})]
    calls: list[dict] = []

    class Pricing(BaseHTTPRequestHandler):
        def do_POST(self) -> None:
            body = json.loads(self.rfile.read(int(self.headers["Content-Length"])))
            calls.append(body)
            assert self.headers["X-Amz-Target"] == "AWSPriceListService.GetProducts"
            name = next(f["Value"] for f in body["Filters"] if f["Field"] == "instanceType")
            items, at = skus.get(name, []), int(body.get("NextToken") or 0)
            answer = {"FormatVersion": "aws_v1", "PriceList": items[at:at + 1]}
            if at + 1 < len(items):
                answer["NextToken"] = str(at + 1)
            data = json.dumps(answer).encode()
            self.send_response(200)
            self.send_header("Content-Type", "application/x-amz-json-1.1")
            self.send_header("Content-Length", str(len(data)))
            self.end_headers()
            self.wfile.write(data)

        def log_message(self, *args: object) -> None:
            pass

    server = ThreadingHTTPServer(("127.0.0.1", 0), Pricing)
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    monkeypatch.setenv("AWS_ACCESS_KEY_ID", "testing")
    monkeypatch.setenv("AWS_SECRET_ACCESS_KEY", "testing")
    out = tmp_path / "prices.yaml"
    try:
        done = runner.invoke(app, ["prices", "--cloud", "aws", "--region", REGION, "--write", str(out),
                                   "--endpoint", f"http://127.0.0.1:{server.server_port}"])
    finally:
        server.shutdown()
        server.server_close()
        thread.join(5)
    assert done.exit_code == 0, done.output
    assert "wrote 3 us-west-2 on-demand prices" in done.output and "entries ignored" in done.output
    assert load_catalog(out).price("aws", REGION, "p5.48xlarge").on_demand_usd == 55.04
    p3 = [c for c in calls if any(f["Value"] == "p3.2xlarge" for f in c["Filters"])]
    assert len(p3) == 8  # every page of the type was read, one GetProducts call each
    assert {"Type": "TERM_MATCH", "Field": "regionCode", "Value": REGION} in p3[0]["Filters"]


def test_write_from_a_pricing_endpoint_that_trickles_fails_within_the_call_limit(
        tmp_path, monkeypatch) -> None:
    """botocore's read timeout bounds each read: a byte every 0.2 s held GetProducts for ever."""
    import time

    from autoscaler.cli import prices
    from tests.trickle import trickling

    monkeypatch.setattr(prices, "PRICING_CALL_LIMIT_S", 1.0)
    monkeypatch.setenv("AWS_ACCESS_KEY_ID", "testing")
    monkeypatch.setenv("AWS_SECRET_ACCESS_KEY", "testing")
    with trickling() as trickle:
        started = time.monotonic()
        done = runner.invoke(app, ["prices", "--cloud", "aws", "--region", "us-west-2", "--write",
                                   str(tmp_path / "prices.yaml"), "--endpoint", trickle.url])
        took = time.monotonic() - started
    assert done.exit_code == 1, done.output
    assert "GetProducts: pricing get_products: did not finish its answer within 1s" in done.output
    assert took < 5 and trickle.requests == 1
    assert not (tmp_path / "prices.yaml").exists()


def test_scores_add_each_zones_spot_placement_score_for_the_types_together(
        moto: str, spot_book: SpotBook, score_book: ScoreBook) -> None:
    spot_book.add("p3.2xlarge", "us-east-1a", 0.92)
    # moto's us-east-1: use1-az6 is us-east-1a, use1-az1 us-east-1b.
    score_book.rows = [{"Region": "us-east-1", "AvailabilityZoneId": "use1-az6", "Score": 2},
                       {"Region": "us-east-1", "AvailabilityZoneId": "use1-az1", "Score": 9}]
    base = ["prices", "--cloud", "aws", "--region", "us-east-1", "--zones", "us-east-1a,us-east-1b",
            "--endpoint", moto, "--scores"]
    result = runner.invoke(app, [*base, "--types", "p3.2xlarge,p3.8xlarge,p3.16xlarge", "--json"])
    assert result.exit_code == 0, result.output
    scores = {(r["instance_type"], r["zone"]): r["spot_score"] for r in json.loads(result.stdout)}
    assert scores[("p3.2xlarge", "us-east-1a")] == 2 and scores[("p3.16xlarge", "us-east-1b")] == 9
    assert score_book.requests[0]["types"] == ["p3.16xlarge", "p3.2xlarge", "p3.8xlarge"]
    table = runner.invoke(app, [*base, "--types", "p3.2xlarge,p3.8xlarge,p3.16xlarge"],
                          env={"COLUMNS": "200"})
    assert "spot score" in table.stdout and "2/10" in table.stdout and "9/10" in table.stdout
    few = runner.invoke(app, [*base, "--types", "p3.2xlarge,p3.8xlarge"])
    assert few.exit_code == 1 and "at least 3 --types" in few.output
    score_book.error = "UnauthorizedOperation"
    denied = runner.invoke(app, [*base, "--types", "p3.2xlarge,p3.8xlarge,p3.16xlarge"])
    assert denied.exit_code == 1 and "ec2:GetSpotPlacementScores" in denied.output

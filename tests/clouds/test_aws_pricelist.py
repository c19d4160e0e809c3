"""The AWS Price List reader against a realistic offer file served on 127.0.0.1, and
against hostile ones: every value in the file is data, never trusted as a number."""

from __future__ import annotations

import json
import re
import time
from collections.abc import Iterator
from datetime import timedelta

import pytest

from autoscaler.catalog import default_catalog
from autoscaler.clouds.aws import AwsCloud, AwsSettings
from autoscaler.clouds.aws_pricelist import (
    PriceListReader,
    PriceListSettings,
    http_chunks,
    read_offer_file,
)
from autoscaler.clouds.base import CloudApiError, CloudDataError, CloudError, CloudUnreachableError
from autoscaler.model.prices import PriceBook
from autoscaler.model.snapshot import Snapshot
from autoscaler.signals.prices import RegionWant, region_offerings
from tests.clouds.helpers import NOW, FakeClock
from tests.clouds.pricelist_fixture import (
    REGION,
    offer,
    on_demand,
    price_server,
    product,
    realistic,
    serve_bytes,
    serve_stream,
    text,
)
from tests.trickle import trickling

PATH = f"/offers/v1.0/aws/AmazonEC2/current/{REGION}/index.json"
GPUS = {t.name: t.gpus for t in default_catalog().types("aws")}


def pieces(document: str, size: int) -> Iterator[str]:
    return (document[i:i + size] for i in range(0, len(document), size))


def url_of(base: str) -> str:
    return base + "/offers/v1.0/aws/AmazonEC2/current/{region}/index.json"


def test_realistic_offer_file_gives_plain_linux_on_demand_prices() -> None:
    got = read_offer_file(pieces(text(realistic()), 1 << 16), REGION, GPUS)
    assert got.on_demand == {"p3.2xlarge": 3.06, "g6.xlarge": 0.8048, "p5.48xlarge": 55.04}
    assert got.problems == [] and got.publication == "2026-11-25T00:00:00Z"
    assert got.overlay() == {"aws": {REGION: {"g6.xlarge": {"on_demand": 0.8048},
                                              "p3.2xlarge": {"on_demand": 3.06},
                                              "p5.48xlarge": {"on_demand": 55.04}}}}


@pytest.mark.parametrize("indent", [None, 4])
@pytest.mark.parametrize("size", [1, 7, 113, 4096])
def test_any_chunking_reads_the_same(size: int, indent: int | None) -> None:
    """Values (and numbers: "55.04" cut as "55.0" + "4") and runs of indentation split
    across chunk boundaries."""
    document = json.dumps(realistic(), indent=indent, separators=None if indent else (",", ":"))
    assert read_offer_file(pieces(document, size), REGION, GPUS).on_demand == {
        "p3.2xlarge": 3.06, "g6.xlarge": 0.8048, "p5.48xlarge": 55.04}


def test_the_cloud_adapter_serves_price_list_prices_over_http_once_per_ttl() -> None:
    with price_server({PATH: serve_bytes(text(realistic()).encode())}) as served:
        clock = FakeClock(NOW)
        cloud = AwsCloud(REGION, clock=clock, settings=AwsSettings(
            price_list_url=url_of(served.url), price_list_ttl=timedelta(hours=6)))
        for _ in range(3):
            got = cloud.on_demand_prices(["p3.2xlarge", "g6.xlarge", "p4d.24xlarge", "x9.huge"])
        # p4d: not in the file; us-west-2 has a built-in list price.
        assert got == {"p3.2xlarge": 3.06, "g6.xlarge": 0.8048, "p4d.24xlarge": 21.95764}
        assert served.paths == [PATH]
        clock.advance(timedelta(hours=7))
        cloud.on_demand_prices(["p3.2xlarge"])
        assert served.paths == [PATH, PATH]


def test_the_operator_price_file_beats_the_public_list() -> None:
    catalog = default_catalog().with_prices({"aws": {REGION: {"p3.2xlarge": {"on_demand": 2.2}}}})
    with price_server({PATH: serve_bytes(text(realistic()).encode())}) as served:
        cloud = AwsCloud(REGION, catalog=catalog,
                         settings=AwsSettings(price_list_url=url_of(served.url)))
        assert cloud.on_demand_prices(["p3.2xlarge", "g6.xlarge"]) == {
            "p3.2xlarge": 2.2, "g6.xlarge": 0.8048}


def test_the_overlay_is_a_region_level_price_file() -> None:
    found = read_offer_file(pieces(text(realistic()), 1 << 16), REGION, GPUS)
    catalog = default_catalog().with_prices(found.overlay())
    price = catalog.price("aws", REGION, "p3.2xlarge")
    assert (price.on_demand_usd, price.source) == (3.06, f"price file ({REGION})")
    book = PriceBook(catalog, Snapshot(taken_at=NOW))
    assert book.price_source("aws", REGION, "g6.xlarge", None) == f"price file ({REGION})"
    assert book.price_source("aws", "eu-west-3", "g5.xlarge", None) == "us-east-1 list price used for eu-west-3"


def hostile(*rows: tuple[dict, dict]) -> str:
    products = {p["sku"]: p for p, _ in rows if isinstance(p, dict) and "sku" in p}
    return text(offer(products, {p["sku"]: t for p, t in rows}))


@pytest.mark.parametrize(("usd", "problem"), [
    (["3.06"], "USD is a list, not a number"),
    ({"v": 1}, "USD is a dict, not a number"),
    (True, "USD is a bool, not a number"),
    (None, "USD is a NoneType, not a number"),
    ("three", "USD 'three' is not a number"),
    ("NaN", "USD nan is not a positive finite price"),
    ("1e999", "USD inf is not a positive finite price"),
    ("-3.06", "USD -3.06 is not a positive finite price"),
    ("0", "USD 0.0 is not a positive finite price"),
    ("5000", "$5000/h is above $1000 per GPU-hour"),
])
def test_hostile_prices_are_refused(usd: object, problem: str) -> None:
    document = hostile((product("A", "p3.2xlarge", gpu="1"), on_demand("A", usd)),
                       (product("B", "g6.xlarge"), on_demand("B", "0.8048")))
    got = read_offer_file(pieces(document, 97), REGION, GPUS)
    assert got.on_demand == {"g6.xlarge": 0.8048}
    assert got.problems == [f"p3.2xlarge: {problem}: ignored"]


def test_a_type_with_more_gpus_than_the_catalog_says_is_ignored() -> None:
    document = hostile((product("A", "p3.2xlarge", gpu="8"), on_demand("A", "3.06")),
                       (product("B", "p5.48xlarge", gpu="8"), on_demand("B", "55.04")))
    got = read_offer_file(pieces(document, 4096), REGION, GPUS)
    assert got.on_demand == {"p5.48xlarge": 55.04}
    assert got.problems == ["p3.2xlarge: the price list says 8 GPUs, the catalog 1: price ignored"]


def test_another_regions_product_and_conflicting_prices_are_left_out() -> None:
    document = hostile(
        (product("A", "p3.2xlarge", region="eu-west-1"), on_demand("A", "3.305")),
        (product("B", "g6.xlarge"), on_demand("B", "0.8048")),
        (product("C", "g6.xlarge"), on_demand("C", "0.05")),
        (product("D", "g5.xlarge"), on_demand("D", "1.006", unit="Quantity")))
    got = read_offer_file(pieces(document, 4096), REGION, GPUS)
    assert got.on_demand == {}
    assert got.problems == [
        "p3.2xlarge: a product for region 'eu-west-1' in the us-west-2 file: ignored",
        "g6.xlarge: 2 different on-demand prices (0.05, 0.8048): left out"]


@pytest.mark.exhausts_stack
@pytest.mark.parametrize(("document", "message"), [
    ("<html>503 Slow Down</html>", "expected '{', found '<'"),
    ('{"products": {"A": tru', "not JSON (or cut short)"),
    ('{"products": {"A": {"attributes": {}}}', "expected ',' or '}', found 'the end'"),
    ('{"terms": {"OnDemand": {}}, "products": {}}', "terms before products"),
    ('{"products": {1: 2}}', "an object key that is not a string (int)"),
    ('{"products": {}} {"products": {}}', "data after the document"),
    ('{"products": {"A": ' + "[" * 5000 + "]" * 5000 + "}}", "nesting too deep"),
    ('{"x": ' + '{"y": ' * 1000 + "1" + "}" * 1000 + "}", "a value longer than 2048 characters"),
    ('{"products": {"A": "' + "x" * 3000 + '"}}', "a value longer than 2048 characters"),
])
def test_documents_that_are_not_offer_files(document: str, message: str) -> None:
    with pytest.raises(CloudDataError, match="AWS price list for us-west-2: " + _escape(message)):
        read_offer_file(pieces(document, 512), REGION, GPUS, max_value_chars=2048)


def _escape(message: str) -> str:
    return re.escape(message)


def test_a_product_that_is_not_an_object_is_passed_over() -> None:
    document = text(offer({"A": ["p3.2xlarge"], "B": {"attributes": None},  # type: ignore[dict-item]
                           "C": product("C", "g6.xlarge")}, {"C": on_demand("C", "0.8048")}))
    assert read_offer_file(pieces(document, 50), REGION, GPUS).on_demand == {"g6.xlarge": 0.8048}


def test_an_endless_answer_stops_at_the_byte_cap() -> None:
    def endless() -> Iterator[bytes]:
        yield b'{"products": {"A": {"attributes": {"note": "'
        while True:
            yield b"x" * 65536
    with price_server({PATH: serve_stream(endless())}) as served:
        fetch = http_chunks(PriceListSettings(max_bytes=4 << 20))
        reader = PriceListReader(REGION, default_catalog(), PriceListSettings(
            url=url_of(served.url), max_bytes=4 << 20, max_value_chars=8 << 20), fetch=fetch)
        with pytest.raises(CloudDataError, match="larger than 4194304 bytes"):
            reader.read()


def test_a_trickling_answer_ends_at_the_deadline_not_at_its_length() -> None:
    # A byte every 0.2 s, never a read timeout: a read of 1 MiB took 100000 bytes' time.
    with trickling() as trickle:
        reader = PriceListReader(REGION, default_catalog(),
                                 PriceListSettings(url=trickle.url, timeout_s=2, deadline_s=1))
        started = time.monotonic()
        with pytest.raises(CloudUnreachableError, match=r"not read within 1 s"):
            reader.read()
        assert time.monotonic() - started < 5


def test_http_failures_are_typed_cloud_errors() -> None:
    with price_server({PATH: serve_bytes(b"\xff\xfe{}")}) as served:
        reader = PriceListReader(REGION, default_catalog(), PriceListSettings(url=url_of(served.url)))
        with pytest.raises(CloudDataError, match="not UTF-8"):
            reader.read()
        missing = PriceListReader("eu-west-1", default_catalog(), PriceListSettings(url=url_of(served.url)))
        with pytest.raises(CloudApiError, match="HTTP 404"):
            missing.read()
    gone = PriceListReader(REGION, default_catalog(), PriceListSettings(url=url_of(served.url), timeout_s=2))
    with pytest.raises(CloudUnreachableError, match="cannot reach"):
        gone.read()
    with pytest.raises(CloudError, match="only http"):
        PriceListReader(REGION, default_catalog(), PriceListSettings(url="file:///etc/passwd")).read()


def test_price_signals_carry_price_list_prices_and_survive_its_failure(moto: str, spot_book) -> None:
    """Wired where DescribePrice is for Alibaba: the market adapter's on-demand prices, so
    the snapshot's offerings carry them; a failing download is missing data, not a price."""
    want = RegionWant("aws", REGION, ("g6.xlarge", "p3.2xlarge"), None)
    with price_server({PATH: serve_bytes(text(realistic()).encode())}) as served:
        cloud = AwsCloud(REGION, settings=AwsSettings(endpoint_url=moto, price_list_url=url_of(served.url)))
        offerings, missing = region_offerings(cloud, want)
    assert missing == []
    assert {o.instance_type: o.on_demand_usd for o in offerings if o.zone is None} == {
        "g6.xlarge": 0.8048, "p3.2xlarge": 3.06}
    dead = AwsCloud(REGION, settings=AwsSettings(endpoint_url=moto, price_list_url=url_of(served.url)))
    offerings, missing = region_offerings(dead, want)
    assert any("on-demand prices" in m and "cannot reach" in m for m in missing)
    book = PriceBook(default_catalog(), Snapshot(taken_at=NOW, offerings=offerings))
    assert book.on_demand("aws", REGION, "g6.xlarge", None) == 0.8048  # the us-west-2 list price
    assert book.price_source("aws", REGION, "p3.2xlarge", None) == "us-east-1 list price used for us-west-2"

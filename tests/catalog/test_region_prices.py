"""Catalog prices per region: the lookup order, the visible us-east-1 fallback, and the
price file's region level with hostile values refused by key."""

from __future__ import annotations

import pytest

from autoscaler.catalog import CatalogError, MissingPriceError, default_catalog, load_catalog
from autoscaler.catalog.price_file import MAX_USD_PER_GPU_HOUR
from autoscaler.catalog.regional import REGIONAL_ON_DEMAND
from autoscaler.catalog.regions import REGIONS


def write(tmp_path, text: str):
    path = tmp_path / "prices.yaml"
    path.write_text(text)
    return path


@pytest.mark.parametrize(("region", "od", "source", "fallback"), [
    ("us-east-1", 3.06, "us-east-1 list price", None),
    ("eu-west-1", 3.305, "eu-west-1 list price", None),
    ("ap-northeast-1", 4.194, "ap-northeast-1 list price", None),
    # No eu-west-3 row for p3.2xlarge: us-east-1 stands in, and says so.
    ("eu-west-3", 3.06, "us-east-1 list price used for eu-west-3", "us-east-1"),
])
def test_builtin_prices_are_per_region_with_a_named_fallback(region, od, source, fallback):
    price = default_catalog().price("aws", region, "p3.2xlarge")
    assert (price.on_demand_usd, price.source, price.fallback_region) == (od, source, fallback)
    assert price.spot_usd == round(od * (1 - 0.70), 4)


def test_us_east_1_prices_equal_the_types_own_prices():
    """The per-region table never disagrees with the type's default (us-east-1) price, so
    us-east-1 pools price exactly as before."""
    cat = default_catalog()
    for (cloud, name), by_region in REGIONAL_ON_DEMAND.items():
        itype = cat.get(cloud, name)
        assert by_region.get("us-east-1", itype.on_demand_usd) == itype.on_demand_usd, name
        assert set(by_region) <= set(REGIONS[cloud]), name
        price = cat.price(cloud, "us-east-1", name)
        assert (price.on_demand_usd, price.spot_usd) == (itype.on_demand_usd, itype.spot_usd)


def test_new_gpu_types_and_current_p_prices():
    cat = default_catalog()
    shapes = {name: (t.gpus, t.gpu_model, t.gpu_memory_gib, t.vcpu, t.ram_gib, t.on_demand_usd)
              for name in ("g6.xlarge", "g6e.xlarge", "p5e.48xlarge", "p5en.48xlarge", "p5.48xlarge",
                           "p4d.24xlarge") for t in [cat.get("aws", name)]}
    assert shapes["g6.xlarge"] == (1, "L4", 24, 4, 16, 0.8048)
    assert shapes["g6e.xlarge"] == (1, "L40S", 48, 4, 32, 1.861)
    assert shapes["p5en.48xlarge"] == (8, "H200", 141, 192, 2048, 63.296)
    assert shapes["p5.48xlarge"][-1] == 55.04 and shapes["p4d.24xlarge"][-1] == 21.957642
    # p5e: Capacity Blocks only, no on-demand list price: launches need the price file.
    assert shapes["p5e.48xlarge"][-1] is None
    with pytest.raises(MissingPriceError, match="price file"):
        cat.on_demand_usd("aws", "p5e.48xlarge", "us-east-1")


def test_price_file_region_beats_region_less_beats_builtin(tmp_path):
    cat = load_catalog(write(tmp_path, """
prices:
  aws:
    p3.2xlarge: {on_demand: 2.5, spot_discount: 0.5}
    us-west-2:
      p3.2xlarge: {on_demand: 3.0, spot: 0.9}
      g5.xlarge: {spot_discount: 0.2}
    eu-west-1:
      p3.2xlarge: {spot: 1.1}
"""))
    west = cat.price("aws", "us-west-2", "p3.2xlarge")
    assert (west.on_demand_usd, west.spot_usd, west.source) == (3.0, 0.9, "price file (us-west-2)")
    # Region-less keeps meaning every region, and beats the built-in eu-west-1 price.
    ireland = cat.price("aws", "eu-west-1", "p3.2xlarge")
    assert (ireland.on_demand_usd, ireland.spot_usd) == (2.5, 1.1)
    assert ireland.source == "price file (every region)"
    assert cat.price("aws", "us-east-1", "p3.2xlarge").spot_usd == 1.25
    # A region entry with only a discount keeps the fallback on-demand price, named.
    g5 = cat.price("aws", "us-west-2", "g5.xlarge")
    assert (g5.on_demand_usd, g5.spot_usd) == (1.006, round(1.006 * 0.8, 4))
    assert g5.source == "us-east-1 list price used for us-west-2"
    # The type itself carries the region-less price (the simulator reads it directly).
    assert cat.get("aws", "p3.2xlarge").on_demand_usd == 2.5


def test_alibaba_prices_per_region(tmp_path):
    cat = load_catalog(write(tmp_path, """
prices:
  alicloud:
    ecs.gn6i-c4g1.xlarge: {on_demand: 1.1}
    cn-beijing:
      ecs.gn6i-c4g1.xlarge: {on_demand: 1.3}
"""))
    assert cat.price("alicloud", "cn-hangzhou", "ecs.gn6i-c4g1.xlarge").on_demand_usd == 1.1
    assert cat.price("alicloud", "cn-beijing", "ecs.gn6i-c4g1.xlarge").on_demand_usd == 1.3
    assert cat.price("alicloud", "cn-beijing", "ecs.gn6v-c8g1.2xlarge").on_demand_usd is None


def test_null_on_demand_removes_a_price_in_one_region(tmp_path):
    cat = load_catalog(write(tmp_path, "prices: {aws: {eu-west-1: {g4dn.xlarge: {on_demand: null}}}}\n"))
    assert cat.price("aws", "eu-west-1", "g4dn.xlarge").on_demand_usd is None
    assert cat.price("aws", "us-east-1", "g4dn.xlarge").on_demand_usd == 0.526


@pytest.mark.parametrize(("text", "needle"), [
    ("prices: {aws: {us-west-2: {p3.2xlarge: {on_demand: -3}}}}", r"prices\.aws\.us-west-2\.p3\.2xlarge\.on_demand: must be > 0"),
    ("prices: {aws: {us-west-2: {p3.2xlarge: {on_demand: .nan}}}}", r"us-west-2\.p3\.2xlarge\.on_demand: nan is not a finite number"),
    ("prices: {aws: {p3.2xlarge: {on_demand: .inf}}}", r"prices\.aws\.p3\.2xlarge\.on_demand: inf is not a finite"),
    ("prices: {aws: {p3.2xlarge: {on_demand: '3.06'}}}", r"p3\.2xlarge\.on_demand: expected a number, got str"),
    ("prices: {aws: {p3.2xlarge: {on_demand: true}}}", r"expected a number, got bool"),
    ("prices: {aws: {p3.2xlarge: {on_demand: 1001}}}", r"p3\.2xlarge\.on_demand: \$1001/h is \$1001 per GPU-hour"),
    ("prices: {aws: {p5.48xlarge: {on_demand: 8001}}}", r"p5\.48xlarge\.on_demand: .*\$1000\.12 per GPU-hour"),
    ("prices: {aws: {p3.2xlarge: {spot: -0.1}}}", r"p3\.2xlarge\.spot: must be > 0"),
    ("prices: {aws: {p3.2xlarge: {spot_discount: 1.5}}}", r"spot_discount: must be in \[0, 1\)"),
    ("prices: {aws: {p3.2xlarge: {spot: 1, spot_discount: 0.5}}}", r"spot or spot_discount, not both"),
    ("prices: {aws: {us-west-9: {p3.2xlarge: {on_demand: 3}}}}", r"prices\.aws\.us-west-9: 'us-west-9' is not a region of aws"),
    ("prices: {aws: {cn-hangzhou: {p3.2xlarge: {on_demand: 3}}}}", r"'cn-hangzhou' is not a region of aws"),
    ("prices: {aws: {us-west-2: {p9.huge: {on_demand: 3}}}}", r"prices\.aws\.us-west-2\.p9\.huge: 'p9\.huge' is not a known aws"),
    ("prices: {aws: {us-west-2: [1, 2]}}", r"prices\.aws\.us-west-2: 'us-west-2' is not a known aws instance type"),
    ("prices: {gcp: {n1: {on_demand: 1}}}", r"prices\.gcp: unknown cloud"),
    ("prices: {aws: {us-west-2: {p3.2xlarge: 3}}}", r"us-west-2\.p3\.2xlarge: expected a mapping"),
    ("prices: {aws: [1]}", r"prices\.aws: expected a mapping"),
    ("prices: {aws: {p3.2xlarge: {on_demand: 3}}", r":2:1: not valid YAML: "),
])
def test_hostile_price_files_are_refused_naming_the_key(tmp_path, text, needle):
    path = write(tmp_path, text + "\n")
    with pytest.raises(CatalogError, match=needle) as err:
        load_catalog(path)
    assert str(path) in str(err.value)


def test_the_sanity_limit_is_per_gpu():
    assert MAX_USD_PER_GPU_HOUR == 1000
    cat = default_catalog().with_prices({"aws": {"p5.48xlarge": {"on_demand": 7999}}})
    assert cat.price("aws", "eu-west-2", "p5.48xlarge").on_demand_usd == 7999

from __future__ import annotations

import pytest

from autoscaler.catalog import (
    CatalogError,
    MissingPriceError,
    UnknownInstanceTypeError,
    default_catalog,
    load_catalog,
)


def test_builtin_types_and_prices():
    cat = default_catalog()
    p3 = cat.get("aws", "p3.8xlarge")
    assert (p3.gpus, p3.gpu_model, p3.on_demand_usd) == (4, "V100", 12.24)
    assert cat.get("aws", "g4dn.xlarge").on_demand_usd == 0.526
    assert cat.get("alicloud", "ecs.gn6v-c8g1.2xlarge").gpu_model == "V100"
    for name in ("p3.2xlarge", "p3.16xlarge", "g4dn.2xlarge", "g4dn.12xlarge", "g5.xlarge"):
        assert cat.get("aws", name).gpus >= 1


def test_alibaba_needs_a_price_file(tmp_path):
    cat = default_catalog()
    with pytest.raises(MissingPriceError, match="price file"):
        cat.on_demand_usd("alicloud", "ecs.gn6i-c4g1.xlarge")
    prices = tmp_path / "prices.yaml"
    prices.write_text("prices:\n  alicloud:\n    ecs.gn6i-c4g1.xlarge: {on_demand: 1.1, spot_discount: 0.8}\n"
                      "  aws:\n    p3.2xlarge: {on_demand: 2.5}\n")
    cat = load_catalog(prices)
    assert cat.on_demand_usd("alicloud", "ecs.gn6i-c4g1.xlarge") == 1.1
    assert cat.get("alicloud", "ecs.gn6i-c4g1.xlarge").spot_usd == pytest.approx(0.22)
    assert cat.on_demand_usd("aws", "p3.2xlarge") == 2.5


@pytest.mark.parametrize(
    ("text", "needle"),
    [
        ("prices:\n  aws:\n    p9.huge: {on_demand: 1}\n", "not a known aws instance type"),
        ("prices:\n  aws:\n    p3.2xlarge: {price: 1}\n", "unknown keys"),
        ("prices:\n  aws:\n    p3.2xlarge: {on_demand: -1}\n", "must be > 0"),
        ("nothing: here\n", "'prices' key"),
    ],
)
def test_bad_price_files_are_refused_clearly(tmp_path, text, needle):
    path = tmp_path / "p.yaml"
    path.write_text(text)
    with pytest.raises(CatalogError, match=needle):
        load_catalog(path)


def test_unknown_type_lists_known_ones():
    with pytest.raises(UnknownInstanceTypeError, match=r"p3\.2xlarge"):
        default_catalog().get("aws", "x1.large")


def test_h200_mig_geometry():
    from autoscaler.catalog.mig import layout_problems

    h200 = default_catalog().get("aws", "p5en.48xlarge")
    assert list(h200.mig) == ["1g.18gb", "1g.35gb", "2g.35gb", "3g.71gb", "4g.71gb", "7g.141gb"]
    assert layout_problems("H200", 141, ["3g.71gb", "2g.35gb", "1g.18gb", "1g.18gb"]) == []
    assert layout_problems("H200", 141, ["3g.71gb"] * 3)[0] == "3g.71gb fits at most 2 time(s) on one H200 141GB"

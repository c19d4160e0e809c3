"""``gpu-autoscaler prices``: what the market says now, per instance type and zone."""

from __future__ import annotations

import json
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Annotated

import typer
from rich.table import Table
from ruamel.yaml import YAML

from autoscaler.bounded import Bound, Overran, sdk_call_limit
from autoscaler.catalog import Catalog, CatalogError
from autoscaler.cli.common import PricesOption, catalog_from, console, fail
from autoscaler.clouds import CloudAuthError, CloudError, CloudMarket, CloudUnreachableError, connect
from autoscaler.clouds.aws_bounded import BoundedClient
from autoscaler.clouds.aws_pricelist import PriceList, PriceListReader, PriceListSettings, query_prices
from autoscaler.model.snapshot import Offering
from autoscaler.policy.models import Cloud
from autoscaler.signals.prices import RegionWant, region_offerings


@dataclass(frozen=True)
class PriceRow:
    instance_type: str
    zone: str
    gpus: int | None
    on_demand_usd: float | None
    spot_usd: float | None
    spot_usd_per_gpu: float | None
    discount: float | None  # 0.7 = spot is 70% below on-demand
    in_stock: bool | None
    spot_score: int | None = None  # the zone's Spot placement score for all the types asked


def price_rows(offerings: list[Offering], catalog: Catalog,
               scores: dict[str, int] | None = None) -> list[PriceRow]:
    """One row per (type, zone); the "any zone" summary only for types with no zone data;
    ``scores``: Spot placement scores by zone."""
    zoned = {o.instance_type for o in offerings if o.zone is not None}
    rows = []
    for off in offerings:
        if off.zone is None and off.instance_type in zoned:
            continue
        key = (off.cloud, off.instance_type)
        gpus = catalog.get(*key).gpus if key in catalog else None
        od, spot = off.on_demand_usd, off.spot_usd
        rows.append(PriceRow(
            instance_type=off.instance_type, zone=off.zone or "any", gpus=gpus,
            on_demand_usd=od, spot_usd=spot,
            spot_usd_per_gpu=round(spot / gpus, 4) if spot is not None and gpus else None,
            discount=round(1 - spot / od, 4) if spot is not None and od else None,
            in_stock=off.in_stock, spot_score=(scores or {}).get(off.zone or "")))
    return sorted(rows, key=lambda r: (r.instance_type, r.zone))


def _usd(value: float | None) -> str:
    return "-" if value is None else f"${value:.4f}"


def prices_table(rows: list[PriceRow], title: str, scores: bool = False) -> Table:
    table = Table(title=title)
    for name in ("type", "zone", "on-demand $/h", "spot $/h", "$/GPU-h (spot)", "discount",
                 "stock", *(["spot score"] if scores else [])):
        left = name in ("type", "zone")
        table.add_column(name, justify="left" if left else "right", overflow="fold")
    stock = {True: "[green]yes[/]", False: "[red]no[/]", None: "[dim]?[/]"}
    for r in rows:
        score = [] if not scores else ["-" if r.spot_score is None else f"{r.spot_score}/10"]
        table.add_row(r.instance_type, r.zone, _usd(r.on_demand_usd), _usd(r.spot_usd),
                      _usd(r.spot_usd_per_gpu),
                      "-" if r.discount is None else f"{r.discount:.0%}", stock[r.in_stock], *score)
    return table


# connect 10 s, read 30 s, 3 attempts: the longest one GetProducts page may take.
PRICING_CALL_LIMIT_S = sdk_call_limit(10, 30, 3)


def read_price_list(region: str, catalog: Catalog, url: str | None, endpoint: str | None) -> PriceList:
    """The region's on-demand prices: the Query API (GetProducts, credentials from the
    environment), or the public bulk offer file at ``url``."""
    if url:
        return PriceListReader(region, catalog, PriceListSettings(url=url)).read()
    import boto3  # the CLI's other commands do not pay for importing it
    from botocore.config import Config
    from botocore.exceptions import BotoCoreError, ClientError

    # The Price List Query API answers in us-east-1 (also eu-central-1, ap-south-1).
    raw = boto3.client("pricing", region_name="us-east-1", endpoint_url=endpoint,
                       config=Config(connect_timeout=10, read_timeout=30,
                                     retries={"max_attempts": 3}))
    # botocore's timeouts bound each socket read; an endpoint that trickles its answer
    # would hold the command for ever, so each page's call has a limit of its own.
    client = BoundedClient(raw, Bound("pricing-call"), "pricing", PRICING_CALL_LIMIT_S)
    gpus = {t.name: t.gpus for t in catalog.types("aws")}
    try:
        return query_prices(client, region, gpus)
    except ClientError as exc:
        raise CloudError(f"GetProducts refused: {exc.response.get('Error', {}).get('Code')}") from exc
    except BotoCoreError as exc:
        raise CloudError(f"GetProducts failed: {type(exc).__name__}: {exc}") from exc
    except Overran as exc:
        raise CloudError(f"GetProducts: {exc}") from exc


def write_price_list(region: str, catalog: Catalog, url: str | None, endpoint: str | None,
                     out: Path) -> None:
    """Read the region's on-demand prices from the AWS Price List into ``out``'s
    ``prices.aws.<region>`` (the file's other entries are kept)."""
    try:
        found = read_price_list(region, catalog, url, endpoint)
    except CloudError as exc:
        fail(f"price list: {exc}")
    if not found.on_demand:
        fail(f"the price list for {region} had no price for any catalog GPU type"
             + (f" ({len(found.problems)} entries ignored, e.g. {found.problems[0]})"
                if found.problems else ""))
    yaml = YAML()
    doc = (yaml.load(out.read_text()) if out.exists() else None) or {}
    if not isinstance(doc, dict) or not isinstance(doc.setdefault("prices", {}), dict):
        fail(f"{out}: not a price file (expected a 'prices:' mapping)")
    aws = doc["prices"].setdefault("aws", {})
    aws[region] = found.overlay()["aws"][region]
    try:  # the result must load as a price file before it replaces the old one
        catalog.with_prices(json.loads(json.dumps(doc["prices"])))
    except (CatalogError, ValueError, TypeError) as exc:
        fail(f"{out}: the merged price file would not load: {exc}")
    with out.open("w") as fh:
        yaml.dump(doc, fh)
    typer.echo(f"wrote {len(found.on_demand)} {region} on-demand prices to {out}"
               + (f" (price list of {found.publication})" if found.publication else "")
               + (f"; {len(found.problems)} entries ignored, e.g. {found.problems[0]}"
                  if found.problems else ""))


def prices(
    cloud: Annotated[Cloud, typer.Option("--cloud", help="aws | alicloud")],
    region: Annotated[str, typer.Option("--region", help="e.g. us-east-1, cn-hangzhou")],
    types: Annotated[str, typer.Option(
        "--types", help="Comma-separated instance types (with --write: every catalog type).")] = "",
    write: Annotated[Path | None, typer.Option(
        "--write", help="AWS: read the region's on-demand prices from the AWS Price List Query "
        "API (GetProducts; --endpoint for another endpoint) into this price file's "
        "prices.aws.<region>, keeping its other entries.", dir_okay=False)] = None,
    price_list_url: Annotated[str | None, typer.Option(
        "--price-list-url", help="With --write: read the public bulk offer file at this URL "
        "instead, '{region}' replaced (no credentials; AWS's is "
        "https://pricing.us-east-1.amazonaws.com/offers/v1.0/aws/AmazonEC2/current/{region}/index.json).",
    )] = None,
    zones: Annotated[str | None, typer.Option("--zones", help="Only these zones (comma-separated).")] = None,
    endpoint: Annotated[str | None, typer.Option(
        "--endpoint", help="API endpoint URL (moto, the fake ECS server, a private endpoint).")] = None,
    prices_file: PricesOption = None,
    json_out: Annotated[bool, typer.Option("--json", help="Print rows as JSON.")] = False,
    scores: Annotated[bool, typer.Option(
        "--scores", help="AWS: also each zone's Spot placement score (1-10) for the --types "
        "together, as the service reads it with clouds.aws.spot_placement_scores "
        "(GetSpotPlacementScores; at least three types; needs ec2:GetSpotPlacementScores).",
    )] = False,
) -> None:
    """Show on-demand and spot prices, $/GPU-h and stock per zone, straight from the cloud.

    Credentials come from the environment: AWS_ACCESS_KEY_ID and AWS_SECRET_ACCESS_KEY (or a profile or instance role); ALIBABA_CLOUD_ACCESS_KEY_ID and ALIBABA_CLOUD_ACCESS_KEY_SECRET.

    AWS on-demand prices come from the catalog or --prices; Alibaba's from DescribePrice.
    --write fills a price file from the AWS Price List instead.
    """  # noqa: E501 (typer keeps docstring line breaks in --help)
    if write is not None:
        if cloud is not Cloud.AWS:
            fail("--write reads the AWS Price List; Alibaba's prices come from DescribePrice "
                 "(run without --write)")
        write_price_list(region, catalog_from(prices_file), price_list_url, endpoint, write)
        return
    names = tuple(sorted({t.strip() for t in types.split(",") if t.strip()}))
    if not names:
        fail("--types needs at least one instance type")
    from autoscaler.clouds.aws import MIN_SCORED_TYPES, AwsCloud, AwsSettings, scorable  # boto3: here only

    if scores and cloud is not Cloud.AWS:
        fail("--scores asks AWS's Spot placement scores; Alibaba's stock per zone is in the "
             "stock column already")
    if scores and not scorable(names):
        fail(f"--scores needs at least {MIN_SCORED_TYPES} --types: AWS scores one or two "
             "types as always low")
    zone_list = tuple(sorted({z.strip() for z in zones.split(",") if z.strip()})) if zones else None
    catalog = catalog_from(prices_file)
    want = RegionWant(cloud.value, region, names, zone_list)
    by_zone: dict[str, int] | None = None
    try:
        if scores:
            aws = AwsCloud(region, catalog=catalog,
                           settings=AwsSettings(endpoint_url=endpoint, spot_scores=True))
            market: CloudMarket = aws
            by_zone = aws.spot_placement_scores(names)
        else:
            market = connect(cloud.value, region, endpoint=endpoint, catalog=catalog)
        offerings, _ = region_offerings(market, want, strict=True)
    except CloudAuthError as exc:
        fail(f"credentials: {exc}")
    except CloudUnreachableError as exc:
        fail(f"endpoint unreachable: {exc}")
    except CloudError as exc:
        fail(str(exc))
    if zone_list is not None:
        offerings = [o for o in offerings if o.zone is None or o.zone in zone_list]
    rows = price_rows(offerings, catalog, by_zone)
    if json_out:
        typer.echo(json.dumps([asdict(r) for r in rows], indent=2))
        return
    console.print(prices_table(rows, f"{cloud.value} {region} prices", scores))


def register(app: typer.Typer) -> None:
    app.command("prices")(prices)

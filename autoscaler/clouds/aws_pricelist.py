"""AWS on-demand prices per region from the Price List bulk offer file (AmazonEC2).

The offer file of a region (``.../offers/v1.0/aws/AmazonEC2/current/<region>/index.json``,
no credentials needed) is one JSON object: ``products`` (sku -> attributes), then ``terms``
(``OnDemand``/``Reserved`` -> sku -> term -> priceDimensions -> pricePerUnit.USD). It is
gigabytes, so it is streamed (``aws_json_stream``) and only the products of the catalog's
GPU types are kept: Linux, shared tenancy, no pre-installed software, capacity status
"Used", no Capacity Block. Everything in it is untrusted data: a price must be a finite
positive number under the catalog's per-GPU sanity limit, a product whose GPU count differs
from the catalog's or that names another region is ignored, and two different prices for
one type leave that type out. Each ignored entry is reported in ``PriceList.problems``.

The result feeds ``AwsCloud.on_demand_prices`` (observed offerings, as Alibaba's
DescribePrice does) or, as ``overlay()``, a region-level price-file mapping for
``Catalog.with_prices``.
"""

from __future__ import annotations

import codecs
import json
import logging
import math
import time
import urllib.error
import urllib.request
from collections.abc import Callable, Iterable, Iterator, Mapping
from dataclasses import dataclass, field
from datetime import timedelta
from typing import Any
from urllib.parse import urlsplit

from autoscaler.catalog import Catalog
from autoscaler.catalog.price_file import MAX_USD_PER_GPU_HOUR
from autoscaler.clouds.aws_json_stream import JsonStream
from autoscaler.clouds.base import (
    CloudApiError,
    CloudDataError,
    CloudError,
    CloudUnreachableError,
    TtlCache,
)
from autoscaler.model.clock import Clock, utc_now

log = logging.getLogger(__name__)

DEFAULT_URL = ("https://pricing.us-east-1.amazonaws.com/offers/v1.0/aws/AmazonEC2/current/"
               "{region}/index.json")
# The attributes a plain on-demand Linux instance has in the offer file.
_WANTED = {"operatingSystem": "Linux", "tenancy": "Shared", "preInstalledSw": "NA",
           "capacitystatus": "Used"}
_MAX_PROBLEMS = 50  # a hostile file can produce millions; the first ones say enough

Chunks = Callable[[str], Iterator[str]]  # url -> decoded text chunks


@dataclass(frozen=True)
class PriceListSettings:
    url: str = DEFAULT_URL  # "{region}" is replaced; http(s) only
    ttl: timedelta = timedelta(hours=24)  # AWS republishes a few times a month
    timeout_s: float = 30  # per read
    deadline_s: float = 900  # the whole download
    max_bytes: int = 16 << 30  # us-east-1's file is several GB; more is not an offer file
    max_value_chars: int = 1 << 20  # one product or one sku's terms


@dataclass(frozen=True)
class PriceList:
    region: str
    on_demand: dict[str, float]
    problems: list[str] = field(default_factory=list)
    publication: str | None = None

    def overlay(self) -> dict[str, Any]:
        """The prices as a price-file ``prices:`` mapping for this region."""
        return {"aws": {self.region: {name: {"on_demand": usd}
                                      for name, usd in sorted(self.on_demand.items())}}}


class _Problems(list[str]):
    def add(self, message: str) -> None:
        if len(self) < _MAX_PROBLEMS:
            self.append(message)


def _usd(raw: Any, gpus: int) -> float | str:
    """A price, or why it is not one. AWS writes USD as a string ("3.0600000000")."""
    if isinstance(raw, bool) or not isinstance(raw, str | int | float):
        return f"USD is a {type(raw).__name__}, not a number"
    try:
        usd = float(raw)
    except ValueError:
        return f"USD {str(raw)[:40]!r} is not a number"
    if not math.isfinite(usd) or usd <= 0:
        return f"USD {usd!r} is not a positive finite price"
    if usd / max(gpus, 1) > MAX_USD_PER_GPU_HOUR:
        return f"${usd:g}/h is above ${MAX_USD_PER_GPU_HOUR:g} per GPU-hour"
    return usd


def _product(raw: Any, region: str, gpus_of: Mapping[str, int],
             problems: _Problems) -> str | None:
    """The instance type of a wanted product, else None."""
    attrs = raw.get("attributes") if isinstance(raw, dict) else None
    if not isinstance(attrs, dict):
        return None
    name = attrs.get("instanceType")
    if not isinstance(name, str) or name not in gpus_of:
        return None
    if any(attrs.get(k) != v for k, v in _WANTED.items()):
        return None
    if attrs.get("marketoption", "OnDemand") != "OnDemand":
        return None  # Capacity Blocks are priced apart
    if attrs.get("regionCode", region) != region:
        problems.add(f"{name}: a product for region {str(attrs.get('regionCode'))[:30]!r} in the "
                     f"{region} file: ignored")
        return None
    gpu = attrs.get("gpu")
    if gpu is not None and str(gpu) != str(gpus_of[name]):
        problems.add(f"{name}: the price list says {str(gpu)[:10]} GPUs, the catalog "
                     f"{gpus_of[name]}: price ignored")
        return None
    return name


def _hourly(raw: Any, name: str, gpus: int, problems: _Problems) -> set[float]:
    """The hourly USD prices in one sku's OnDemand terms."""
    found: set[float] = set()
    terms = raw.values() if isinstance(raw, dict) else ()
    for term in terms:
        dims = term.get("priceDimensions") if isinstance(term, dict) else None
        for dim in dims.values() if isinstance(dims, dict) else ():
            if not isinstance(dim, dict) or str(dim.get("unit", "")).lower() not in ("hrs", "hours"):
                continue
            per_unit = dim.get("pricePerUnit")
            usd = _usd(per_unit.get("USD") if isinstance(per_unit, dict) else None, gpus)
            if isinstance(usd, str):
                problems.add(f"{name}: {usd}: ignored")
            else:
                found.add(usd)
    return found


def read_offer_file(chunks: Iterator[str], region: str, gpus_of: Mapping[str, int], *,
                    max_value_chars: int = 1 << 20) -> PriceList:
    """On-demand $/h per wanted type (``gpus_of``: type -> the catalog's GPUs)."""
    stream = JsonStream(chunks, what=f"AWS price list for {region}", max_value=max_value_chars)
    problems = _Problems()
    skus: dict[str, str] = {}
    prices: dict[str, set[float]] = {}
    publication: str | None = None
    seen_products = False
    for key in stream.members():
        if key == "products":
            seen_products = True
            for sku in stream.members():
                name = _product(stream.value(), region, gpus_of, problems)
                if name is not None:
                    skus[sku] = name
        elif key == "terms":
            if not seen_products:
                raise CloudDataError(f"AWS price list for {region}: terms before products "
                                     "(not an AWS offer file)")
            _read_terms(stream, skus, gpus_of, prices, problems)
        elif key == "publicationDate":
            value = stream.value()
            publication = value[:40] if isinstance(value, str) else None
        else:
            stream.skip(1)
    if not stream.at_end():
        raise CloudDataError(f"AWS price list for {region}: data after the document")
    return PriceList(region, _single(prices, problems), list(problems), publication)


def _read_terms(stream: JsonStream, skus: Mapping[str, str], gpus_of: Mapping[str, int],
                prices: dict[str, set[float]], problems: _Problems) -> None:
    for kind in stream.members():
        if kind != "OnDemand":
            stream.skip(2)  # Reserved: walked, never kept
            continue
        for sku in stream.members():
            name = skus.get(sku)
            if name is None:
                stream.skip(3)
                continue
            found = _hourly(stream.value(), name, gpus_of[name], problems)
            if found:
                prices.setdefault(name, set()).update(found)


# GetProducts pages: each PriceList item is one sku's JSON (product + terms), a few KB.
MAX_PAGES_PER_TYPE = 20


def read_get_products(items: Iterable[Any], region: str, gpus_of: Mapping[str, int]) -> PriceList:
    """The same prices from the Price List Query API's ``GetProducts`` answers: each item
    is the JSON text of one sku (``product`` with its attributes, ``terms``), untrusted
    like the bulk file (the same checks, the same problems)."""
    problems = _Problems()
    prices: dict[str, set[float]] = {}
    for item in items:
        try:
            doc = json.loads(item) if isinstance(item, str | bytes) else None
        except ValueError:
            doc = None
        if not isinstance(doc, dict):
            problems.add("a GetProducts item that is not a JSON object: ignored")
            continue
        name = _product(doc.get("product"), region, gpus_of, problems)
        terms = doc.get("terms")
        if name is None or not isinstance(terms, dict):
            continue
        found = _hourly(terms.get("OnDemand"), name, gpus_of[name], problems)
        if found:
            prices.setdefault(name, set()).update(found)
    return PriceList(region, _single(prices, problems), list(problems))


def _single(prices: dict[str, set[float]], problems: _Problems) -> dict[str, float]:
    out: dict[str, float] = {}
    for name, found in sorted(prices.items()):
        if len(found) == 1:
            out[name] = next(iter(found))
        else:
            problems.add(f"{name}: {len(found)} different on-demand prices "
                         f"({', '.join(f'{p:g}' for p in sorted(found)[:4])}): left out")
    return out


def query_prices(client: Any, region: str, gpus_of: Mapping[str, int]) -> PriceList:
    """On-demand prices of ``gpus_of``'s types in ``region`` through a boto3 ``pricing``
    client (``GetProducts``, one filtered query per type: a few pages, not gigabytes)."""
    items: list[Any] = []
    for name in sorted(gpus_of):
        filters = [{"Type": "TERM_MATCH", "Field": k, "Value": v} for k, v in (
            ("instanceType", name), ("regionCode", region), *_WANTED.items())]
        token: str | None = None
        for _ in range(MAX_PAGES_PER_TYPE):
            kwargs: dict[str, Any] = {"ServiceCode": "AmazonEC2", "Filters": filters,
                                      "FormatVersion": "aws_v1", "MaxResults": 100}
            if token:
                kwargs["NextToken"] = token
            page = client.get_products(**kwargs)
            listed = page.get("PriceList") if isinstance(page, dict) else None
            items += listed if isinstance(listed, list) else []
            token = page.get("NextToken") if isinstance(page, dict) else None
            if not isinstance(token, str) or not token:
                break
    return read_get_products(items, region, gpus_of)


def http_chunks(settings: PriceListSettings) -> Chunks:
    """A fetcher that streams a URL as UTF-8 text under the byte cap and the deadline."""
    def fetch(url: str) -> Iterator[str]:
        if urlsplit(url).scheme not in ("http", "https"):
            raise CloudError(f"price list URL {url!r}: only http(s) is read")
        deadline = time.monotonic() + settings.deadline_s
        try:
            answer = urllib.request.urlopen(url, timeout=settings.timeout_s)  # the scheme was checked above
        except urllib.error.HTTPError as exc:
            raise CloudApiError(str(exc.code), f"price list {url}: HTTP {exc.code}") from None
        except (urllib.error.URLError, OSError) as exc:
            raise CloudUnreachableError(f"price list {url}: cannot reach it: {exc}") from None
        decoder = codecs.getincrementaldecoder("utf-8")()
        total = 0
        with answer:
            while True:
                try:  # read1: one socket read, so the deadline is checked at least every timeout_s
                    data = answer.read1(1 << 20)
                except OSError as exc:
                    raise CloudUnreachableError(f"price list {url}: read failed: {exc}") from None
                if not data:
                    break
                total += len(data)
                if total > settings.max_bytes:
                    raise CloudDataError(f"price list {url}: larger than {settings.max_bytes} bytes")
                if time.monotonic() > deadline:
                    raise CloudUnreachableError(
                        f"price list {url}: not read within {settings.deadline_s:g} s")
                try:
                    yield decoder.decode(data)
                except UnicodeDecodeError:
                    raise CloudDataError(f"price list {url}: not UTF-8 text") from None
        yield decoder.decode(b"", final=True)
    return fetch


class PriceListReader:
    """On-demand prices of the catalog's AWS types in one region, read at most once per TTL."""

    def __init__(self, region: str, catalog: Catalog, settings: PriceListSettings | None = None,
                 *, clock: Clock = utc_now, fetch: Chunks | None = None):
        self.region = region
        self.settings = settings or PriceListSettings()
        self._gpus = {t.name: t.gpus for t in catalog.types("aws")}
        self._fetch = fetch or http_chunks(self.settings)
        self._cache: TtlCache[str, PriceList] = TtlCache(self.settings.ttl, clock)
        self.reads = 0

    @property
    def url(self) -> str:
        return self.settings.url.replace("{region}", self.region)

    def read(self) -> PriceList:
        cached = self._cache.get(self.region)
        if cached is None:
            self.reads += 1
            cached = read_offer_file(self._fetch(self.url), self.region, self._gpus,
                                     max_value_chars=self.settings.max_value_chars)
            if cached.problems:
                log.warning("aws price list %s: %d entries ignored, e.g. %s", self.region,
                            len(cached.problems), "; ".join(cached.problems[:3]))
            self._cache.put(self.region, cached)
        return cached

    def on_demand_prices(self, types: Iterable[str]) -> dict[str, float]:
        found = self.read().on_demand
        return {name: found[name] for name in types if name in found}

"""A small, realistic AWS Price List offer file (AmazonEC2, one region) and a loopback HTTP
server that serves it, or hostile variants of it."""

from __future__ import annotations

import json
import threading
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any

REGION = "us-west-2"
ON_DEMAND_CODE = "JRTCKXETXF"  # AWS's offer term code for on-demand


def product(sku: str, itype: str, *, os: str = "Linux", tenancy: str = "Shared",
            sw: str = "NA", capacity: str = "Used", region: str = REGION, gpu: str | None = None,
            market: str = "OnDemand") -> dict[str, Any]:
    attributes = {
        "servicecode": "AmazonEC2", "location": "US West (Oregon)", "locationType": "AWS Region",
        "instanceType": itype, "currentGeneration": "Yes", "instanceFamily": "GPU instance",
        "vcpu": "8", "memory": "61 GiB", "operatingSystem": os, "tenancy": tenancy,
        "licenseModel": "No License required", "usagetype": f"USW2-BoxUsage:{itype}",
        "operation": "RunInstances", "capacitystatus": capacity, "preInstalledSw": sw,
        "regionCode": region, "servicename": "Amazon Elastic Compute Cloud", "marketoption": market,
    }
    if gpu is not None:
        attributes["gpu"] = gpu
    return {"sku": sku, "productFamily": "Compute Instance", "attributes": attributes}


def on_demand(sku: str, usd: Any, unit: str = "Hrs") -> dict[str, Any]:
    code = f"{sku}.{ON_DEMAND_CODE}"
    return {code: {
        "offerTermCode": ON_DEMAND_CODE, "sku": sku, "effectiveDate": "2026-11-01T00:00:00Z",
        "priceDimensions": {f"{code}.6YS6EN2CT7": {
            "rateCode": f"{code}.6YS6EN2CT7", "description": f"${usd} per On Demand Linux instance",
            "beginRange": "0", "endRange": "Inf", "unit": unit, "pricePerUnit": {"USD": usd},
            "appliesTo": []}},
        "termAttributes": {}}}


def reserved(sku: str) -> dict[str, Any]:
    code = f"{sku}.4NA7Y494T4"
    return {code: {"offerTermCode": "4NA7Y494T4", "sku": sku, "priceDimensions": {
        f"{code}.2TG2D8R56U": {"unit": "Quantity", "pricePerUnit": {"USD": "10000"}},
        f"{code}.6YS6EN2CT7": {"unit": "Hrs", "pricePerUnit": {"USD": "0.9"}}},
        "termAttributes": {"LeaseContractLength": "1yr", "PurchaseOption": "Partial Upfront"}}}


def offer(products: dict[str, dict[str, Any]], terms: dict[str, dict[str, Any]],
          reserved_terms: dict[str, dict[str, Any]] | None = None) -> dict[str, Any]:
    return {
        "formatVersion": "v1.0", "disclaimer": "This pricing list is for informational purposes only.",
        "offerCode": "AmazonEC2", "version": "20261125000000",
        "publicationDate": "2026-11-25T00:00:00Z",
        "products": products,
        "terms": {"OnDemand": terms, "Reserved": reserved_terms or {}},
        "attributesList": {"operatingSystem": ["Linux", "Windows"]},
    }


def realistic() -> dict[str, Any]:
    """p3.2xlarge, g6.xlarge and p5.48xlarge as a plain Linux on-demand instance, plus the
    variants the reader must pass over (Windows, dedicated, RHEL, SQL Web, unused capacity
    reservations, Capacity Blocks), a type the catalog does not know, and Reserved terms."""
    products = {
        "P3LINUX": product("P3LINUX", "p3.2xlarge", gpu="1"),
        "P3WIN": product("P3WIN", "p3.2xlarge", os="Windows", gpu="1"),
        "P3DEDI": product("P3DEDI", "p3.2xlarge", tenancy="Dedicated", gpu="1"),
        "P3RHEL": product("P3RHEL", "p3.2xlarge", os="RHEL", gpu="1"),
        "P3SQL": product("P3SQL", "p3.2xlarge", sw="SQL Web", gpu="1"),
        "P3UNUSED": product("P3UNUSED", "p3.2xlarge", capacity="UnusedCapacityReservation", gpu="1"),
        "G6": product("G6", "g6.xlarge", gpu="1"),
        "P5": product("P5", "p5.48xlarge", gpu="8"),
        "P5BLOCK": product("P5BLOCK", "p5.48xlarge", gpu="8", market="CapacityBlock"),
        "M5": product("M5", "m5.large"),
        "EBS": {"sku": "EBS", "productFamily": "Storage", "attributes": {"volumeType": "gp3"}},
    }
    terms: dict[str, dict[str, Any]] = {}
    for sku, usd in [("P3LINUX", "3.0600000000"), ("P3WIN", "3.6480000000"), ("P3DEDI", "3.3660000000"),
                     ("P3RHEL", "3.1900000000"), ("P3SQL", "3.7500000000"), ("P3UNUSED", "0.0000000000"),
                     ("G6", "0.8048000000"), ("P5", "55.0400000000"), ("P5BLOCK", "31.4640000000"),
                     ("M5", "0.0960000000")]:
        terms[sku] = on_demand(sku, usd)
    return offer(products, terms, {"P3LINUX": reserved("P3LINUX"), "P5": reserved("P5")})


def text(document: dict[str, Any]) -> str:
    return json.dumps(document, indent=1)


Handler = Callable[[BaseHTTPRequestHandler], None]


def serve_bytes(body: bytes, status: int = 200) -> Handler:
    def handle(req: BaseHTTPRequestHandler) -> None:
        req.send_response(status)
        req.send_header("Content-Length", str(len(body)))
        req.end_headers()
        req.wfile.write(body)
    return handle


def serve_stream(chunks: Iterator[bytes]) -> Handler:
    """No Content-Length: the body is whatever the iterator yields until the client leaves."""
    def handle(req: BaseHTTPRequestHandler) -> None:
        req.send_response(200)
        req.end_headers()
        try:
            for chunk in chunks:
                req.wfile.write(chunk)
        except (BrokenPipeError, ConnectionResetError):
            pass
    return handle


@dataclass
class Served:
    url: str  # http://127.0.0.1:PORT
    paths: list[str]  # every path asked, in order


@contextmanager
def price_server(routes: dict[str, Handler]) -> Iterator[Served]:
    """An HTTP server on 127.0.0.1 answering ``routes`` (path -> handler, else 404)."""
    class Files(BaseHTTPRequestHandler):
        def do_GET(self) -> None:
            served.append(self.path)
            handle = routes.get(self.path)
            if handle is None:
                serve_bytes(b"<Error><Code>NoSuchKey</Code></Error>", 404)(self)
            else:
                handle(self)

        def log_message(self, *args: object) -> None:
            pass

    served: list[str] = []
    server = ThreadingHTTPServer(("127.0.0.1", 0), Files)
    server.daemon_threads = True
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    try:
        host, port = server.server_address[:2]
        yield Served(f"http://{host}:{port}", served)
    finally:
        server.shutdown()
        server.server_close()

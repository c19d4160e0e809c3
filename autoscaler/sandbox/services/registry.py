"""The sandbox's container registry: what a baked image pre-pulls from (``bootstrap.prepull``).

Nodes reach nothing but 169.254.77.0/24, so no public registry: this one serves images
written here into a directory, read-only, over the pull half of the OCI distribution API
(``GET /v2/``, ``GET|HEAD /v2/<name>/manifests/<tag or digest>``, ``GET|HEAD
/v2/<name>/blobs/<digest>``), plain HTTP. containerd's own ``ctr images pull --plain-http``
pulls from it as from any registry.

:func:`write_image` makes a small single-layer image (one file) under ``<dir>/<name>/``:
``blobs/sha256/<hex>`` and ``tags/<tag>`` (the manifest's digest). :class:`Registry` runs the
server in its own process (uvicorn), stopped by PID.

``python -m autoscaler.sandbox.services.registry --dir D --host H --port P`` serves ``D``.
"""

from __future__ import annotations

import argparse
import gzip
import hashlib
import io
import json
import re
import sys
import tarfile
from collections.abc import Sequence
from pathlib import Path
from typing import Self

from starlette.applications import Starlette
from starlette.requests import Request
from starlette.responses import Response
from starlette.routing import Route

from autoscaler.sandbox.hosts.procs import ManagedProcess, ServiceProcess, free_port, port_open, wait_until

MANIFEST = "application/vnd.oci.image.manifest.v1+json"
CONFIG = "application/vnd.oci.image.config.v1+json"
LAYER = "application/vnd.oci.image.layer.v1.tar+gzip"
_NAME = re.compile(r"^[a-z0-9]+(?:[._-][a-z0-9]+)*(?:/[a-z0-9]+(?:[._-][a-z0-9]+)*)*$")
_TAG = re.compile(r"^[A-Za-z0-9_][A-Za-z0-9_.-]{0,127}$")
_DIGEST = re.compile(r"^sha256:[0-9a-f]{64}$")


def _put(blobs: Path, data: bytes) -> str:
    digest = hashlib.sha256(data).hexdigest()
    (blobs / digest).write_bytes(data)
    return f"sha256:{digest}"


def write_image(root: Path, name: str, tag: str, files: dict[str, bytes]) -> str:
    """A single-layer linux/amd64 image of ``files`` (path in the image -> content) as
    ``name:tag`` under ``root``; returns the manifest's digest."""
    if not _NAME.match(name) or not _TAG.match(tag):
        raise ValueError(f"not an image name and tag: {name}:{tag}")
    repo = root / name
    blobs = repo / "blobs" / "sha256"
    blobs.mkdir(parents=True, exist_ok=True)
    (repo / "tags").mkdir(exist_ok=True)
    tar_bytes = io.BytesIO()
    with tarfile.open(fileobj=tar_bytes, mode="w", format=tarfile.PAX_FORMAT) as tar:
        for path, content in sorted(files.items()):
            info = tarfile.TarInfo(path.lstrip("/"))
            info.size, info.mode, info.mtime = len(content), 0o644, 0
            tar.addfile(info, io.BytesIO(content))
    raw = tar_bytes.getvalue()
    layer = gzip.compress(raw, mtime=0)
    config = json.dumps({
        "architecture": "amd64", "os": "linux", "config": {},
        "rootfs": {"type": "layers", "diff_ids": [f"sha256:{hashlib.sha256(raw).hexdigest()}"]},
    }).encode()
    manifest = json.dumps({
        "schemaVersion": 2, "mediaType": MANIFEST,
        "config": {"mediaType": CONFIG, "digest": _put(blobs, config), "size": len(config)},
        "layers": [{"mediaType": LAYER, "digest": _put(blobs, layer), "size": len(layer)}],
    }).encode()
    digest = _put(blobs, manifest)
    (repo / "tags" / tag).write_text(digest)
    return digest


def app(root: Path) -> Starlette:
    root = root.resolve()

    def repo_of(request: Request) -> Path | None:
        name = str(request.path_params["name"])
        repo = (root / name).resolve()
        if not _NAME.match(name) or root not in repo.parents or not repo.is_dir():
            return None
        return repo

    def blob(repo: Path, digest: str) -> bytes | None:
        path = repo / "blobs" / "sha256" / digest.removeprefix("sha256:")
        return path.read_bytes() if _DIGEST.match(digest) and path.is_file() else None

    def unknown(code: str, what: str) -> Response:
        body = json.dumps({"errors": [{"code": code, "message": f"{what} unknown"}]})
        return Response(body, 404, media_type="application/json")

    def answer(request: Request, data: bytes, media: str, digest: str) -> Response:
        headers = {"Docker-Content-Digest": digest, "Content-Length": str(len(data))}
        body = b"" if request.method == "HEAD" else data
        return Response(body, 200, media_type=media, headers=headers)

    async def base(request: Request) -> Response:
        return Response("{}", 200, media_type="application/json",
                        headers={"Docker-Distribution-API-Version": "registry/2.0"})

    async def manifest(request: Request) -> Response:
        repo, ref = repo_of(request), request.path_params["ref"]
        if repo is None:
            return unknown("NAME_UNKNOWN", "repository")
        if not _DIGEST.match(ref):
            tag = repo / "tags" / ref
            if not _TAG.match(ref) or not tag.is_file():
                return unknown("MANIFEST_UNKNOWN", "manifest")
            ref = tag.read_text().strip()
        data = blob(repo, ref)
        if data is None:
            return unknown("MANIFEST_UNKNOWN", "manifest")
        return answer(request, data, MANIFEST, ref)

    async def blobs(request: Request) -> Response:
        repo, digest = repo_of(request), request.path_params["digest"]
        data = None if repo is None else blob(repo, digest)
        if data is None:
            return unknown("BLOB_UNKNOWN", "blob")
        return answer(request, data, "application/octet-stream", digest)

    methods = ["GET", "HEAD"]
    return Starlette(routes=[
        Route("/v2/", base, methods=methods),
        Route("/v2/{name:path}/manifests/{ref}", manifest, methods=methods),
        Route("/v2/{name:path}/blobs/{digest}", blobs, methods=methods),
    ])


class Registry(ServiceProcess):
    """One registry process serving ``root`` on ``host`` (a free port unless given);
    ``address`` is ``host:port``, as image references start."""

    def __init__(self, root: Path, host: str = "127.0.0.1", port: int | None = None):
        self.root, self.host = Path(root), host
        self.port = port or free_port(host)
        self.log_path = self.root.parent / f"registry-{self.port}.log"

    @property
    def address(self) -> str:
        return f"{self.host}:{self.port}"

    def start(self, timeout: float = 30.0) -> Self:
        self.root.mkdir(parents=True, exist_ok=True)
        argv = [sys.executable, "-m", "autoscaler.sandbox.services.registry", "--dir",
                str(self.root), "--host", self.host, "--port", str(self.port)]
        self.proc = ManagedProcess("registry", argv, self.log_path)
        wait_until(lambda: port_open(self.host, self.port), timeout, "registry port",
                   proc=self.proc)
        return self



def main(argv: Sequence[str] | None = None) -> None:
    import uvicorn

    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--dir", type=Path, required=True, help="the images' directory")
    parser.add_argument("--host", default="127.0.0.1")
    parser.add_argument("--port", type=int, required=True)
    args = parser.parse_args(argv)
    uvicorn.run(app(args.dir), host=args.host, port=args.port, log_level="warning")


if __name__ == "__main__":
    main()

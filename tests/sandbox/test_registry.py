"""The sandbox registry answers the pull half of the OCI distribution API from the images
written into its directory, and nothing outside it. (containerd's own pull from it runs on
a booted host in tests/e2e/test_baked_image_e2e.py.)"""

from __future__ import annotations

import hashlib
import json
from pathlib import Path

import pytest
import requests

from autoscaler.sandbox.services.registry import LAYER, MANIFEST, Registry, write_image


def test_an_image_is_pulled_by_tag_and_by_digest_and_every_blob_matches_its_digest(
        tmp_path: Path) -> None:
    digest = write_image(tmp_path / "images", "sandbox/hello", "1", {"hello.txt": b"hi\n"})
    (tmp_path / "outside").write_text("secret")
    with Registry(tmp_path / "images") as registry:
        base = f"http://{registry.address}/v2"
        assert requests.get(f"{base}/", timeout=5).headers["Docker-Distribution-API-Version"] \
            == "registry/2.0"
        head = requests.head(f"{base}/sandbox/hello/manifests/1", timeout=5)
        assert head.status_code == 200 and head.headers["Docker-Content-Digest"] == digest
        assert head.headers["Content-Type"] == MANIFEST and head.content == b""
        by_tag = requests.get(f"{base}/sandbox/hello/manifests/1", timeout=5)
        by_digest = requests.get(f"{base}/sandbox/hello/manifests/{digest}", timeout=5)
        assert by_tag.content == by_digest.content
        assert f"sha256:{hashlib.sha256(by_tag.content).hexdigest()}" == digest
        manifest = json.loads(by_tag.content)
        assert [layer["mediaType"] for layer in manifest["layers"]] == [LAYER]
        for ref in [manifest["config"], *manifest["layers"]]:
            blob = requests.get(f"{base}/sandbox/hello/blobs/{ref['digest']}", timeout=5)
            assert blob.status_code == 200 and len(blob.content) == ref["size"]
            assert f"sha256:{hashlib.sha256(blob.content).hexdigest()}" == ref["digest"]
        for path, code in [("sandbox/hello/manifests/2", "MANIFEST_UNKNOWN"),
                           ("sandbox/other/manifests/1", "NAME_UNKNOWN"),
                           ("sandbox/hello/blobs/sha256:" + "0" * 64, "BLOB_UNKNOWN"),
                           ("sandbox/hello/blobs/..%2F..%2Foutside", None),
                           ("sandbox/../../outside/manifests/1", None)]:
            answer = requests.get(f"{base}/{path}", timeout=5)
            assert answer.status_code == 404, path
            if code is not None:
                assert answer.json()["errors"][0]["code"] == code
        proc = registry.proc
    assert proc is not None and not proc.alive()  # stopped by PID on the way out


def test_image_names_and_tags_are_checked() -> None:
    with pytest.raises(ValueError, match="not an image name and tag"):
        write_image(Path("/nonexistent"), "../up", "1", {})
    with pytest.raises(ValueError, match="not an image name and tag"):
        write_image(Path("/nonexistent"), "ok", "bad tag", {})

"""Headless Chromium (Debian's ``chromium`` package) driven over the DevTools protocol.

Started with a fresh profile and everything that would reach the network off; stopped by
PID. ``type_into`` types like a person (focus, insert text, press Enter), so a form is
submitted by the browser itself, cookies and redirects included.
"""

from __future__ import annotations

import base64
import json
import shutil
import subprocess
import tempfile
import time
import urllib.request
from pathlib import Path
from typing import Any

import websocket

from autoscaler.sandbox.hosts.procs import free_port, wait_until

FLAGS = ("--headless", "--no-sandbox", "--disable-gpu", "--disable-quic", "--no-first-run",
         "--disable-background-networking", "--disable-component-update", "--disable-sync",
         "--hide-scrollbars", "--window-size=1280,900")


def chromium_path() -> str | None:
    return shutil.which("chromium")


class Chromium:
    def __init__(self, workdir: Path):
        self.profile = Path(tempfile.mkdtemp(prefix="chromium-", dir=workdir))
        self.port = free_port()
        self.log = open(workdir / "chromium.log", "wb")  # noqa: SIM115 (closed in stop)
        binary = chromium_path()
        if binary is None:
            raise RuntimeError("chromium is not installed (apt-get install -y chromium)")
        self.proc = subprocess.Popen(
            [binary, *FLAGS, f"--user-data-dir={self.profile}",
             f"--remote-debugging-port={self.port}", "--remote-debugging-address=127.0.0.1",
             "about:blank"], stdout=self.log, stderr=subprocess.STDOUT)
        wait_until(self._ready, 30, "chromium's DevTools endpoint")
        self.ws = websocket.create_connection(self._page_socket(), timeout=30, suppress_origin=True)
        self._id = 0
        self.events: list[dict[str, Any]] = []
        self.send("Page.enable")

    def _ready(self) -> bool:
        with urllib.request.urlopen(f"http://127.0.0.1:{self.port}/json/version", timeout=2) as r:
            return r.status == 200

    def _page_socket(self) -> str:
        with urllib.request.urlopen(f"http://127.0.0.1:{self.port}/json/list", timeout=5) as r:
            pages = [t for t in json.loads(r.read()) if t.get("type") == "page"]
        return str(pages[0]["webSocketDebuggerUrl"])

    def send(self, method: str, **params: Any) -> dict[str, Any]:
        self._id += 1
        self.ws.send(json.dumps({"id": self._id, "method": method, "params": params}))
        deadline = time.monotonic() + 30
        while time.monotonic() < deadline:
            msg = json.loads(self.ws.recv())
            if msg.get("id") == self._id:
                if "error" in msg:
                    raise RuntimeError(f"{method}: {msg['error']}")
                result: dict[str, Any] = msg.get("result", {})
                return result
            self.events.append(msg)
        raise TimeoutError(method)

    def _wait_load(self, timeout: float = 30) -> None:
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            if any(e.get("method") == "Page.loadEventFired" for e in self.events):
                self.events.clear()
                return
            self.ws.settimeout(max(0.1, deadline - time.monotonic()))
            self.events.append(json.loads(self.ws.recv()))
        raise TimeoutError("page load")

    def goto(self, url: str) -> None:
        self.events.clear()
        self.send("Page.navigate", url=url)
        self._wait_load()

    def text(self) -> str:
        result = self.send("Runtime.evaluate", expression="document.body.innerText", returnByValue=True)
        return str(result["result"].get("value", ""))

    def title(self) -> str:
        result = self.send("Runtime.evaluate", expression="document.title", returnByValue=True)
        return str(result["result"].get("value", ""))

    def type_into(self, selector: str, text: str) -> None:
        """Focus ``selector``, type ``text`` and press Enter; wait for the next page."""
        root = self.send("DOM.getDocument")["root"]["nodeId"]
        node = self.send("DOM.querySelector", nodeId=root, selector=selector)["nodeId"]
        self.send("DOM.focus", nodeId=node)
        self.send("Input.insertText", text=text)
        self.events.clear()
        for kind in ("keyDown", "keyUp"):
            self.send("Input.dispatchKeyEvent", type=kind, key="Enter", code="Enter",
                      windowsVirtualKeyCode=13, **({"text": "\r"} if kind == "keyDown" else {}))
        self._wait_load()

    def screenshot(self, path: Path) -> Path:
        data = self.send("Page.captureScreenshot", format="png", captureBeyondViewport=True)["data"]
        path.write_bytes(base64.b64decode(data))
        return path

    def stop(self) -> None:
        try:
            self.ws.close()
        finally:
            self.proc.terminate()
            try:
                self.proc.wait(timeout=10)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait(timeout=10)
            self.log.close()
            shutil.rmtree(self.profile, ignore_errors=True)

"""Informer-style caches: list once, then watch from the list's resourceVersion.

One thread per resource keeps a watch open (``allowWatchBookmarks``, so an idle stream
still moves its resourceVersion forward); a ``410 Gone`` (the version is older than the
server keeps) re-lists. A tick reads the caches and makes no API call, so its cost does
not grow with the cluster. Objects are kept as ``transform(obj)`` (None drops them: pods
without GPUs are never stored), keyed ``namespace/name``.
"""

from __future__ import annotations

import contextlib
import json
import logging
import threading
from collections.abc import Callable
from typing import Any

from kubernetes.client.exceptions import ApiException

log = logging.getLogger(__name__)

Obj = dict[str, Any]
ListFn = Callable[..., Any]  # a CoreV1Api list_* method


def object_key(obj: Obj) -> str:
    meta = obj.get("metadata") or {}
    return f"{meta.get('namespace', '')}/{meta.get('name', '')}"


class Gone(Exception):
    """The watch's resourceVersion is too old: list again."""


class Informer:
    def __init__(self, what: str, list_fn: ListFn, transform: Callable[[Obj], Any | None],
                 *, timeout_s: float, watch_s: int = 300, retry_s: float = 2.0,
                 on_change: Callable[[Any | None, Any | None], None] | None = None):
        self.what = what
        # (old, new) records of each watch event, after the cache has it (not on lists)
        self.on_change = on_change
        self._list, self._transform = list_fn, transform
        self.timeout_s, self.watch_s, self.retry_s = timeout_s, watch_s, retry_s
        self.items: dict[str, Any] = {}
        self.version: str | None = None
        self.error: str | None = None
        self.failure: Exception | None = None  # the last error itself, for the reader's words
        self.lists = 0  # full lists made (the first one, then one per 410 Gone)
        self.changed = 0  # events applied: readers can tell whether to rebuild
        self._lock = threading.Lock()
        self._synced = threading.Event()
        self._tried = threading.Event()  # the first list answered or failed
        self._stop = threading.Event()
        self._response: Any = None
        self._thread = threading.Thread(target=self._run, name=f"watch-{what}", daemon=True)

    def start(self) -> Informer:
        self._thread.start()
        return self

    def wait_tried(self, timeout_s: float) -> bool:
        """Block until the first list succeeded or failed; whether it succeeded."""
        self._tried.wait(timeout_s)
        return self._synced.is_set()

    @property
    def synced(self) -> bool:
        return self._synced.is_set()

    def snapshot(self) -> tuple[dict[str, Any], int]:
        with self._lock:
            return dict(self.items), self.changed

    def stop(self) -> None:
        self._stop.set()
        resp = self._response
        if resp is not None:
            with contextlib.suppress(Exception):  # already closed
                resp.shutdown()  # unblocks the reading thread (urllib3 >= 2.3)
        self._thread.join(timeout=5)

    # -- the thread -------------------------------------------------------------------
    def _run(self) -> None:
        while not self._stop.is_set():
            try:
                if self.version is None:
                    self._relist()
                self._watch()
            except Gone:
                log.info("kubernetes %s watch: 410 Gone, listing again", self.what)
                self.version = None
            except ApiException as exc:
                if exc.status == 410:  # answered before the stream started
                    self.version = None
                    continue
                self._failed(exc)
            except Exception as exc:  # network, API errors: report, back off, retry
                self._failed(exc)

    def _failed(self, exc: Exception) -> None:
        if self._stop.is_set():
            return
        self.error = f"{self.what} watch failed: {_why(exc)}"
        self.failure = exc
        self._tried.set()
        self._stop.wait(self.retry_s)

    def _relist(self) -> None:
        resp = self._list(_preload_content=False, _request_timeout=self.timeout_s)
        body = json.loads(resp.data)
        items = {}
        for obj in body.get("items") or []:
            value = self._transform(obj)
            if value is not None:
                items[object_key(obj)] = value
        with self._lock:
            self.items = items
            self.changed += 1
        self.version = (body.get("metadata") or {}).get("resourceVersion")
        self.lists += 1
        self.error, self.failure = None, None
        self._synced.set()
        self._tried.set()

    def _watch(self) -> None:
        resp = self._list(watch=True, resource_version=self.version, allow_watch_bookmarks=True,
                          timeout_seconds=self.watch_s, _preload_content=False,
                          _request_timeout=(self.timeout_s, self.watch_s + 30))
        self._response = resp
        try:
            buffer = b""
            for chunk in resp.stream(amt=None, decode_content=False):  # a chunk per event
                if self._stop.is_set():
                    return
                buffer += chunk
                *lines, buffer = buffer.split(b"\n")
                for line in lines:
                    if line.strip():
                        self._event(json.loads(line))
        finally:
            self._response = None
            resp.release_conn()

    def _event(self, event: Obj) -> None:
        kind, obj = event.get("type"), event.get("object") or {}
        if kind == "ERROR":
            if obj.get("code") == 410:
                raise Gone()
            raise RuntimeError(f"watch error {obj.get('code')}: {obj.get('message', '')}")
        version = (obj.get("metadata") or {}).get("resourceVersion")
        if kind != "BOOKMARK":
            key = object_key(obj)
            value = None if kind == "DELETED" else self._transform(obj)
            with self._lock:
                old = self.items.get(key)
                if value is None:
                    self.items.pop(key, None)
                else:
                    self.items[key] = value
                self.changed += 1
            if self.on_change is not None:
                try:
                    self.on_change(old, value)
                except Exception:  # a listener's trouble must not stop the watch
                    log.exception("kubernetes %s watch: change listener failed", self.what)
        if version:
            self.version = version
        self.error, self.failure = None, None


def _why(exc: Exception) -> str:
    if isinstance(exc, ApiException):
        return f"API answered {exc.status} {exc.reason}"
    return type(exc).__name__

"""``FakeKube``'s objects: one store per resource, resourceVersions and the watch log.

Every change gets the next resourceVersion (one counter for all kinds, like etcd's
revision) and an event in a bounded log. A watch from version ``v`` replays the events
after ``v``; a ``v`` older than the log keeps answers ``410 Gone`` (``compact()`` forces
that, as etcd compaction does), and the client must list again.
"""

from __future__ import annotations

import copy
import threading
from collections import deque
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from typing import Any

Obj = dict[str, Any]
KINDS = {"nodes": "Node", "pods": "Pod", "persistentvolumeclaims": "PersistentVolumeClaim",
         "persistentvolumes": "PersistentVolume", "resourcequotas": "ResourceQuota",
         "priorityclasses": "PriorityClass", "jobs": "Job",
         # Kept empty: served so kubectl can map deploy/kubernetes/rbac.yaml's kinds.
         "namespaces": "Namespace", "serviceaccounts": "ServiceAccount",
         "clusterroles": "ClusterRole", "clusterrolebindings": "ClusterRoleBinding"}
NAMESPACED = {"pods", "persistentvolumeclaims", "resourcequotas", "jobs", "serviceaccounts"}


@dataclass(frozen=True)
class Event:
    version: int
    resource: str
    type: str  # ADDED | MODIFIED | DELETED
    obj: Obj


class Store:
    def __init__(self, keep_events: int = 100_000):
        self.lock = threading.RLock()
        self.changed = threading.Condition(self.lock)
        self.objects: dict[str, dict[str, Obj]] = {kind: {} for kind in KINDS}
        self.version = 1
        self.events: deque[Event] = deque(maxlen=keep_events)
        self.oldest = 1  # watches from versions below this are answered 410 Gone

    def put(self, resource: str, key: str, obj: Obj) -> Obj:
        with self.lock:
            kind = "MODIFIED" if key in self.objects[resource] else "ADDED"
            self.version += 1
            obj["metadata"]["resourceVersion"] = str(self.version)
            self.objects[resource][key] = obj
            self._log(Event(self.version, resource, kind, copy.deepcopy(obj)))
            return obj

    def touch(self, resource: str, key: str, change: Callable[[Obj], None]) -> Obj:
        with self.lock:
            obj = self.objects[resource][key]
            change(obj)
            return self.put(resource, key, obj)

    def delete(self, resource: str, key: str) -> Obj | None:
        with self.lock:
            obj = self.objects[resource].pop(key, None)
            if obj is not None:
                self.version += 1
                gone = copy.deepcopy(obj)
                gone["metadata"]["resourceVersion"] = str(self.version)
                self._log(Event(self.version, resource, "DELETED", gone))
            return obj

    def _log(self, event: Event) -> None:
        if len(self.events) == self.events.maxlen:
            self.oldest = self.events[0].version + 1
        self.events.append(event)
        self.changed.notify_all()

    def compact(self) -> None:
        """Forget the event log, like a restarted API server's watch cache: every watch
        open now, or started later from a version up to now, gets 410 Gone."""
        with self.lock:
            self.events.clear()
            self.version += 1  # a list now returns a version that is watchable again
            self.oldest = self.version + 1
            self.changed.notify_all()

    def since(self, resource: str, version: int) -> Iterator[Event] | None:
        """Events of ``resource`` after ``version``; None when they are no longer kept."""
        with self.lock:
            if version + 1 < self.oldest:
                return None
            newer = []
            for event in reversed(self.events):  # newest first: only the new ones are read
                if event.version <= version:
                    break
                if event.resource == resource:
                    newer.append(event)
            return reversed(newer)

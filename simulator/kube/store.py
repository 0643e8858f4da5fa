"""One simulated cluster: its objects, its resourceVersion, its kinds, and what the API
server does with them (create, get, list, replace, patch, delete), with no HTTP.

Rules kept from the real server:

* One resourceVersion counter per cluster (etcd's revision): every write takes the next
  one and stamps it on the object; a list answers the current one, so it changes only
  when something in the cluster changed. A write that changes nothing (a patch that
  sets what is there) is not a write: the resourceVersion stays.
* Lists are ordered by namespace and name. With `limit`, a page ends with a continue
  token; the next pages come from the same snapshot (objects changed meanwhile show as
  they were), until the cluster is compacted, or the snapshot is older than
  `continue_ttl` seconds, while the cluster changed since: then 410 Expired, with a token
  that continues from the current state.
* Stored objects are never changed in place (a write stores a new dict), so a snapshot
  is a list of references.
* Every write is an event (ADDED, MODIFIED, DELETED) in a bounded history, which a watch
  reads from its resourceVersion on; a resourceVersion older than the history holds is
  410 Expired, as etcd's compacted revisions are.
* `dry_run`: a write checked and answered in full, and nothing stored.
* The workload controllers' part, in a blink: once a DaemonSet or Deployment changed,
  its status says it is rolled out (every matching node, every replica ready), so
  `kubectl rollout status` ends. A PodDisruptionBudget's status follows its pods the same
  way (simulator/kube/pods.py).
"""

from __future__ import annotations

import base64
import binascii
import bisect
import copy
import json
import random
import threading
import time
import uuid
from collections import OrderedDict, deque
from collections.abc import Callable, Iterable
from dataclasses import dataclass
from datetime import UTC, datetime
from typing import Any

from simulator.kube import errors, patches, pods, validation
from simulator.kube.dcgm import DcgmNode
from simulator.kube.errors import StatusError
from simulator.kube.resources import (
    BUILTIN,
    CRDS,
    DAEMONSETS,
    DEPLOYMENTS,
    NAMESPACES,
    NODES,
    PDBS,
    PODS,
    SECRETS,
    STATUS_ON_CREATE_DROP,
    STATUS_ON_CREATE_KEEP,
    ResourceType,
    types_from_crd,
)
from simulator.kube.selectors import Matcher, matcher

Obj = dict[str, Any]
Key = tuple[str, str]  # (namespace, name); namespace "" for cluster-scoped kinds

DEFAULT_NAMESPACES = ("default", "kube-system", "kube-public", "kube-node-lease")
MAX_SNAPSHOTS = 256
WATCH_HISTORY = 1000  # events a watch can start behind the current resourceVersion
_NAME_CHARS = "bcdfghjklmnpqrstvwxz2456789"  # what generateName appends, as the server does


@dataclass(frozen=True)
class Event:
    """One write, as a watch sees it: the object before (None: created) and after (None:
    deleted)."""

    resource_version: int
    storage_key: tuple[str, str]
    key: Key
    old: Obj | None
    new: Obj | None


@dataclass
class Snapshot:
    keys: list[Key]
    items: list[Obj]
    taken: float


def _now() -> str:
    return datetime.now(UTC).strftime("%Y-%m-%dT%H:%M:%SZ")


class ClusterState:
    def __init__(
        self, name: str, token: str, *, monotonic: Callable[[], float] = time.monotonic
    ) -> None:
        self.name = name
        self.token = token
        self.resource_version = 1
        self.compacted = 0  # continue tokens of an older resourceVersion are expired
        self.continue_ttl = 300.0
        self._monotonic = monotonic
        self._rng = random.Random(name)
        self.types: dict[tuple[str, str, str], ResourceType] = {}
        self.objects: dict[tuple[str, str], dict[Key, Obj]] = {}
        self._snapshots: OrderedDict[tuple[Any, ...], Snapshot] = OrderedDict()
        self.events: deque[Event] = deque()
        self.history_size = WATCH_HISTORY
        self.history_floor = 0  # a watch from an older resourceVersion is 410 Expired
        self.changed: threading.Condition | None = None  # notified on every write
        self.removed = False  # watches of a removed cluster end
        self.pod_logs: dict[str, dict[str, str]] = {}  # pod uid: container: output
        self.dcgm: dict[str, DcgmNode] = {}  # node name: what its dcgm-exporter serves
        for rt in BUILTIN:
            self.register(rt)
        for namespace in DEFAULT_NAMESPACES:
            self.put({"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": namespace}})

    # ---- kinds ---------------------------------------------------------------------------

    def register(self, rt: ResourceType) -> None:
        self.types[(rt.group, rt.version, rt.plural)] = rt
        self.objects.setdefault(rt.storage_key, {})

    def resource_type(self, group: str, version: str, plural: str) -> ResourceType:
        rt = self.types.get((group, version, plural))
        if rt is None:
            raise StatusError(404, "the server could not find the requested resource")
        return rt

    def type_of(self, obj: Obj) -> ResourceType:
        api_version, kind = obj.get("apiVersion", ""), obj.get("kind", "")
        group, _, version = api_version.rpartition("/")
        for rt in self.types.values():
            if rt.group == group and rt.kind == kind and rt.version == version:
                return rt
        raise errors.bad_request(f"no kind {kind!r} is registered for version {api_version!r}")

    def groups(self) -> dict[str, list[str]]:
        """Every API group but the core one, with its versions."""
        found: dict[str, list[str]] = {}
        for group, version, _ in self.types:
            if group and version not in found.setdefault(group, []):
                found[group].append(version)
        return found

    def resources_of(self, group: str, version: str) -> list[ResourceType]:
        return [rt for (g, v, _), rt in self.types.items() if (g, v) == (group, version)]

    # ---- writes --------------------------------------------------------------------------

    def _store(
        self, rt: ResourceType, key: Key, obj: Obj, *, dry_run: bool = False, control: bool = True
    ) -> Obj:
        if dry_run:
            return obj  # a create's answer has no resourceVersion yet, an update's the old one
        self.resource_version += 1
        obj["metadata"]["resourceVersion"] = str(self.resource_version)
        old = self.objects[rt.storage_key].get(key)
        self.objects[rt.storage_key][key] = obj
        self._record(rt.storage_key, key, old, obj)
        if control:
            self._controller(rt, key)
        return obj

    def _record(
        self, storage_key: tuple[str, str], key: Key, old: Obj | None, new: Obj | None
    ) -> None:
        self.events.append(Event(self.resource_version, storage_key, key, old, new))
        while len(self.events) > self.history_size:
            self.history_floor = self.events.popleft().resource_version
        if self.changed is not None:
            self.changed.notify_all()
        if storage_key in (PODS.storage_key, PDBS.storage_key):
            pods.budgets_follow(self, key[0])  # the disruption controller, in a blink

    def _forget(self, rt_key: tuple[str, str], key: Key) -> None:
        """Delete a stored object: the next resourceVersion, and a DELETED event whose
        object carries it, as the real server's does."""
        old = self.objects[rt_key].pop(key)
        self.pod_logs.pop(old["metadata"].get("uid", ""), None)  # a pod's logs go with it
        self.resource_version += 1
        gone = {
            **old,
            "metadata": {**old["metadata"], "resourceVersion": str(self.resource_version)},
        }
        self._record(rt_key, key, gone, None)

    def _controller(self, rt: ResourceType, key: Key) -> None:
        if rt not in (DAEMONSETS, DEPLOYMENTS):
            return
        obj = self.objects[rt.storage_key][key]
        generation = int(obj["metadata"].get("generation", 1))
        if (obj.get("status") or {}).get("observedGeneration") == generation:
            return
        spec = obj.get("spec") or {}
        if rt == DAEMONSETS:
            wanted = (((spec.get("template") or {}).get("spec") or {}).get("nodeSelector")) or {}
            nodes = sum(
                1
                for node in self.objects[NODES.storage_key].values()
                if all(
                    (node["metadata"].get("labels") or {}).get(k) == v for k, v in wanted.items()
                )
            )
            status: dict[str, Any] = {
                "currentNumberScheduled": nodes, "desiredNumberScheduled": nodes,
                "numberAvailable": nodes, "numberMisscheduled": 0, "numberReady": nodes,
                "observedGeneration": generation, "updatedNumberScheduled": nodes,
            }  # fmt: skip
        else:
            replicas = int(spec.get("replicas", 1))
            now = _now()
            status = {
                "observedGeneration": generation, "replicas": replicas,
                "updatedReplicas": replicas, "readyReplicas": replicas,
                "availableReplicas": replicas,
                "conditions": [
                    {"type": "Available", "status": "True", "reason": "MinimumReplicasAvailable",
                     "message": "Deployment has minimum availability.",
                     "lastUpdateTime": now, "lastTransitionTime": now},
                    {"type": "Progressing", "status": "True", "reason": "NewReplicaSetAvailable",
                     "message": f'ReplicaSet "{key[1]}" has successfully progressed.',
                     "lastUpdateTime": now, "lastTransitionTime": now},
                ],
            }  # fmt: skip
            if not replicas:
                status = {"observedGeneration": generation, "conditions": status["conditions"]}
        self._store(rt, key, {**obj, "status": status, "metadata": dict(obj["metadata"])})

    def _fresh_metadata(self, obj: Obj) -> None:
        meta = obj["metadata"]
        meta.setdefault("uid", str(uuid.uuid4()))
        meta.setdefault("creationTimestamp", _now())
        meta.setdefault("generation", 1)

    def put(self, obj: Obj) -> Obj:
        """Store an object as given (the control API: a kubelet registering its node, a
        seeded pod); metadata the server owns is filled in, a missing namespace made."""
        if not isinstance(obj, dict) or not isinstance(obj.get("metadata"), dict):
            raise errors.bad_request("an object needs apiVersion, kind and metadata")
        rt = self.type_of(obj)
        obj = copy.deepcopy(obj)
        meta = obj["metadata"]
        name = meta.get("name")
        if not name:
            raise errors.bad_request("metadata.name is required")
        namespace = meta.get("namespace", "") if rt.namespaced else ""
        if rt.namespaced:
            if not namespace:
                raise errors.bad_request(f"{rt.kind} {name}: metadata.namespace is required")
            if ("", namespace) not in self.objects[NAMESPACES.storage_key]:
                self.put({"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": namespace}})
        else:
            meta.pop("namespace", None)
        old = self.objects[rt.storage_key].get((namespace, name))
        if old is not None and "uid" not in meta:
            meta["uid"] = old["metadata"]["uid"]
            meta["creationTimestamp"] = old["metadata"]["creationTimestamp"]
        meta.pop("resourceVersion", None)
        self._fresh_metadata(obj)
        _secret_normalize(rt, obj)
        if rt == CRDS:
            self._crd_register(obj)
        return self._store(rt, (namespace, name), obj, control=False)  # status as given

    def create(self, rt: ResourceType, namespace: str, body: Any, *, dry_run: bool = False) -> Obj:
        obj = self._body(rt, body)
        meta = obj["metadata"]
        if meta.get("resourceVersion"):
            raise errors.bad_request("resourceVersion should not be set on objects to be created")
        if not meta.get("name"):
            if not meta.get("generateName"):
                raise errors.invalid(
                    rt, "", "metadata.name: Required value: name or generateName is required"
                )
            meta["name"] = meta["generateName"] + "".join(
                self._rng.choice(_NAME_CHARS) for _ in range(5)
            )
        name = meta["name"]
        _secret_normalize(rt, obj)
        validation.validate(rt, obj)
        self._namespace_check(rt, namespace, meta)
        key = (namespace, name)
        if key in self.objects[rt.storage_key]:
            raise errors.already_exists(rt, name)
        for owned in ("uid", "creationTimestamp", "generation", "deletionTimestamp"):
            meta.pop(owned, None)
        if rt.status_subresource:
            if rt.status_on_create == STATUS_ON_CREATE_DROP:
                obj.pop("status", None)
            elif rt.status_on_create != STATUS_ON_CREATE_KEEP:
                obj["status"] = copy.deepcopy(rt.status_on_create)
        self._fresh_metadata(obj)
        if rt == CRDS:
            self._crd_register(obj, dry_run=dry_run)
        return self._store(rt, key, obj, dry_run=dry_run)

    def replace(
        self,
        rt: ResourceType,
        namespace: str,
        name: str,
        body: Any,
        subresource: str = "",
        *,
        dry_run: bool = False,
    ) -> Obj:
        old = self.get(rt, namespace, name)
        new = self._body(rt, body)
        if new["metadata"].get("name", name) != name:
            raise errors.bad_request(
                f"the name of the object ({new['metadata']['name']}) does not match the name "
                f"on the URL ({name})"
            )
        return self._update(rt, namespace, old, new, subresource, dry_run=dry_run)

    def patch(
        self,
        rt: ResourceType,
        namespace: str,
        name: str,
        content_type: str,
        body: Any,
        subresource: str = "",
        *,
        dry_run: bool = False,
    ) -> Obj:
        old = self.get(rt, namespace, name)
        accepted = [patches.JSON_PATCH, patches.MERGE_PATCH]
        if rt.builtin:
            accepted.append(patches.STRATEGIC_MERGE_PATCH)
        try:
            if content_type == patches.JSON_PATCH:
                new = patches.json_patch(old, body)
            elif content_type == patches.MERGE_PATCH:
                new = self._object_patch(body, patches.merge_patch, old)
            elif content_type == patches.STRATEGIC_MERGE_PATCH and rt.builtin:
                new = self._object_patch(body, patches.strategic_merge_patch, old)
            else:
                # Server-side apply is not simulated: answered as a kind that refuses it.
                raise errors.unsupported_patch(accepted)
        except patches.PatchError as exc:
            if exc.malformed:
                raise errors.bad_request(str(exc)) from exc
            raise StatusError(422, str(exc), reason="Invalid") from exc
        if not isinstance(new, dict) or not isinstance(new.get("metadata"), dict):
            raise errors.invalid(rt, name, "metadata: Required value")
        meta = new["metadata"]
        if meta.get("name") != name or meta.get("namespace", "") != old["metadata"].get(
            "namespace", ""
        ):
            raise errors.invalid(rt, name, "metadata.name: Invalid value: field is immutable")
        return self._update(rt, namespace, old, new, subresource, dry_run=dry_run)

    @staticmethod
    def _object_patch(body: Any, apply: Callable[[Any, Any], Any], old: Obj) -> Any:
        if not isinstance(body, dict):
            raise patches.PatchError("a merge patch is a JSON object", malformed=True)
        return apply(old, body)

    def _update(
        self,
        rt: ResourceType,
        namespace: str,
        old: Obj,
        new: Obj,
        subresource: str,
        *,
        dry_run: bool = False,
    ) -> Obj:
        name = old["metadata"]["name"]
        wanted = new["metadata"].get("resourceVersion")
        if wanted and wanted != old["metadata"]["resourceVersion"]:
            raise errors.conflict(rt, name)
        if rt.status_subresource:
            if subresource == "status":
                status = new.get("status")
                new = dict(old)
                if status is None:
                    new.pop("status", None)
                else:
                    new["status"] = status
            elif "status" in old:
                new = {**new, "status": old["status"]}
            else:
                new.pop("status", None)
        metadata = dict(new["metadata"])
        for owned in ("uid", "creationTimestamp", "resourceVersion", "generation", "namespace"):
            if owned in old["metadata"]:
                metadata[owned] = old["metadata"][owned]
            else:
                metadata.pop(owned, None)
        new = {**new, "metadata": metadata}
        if _spec_of(new) != _spec_of(old):
            metadata["generation"] = int(old["metadata"].get("generation", 1)) + 1
        new.setdefault("apiVersion", old.get("apiVersion"))
        new.setdefault("kind", old.get("kind"))
        _secret_normalize(rt, new)
        validation.validate(rt, new, old)
        if new == old:
            return old  # nothing changed: no write, the resourceVersion stays
        if rt == CRDS:
            self._crd_register(new, dry_run=dry_run)
        return self._store(rt, (namespace, name), copy.deepcopy(new), dry_run=dry_run)

    def scale(
        self,
        rt: ResourceType,
        namespace: str,
        name: str,
        verb: str,
        content_type: str = "",
        body: Any = None,
        *,
        dry_run: bool = False,
    ) -> Obj:
        """The /scale subresource: an autoscaling/v1 Scale of `spec.replicas`; an update or
        patch of it changes only the replicas."""
        old = self.get(rt, namespace, name)
        current = _scale_of(old)
        if verb == "get":
            return current
        try:
            if verb == "update":
                wanted = body
            elif content_type == patches.JSON_PATCH:
                wanted = patches.json_patch(current, body)
            elif content_type in patches.TYPES:
                wanted = self._object_patch(body, patches.merge_patch, current)
            else:
                raise errors.unsupported_patch(list(patches.TYPES))
        except patches.PatchError as exc:
            if exc.malformed:
                raise errors.bad_request(str(exc)) from exc
            raise StatusError(422, str(exc), reason="Invalid") from exc
        replicas = (
            ((wanted or {}).get("spec") or {}).get("replicas") if isinstance(wanted, dict) else None
        )
        if isinstance(replicas, bool) or not isinstance(replicas, int) or replicas < 0:
            raise validation.refusal(
                rt,
                name,
                [
                    validation.invalid_value(
                        "spec.replicas", replicas, "must be greater than or equal to 0"
                    )
                ],
            )
        metadata = dict(old["metadata"])
        if (wanted.get("metadata") or {}).get("resourceVersion"):
            metadata["resourceVersion"] = wanted["metadata"]["resourceVersion"]
        new = {**old, "metadata": metadata, "spec": {**old["spec"], "replicas": replicas}}
        return _scale_of(self._update(rt, namespace, old, new, "", dry_run=dry_run))

    def delete(self, rt: ResourceType, namespace: str, name: str, *, dry_run: bool = False) -> Obj:
        old = self.get(rt, namespace, name)
        if dry_run:
            return old
        self._forget(rt.storage_key, (namespace, name))
        if rt == NAMESPACES:
            # Immediate, where the real server first marks the namespace Terminating.
            for kind in {kind.storage_key: kind for kind in self.types.values()}.values():
                if kind.namespaced:
                    store = self.objects[kind.storage_key]
                    for key in [key for key in store if key[0] == name]:
                        self._forget(kind.storage_key, key)
        if rt == CRDS:
            for found in types_from_crd(old):
                self.types.pop((found.group, found.version, found.plural), None)
            self.objects.pop((old["spec"]["group"], old["spec"]["names"]["plural"]), None)
        return old

    def compact(self) -> None:
        """Expire every continue token and watch of an older resourceVersion (etcd
        compaction)."""
        self.compacted = self.resource_version
        self._snapshots.clear()
        self.events.clear()
        self.history_floor = self.resource_version

    def events_since(self, version: int) -> list[Event]:
        """The writes after `version`; 410 when the history no longer holds them all."""
        if version < self.history_floor:
            raise errors.too_old(version, self.history_floor)
        if not self.events or version >= self.events[-1].resource_version:
            return []
        versions = [event.resource_version for event in self.events]
        return list(self.events)[bisect.bisect_right(versions, version) :]

    # ---- reads ---------------------------------------------------------------------------

    def get(self, rt: ResourceType, namespace: str, name: str) -> Obj:
        obj = self.objects[rt.storage_key].get((namespace if rt.namespaced else "", name))
        if obj is None:
            raise errors.not_found(rt, name)
        return as_version(obj, rt)

    def list(
        self,
        rt: ResourceType,
        namespace: str,
        *,
        label_selector: str = "",
        field_selector: str = "",
        limit: int = 0,
        continue_token: str = "",
    ) -> Obj:
        selects = matcher(label_selector, field_selector, rt.selectable_fields())
        signature = (rt.storage_key, namespace, label_selector, field_selector)
        begin = 0
        if continue_token:
            version, start = _decode(continue_token)
            snapshot = self._snapshot_for(signature, version, start)
            if snapshot is None:
                snapshot = self._snapshot_take(rt, namespace, selects)
                version = self.resource_version
            begin = bisect.bisect_right(snapshot.keys, start)
        else:
            version = self.resource_version
            snapshot = self._snapshot_take(rt, namespace, selects)
        metadata: dict[str, Any] = {"resourceVersion": str(version)}
        end = len(snapshot.items)
        if limit > 0 and begin + limit < end:
            end = begin + limit
            metadata["continue"] = _encode(version, snapshot.keys[end - 1])
            if selects is None:
                metadata["remainingItemCount"] = len(snapshot.items) - end
            self._snapshots[(signature, version)] = snapshot
            self._snapshots.move_to_end((signature, version))
            while len(self._snapshots) > MAX_SNAPSHOTS:
                self._snapshots.popitem(last=False)
        return {
            "kind": rt.list_kind,
            "apiVersion": rt.api_version,
            "metadata": metadata,
            "items": [as_version(obj, rt) for obj in snapshot.items[begin:end]],
        }

    def _snapshot_for(
        self, signature: tuple[Any, ...], version: int, start: Key
    ) -> Snapshot | None:
        """The snapshot a continue token reads from; None: read on from the current state
        (the token is of the current resourceVersion). Raises 410 when it is gone."""
        if version > self.resource_version:
            raise errors.bad_request("continue key is not valid: resourceVersion is in the future")
        snapshot = self._snapshots.get((signature, version))
        too_old = snapshot is not None and self._monotonic() - snapshot.taken > self.continue_ttl
        # As etcd: a revision is gone once compacted; the current one always reads on.
        if version < self.compacted or (too_old and version != self.resource_version):
            self._snapshots.pop((signature, version), None)
            raise errors.expired(_encode(self.resource_version, start))
        if snapshot is not None:
            return snapshot
        if version == self.resource_version:
            return None
        raise errors.expired(_encode(self.resource_version, start))

    def _snapshot_take(self, rt: ResourceType, namespace: str, selects: Matcher | None) -> Snapshot:
        store = self.objects[rt.storage_key]
        keys = sorted(
            key
            for key, obj in store.items()
            if (not namespace or key[0] == namespace) and (selects is None or selects(obj))
        )
        return Snapshot(keys=keys, items=[store[key] for key in keys], taken=self._monotonic())

    def counts(self) -> dict[str, int]:
        return {
            f"{group}/{plural}" if group else plural: len(store)
            for (group, plural), store in sorted(self.objects.items())
        }

    # ---- helpers -------------------------------------------------------------------------

    def _body(self, rt: ResourceType, body: Any) -> Obj:
        if not isinstance(body, dict):
            raise errors.bad_request("the body of the request is not a JSON object")
        kind = body.get("kind")
        if kind is not None and kind != rt.kind:
            raise errors.bad_request(
                f"the kind in the data ({kind}) does not match the expected kind ({rt.kind})"
            )
        obj = copy.deepcopy(body)
        obj["apiVersion"], obj["kind"] = rt.api_version, rt.kind
        if not isinstance(obj.get("metadata"), dict):
            obj["metadata"] = {}
        return obj

    def _namespace_check(self, rt: ResourceType, namespace: str, meta: dict[str, Any]) -> None:
        if not rt.namespaced:
            meta.pop("namespace", None)
            return
        if meta.get("namespace", namespace) != namespace:
            raise errors.bad_request(
                "the namespace of the provided object does not match the namespace sent on "
                "the request"
            )
        meta["namespace"] = namespace
        if ("", namespace) not in self.objects[NAMESPACES.storage_key]:
            raise errors.not_found(NAMESPACES, namespace)

    def _crd_register(self, crd: Obj, *, dry_run: bool = False) -> None:
        try:
            found = types_from_crd(crd)
        except ValueError as exc:
            raise errors.invalid(CRDS, crd["metadata"].get("name", ""), str(exc)) from exc
        if dry_run:
            return
        for rt in found:
            self.register(rt)


def _scale_of(obj: Obj) -> Obj:
    meta = obj["metadata"]
    selector = ((obj.get("spec") or {}).get("selector") or {}).get("matchLabels") or {}
    return {
        "kind": "Scale",
        "apiVersion": "autoscaling/v1",
        "metadata": {
            key: meta[key]
            for key in ("name", "namespace", "uid", "resourceVersion", "creationTimestamp")
            if key in meta
        },
        "spec": {"replicas": int((obj.get("spec") or {}).get("replicas", 1))},
        "status": {
            "replicas": int((obj.get("status") or {}).get("replicas", 0)),
            "selector": ",".join(f"{k}={v}" for k, v in sorted(selector.items())),
        },
    }


def _secret_normalize(rt: ResourceType, obj: Obj) -> None:
    """A Secret as the real server stores it: `stringData` is write-only, merged into
    `data` (base64, over a key of the same name) and never stored nor returned; `data`
    must be base64; `type` defaults to Opaque."""
    if rt != SECRETS:
        return
    data = obj.get("data")
    if data is not None and not isinstance(data, dict):
        raise errors.bad_request(
            'Secret in version "v1" cannot be handled as a Secret: data must be an object'
        )
    data = dict(data or {})
    for key, value in data.items():
        try:
            base64.b64decode(str(value), validate=True)
        except (binascii.Error, ValueError):
            raise errors.bad_request(
                f'Secret in version "v1" cannot be handled as a Secret: illegal base64 data '
                f"at data.{key}"
            ) from None
    string_data = obj.pop("stringData", None)
    if isinstance(string_data, dict):
        for key, value in string_data.items():
            data[key] = base64.b64encode(str(value).encode()).decode()
    if data or "data" in obj:
        obj["data"] = data
    obj.setdefault("type", "Opaque")


def _spec_of(obj: Obj) -> dict[str, Any]:
    return {k: v for k, v in obj.items() if k not in ("metadata", "status")}


def as_version(obj: Obj, rt: ResourceType) -> Obj:
    """The object as the version it was asked at (custom kinds served at several)."""
    if obj.get("apiVersion") == rt.api_version:
        return obj
    return {**obj, "apiVersion": rt.api_version}


def _encode(version: int, start: Key) -> str:
    raw = json.dumps({"v": "meta.k8s.io/v1", "rv": version, "start": list(start)})
    return base64.urlsafe_b64encode(raw.encode()).decode()


def _decode(token: str) -> tuple[int, Key]:
    try:
        data = json.loads(base64.urlsafe_b64decode(token.encode()))
        namespace, name = data["start"]
        return int(data["rv"]), (str(namespace), str(name))
    except (ValueError, KeyError, TypeError, binascii.Error) as exc:
        raise errors.bad_request(f"continue key is not valid: {exc}") from exc


def objects_put(state: ClusterState, objects: Iterable[Obj]) -> int:
    """Store many objects (the control API); answers the cluster's resourceVersion."""
    for obj in objects:
        state.put(obj)
    return state.resource_version

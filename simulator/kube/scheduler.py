"""The scheduler and the kubelets of the simulated clusters (``--schedule``).

A thread runs passes over every cluster served, each under the simulator's lock:

* the scheduler binds each pod waiting for a node (no ``spec.nodeName``), oldest first,
  through the ``pods/binding`` path (so watches see it), as kube-scheduler's default
  filters would: the node is schedulable (not cordoned) and Ready, its NoSchedule and
  NoExecute taints are tolerated, its labels satisfy the pod's nodeSelector and required
  node affinity (In, NotIn, Exists, DoesNotExist), and it has the pod's requests of
  ``cpu``, ``memory`` and ``nvidia.com/gpu`` (and a pod slot) free of what the pods on it
  request. Among those that fit, the most allocated one (MostAllocated scoring, GPUs
  weighing most: pack, as GPU clusters configure it). A pod no node takes gets the
  PodScheduled=False condition, reason ``Unschedulable``, with kube-scheduler's message
  (``0/3 nodes are available: 1 Insufficient nvidia.com/gpu, 2 node(s) didn't match
  Pod's node affinity/selector. preemption: ...``);
* the kubelets start a pod placed on a Ready node ``START_DELAY`` seconds after it was
  bound (Running, Ready, its containers running), finish one annotated
  ``sim.capvco.io/run-seconds: "N"`` N seconds after it started (Succeeded), remove a
  pod being deleted (an eviction) ``STOP_DELAY`` seconds after its deletionTimestamp,
  and, as the pod garbage collector, delete a pod whose node is gone.

Times are divided by ``time_scale``: a benchmark compresses a day into minutes.

Pods of a Job (``is_job_pod``) are bound like others, but their start and finish are the
Job controller's kubelet's (simulator/kube/jobs.py), not these kubelets'.
"""

from __future__ import annotations

import json
import threading
import time
from collections.abc import Callable
from decimal import Decimal, InvalidOperation
from typing import TYPE_CHECKING, Any

from simulator.kube import pods
from simulator.kube.resources import NODES, PODS

if TYPE_CHECKING:
    from simulator.kube.server import Simulator
    from simulator.kube.store import ClusterState


Obj = dict[str, Any]
GPU = "nvidia.com/gpu"
DEFAULT_SCHEDULER = "default-scheduler"  # pods naming another scheduler are left to it
RUN_SECONDS = "sim.capvco.io/run-seconds"
START_DELAY = 1.0  # seconds from binding to Running: the image pulled, the containers started
STOP_DELAY = 1.0  # seconds a pod being deleted takes to stop
# MostAllocated's weights: a GPU node is full when its GPUs are, whatever its CPUs do.
WEIGHTS = {"cpu": 1, "memory": 1, GPU: 3}
UNSCHEDULABLE = "node(s) were unschedulable"
AFFINITY = "node(s) didn't match Pod's node affinity/selector"
NOT_READY_TAINT = {"key": "node.kubernetes.io/not-ready", "effect": "NoSchedule"}
UNSCHEDULABLE_TAINT = {"key": "node.kubernetes.io/unschedulable", "effect": "NoSchedule"}
NO_VICTIMS = "No preemption victims found for incoming pod"
NOT_HELPFUL = "Preemption is not helpful for scheduling"
_SUFFIXES = {
    "Ki": Decimal(2**10), "Mi": Decimal(2**20), "Gi": Decimal(2**30), "Ti": Decimal(2**40),
    "Pi": Decimal(2**50), "Ei": Decimal(2**60), "n": Decimal("1e-9"), "u": Decimal("1e-6"),
    "m": Decimal("1e-3"), "k": Decimal(10**3), "M": Decimal(10**6), "G": Decimal(10**9),
    "T": Decimal(10**12), "P": Decimal(10**15), "E": Decimal(10**18),
}  # fmt: skip


def is_job_pod(pod: Obj) -> bool:
    """A pod a Job owns: its kubelet is the Job simulation's, not this module's."""
    return any(ref.get("kind") == "Job" for ref in pod["metadata"].get("ownerReferences") or [])


def quantity(text: Any) -> Decimal:
    """A resource quantity (``500m``, ``16Gi``, ``2``) as a number; 0 when malformed."""
    text = str(text).strip()
    for suffix in sorted(_SUFFIXES, key=len, reverse=True):
        if text.endswith(suffix):
            text, scale = text[: -len(suffix)], _SUFFIXES[suffix]
            break
    else:
        scale = Decimal(1)
    try:
        return Decimal(text) * scale
    except InvalidOperation:
        return Decimal(0)


def requests_of(pod: Obj) -> dict[str, Decimal]:
    """What a pod requests of a node: its containers' requests (a limit without a request
    is one), at least its largest init container's, and a pod slot."""

    def summed(containers: list[Obj]) -> dict[str, Decimal]:
        total: dict[str, Decimal] = {}
        for container in containers:
            resources = container.get("resources") or {}
            asked = {**(resources.get("limits") or {}), **(resources.get("requests") or {})}
            for name, value in asked.items():
                total[name] = total.get(name, Decimal(0)) + quantity(value)
        return total

    spec = pod.get("spec") or {}
    found = summed(spec.get("containers") or [])
    for init in spec.get("initContainers") or []:
        for name, value in summed([init]).items():
            found[name] = max(found.get(name, Decimal(0)), value)
    found["pods"] = Decimal(1)
    return found


def _finished(pod: Obj) -> bool:
    return (pod.get("status") or {}).get("phase") in pods.FINISHED


def _tolerated(taint: Obj, tolerations: list[Obj]) -> bool:
    for toleration in tolerations:
        if toleration.get("effect") and toleration["effect"] != taint.get("effect"):
            continue
        if toleration.get("operator") == "Exists":
            if not toleration.get("key") or toleration["key"] == taint.get("key"):
                return True
        elif toleration.get("key") == taint.get("key") and toleration.get("value", "") == taint.get(
            "value", ""
        ):
            return True
    return False


def _selected(pod: Obj, labels: dict[str, str]) -> bool:
    """The pod's nodeSelector and required node affinity (any of its terms) hold."""
    spec = pod["spec"]
    if any(labels.get(k) != v for k, v in (spec.get("nodeSelector") or {}).items()):
        return False
    required = (
        ((spec.get("affinity") or {}).get("nodeAffinity") or {}).get(
            "requiredDuringSchedulingIgnoredDuringExecution"
        )
        or {}
    ).get("nodeSelectorTerms")
    if not required:
        return True
    return any(
        all(pods.expression_matches(e, labels) for e in term.get("matchExpressions") or [])
        for term in required
    )


def _misfits(pod: Obj, node: Obj, free: dict[str, Decimal], asked: dict[str, Decimal]) -> list[str]:
    """Why `node` cannot take `pod`, in the order kube-scheduler's filters run: the first
    filter that fails says it ([] when it fits). Resource misfits are all told."""
    tolerations = pod["spec"].get("tolerations") or []
    if (node.get("spec") or {}).get("unschedulable") and not _tolerated(
        UNSCHEDULABLE_TAINT, tolerations
    ):
        return [UNSCHEDULABLE]
    taints = [
        t
        for t in (node.get("spec") or {}).get("taints") or []
        if t.get("effect") != "PreferNoSchedule"
    ]
    if not pods.ready(node):
        taints.append(NOT_READY_TAINT)
    for taint in taints:
        if not _tolerated(taint, tolerations):
            return [
                f"node(s) had untolerated taint {{{taint.get('key')}: {taint.get('value', '')}}}"
            ]
    if not _selected(pod, node["metadata"].get("labels") or {}):
        return [AFFINITY]
    reasons = ["Too many pods"] if free.get("pods", Decimal(0)) < 1 else []
    for name in sorted(asked, key=lambda name: (name not in ("cpu", "memory"), name)):
        if name != "pods" and asked[name] > 0 and free.get(name, Decimal(0)) < asked[name]:
            reasons.append(f"Insufficient {name}")
    return reasons


def _histogram(reasons: dict[str, int]) -> str:
    return ", ".join(sorted(f"{count} {reason}" for reason, count in reasons.items()))


def unschedulable_message(nodes: int, misfits: list[list[str]]) -> str:
    """kube-scheduler's FitError message, with what preemption found (no pod of a lower
    priority to preempt: it helps nowhere)."""
    if not nodes:
        return "no nodes available to schedule pods"
    found: dict[str, int] = {}
    preemption: dict[str, int] = {}
    for reasons in misfits:
        for reason in reasons:
            found[reason] = found.get(reason, 0) + 1
        resolvable = any(r.startswith("Insufficient") or r == "Too many pods" for r in reasons)
        after = NO_VICTIMS if resolvable else NOT_HELPFUL
        preemption[after] = preemption.get(after, 0) + 1
    return (
        f"0/{nodes} nodes are available: {_histogram(found)}. "
        f"preemption: 0/{nodes} nodes are available: {_histogram(preemption)}."
    )


def schedule(state: ClusterState) -> None:
    """One scheduling pass over a cluster: every waiting pod bound or told why not."""
    nodes = sorted(state.objects[NODES.storage_key].values(), key=lambda n: n["metadata"]["name"])
    allocatable: dict[str, dict[str, Decimal]] = {
        node["metadata"]["name"]: {
            k: quantity(v) for k, v in ((node.get("status") or {}).get("allocatable") or {}).items()
        }
        for node in nodes
    }
    free = {name: dict(resources) for name, resources in allocatable.items()}
    waiting = []
    for pod in state.objects[PODS.storage_key].values():
        on = pod["spec"].get("nodeName")
        if on in free and not _finished(pod):
            for name, value in requests_of(pod).items():
                free[on][name] = free[on].get(name, Decimal(0)) - value
        elif not on and _waits(pod):
            waiting.append(pod)
    waiting.sort(
        key=lambda p: (
            -int(p["spec"].get("priority") or 0),
            p["metadata"].get("creationTimestamp", ""),
            p["metadata"]["namespace"],
            p["metadata"]["name"],
        )
    )
    # Free resources only shrink during a pass: a pod like one that fit nowhere fits nowhere.
    unfit: dict[str, str] = {}
    for pod in waiting:
        asked = requests_of(pod)
        shape = _shape(pod, asked)
        if shape in unfit:
            _tell_unschedulable(state, pod, unfit[shape])
            continue
        misfits, fitting = [], []
        for node in nodes:
            name = node["metadata"]["name"]
            reasons = _misfits(pod, node, free[name], asked)
            if reasons:
                misfits.append(reasons)
            else:
                fitting.append(name)
        meta = pod["metadata"]
        if not fitting:
            unfit[shape] = unschedulable_message(len(nodes), misfits)
            _tell_unschedulable(state, pod, unfit[shape])
            continue
        best = min(
            fitting, key=lambda name: (-_allocated(allocatable[name], free[name], asked), name)
        )
        for resource, value in asked.items():
            free[best][resource] = free[best].get(resource, Decimal(0)) - value
        binding = {"target": {"kind": "Node", "name": best}}
        pods.bind(state, meta["namespace"], meta["name"], binding, dry_run=False)


def _shape(pod: Obj, asked: dict[str, Decimal]) -> str:
    """What the filters read of a pod: two pods of one shape fit the same nodes."""
    spec = pod["spec"]
    wanted = [spec.get(f) for f in ("nodeSelector", "affinity", "tolerations")]
    return json.dumps([sorted((k, str(v)) for k, v in asked.items()), wanted], sort_keys=True)


def _waits(pod: Obj) -> bool:
    """A pod for this scheduler to place (one on no node yet)."""
    return (
        not _finished(pod)
        and not pod["metadata"].get("deletionTimestamp")
        and pod["spec"].get("schedulerName", DEFAULT_SCHEDULER) == DEFAULT_SCHEDULER
    )


def collect_orphans(state: ClusterState) -> None:
    """The pod garbage collector: a pod on a node that is gone goes too."""
    nodes = state.objects[NODES.storage_key]
    for (namespace, name), pod in list(state.objects[PODS.storage_key].items()):
        on = pod["spec"].get("nodeName")
        if on and ("", on) not in nodes:
            state.delete(PODS, namespace, name)


def _allocated(
    allocatable: dict[str, Decimal], free: dict[str, Decimal], asked: dict[str, Decimal]
) -> Decimal:
    """MostAllocated's score of a node once the pod is on it (0 to 100)."""
    score, weights = Decimal(0), 0
    for resource, weight in WEIGHTS.items():
        total = allocatable.get(resource, Decimal(0))
        if total <= 0:
            continue
        used = total - free.get(resource, Decimal(0)) + asked.get(resource, Decimal(0))
        score += weight * used * 100 / total
        weights += weight
    return score / weights if weights else Decimal(0)


def _tell_unschedulable(state: ClusterState, pod: Obj, message: str) -> None:
    status = dict(pod.get("status") or {})
    conditions = pods.condition_set(
        status.get("conditions") or [], "PodScheduled", "False",
        reason="Unschedulable", message=message,
    )  # fmt: skip
    if conditions != status.get("conditions"):
        state.put({**pod, "status": {**status, "conditions": conditions}})


class Scheduler:
    """The scheduler and kubelets of every cluster served, a pass every `interval`
    seconds until `stop` is set; their delays divided by `time_scale`."""

    def __init__(
        self,
        simulator: Simulator,
        *,
        time_scale: float = 1.0,
        interval: float = 0.1,
        monotonic: Callable[[], float] = time.monotonic,
    ) -> None:
        self.simulator = simulator
        self.time_scale = time_scale
        self.interval = interval
        self._monotonic = monotonic
        self._since: dict[str, float] = {}  # pod uid: when its current state was first seen
        # A cluster's resourceVersion at its last pass: unchanged, scheduling again would
        # decide the same.
        self._passed: dict[ClusterState, int] = {}
        simulator.kubelets = True

    def step(self) -> None:
        with self.simulator.lock:
            seen: set[str] = set()
            passed, self._passed = self._passed, {}
            for state in list(self.simulator.clusters.values()):
                collect_orphans(state)
                if passed.get(state) != state.resource_version:
                    schedule(state)
                self._kubelets(state, seen)
                self._passed[state] = state.resource_version
            self._since = {uid: t for uid, t in self._since.items() if uid in seen}

    def run(self, stop: threading.Event) -> None:
        while not stop.is_set():
            self.step()
            stop.wait(self.interval)

    def _due(self, key: str, seconds: float) -> bool:
        """Whether `seconds` (scaled) have passed since `key` was first asked about."""
        now = self._monotonic()
        since = self._since.setdefault(key, now)
        return now - since >= seconds / self.time_scale

    def _kubelets(self, state: ClusterState, seen: set[str]) -> None:
        nodes = state.objects[NODES.storage_key]
        for (namespace, name), pod in list(state.objects[PODS.storage_key].items()):
            uid, phase = pod["metadata"]["uid"], (pod.get("status") or {}).get("phase")
            node = nodes.get(("", pod["spec"].get("nodeName") or ""))
            if pod["metadata"].get("deletionTimestamp"):
                key = f"{uid}/stop"
                seen.add(key)
                if node is None or _finished(pod) or self._due(key, STOP_DELAY):
                    state.delete(PODS, namespace, name)
                continue
            if node is None or is_job_pod(pod) or _finished(pod):
                continue
            key = f"{uid}/{phase}"
            seen.add(key)
            if phase == "Pending" and pods.ready(node) and self._due(key, START_DELAY):
                state.put(_running(pod))
            elif phase == "Running":
                run = _seconds((pod["metadata"].get("annotations") or {}).get(RUN_SECONDS))
                if run is not None and self._due(key, run):
                    state.put(_succeeded(pod))


def _seconds(text: Any) -> float | None:
    """The run-seconds annotation's value; None when absent or not a number of seconds."""
    try:
        seconds = float(text)
    except (TypeError, ValueError):
        return None
    return seconds if seconds >= 0 else None


def _container_statuses(pod: Obj, state: Obj, *, ready: bool) -> list[Obj]:
    return [
        {
            "name": container.get("name", ""),
            "image": container.get("image", ""),
            "imageID": "",
            "containerID": f"containerd://{pod['metadata']['uid'].replace('-', '')}{n}",
            "ready": ready,
            "started": ready,
            "restartCount": 0,
            "state": state,
        }
        for n, container in enumerate(pod["spec"].get("containers") or [])
    ]


def _running(pod: Obj) -> Obj:
    started = pods.now()
    status = dict(pod.get("status") or {})
    conditions = status.get("conditions") or []
    for kind in ("PodReadyToStartContainers", "Initialized", "ContainersReady", "Ready"):
        conditions = pods.condition_set(conditions, kind, "True")
    status.update(
        phase="Running",
        startTime=started,
        conditions=conditions,
        containerStatuses=_container_statuses(pod, {"running": {"startedAt": started}}, ready=True),
    )
    return {**pod, "status": status}


def _succeeded(pod: Obj) -> Obj:
    status = dict(pod.get("status") or {})
    conditions = status.get("conditions") or []
    for kind in ("ContainersReady", "Ready"):
        conditions = pods.condition_set(conditions, kind, "False", reason="PodCompleted")
    started = status.get("startTime", pods.now())
    ended = {"exitCode": 0, "reason": "Completed", "startedAt": started, "finishedAt": pods.now()}
    status.update(
        phase="Succeeded",
        conditions=conditions,
        containerStatuses=_container_statuses(pod, {"terminated": ended}, ready=False),
    )
    return {**pod, "status": status}

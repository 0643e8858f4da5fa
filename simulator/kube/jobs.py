"""batch/v1 Jobs in the simulated clusters (``--schedule``): the Job controller, the
kubelet of a Job's pods and the logs they leave, in the same passes as the scheduler
(simulator/kube/scheduler.py).

* The Job controller makes a Job's pod from its template (owned by the Job, labelled
  ``job-name`` and ``controller-uid`` as the real controller labels it), makes another
  after a failure while ``backoffLimit`` allows, and ends the Job: ``Complete`` once its pod
  succeeded, ``Failed`` with ``BackoffLimitExceeded`` or, past ``activeDeadlineSeconds``,
  ``DeadlineExceeded`` (its pod deleted). A pod whose Job is gone is deleted (the garbage
  collector: any propagation policy ends so).
* The kubelet of a Job's pod on a node: admission first (the node's allocatable
  ``nvidia.com/gpu`` against what its other pods hold: a pod asking for more fails
  ``OutOfnvidia.com/gpu``, as the real kubelet rejects it), the image pulled, then each
  container "runs" (simulator/kube/guest.py: nvidia-smi's output for the node's simulated
  GPUs), the pod ends ``Succeeded`` or ``Failed`` with the containers' exit codes, and
  their output is the pod's log (``pods/log``).

A node's annotation ``sim.capvco.io/pod-start`` makes its Job pods fail to start, for tests:
``never`` (they stay ContainerCreating) or ``ErrImagePull`` (the image cannot be pulled).
"""

from __future__ import annotations

import copy
from collections.abc import Callable
from decimal import Decimal
from typing import TYPE_CHECKING, Any

from simulator.kube import guest, pods
from simulator.kube.resources import JOBS, NODES, PODS

if TYPE_CHECKING:
    from simulator.kube.store import ClusterState

Obj = dict[str, Any]
Due = Callable[[str, float], bool]
POD_START = "sim.capvco.io/pod-start"
START_DELAY = 1.0  # seconds from a Job pod's binding to its end: pulled, ran, exited


def job_of(pod: Obj) -> Obj | None:
    """The owner reference of the Job that owns the pod, if one does."""
    refs = pod["metadata"].get("ownerReferences") or []
    return next((ref for ref in refs if ref.get("kind") == "Job"), None)


def step(state: ClusterState, due: Due, seen: set[str]) -> None:
    """One pass of the Job controller and of the Job pods' kubelet over a cluster."""
    jobs = state.objects[JOBS.storage_key]
    uids = {job["metadata"]["uid"] for job in jobs.values()}
    by_job: dict[str, list[Obj]] = {}
    for (namespace, name), pod in list(state.objects[PODS.storage_key].items()):
        ref = job_of(pod)
        if ref is None:
            continue
        if ref.get("uid") not in uids:
            state.delete(PODS, namespace, name)  # the garbage collector
            continue
        by_job.setdefault(ref["uid"], []).append(pod)
        _kubelet(state, pod, due, seen)
    for job in list(jobs.values()):
        _control(state, job, by_job.get(job["metadata"]["uid"], []), due, seen)


# ---- the Job controller --------------------------------------------------------------------


def _finished(job: Obj) -> bool:
    conditions = (job.get("status") or {}).get("conditions") or []
    return any(c["type"] in ("Complete", "Failed") and c["status"] == "True" for c in conditions)


def _control(state: ClusterState, job: Obj, owned: list[Obj], due: Due, seen: set[str]) -> None:
    meta, spec = job["metadata"], job.get("spec") or {}
    if _finished(job):
        ttl = spec.get("ttlSecondsAfterFinished")
        key = f"{meta['uid']}/ttl"
        seen.add(key)
        if ttl is not None and due(key, float(ttl)):
            state.delete(JOBS, meta["namespace"], meta["name"])
        return
    status = dict(job.get("status") or {})
    live = [p for p in owned if (p.get("status") or {}).get("phase") not in pods.FINISHED]
    succeeded = sum(1 for p in owned if p["status"].get("phase") == "Succeeded")
    failed = sum(1 for p in owned if p["status"].get("phase") == "Failed")
    deadline = spec.get("activeDeadlineSeconds")
    key = f"{meta['uid']}/active"
    seen.add(key)
    if succeeded:
        _end(state, job, status, "Complete", "", "", succeeded=succeeded, failed=failed)
    elif failed > int(spec.get("backoffLimit", 6)):
        message = "Job has reached the specified backoff limit"
        _end(state, job, status, "Failed", "BackoffLimitExceeded", message, failed=failed)
    elif deadline is not None and due(key, float(deadline)):
        for pod in live:
            state.delete(PODS, pod["metadata"]["namespace"], pod["metadata"]["name"])
        message = "Job was active longer than specified deadline"
        _end(state, job, status, "Failed", "DeadlineExceeded", message, failed=failed + len(live))
    elif not live:
        _pod_make(state, job)
        started = status.get("startTime") or pods.now()
        state.put({**job, "status": {**status, "startTime": started, "active": 1}})


def _end(
    state: ClusterState, job: Obj, status: Obj, kind: str, reason: str, message: str, **counts: int
) -> None:
    at = pods.now()
    conditions = status.get("conditions") or []
    first = "SuccessCriteriaMet" if kind == "Complete" else "FailureTarget"
    for condition in (first, kind):
        conditions = pods.condition_set(
            conditions, condition, "True", reason=reason, message=message
        )
    ended = {**status, **counts, "active": 0, "conditions": conditions}
    if kind == "Complete":
        ended["completionTime"] = at
    state.put({**job, "status": ended})


def _pod_make(state: ClusterState, job: Obj) -> None:
    meta = job["metadata"]
    template = copy.deepcopy((job.get("spec") or {}).get("template") or {})
    pod_meta = template.get("metadata") or {}
    labels = {
        **(pod_meta.get("labels") or {}),
        "controller-uid": meta["uid"], "batch.kubernetes.io/controller-uid": meta["uid"],
        "job-name": meta["name"], "batch.kubernetes.io/job-name": meta["name"],
    }  # fmt: skip
    owner = {
        "apiVersion": "batch/v1", "kind": "Job", "name": meta["name"], "uid": meta["uid"],
        "controller": True, "blockOwnerDeletion": True,
    }  # fmt: skip
    body = {
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {
            "generateName": f"{meta['name']}-",
            "namespace": meta["namespace"],
            "labels": labels,
            "annotations": pod_meta.get("annotations") or {},
            "ownerReferences": [owner],
        },
        "spec": template.get("spec") or {},
    }
    state.create(PODS, meta["namespace"], body)


# ---- the kubelet of a Job's pods -----------------------------------------------------------


def _kubelet(state: ClusterState, pod: Obj, due: Due, seen: set[str]) -> None:
    meta, status = pod["metadata"], pod.get("status") or {}
    node = state.objects[NODES.storage_key].get(("", pod["spec"].get("nodeName") or ""))
    if node is None or meta.get("deletionTimestamp") or status.get("phase") in pods.FINISHED:
        return
    start = (node["metadata"].get("annotations") or {}).get(POD_START, "")
    if start == "never":
        _waiting(state, pod, "ContainerCreating", "")
        return
    if start == "ErrImagePull":
        image = (pod["spec"].get("containers") or [{}])[0].get("image", "")
        message = f'failed to pull and unpack image "{image}": not found'
        _waiting(state, pod, "ErrImagePull", message)
        return
    key = f"{meta['uid']}/start"
    seen.add(key)
    if not due(key, START_DELAY):
        return
    if refused := _gpus_refused(state, pod, node):
        failed = {
            **status, "phase": "Failed", "reason": "OutOfnvidia.com/gpu",
            "message": f"Pod was rejected: {refused}",
        }  # fmt: skip
        state.put({**pod, "status": failed})
        return
    ran = [(c, *guest.run(c, node)) for c in pod["spec"].get("containers") or []]
    started = status.get("startTime") or pods.now()
    state.pod_logs[meta["uid"]] = {c.get("name", ""): output for c, _, output in ran}
    statuses = [
        {
            "name": c.get("name", ""), "image": c.get("image", ""), "imageID": "",
            "ready": False, "started": False, "restartCount": 0,
            "state": {"terminated": {
                "exitCode": code, "reason": "Completed" if code == 0 else "Error",
                "startedAt": started, "finishedAt": pods.now(),
            }},
        }
        for c, code, _ in ran
    ]  # fmt: skip
    phase = "Succeeded" if all(code == 0 for _, code, _ in ran) else "Failed"
    conditions = pods.condition_set(status.get("conditions") or [], "Ready", "False",
                                    reason="PodCompleted")  # fmt: skip
    state.put(
        {
            **pod,
            "status": {
                **status, "phase": phase, "startTime": started, "conditions": conditions,
                "containerStatuses": statuses,
            },
        }
    )  # fmt: skip


def _waiting(state: ClusterState, pod: Obj, reason: str, message: str) -> None:
    waiting = {"reason": reason, **({"message": message} if message else {})}
    statuses = [
        {
            "name": c.get("name", ""), "image": c.get("image", ""), "imageID": "",
            "ready": False, "started": False, "restartCount": 0, "state": {"waiting": waiting},
        }
        for c in pod["spec"].get("containers") or []
    ]  # fmt: skip
    status = pod.get("status") or {}
    if status.get("containerStatuses") != statuses:
        state.put({**pod, "status": {**status, "containerStatuses": statuses}})


def _gpus_refused(state: ClusterState, pod: Obj, node: Obj) -> str:
    """The kubelet's admission of the pod's GPUs: "" when they fit the node."""
    from simulator.kube.scheduler import quantity, requests_of

    asked = requests_of(pod).get(guest.GPU, Decimal(0))
    if not asked:
        return ""
    capacity = quantity(((node.get("status") or {}).get("allocatable") or {}).get(guest.GPU, 0))
    used = sum(
        (
            requests_of(other).get(guest.GPU, Decimal(0))
            for other in state.objects[PODS.storage_key].values()
            if other["spec"].get("nodeName") == node["metadata"]["name"]
            and other["metadata"]["uid"] != pod["metadata"]["uid"]
            and (other.get("status") or {}).get("phase") == "Running"
        ),
        Decimal(0),
    )
    if used + asked <= capacity:
        return ""
    return (
        f"Node didn't have enough resource: {guest.GPU}, requested: {asked}, used: {used}, "
        f"capacity: {capacity}"
    )


def log(state: ClusterState, pod: Obj, container: str) -> str:
    """What `pods/log` answers: the container's output; raises 400 while it has not run."""
    from simulator.kube import errors

    names = [c.get("name", "") for c in pod["spec"].get("containers") or []]
    name = container or (names[0] if len(names) == 1 else "")
    meta = pod["metadata"]
    if not name:
        raise errors.bad_request(
            f"a container name must be specified for pod {meta['name']}, choose one of: "
            f"[{' '.join(names)}]"
        )
    if name not in names:
        raise errors.bad_request(f"container {name} is not valid for pod {meta['name']}")
    if name in state.pod_logs.get(meta["uid"], {}):
        return state.pod_logs[meta["uid"]][name]
    statuses = (pod.get("status") or {}).get("containerStatuses") or []
    waiting = next((s["state"].get("waiting") for s in statuses if s.get("name") == name), None)
    reason = (waiting or {}).get("reason", "ContainerCreating")
    raise errors.bad_request(
        f'container "{name}" in pod "{meta["name"]}" is waiting to start: {reason}'
    )

"""What the API server does for a pod beyond storing it: the `binding` subresource (how
the scheduler places a pod), the `eviction` subresource and PodDisruptionBudgets, whose
status the disruption controller keeps, here on every write of a pod or budget.

As the real server:

* a binding sets `spec.nodeName` and the PodScheduled condition, once: a pod already on
  a node, or being deleted, is 409 Conflict;
* an eviction of a Pending, finished or terminating pod, or of one no budget selects,
  deletes it; one that selects it must allow a disruption (`disruptionsAllowed` > 0),
  else 429 TooManyRequests with the budget's numbers in a `DisruptionBudget` cause; two
  budgets selecting the pod are a 500;
* a budget's status counts the pods it selects (`expectedPods`), the Ready ones not being
  deleted (`currentHealthy`), the healthy it asks for (`desiredHealthy`, from
  `minAvailable` or `maxUnavailable`, a number or a percentage rounded up) and the
  difference (`disruptionsAllowed`).

An evicted pod is deleted gracefully where a kubelet runs (`graceful`: it gets a
`deletionTimestamp` and the kubelet removes it, simulator/kube/scheduler.py); else at once.
"""

from __future__ import annotations

import math
from datetime import UTC, datetime
from typing import TYPE_CHECKING, Any

from simulator.kube import errors
from simulator.kube.errors import StatusError
from simulator.kube.resources import PDBS, PODS

if TYPE_CHECKING:
    from simulator.kube.store import ClusterState

Obj = dict[str, Any]
FINISHED = ("Succeeded", "Failed")
EVICTION_REFUSED = "Cannot evict pod as it would violate the pod's disruption budget."
SUCCESS: Obj = {"kind": "Status", "apiVersion": "v1", "metadata": {}, "status": "Success"}


def now() -> str:
    return datetime.now(UTC).strftime("%Y-%m-%dT%H:%M:%SZ")


def selector_matches(selector: Obj | None, labels: dict[str, str]) -> bool:
    """A LabelSelector (matchLabels, matchExpressions) against labels; no selector
    selects nothing, an empty one everything."""
    if selector is None:
        return False
    if any(labels.get(k) != v for k, v in (selector.get("matchLabels") or {}).items()):
        return False
    return all(expression_matches(e, labels) for e in selector.get("matchExpressions") or [])


def expression_matches(expression: Obj, labels: dict[str, str]) -> bool:
    """One requirement of a label or node selector: In, NotIn, Exists, DoesNotExist."""
    key, operator = expression.get("key", ""), expression.get("operator", "")
    values = expression.get("values") or []
    if operator == "In":
        return key in labels and labels[key] in values
    if operator == "NotIn":
        return key not in labels or labels[key] not in values
    if operator == "Exists":
        return key in labels
    if operator == "DoesNotExist":
        return key not in labels
    return False  # Gt, Lt: not simulated


def ready(obj: Obj) -> bool:
    """A node's or pod's Ready condition is True."""
    return any(
        c.get("type") == "Ready" and c.get("status") == "True"
        for c in (obj.get("status") or {}).get("conditions") or []
    )


def condition_set(conditions: list[Obj], kind: str, status: str, **more: str) -> list[Obj]:
    """The conditions with one of `kind` set; its transition time moves with its status."""
    old = next((c for c in conditions if c.get("type") == kind), None)
    moved = old is None or old.get("status") != status
    since = now() if moved or old is None else old.get("lastTransitionTime", now())
    new = {"type": kind, "status": status, "lastProbeTime": None,
           "lastTransitionTime": since, **more}  # fmt: skip
    return [c for c in conditions if c.get("type") != kind] + [new]


# ---- binding -------------------------------------------------------------------------


def bind(state: ClusterState, namespace: str, name: str, body: Any, *, dry_run: bool) -> Obj:
    """POST pods/{name}/binding."""
    target = (body or {}).get("target") if isinstance(body, dict) else None
    node = target.get("name") if isinstance(target, dict) else None
    if not node:
        raise errors.invalid(PODS, name, "target.name: Required value")
    pod = state.get(PODS, namespace, name)
    already = pod["spec"].get("nodeName")
    if already or pod["metadata"].get("deletionTimestamp"):
        problem = (
            f'pod {name} is already assigned to node "{already}"'
            if already
            else f"pod {name} is being deleted, cannot be assigned to a host"
        )
        raise StatusError(
            409,
            f'Operation cannot be fulfilled on pods/binding "{name}": {problem}',
            reason="Conflict",
            details={"name": name, "kind": "pods/binding"},
        )
    status = dict(pod.get("status") or {})
    status["conditions"] = condition_set(status.get("conditions") or [], "PodScheduled", "True")
    if not dry_run:
        state.put({**pod, "spec": {**pod["spec"], "nodeName": node}, "status": status})
    return {**SUCCESS, "code": 201}


# ---- eviction and disruption budgets -------------------------------------------------


def evict(
    state: ClusterState, namespace: str, name: str, body: Any, *, dry_run: bool, graceful: bool
) -> Obj:
    """POST pods/{name}/eviction with a policy/v1 Eviction."""
    if not isinstance(body, dict):
        raise errors.bad_request("the body of the request is not a JSON object")
    named = (body.get("metadata") or {}).get("name")
    if named and named != name:
        raise errors.bad_request("name in URL does not match name in Eviction object")
    pod = state.get(PODS, namespace, name)
    options = body.get("deleteOptions") or {}
    dry_run = dry_run or "All" in (options.get("dryRun") or [])
    phase = (pod.get("status") or {}).get("phase")
    ignores_budgets = phase in (*FINISHED, "Pending") or pod["metadata"].get("deletionTimestamp")
    if not ignores_budgets:
        labels = pod["metadata"].get("labels") or {}
        budgets = [
            pdb
            for (ns, _), pdb in sorted(state.objects[PDBS.storage_key].items())
            if ns == namespace and selector_matches((pdb.get("spec") or {}).get("selector"), labels)
        ]
        if len(budgets) > 1:
            raise StatusError(
                500,
                "This pod has more than one PodDisruptionBudget, which the eviction "
                "subresource does not support.",
            )
        if budgets:
            status = budget_status(budgets[0], _pods_in(state, namespace))
            if status["disruptionsAllowed"] <= 0:
                budget = budgets[0]["metadata"]["name"]
                raise StatusError(
                    429,
                    EVICTION_REFUSED,
                    details={
                        "causes": [
                            {
                                "reason": "DisruptionBudget",
                                "message": f"The disruption budget {budget} needs "
                                f"{status['desiredHealthy']} healthy pods and has "
                                f"{status['currentHealthy']} currently",
                            }
                        ]
                    },
                )
    if not dry_run:
        delete_pod(state, pod, graceful=graceful, grace=options.get("gracePeriodSeconds"))
    return {**SUCCESS, "code": 201}


def delete_pod(state: ClusterState, pod: Obj, *, graceful: bool, grace: Any = None) -> None:
    """Delete a pod: gracefully (a deletionTimestamp, for its kubelet to act on) or at once."""
    meta = pod["metadata"]
    if not graceful:
        state.delete(PODS, meta["namespace"], meta["name"])
        return
    if meta.get("deletionTimestamp"):
        return
    seconds = grace if isinstance(grace, int) else pod["spec"].get("terminationGracePeriodSeconds")
    marked = {**meta, "deletionTimestamp": now(), "deletionGracePeriodSeconds": int(seconds or 30)}
    state.put({**pod, "metadata": marked})


def _pods_in(state: ClusterState, namespace: str) -> list[Obj]:
    return [pod for (ns, _), pod in state.objects[PODS.storage_key].items() if ns == namespace]


def _scaled(value: Any, total: int) -> int | None:
    """An int-or-percent of `total`, a percentage rounded up; None when not a valid one."""
    if isinstance(value, bool):
        return None
    if isinstance(value, int):
        return value
    if isinstance(value, str) and value.endswith("%") and value[:-1].isdigit():
        return math.ceil(int(value[:-1]) * total / 100)
    return None


def budget_status(pdb: Obj, pods: list[Obj]) -> Obj:
    """A PodDisruptionBudget's status from the pods of its namespace."""
    spec = pdb.get("spec") or {}
    selected = [
        pod
        for pod in pods
        if selector_matches(spec.get("selector"), pod["metadata"].get("labels") or {})
        and (pod.get("status") or {}).get("phase") not in FINISHED
    ]
    expected = len(selected)
    healthy = sum(
        1 for pod in selected if ready(pod) and not pod["metadata"].get("deletionTimestamp")
    )
    if spec.get("maxUnavailable") is not None:
        unavailable = _scaled(spec["maxUnavailable"], expected)
        desired = expected if unavailable is None else max(expected - unavailable, 0)
    else:
        minimum = _scaled(spec.get("minAvailable", 1), expected)
        desired = expected if minimum is None else minimum
    allowed = max(healthy - desired, 0)
    old = pdb.get("status") or {}
    conditions = condition_set(
        old.get("conditions") or [],
        "DisruptionAllowed",
        "True" if allowed else "False",
        reason="SufficientPods" if allowed else "InsufficientPods",
        message="",
    )
    return {
        "observedGeneration": int(pdb["metadata"].get("generation", 1)),
        "currentHealthy": healthy,
        "desiredHealthy": desired,
        "disruptionsAllowed": allowed,
        "expectedPods": expected,
        "conditions": conditions,
    }


def budgets_follow(state: ClusterState, namespace: str) -> None:
    """The disruption controller: every budget of `namespace` with its status up to date
    (written only when it changed, so this ends)."""
    budgets = [
        (key, pdb) for key, pdb in state.objects[PDBS.storage_key].items() if key[0] == namespace
    ]
    if not budgets:
        return
    pods = _pods_in(state, namespace)
    for _, pdb in budgets:
        status = budget_status(pdb, pods)
        if status != pdb.get("status"):
            state.put({**pdb, "status": status})

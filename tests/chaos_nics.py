"""The pods' SR-IOV NICs in the seeded fault run of our own parts (tests/chaos_ops.py).

Each cluster has SR-IOV on (network `sriov-nl-rmd`, a credential of its own), set by its
admin through the API. Its nodes in that network's location are enrolled as their
installer would, and what the CNI plugin of a node does goes through the agent API over
gunicorn, faults and all: a pod placed on a node (in the cluster's Kubernetes) is ADDed and
polled until attached (ADDed again after a failure worth trying again), DELed later, or
deleted from Kubernetes without a DEL, as a pod that died with its node's runtime; force
deletes and scale-downs take nodes, and their pods, away meanwhile.

What must hold (`problems`, once the run settled):

* every NIC on a VM in that network is the attached NIC of a pod that is still there, on
  that VM's node, and every such pod's NIC is on its VM (none lost, none left behind);
* a NIC whose pod is still there was released only by that pod's DEL: a cluster cut off
  is not a pod gone;
* no request is left half-made (requested, attaching, detaching);
* every attach and detach whitesky saw was made with the credential the admin gave.
"""

from __future__ import annotations

import random
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

import requests
from django.db import DatabaseError, InterfaceError, connection

from sriov.models import PodNic
from tests.chaos import ChaosError
from tests.kube_sim import KubeSimulator, SimCluster, pod_object
from tests.whitesky_sim import WhiteskySimulator

NETWORK = "sriov-nl-rmd"
NETWORK_ID = 101
LOCATION = "nl-rmd-dc01-001"
SUBJECT = "sriov-operator"
NAMESPACE = "net"
IFNAME = "net1"
NIC_OPERATIONS = ("attachExternalNetworksVirtualMachine", "detachExternalNetworksVirtualMachine")
AGENT = "/api/v1/sriov/agent"
# Seconds between the plugin's acts (uniform), and pods at most on the clusters at once.
NIC_EVERY = (0.5, 2.0)
PODS_MAX = 6
Objects = dict[str, dict[str, tuple[str, Any, str]]]
State = PodNic.State
HALF_MADE = (State.REQUESTED, State.ATTACHING, State.DETACHING)
LIVE = ("added", "attached", "deleting")  # a pod of ours, in its cluster


@dataclass
class NetPod:
    """A pod of ours with an SR-IOV NIC asked for, as its node's plugin knows it."""

    cluster: str
    name: str
    node: str
    uid: str
    state: str = "added"
    """added (ADD sent, not attached yet), attached, deleting (DEL sent, its detach
    queued), deleted (DEL answered: released, then the pod deleted), vanished (deleted from
    Kubernetes without a DEL)."""

    @property
    def attachment(self) -> str:
        return f"?container_id=sandbox-{self.name}&ifname={IFNAME}"


@dataclass
class Answer:
    status: int
    body: Any


@dataclass
class Nics:
    """The SR-IOV side of the run (see the module)."""

    base: str
    sim: WhiteskySimulator
    kube: KubeSimulator
    servers: dict[str, SimCluster]
    """Each cluster's API server, reached directly (not through the run's proxies)."""
    person: Callable[[str, str, dict[str, Any] | None], Any]
    """The API as the clusters' admin: (method, url, body) -> an answer with
    .status_code and .data; raises ChaosError when none came."""
    judge: Callable[[str, str, requests.Response], None]
    """Told of every agent answer: a 5xx that says nothing clear is a problem."""
    enabled: dict[str, tuple[int, str]] = field(default_factory=dict)
    """Per cluster name, its pk and enrollment token (SR-IOV on): a cluster made again
    under the name is another."""
    tokens: dict[tuple[str, str], str] = field(default_factory=dict)
    """Per (cluster, node), the node's token."""
    pods: list[NetPod] = field(default_factory=list)
    made = 0
    acts: dict[str, int] = field(default_factory=dict)

    # --- what the admin, the installer and the plugin do ----------------------------------

    def act(self, rng: random.Random, clusters: Objects, active: dict[str, int]) -> str:
        """One step of the clusters' plugins; `clusters`: each active cluster's objects now
        (by uid: what, made, providerID), as read from its API server; `active`: their pks
        by name. Answers what it did."""
        self.forget(active)
        pending = [p for p in self.pods if p.state in ("added", "deleting")]
        if pending and rng.random() < 0.5:
            pod = rng.choice(pending)
            return self.poll(pod) if pod.state == "added" else self.delete(pod)
        live = [p for p in self.pods if p.state in ("added", "attached")]  # no DEL sent
        kinds = {
            "add": 3 if len(live) < PODS_MAX else 0,
            "delete": 2 if live else 0,
            "vanish": 1 if live else 0,
        }
        kind = rng.choices(list(kinds), weights=list(kinds.values()))[0]
        if kind == "add":
            return self.add(rng, clusters, active)
        pod = rng.choice(live)
        return self.delete(pod) if kind == "delete" else self.vanish(pod)

    def forget(self, active: dict[str, int]) -> None:
        """A cluster deleted takes its pods, its tokens and its SR-IOV with it."""
        for name, (pk, _) in list(self.enabled.items()):
            if active.get(name) != pk:
                self.enabled.pop(name)
                self.tokens = {k: v for k, v in self.tokens.items() if k[0] != name}
                for pod in self.pods:
                    if pod.cluster == name and pod.state in LIVE:
                        pod.state = "vanished"

    def add(self, rng: random.Random, clusters: Objects, active: dict[str, int]) -> str:
        nodes = [
            (cluster, what.removeprefix("node "))
            for cluster, objects in sorted(clusters.items())
            for what, _, provider_id in objects.values()
            if what.startswith("node ") and provider_id.startswith(f"vco://{LOCATION}/")
        ]
        if not nodes:
            return "no node in the network's location"
        cluster, node = rng.choice(nodes)
        if cluster not in self.enabled:
            return self.enable(cluster, active[cluster])
        token = self.token(cluster, node)
        if not token:
            return f"node {cluster}/{node} not enrolled yet"
        name = f"net-{self.made}"
        self.made += 1
        obj = pod_object(name, namespace=NAMESPACE, node=node, sriov_network=NETWORK)
        self.kube.put(cluster, obj)
        uid = self.kube_uid(cluster, name)
        pod = NetPod(cluster=cluster, name=name, node=node, uid=uid)
        self.pods.append(pod)
        return self._add(pod, token)

    def _add(self, pod: NetPod, token: str) -> str:
        body = {
            "pod_uid": pod.uid, "namespace": NAMESPACE, "pod_name": pod.name,
            "node_name": pod.node, "container_id": f"sandbox-{pod.name}", "ifname": IFNAME,
        }  # fmt: skip
        answer = self.agent("POST", f"{AGENT}/nics/", token, body)
        pod.state = "attached" if answer.status == 200 and _attached(answer) else "added"
        return f"ADD {pod.cluster}/{pod.name} on {pod.node}: {_said(answer)}"

    def poll(self, pod: NetPod) -> str:
        """The plugin's poll of a queued ADD; after a failure worth trying again, ADD again
        (the kubelet does: the sandbox's ADD failed)."""
        token = self.token(pod.cluster, pod.node)
        if not token:
            return f"poll {pod.cluster}/{pod.name}: its node is not enrolled"
        answer = self.agent("GET", f"{AGENT}/nics/{pod.uid}/{pod.attachment}", token, None)
        if answer.status == 200 and _attached(answer):
            pod.state = "attached"
        elif answer.status in (200, 404) or answer.status >= 500:
            return f"poll {pod.cluster}/{pod.name}: {_said(answer)}; " + self._add(pod, token)
        return f"poll {pod.cluster}/{pod.name}: {_said(answer)}"

    def delete(self, pod: NetPod) -> str:
        """DEL, again while its detach is queued (202), until released (204); then the
        pod goes."""
        token = self.token(pod.cluster, pod.node)
        if not token:
            return f"DEL {pod.cluster}/{pod.name}: its node is not enrolled"
        answer = self.agent("DELETE", f"{AGENT}/nics/{pod.uid}/{pod.attachment}", token, None)
        if answer.status == 202:
            pod.state = "deleting"
        elif answer.status in (200, 204):
            pod.state = "deleted"
            self.kube_delete(pod)
        return f"DEL {pod.cluster}/{pod.name}: {_said(answer)}"

    def vanish(self, pod: NetPod) -> str:
        """The pod deleted from Kubernetes without a DEL (its node's runtime died)."""
        self.kube_delete(pod)
        pod.state = "vanished"
        return f"pod {pod.cluster}/{pod.name} deleted without DEL"

    def enable(self, cluster: str, pk: int) -> str:
        """The admin turns SR-IOV on with its own credential and makes the enrollment
        token."""
        url = f"/api/v1/sriov/clusters/{pk}/"
        config = {
            "enabled": True,
            "external_network": NETWORK,
            "credential": self.sim.token(subject=SUBJECT),
        }
        self.person("put", url, config)
        made = self.person("post", f"{url}agent-token/", {})
        self.enabled[cluster] = (pk, made.data["token"])
        return f"SR-IOV on for {cluster}"

    def token(self, cluster: str, node: str) -> str:
        """The node's token: enrolled, as its installer does, when it has none (yet, or
        since its machine went and a new one took its name)."""
        if (cluster, node) not in self.tokens and cluster in self.enabled:
            enrollment = self.enabled[cluster][1]
            answer = self.agent("POST", f"{AGENT}/enroll/", enrollment, {"node_name": node})
            if answer.status == 201:
                self.tokens[cluster, node] = answer.body["token"]
        return self.tokens.get((cluster, node), "")

    def settle_tick(self) -> None:
        """While the run settles, the plugins still poll their queued ADDs and DELs."""
        for pod in [p for p in self.pods if p.state in ("added", "deleting")]:
            try:
                self.poll(pod) if pod.state == "added" else self.delete(pod)
            except (ChaosError, DatabaseError, InterfaceError):
                connection.close()

    # --- the wire -------------------------------------------------------------------------

    def agent(self, method: str, url: str, token: str, body: dict[str, Any] | None) -> Answer:
        try:
            response = requests.request(
                method,
                f"{self.base}{url}",
                json=body,
                headers={"Authorization": f"Bearer {token}"},
                timeout=15,
            )
        except requests.RequestException as exc:
            raise ChaosError(f"{method} {url}: no answer ({type(exc).__name__})") from exc
        self.judge(method, url, response)
        if response.status_code == 401:  # its node's machine went: enrolled again later
            self.tokens = {k: v for k, v in self.tokens.items() if v != token}
        try:
            parsed = response.json()
        except ValueError:
            parsed = response.text[:200]
        return Answer(response.status_code, parsed)

    def kube_uid(self, cluster: str, name: str) -> str:
        found = self.servers[cluster].call("GET", f"/api/v1/namespaces/{NAMESPACE}/pods/{name}")
        found.raise_for_status()
        return str(found.json()["metadata"]["uid"])

    def kube_delete(self, pod: NetPod) -> None:
        path = f"/api/v1/namespaces/{NAMESPACE}/pods/{pod.name}"
        gone = self.servers[pod.cluster].call("DELETE", path)
        if gone.status_code not in (200, 404):
            gone.raise_for_status()

    # --- the invariants -------------------------------------------------------------------

    def problems(self, clusters: Objects) -> list[str]:
        """What is not as it must be once the run settled (see the module)."""
        alive = {uid for objects in clusters.values() for uid in objects}
        state = self.sim.state()
        nics = state["nics"].values() if isinstance(state["nics"], dict) else state["nics"]
        on_vms = {
            (nic["vm_id"], nic["mac_address"]) for nic in nics if nic["network_id"] == NETWORK_ID
        }
        rows = list(PodNic.objects.select_related("cluster").order_by("pk"))
        found: list[str] = []
        attached = set()
        for row in rows:
            who = f"NIC of pod {row.cluster.name}/{row.namespace}/{row.pod_name}"
            if row.state in (
                PodNic.State.REQUESTED,
                PodNic.State.ATTACHING,
                PodNic.State.DETACHING,
            ):
                found.append(f"{who} still {row.state} ({row.failure or 'no failure said'})")
            elif row.state == PodNic.State.ATTACHED:
                attached.add((row.vm_id, row.mac))
                if row.pod_uid not in alive:
                    found.append(f"{who} attached, its pod gone")
                if (row.vm_id, row.mac) not in on_vms:
                    found.append(f"{who} attached, not on VM {row.vm_id} ({row.mac})")
        for vm_id, mac in sorted(on_vms - attached):
            found.append(f"a NIC on VM {vm_id} ({mac}) in {NETWORK} that no pod's attached NIC is")
        by_uid = {pod.uid: pod for pod in self.pods}
        for row in rows:
            pod = by_uid.get(row.pod_uid)
            released = row.state == PodNic.State.RELEASED and row.pod_uid in alive
            if released and pod is not None and pod.state not in ("deleting", "deleted"):
                found.append(
                    f"NIC of pod {pod.cluster}/{pod.name} released, its pod still there and "
                    "never DELed"
                )
        for pod in self.pods:
            if pod.uid in alive and pod.state in LIVE:
                live = [
                    r for r in rows if r.pod_uid == pod.uid and r.state == PodNic.State.ATTACHED
                ]
                if not live:
                    found.append(f"pod {pod.cluster}/{pod.name} still there without its NIC")
        subjects = {
            call.get("subject")
            for call in self.sim.calls()["calls"]
            if call["operation"] in NIC_OPERATIONS
        }
        if subjects - {SUBJECT}:
            found.append(f"NICs attached or detached as {sorted(subjects - {SUBJECT})}")
        return found

    def census(self) -> str:
        states: dict[str, int] = {}
        for pod in self.pods:
            states[pod.state] = states.get(pod.state, 0) + 1
        return f"NIC pods {dict(sorted(states.items())) or 'none'}"


def _attached(answer: Answer) -> bool:
    return isinstance(answer.body, dict) and answer.body.get("state") == PodNic.State.ATTACHED


def _said(answer: Answer) -> str:
    body = answer.body
    if not isinstance(body, dict):
        return str(answer.status)
    if "state" in body:
        return f"{answer.status} {body['state']}"
    return f"{answer.status} {body.get('code', '')}: {str(body.get('detail', ''))[:120]}"

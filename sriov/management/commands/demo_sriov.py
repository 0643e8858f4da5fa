"""Give the demo cluster SR-IOV: a few pods in its Kubernetes (the fake API server, whose
joiner makes each running VM a node), SR-IOV enabled with a demo credential of its own,
and NICs for those pods asked for through the agent API as the CNI plugin would, with
each node's token enrolled as its installer would.

Only for `make run` (it takes its credential from the simulator's control API). Waits for
the demo machines to run and their nodes to join first; run again, it asks again (ADD is
idempotent).
"""

from __future__ import annotations

import time
from typing import Any

import requests
from django.core.management.base import BaseCommand, CommandError

from capvco_web.audit import SystemActor
from clusters.models import Cluster, Machine
from gpus import naming
from kube.client import kube_client
from kube.observe import cluster_kube_observe
from sriov.models import AgentToken
from sriov.services import sriov_config_set
from sriov.tokens import agent_token_rotate, node_token_revoke

ACTOR = SystemActor.DEMO_SRIOV
LOCATION = "nl-rmd-dc01-001"
NETWORK = "sriov-nl-rmd"  # the demo world's external network there
PODS = [("web-0", "team-a"), ("web-1", "team-a"), ("ingest-0", "team-b")]


class Command(BaseCommand):
    help = "Enable SR-IOV on the demo cluster and give a few pods NICs through the agent API."

    def add_arguments(self, parser: Any) -> None:
        parser.add_argument("--simulator", required=True, help="e.g. http://127.0.0.1:8081")
        parser.add_argument("--kube", required=True, help="e.g. https://127.0.0.1:8082")
        parser.add_argument(
            "--kube-ca",
            default="",
            help="the CA certificate the fake Kubernetes API serves with (its --tls-dir/ca.crt)",
        )
        parser.add_argument("--web", required=True, help="e.g. http://127.0.0.1:8000")
        parser.add_argument("--wait", type=float, default=300, help="seconds to wait for VMs")

    def handle(
        self,
        *args: Any,
        simulator: str,
        kube: str,
        web: str,
        wait: float,
        kube_ca: str = "",
        **options: Any,
    ) -> None:
        self.verify: str | bool = kube_ca or True
        cluster = Cluster.objects.select_related("account").filter(name="demo").first()
        if cluster is None:
            raise CommandError("no demo cluster: run demo_seed first")
        deadline = time.monotonic() + wait
        machines = self._running_machines(cluster, deadline)
        if not cluster.kubeconfig:
            raise CommandError("the demo cluster has no kubeconfig: run demo_seed first")
        root = kube.rstrip("/")
        nodes = [
            self._joined(root, naming.vm_name(cluster.name, m.name), deadline) for m in machines
        ]
        self._pods(root, nodes)
        with kube_client(cluster) as client:
            cluster_kube_observe(client=client, cluster=cluster)
        token = requests.post(
            f"{simulator.rstrip('/')}/_sim/token", json={"subject": "sriov-demo"}, timeout=5
        ).json()["jwt"]
        sriov_config_set(
            cluster=cluster,
            changes={"enabled": True, "external_network": NETWORK, "credential": token},
            actor=ACTOR,
            reason="demo",
        )
        _, enrollment = agent_token_rotate(cluster=cluster, actor=ACTOR, reason="demo")
        agent_url = f"{web.rstrip('/')}/api/v1/sriov/agent"
        node_tokens = {node: self._enroll(agent_url, enrollment, node) for node in nodes}
        for index, (name, namespace) in enumerate(PODS):
            pod = self._pod(kube.rstrip("/"), namespace, name)
            node = nodes[index % len(nodes)]
            nic = self._add(
                agent_url,
                node_tokens[node],
                {
                    "pod_uid": pod["metadata"]["uid"],
                    "namespace": namespace,
                    "pod_name": name,
                    "node_name": node,
                    "container_id": f"demo-{pod['metadata']['uid']}",
                    "ifname": "net1",
                },
            )
            self.stdout.write(
                f"{namespace}/{name} on {node}: {nic['mac']} {nic['address']}/{nic['prefix']}"
            )
        self.stdout.write(self.style.SUCCESS(f"SR-IOV on for 'demo': {len(PODS)} pods have NICs."))

    def _add(self, agent_url: str, token: str, body: dict[str, str]) -> dict[str, Any]:
        """ADD as the CNI plugin makes it: queued (202), the request is polled after each
        Retry-After until a worker attached its NIC (a minute at most)."""
        deadline = time.monotonic() + 60
        headers = {"Authorization": f"Bearer {token}"}
        answer = requests.post(f"{agent_url}/nics/", headers=headers, json=body, timeout=60)
        key = {"container_id": body["container_id"], "ifname": body["ifname"]}
        while answer.status_code == 202 and time.monotonic() < deadline:
            time.sleep(float(answer.headers.get("Retry-After", "1")))
            answer = requests.get(
                f"{agent_url}/nics/{body['pod_uid']}/", headers=headers, params=key, timeout=60
            )
        if answer.status_code != 200 or answer.json().get("state") != "attached":
            raise CommandError(
                f"ADD {body['namespace']}/{body['pod_name']}: {answer.status_code} {answer.text}"
            )
        return dict(answer.json())

    def _enroll(self, agent_url: str, enrollment: str, node: str) -> str:
        """The node's token, as its installer gets it (again after each demo run)."""
        current = AgentToken.objects.filter(cluster__name="demo", node_name=node)
        if current.exists():  # a demo run before: its token was not kept
            node_token_revoke(
                cluster=current[0].cluster, node_name=node, actor=ACTOR, reason="demo again"
            )
        answer = requests.post(
            f"{agent_url}/enroll/",
            headers={"Authorization": f"Bearer {enrollment}"},
            json={"node_name": node},
            timeout=60,
        )
        if answer.status_code != 201:
            raise CommandError(f"enrolling {node}: {answer.status_code} {answer.text}")
        return str(answer.json()["token"])

    def _running_machines(self, cluster: Cluster, deadline: float) -> list[Machine]:
        while True:
            machines = list(
                Machine.objects.filter(
                    pool__cluster=cluster,
                    phase=Machine.Phase.RUNNING,
                    vm_id__isnull=False,
                    pool__site__location__name=LOCATION,
                ).select_related("pool__site__location")
            )
            if machines:
                return machines
            if time.monotonic() > deadline:
                raise CommandError(f"no demo machine in {LOCATION} runs in time")
            time.sleep(3)

    def _joined(self, kube: str, node: str, deadline: float) -> str:
        """Wait until the VM's node joined (the fake API server's joiner makes it)."""
        info = requests.get(f"{kube}/_sim/clusters/demo", timeout=5, verify=self.verify).json()
        while True:
            found = requests.get(
                f"{info['server']}/api/v1/nodes/{node}",
                headers={"Authorization": f"Bearer {info['token']}"},
                timeout=5,
                verify=self.verify,
            )
            if found.status_code == 200:
                return node
            if time.monotonic() > deadline:
                raise CommandError(f"node {node} did not join in time")
            time.sleep(2)

    def _pods(self, kube: str, nodes: list[str]) -> None:
        pods = [
            {
                "apiVersion": "v1",
                "kind": "Pod",
                "metadata": {
                    "name": name,
                    "namespace": namespace,
                    "annotations": {
                        "k8s.v1.cni.cncf.io/networks": "default/capvco-sriov",
                        "capvco.io/sriov-network": NETWORK,
                    },
                },
                "spec": {
                    "nodeName": nodes[index % len(nodes)],
                    "containers": [{"name": "main", "image": "busybox"}],
                },
                "status": {"phase": "Running"},
            }
            for index, (name, namespace) in enumerate(PODS)
        ]
        requests.post(
            f"{kube}/_sim/clusters/demo/objects",
            json={"objects": pods},
            timeout=10,
            verify=self.verify,
        ).raise_for_status()

    def _pod(self, kube: str, namespace: str, name: str) -> dict[str, Any]:
        info = requests.get(f"{kube}/_sim/clusters/demo", timeout=5, verify=self.verify).json()
        found = requests.get(
            f"{info['server']}/api/v1/namespaces/{namespace}/pods/{name}",
            headers={"Authorization": f"Bearer {info['token']}"},
            timeout=5,
            verify=self.verify,
        )
        found.raise_for_status()
        return dict(found.json())

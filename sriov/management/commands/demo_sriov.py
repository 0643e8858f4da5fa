"""Give the demo cluster SR-IOV: a Kubernetes (the fake API server) with a node per running
machine and a few pods, SR-IOV enabled with a demo credential of its own, and NICs for
those pods asked for through the agent API, as the CNI plugin would.

Only for `make run` (it takes its credential from the simulator's control API). Waits for
the demo machines to run first; run again, it asks again (ADD is idempotent).
"""

from __future__ import annotations

import time
from typing import Any

import requests
from django.core.management.base import BaseCommand, CommandError

from clusters.kube import kube_client
from clusters.kube_observe import cluster_kube_observe
from clusters.models import Cluster, Machine
from clusters.nodes import provider_id
from gpus import naming
from sriov.services import sriov_config_set
from sriov.tokens import agent_token_rotate

ACTOR = "demo_sriov"
LOCATION = "nl-rmd-dc01-001"
NETWORK = "sriov-nl-rmd"  # the demo world's external network there
PODS = [("web-0", "team-a"), ("web-1", "team-a"), ("ingest-0", "team-b")]


class Command(BaseCommand):
    help = "Enable SR-IOV on the demo cluster and give a few pods NICs through the agent API."

    def add_arguments(self, parser: Any) -> None:
        parser.add_argument("--simulator", required=True, help="e.g. http://127.0.0.1:8081")
        parser.add_argument("--kube", required=True, help="e.g. http://127.0.0.1:8082")
        parser.add_argument("--web", required=True, help="e.g. http://127.0.0.1:8000")
        parser.add_argument("--wait", type=float, default=300, help="seconds to wait for VMs")

    def handle(
        self, *args: Any, simulator: str, kube: str, web: str, wait: float, **options: Any
    ) -> None:
        cluster = Cluster.objects.select_related("account").filter(name="demo").first()
        if cluster is None:
            raise CommandError("no demo cluster: run demo_seed first")
        machines = self._running_machines(cluster, wait)
        described = self._kube_cluster(kube.rstrip("/"))
        Cluster.objects.filter(pk=cluster.pk).update(kubeconfig=described["yaml"])
        cluster.refresh_from_db()
        self._nodes_and_pods(kube.rstrip("/"), cluster, machines)
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
        _, agent_token = agent_token_rotate(cluster=cluster, actor=ACTOR, reason="demo")
        session = requests.Session()
        session.headers["Authorization"] = f"Bearer {agent_token}"
        for index, (name, namespace) in enumerate(PODS):
            pod = self._pod(kube.rstrip("/"), namespace, name)
            node = naming.vm_name(cluster.name, machines[index % len(machines)].name)
            answer = session.post(
                f"{web.rstrip('/')}/api/v1/sriov/agent/nics/",
                json={
                    "pod_uid": pod["metadata"]["uid"],
                    "namespace": namespace,
                    "pod_name": name,
                    "node_name": node,
                },
                timeout=120,
            )
            if answer.status_code != 200:
                raise CommandError(f"ADD {namespace}/{name}: {answer.status_code} {answer.text}")
            nic = answer.json()
            self.stdout.write(
                f"{namespace}/{name} on {node}: {nic['mac']} {nic['address']}/{nic['prefix']}"
            )
        self.stdout.write(self.style.SUCCESS(f"SR-IOV on for 'demo': {len(PODS)} pods have NICs."))

    def _running_machines(self, cluster: Cluster, wait: float) -> list[Machine]:
        deadline = time.monotonic() + wait
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
                raise CommandError(f"no demo machine in {LOCATION} runs after {wait:.0f} s")
            time.sleep(3)

    def _kube_cluster(self, kube: str) -> dict[str, Any]:
        import yaml

        made = requests.post(f"{kube}/_sim/clusters", json={"name": "demo"}, timeout=5)
        if made.status_code == 409:
            made = requests.get(f"{kube}/_sim/clusters/demo", timeout=5)
        made.raise_for_status()
        found = made.json()
        return {"yaml": yaml.safe_dump(found["kubeconfig"]), **found}

    def _nodes_and_pods(self, kube: str, cluster: Cluster, machines: list[Machine]) -> None:
        nodes: list[dict[str, Any]] = []
        for machine in machines:
            assert machine.vm_id is not None
            name = naming.vm_name(cluster.name, machine.name)
            nodes.append(
                {
                    "apiVersion": "v1",
                    "kind": "Node",
                    "metadata": {"name": name, "labels": {"kubernetes.io/hostname": name}},
                    "spec": {
                        "providerID": provider_id(machine.pool.site.location.name, machine.vm_id)
                    },
                    "status": {"conditions": [{"type": "Ready", "status": "True"}]},
                }
            )
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
                    "nodeName": nodes[index % len(nodes)]["metadata"]["name"],
                    "containers": [{"name": "main", "image": "busybox"}],
                },
                "status": {"phase": "Running"},
            }
            for index, (name, namespace) in enumerate(PODS)
        ]
        requests.post(
            f"{kube}/_sim/clusters/demo/objects", json={"objects": nodes + pods}, timeout=10
        ).raise_for_status()

    def _pod(self, kube: str, namespace: str, name: str) -> dict[str, Any]:
        info = requests.get(f"{kube}/_sim/clusters/demo", timeout=5).json()
        found = requests.get(
            f"{info['server']}/api/v1/namespaces/{namespace}/pods/{name}",
            headers={"Authorization": f"Bearer {info['token']}"},
            timeout=5,
        )
        found.raise_for_status()
        return dict(found.json())

"""Seed the demo: an account on the whitesky simulator, observed at once (its locations,
cards, cloudspaces and images), and a GPU cluster that converges.

Only for the simulator (it takes its token from the simulator's control API). With
`--kube-simulator`, the demo cluster gets the kubeconfig of the fake Kubernetes API's
cluster `demo` (whose joiner turns the cluster's running VMs into nodes) and its GPU
add-on on. Run again, it refreshes the token and the kubeconfig (the fake API server
makes a new one each start) and leaves what exists alone.
"""

from __future__ import annotations

from typing import Any

import requests
import yaml
from django.core.management.base import BaseCommand, CommandError
from django.db import transaction

from capvco_web.audit import SystemActor
from capvco_web.integrations import whitesky as ws
from capvco_web.validators import kube_allowed_servers
from cloud.models import Account, whitesky_allowed_hosts
from cloud.observe import account_locations_observe
from cloud.whitesky import whitesky_client
from clusters.models import Cluster, ClusterSite, MachinePool
from clusters.services import cluster_kubeconfig_set
from clusters.tasks import observe_catalog, observe_location

DEMO_CLUSTER = "demo"


def _ubuntu(images: list[ws.Image]) -> ws.Image | None:
    return next((image for image in images if "ubuntu" in image.name.lower()), None)


# (pool, location index in the account's list, replicas, GPU type)
DEMO_POOLS = [("a100", 0, 2, "NVIDIA A100"), ("t4", 1, 1, "NVIDIA T4")]


class Command(BaseCommand):
    help = "Create the demo account and cluster against the whitesky simulator."

    def add_arguments(self, parser: Any) -> None:
        parser.add_argument("--simulator", required=True, help="e.g. http://127.0.0.1:8081")
        parser.add_argument(
            "--kube-simulator",
            default="",
            help="the fake Kubernetes API serving cluster 'demo', e.g. https://127.0.0.1:8082",
        )
        parser.add_argument(
            "--kube-simulator-ca",
            default="",
            help="the CA certificate the fake Kubernetes API serves with (its --tls-dir/ca.crt)",
        )

    def handle(
        self,
        *args: Any,
        simulator: str,
        kube_simulator: str = "",
        kube_simulator_ca: str = "",
        **options: Any,
    ) -> None:
        kube_root = kube_simulator.rstrip("/")
        if kube_root and (refusal := kube_allowed_servers().refusal(kube_root)):
            raise CommandError(
                f"the Kubernetes simulator at {kube_root} is not an allowed API server "
                f"({refusal}); add {kube_root} to KUBE_ALLOWED_HOSTS (make run does)"
            )
        self._whitesky(simulator)
        if kube_root:
            self._kubernetes(kube_root, kube_simulator_ca or True)

    def _kubernetes(self, root: str, verify: str | bool) -> None:
        try:
            found = requests.get(f"{root}/_sim/clusters/{DEMO_CLUSTER}", timeout=5, verify=verify)
            found.raise_for_status()
        except requests.RequestException as exc:
            raise CommandError(
                f"the Kubernetes simulator at {root} does not serve cluster {DEMO_CLUSTER}: {exc}"
            ) from exc
        kubeconfig = yaml.safe_dump(found.json()["kubeconfig"])
        cluster = Cluster.objects.get(name=DEMO_CLUSTER, account__name="demo")
        if cluster.kubeconfig != kubeconfig.strip():
            cluster_kubeconfig_set(
                cluster=cluster,
                kubeconfig=kubeconfig,
                actor=SystemActor.DEMO_SEED,
                reason="the demo's Kubernetes simulator",
            )
        self.stdout.write(f"Demo cluster '{DEMO_CLUSTER}': Kubernetes at {found.json()['server']}.")

    def _whitesky(self, simulator: str) -> None:
        root = simulator.rstrip("/")
        if refusal := whitesky_allowed_hosts().refusal(root):
            raise CommandError(
                f"the simulator at {root} is not an allowed whitesky host ({refusal}); "
                f"add {root} to WHITESKY_ALLOWED_HOSTS (make run does)"
            )
        try:
            token = requests.get(f"{root}/_sim/token", timeout=5)
            token.raise_for_status()
        except requests.RequestException as exc:
            raise CommandError(f"the simulator at {root} does not answer: {exc}") from exc
        issued = token.json()
        account, _ = Account.objects.update_or_create(
            name="demo",
            defaults={
                "api_url": f"{root}/api/1",
                "iam_url": root,
                "customer_id": issued["customer_id"],
                "credential": issued["jwt"],
            },
        )
        with whitesky_client(account) as client:
            locations = sorted(
                account_locations_observe(client=client, account=account), key=lambda loc: loc.name
            )[::-1]
            cloudspaces = {cs.location: cs for cs in client.list_cloudspaces()}
            images = {
                loc.name: next(
                    (
                        i
                        for i in client.list_images(location=loc.name)
                        if "ubuntu" in i.name.lower()
                    ),
                    None,
                )
                for loc in locations
            }
        # Its catalog (cloudspaces, images) and each location's cards now, not at the next
        # beat tick (the catalog's is minutes away): a new cluster can be set up at once.
        observe_catalog(account.pk)
        for location in locations:
            observe_location(location.pk)
        if Cluster.objects.filter(name=DEMO_CLUSTER, account=account).exists():
            self.stdout.write("The demo cluster exists already.")
            return
        with transaction.atomic():
            # The GPU add-on on: once the device plugin runs, the nodes advertise their GPUs.
            cluster = Cluster.objects.create(name=DEMO_CLUSTER, account=account, gpu_addon=True)
            for pool_name, index, replicas, gpu_type in DEMO_POOLS:
                location = locations[index]
                image = images[location.name]
                if location.name not in cloudspaces or image is None:
                    raise CommandError(f"{location.name} has no cloudspace or Ubuntu image")
                site, _ = ClusterSite.objects.get_or_create(
                    cluster=cluster,
                    location=location,
                    defaults={
                        "cloudspace_id": cloudspaces[location.name].cloudspace_id,
                        "image_id": image.image_id,
                    },
                )
                MachinePool.objects.create(
                    cluster=cluster,
                    site=site,
                    name=pool_name,
                    replicas=replicas,
                    gpu_type=gpu_type,
                    gpu_count=1,
                )
        self.stdout.write(
            self.style.SUCCESS(
                "Demo cluster 'demo': 2 x NVIDIA A100 machines in "
                f"{locations[0].name}, 1 x NVIDIA T4 machine in {locations[1].name}."
            )
        )

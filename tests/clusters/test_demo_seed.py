"""`make run`'s demo: seeded against the simulator, which must be an allowed host."""

from __future__ import annotations

from typing import Any

import pytest
from django.core.management import CommandError, call_command

from capvco_web.models import AuditEvent
from cloud.models import Account, Cloudspace, Image
from clusters.models import Cluster
from gpus.models import GpuProfile
from tests.http_stub import HttpStub, Reply
from tests.kube_sim import KubeSimulator
from tests.whitesky_sim import WhiteskySimulator

pytestmark = pytest.mark.django_db


def test_demo_is_seeded_against_the_allowed_simulator(whitesky_sim: WhiteskySimulator) -> None:
    call_command("demo_seed", simulator=whitesky_sim.base_url)
    assert Account.objects.get(name="demo").api_url == whitesky_sim.api_url
    assert Cluster.objects.get(name="demo").pools.count() == 2


def test_the_demo_account_is_observed_at_once_so_a_cluster_can_be_set_up(
    whitesky_sim: WhiteskySimulator,
) -> None:
    call_command("demo_seed", simulator=whitesky_sim.base_url)

    account = Account.objects.get(name="demo")
    for location in account.locations.all():
        # What the new-cluster form offers, without waiting for the catalog's beat.
        assert Cloudspace.objects.filter(location=location).exists(), location.name
        assert Image.objects.filter(location=location).exists(), location.name
        assert GpuProfile.objects.filter(location=location).exists(), location.name
        assert location.last_complete_observation_at is not None


def test_demo_against_a_simulator_not_allowed_says_so_and_asks_it_nothing(
    http_stub: Any,
) -> None:
    elsewhere: HttpStub = http_stub(Reply(200, b'{"jwt": "a.b.c", "customer_id": "c"}'))
    with pytest.raises(CommandError, match=r"add .* to WHITESKY_ALLOWED_HOSTS"):
        call_command("demo_seed", simulator=elsewhere.origin)
    assert elsewhere.received == []
    assert not Account.objects.exists()


def test_demo_against_a_kubernetes_simulator_not_allowed_says_so_and_asks_nothing(
    http_stub: Any, whitesky_sim: WhiteskySimulator
) -> None:
    elsewhere: HttpStub = http_stub(Reply(200, b"{}"))
    with pytest.raises(CommandError, match=r"add .* to KUBE_ALLOWED_HOSTS"):
        call_command("demo_seed", simulator=whitesky_sim.base_url, kube_simulator=elsewhere.origin)
    assert elsewhere.received == []
    assert not Account.objects.exists()


def test_the_demo_cluster_gets_the_kubernetes_simulators_kubeconfig_and_the_gpu_addon(
    whitesky_sim: WhiteskySimulator, kube_sim: KubeSimulator
) -> None:
    served = kube_sim.cluster("demo")

    call_command(
        "demo_seed",
        simulator=whitesky_sim.base_url,
        kube_simulator=kube_sim.base_url,
        kube_simulator_ca=kube_sim.ca_file,
    )
    call_command(
        "demo_seed",
        simulator=whitesky_sim.base_url,
        kube_simulator=kube_sim.base_url,
        kube_simulator_ca=kube_sim.ca_file,
    )

    cluster = Cluster.objects.get(name="demo")
    assert cluster.gpu_addon
    assert served.token in cluster.kubeconfig
    assert AuditEvent.objects.filter(action="cluster.kubeconfig_set").count() == 1


def test_a_kubernetes_simulator_without_the_demo_cluster_is_refused_by_name(
    whitesky_sim: WhiteskySimulator, kube_sim: KubeSimulator
) -> None:
    with pytest.raises(CommandError, match="does not serve cluster demo"):
        call_command(
            "demo_seed",
            simulator=whitesky_sim.base_url,
            kube_simulator=kube_sim.base_url,
            kube_simulator_ca=kube_sim.ca_file,
        )

"""A location's page: each physical card with its instances, which vGPU sits on which
machine, VM and pod, and the orphan sweep's plan for it (read only); linked from the
overview. And the pending GPU pods list, linked from the cluster page's figure."""

from __future__ import annotations

import re
from html import unescape

import pytest
from django.test import Client

from capvco_web.models import AuditEvent
from cloud.models import Account
from clusters.releases import location_plan
from gpus.models import VgpuReservation
from kube.models import KubePod
from tests.dashboard.conftest import Kube, World
from tests.factories import KubePodFactory, LocationFactory, MembershipFactory

pytestmark = pytest.mark.django_db


def _section(html: str, element_id: str, end: str = "</table>") -> str:
    start = html.index(f'id="{element_id}"')
    return html[start : html.index(end, start)]


def test_the_location_page_maps_each_card_to_its_vgpus_machines_vms_and_pods(
    admin_client: Client, world: World, kube: Kube
) -> None:
    html = unescape(admin_client.get(f"/locations/{world.fresh.pk}/").content.decode())

    card = _section(html, "card-card-a100")
    assert "NVIDIA A100" in card
    # 5 free as listed, and 4 held: two attached to the machines, two orphans.
    assert '9 instances: 4 held, <span class="free">5 free</span>' in card
    gpu_0, gpu_1 = world.machines
    first = _section(html, f"vgpu-{world.attached[0].pk}", "</tr>")
    assert f"prod/{gpu_0.name}" in first and gpu_0.vm_name in first
    assert kube.advertising.name in first and "ml/train-0" in first
    second = _section(html, f"vgpu-{world.attached[1].pk}", "</tr>")
    assert f"prod/{gpu_1.name}" in second and "ml/train-0" not in second
    orphan = _section(html, f"vgpu-{world.orphan.pk}", "</tr>")
    assert "orphaned" in orphan and "none" in orphan  # no machine, no VM
    assert f"vgpu-{world.released.pk}" not in html  # history holds no instance
    assert "card-card-t4" not in html  # the other location's card


def test_a_cards_heading_names_its_model_and_pci_address_once(
    admin_client: Client, world: World
) -> None:
    # As the mirror keeps a card: the model as listed, PCI address included, and the
    # address read from it.
    world.a100.pci_address = "0000:3b:00.0"
    world.a100.save(update_fields=["pci_address"])

    html = unescape(admin_client.get(f"/locations/{world.fresh.pk}/").content.decode())

    card = _section(html, "card-card-a100", "</h3>")
    heading = " ".join(re.sub(r"<[^>]+>", " ", card[card.index("<h3>") :]).split())
    assert heading == "NVIDIA A100 · 0000:3b:00.0 · card card-a100"


def test_the_location_page_shows_the_sweep_plan_and_carries_out_nothing(
    admin_client: Client, world: World
) -> None:
    Account.objects.filter(pk=world.fresh.account_id).update(orphan_auto_release=True)
    steps = location_plan(world.fresh).steps
    assert [step.target for step in steps] == [world.orphan.name]
    events = AuditEvent.objects.count()

    html = unescape(admin_client.get(f"/locations/{world.fresh.pk}/").content.decode())

    plan = _section(html, "location-plan")
    assert "the next orphan sweep takes 1 step" in plan
    assert world.orphan.name in plan and "release_vgpu" in plan
    assert all(str(call) in plan for call in steps[0].calls())
    world.orphan.refresh_from_db()
    assert world.orphan.state == VgpuReservation.State.RESERVED
    assert AuditEvent.objects.count() == events


def test_the_overview_links_each_location_to_its_page(admin_client: Client, world: World) -> None:
    html = admin_client.get("/").content.decode()
    for location in (world.fresh, world.stale):
        assert f'href="/locations/{location.pk}/"' in html


def test_a_location_of_another_account_is_not_found(world: World, client: Client) -> None:
    theirs = LocationFactory(name="elsewhere")
    client.force_login(MembershipFactory(account=world.fresh.account, role="viewer").user)
    assert client.get(f"/locations/{theirs.pk}/").status_code == 404
    assert client.get(f"/locations/{world.fresh.pk}/").status_code == 200


def test_the_unscheduled_figure_links_to_the_pending_pods_with_why(
    admin_client: Client, world: World, kube: Kube
) -> None:
    KubePodFactory(
        cluster=world.cluster,
        namespace="ml",
        name="train-big",
        node_name="",
        phase=KubePod.Phase.PENDING,
        gpu_requests=2,
        gpu_type="nvidia-a100",
    )
    KubePodFactory(
        cluster=world.cluster,
        namespace="ml",
        name="train-h100",
        node_name="",
        phase=KubePod.Phase.PENDING,
        gpu_requests=1,
        gpu_type="nvidia-h100",
    )
    page = admin_client.get(f"/clusters/{world.cluster.pk}/").content.decode()
    link = f'href="/pods/pending/?cluster={world.cluster.pk}"'
    assert link in page and "3 by pods not scheduled yet" in page

    html = unescape(admin_client.get(f"/pods/pending/?cluster={world.cluster.pk}").content.decode())
    big = _section(html, f"pod-{KubePod.objects.get(name='train-big').pk}", "</tr>")
    assert "all GPU type nvidia-a100 requested" in big
    h100 = _section(html, f"pod-{KubePod.objects.get(name='train-h100').pk}", "</tr>")
    assert "no Ready node with GPU type nvidia-h100" in h100
    assert "train-0" not in html  # scheduled


@pytest.mark.parametrize(
    ("query", "named"), [("?clustr=1", "clustr"), ("?cluster=nope", "cluster")]
)
def test_the_pending_pods_list_refuses_what_it_does_not_know(
    admin_client: Client, world: World, query: str, named: str
) -> None:
    response = admin_client.get(f"/pods/pending/{query}")
    assert response.status_code == 400
    assert f"{named}: " in response.content.decode()

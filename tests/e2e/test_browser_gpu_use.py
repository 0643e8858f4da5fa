"""GPU use on a cluster's page in a real browser: the recorded H200 node's exporter read
through the fake API's pod proxy, its GPU "requested but unused" after two hours of 0-3 %,
then in use; the page's figures the same as the API's and its CSV's
(`/api/v1/clusters/<id>/gpu-use/`), all from one function (kube.gpu_use.gpu_use). And on a
location's page: the GPUs of the nodes whose machines are there, the same as its API's and
CSV's (`/api/v1/locations/<id>/gpu-use/`, kube.gpu_use.location_gpu_use), the locations of
a cluster adding up to its row of the overview."""

from __future__ import annotations

import csv
import io
from decimal import Decimal
from typing import Any

import pytest
from django.contrib.auth.models import User
from django.test import Client, override_settings
from django.utils import timezone
from playwright.sync_api import Page, expect
from prometheus_client.parser import text_string_to_metric_families
from rest_framework.test import APIClient

from cloud.models import Location
from clusters.models import Cluster
from tests.clusters.conftest import pool, site
from tests.e2e.test_browser_orphans import log_in
from tests.e2e.test_dashboard_browser import PASSWORD
from tests.kube.test_gpu_use import GPU_0, STEP, read, recorded, spanning
from tests.kube_sim import KubeSimulator

__all__ = ["pool", "recorded", "site", "spanning"]  # the fixtures
pytestmark = pytest.mark.usefixtures("django_allow_async_unsafe", "screenshot_on_failure")


def api_figures(cluster: Cluster) -> tuple[dict[str, Any], list[dict[str, str]]]:
    api = APIClient()
    api.force_authenticate(User.objects.get(username="admin"))
    url = f"/api/v1/clusters/{cluster.pk}/gpu-use/"
    answer = api.get(url).json()
    rows = list(csv.DictReader(io.StringIO(api.get(url, {"format": "csv"}).content.decode())))
    return answer, rows


def test_a_gpu_held_at_0_percent_for_hours_is_requested_but_unused_as_the_api_says(
    page: Page,
    live_server: Any,
    transactional_db: None,
    recorded: Cluster,
    kube_sim: KubeSimulator,
    picture: Any,
) -> None:
    User.objects.create_superuser("admin", password=PASSWORD)
    start = timezone.now() - 9 * STEP
    for n in range(9):  # the recording's idle lines: 3 %, then 0 % for 2 h
        read(recorded, start + n * STEP)
    answer, rows = api_figures(recorded)
    log_in(page, live_server)
    page.goto(f"{live_server.url}/clusters/{recorded.pk}/")

    gpu = page.locator(f'#gpu-use-gpus tr[data-gpu="{GPU_0}/0"]')
    expect(gpu.locator(".status")).to_have_text("requested but unused")
    (row,) = answer["results"]
    assert row["status"] == rows[0]["status"] == "requested but unused"
    expect(gpu.locator(".mean")).to_have_text(f"{row['mean_utilisation_percent']} %")
    assert rows[0]["mean_utilisation_percent"] == row["mean_utilisation_percent"] == "0.3"
    expect(page.locator("#gpu-use-efficiency")).to_have_text(f"{answer['efficiency_percent']} %")
    expect(page.locator("#gpu-use-unused")).to_have_text("1 requested but unused")
    picture("gpu-use", page.locator("#gpu-use"))
    expect(page.locator('#gpu-use-groups tr[data-namespace="ml"] td.num').last).to_have_text(
        f"{answer['namespaces'][0]['efficiency_percent']} %"
    )
    # gpu-1's exporter does not answer: unknown, said so, not 0 %.
    expect(page.locator("#gpu-use-error")).to_contain_text("connection refused")

    overview_and_metrics_agree(page, live_server, recorded, answer, unused=1, in_use=0)

    read(recorded, start + 9 * STEP)  # the first busy line: 100 %
    page.goto(f"{live_server.url}/clusters/{recorded.pk}/")
    expect(gpu.locator(".status")).to_have_text("in use")
    expect(gpu.locator(".use")).to_have_text("100 %")
    answer, rows = api_figures(recorded)
    assert answer["efficiency_percent"] == rows[0]["mean_utilisation_percent"] == "10.3"
    expect(page.locator("#gpu-use-efficiency")).to_have_text("10.3 %")
    overview_and_metrics_agree(page, live_server, recorded, answer, unused=0, in_use=1)


def overview_and_metrics_agree(
    page: Page,
    live_server: Any,
    cluster: Cluster,
    answer: dict[str, Any],
    *,
    unused: int,
    in_use: int,
) -> None:
    """The overview's row of the cluster and /metrics give the API's figures."""
    page.goto(f"{live_server.url}/")
    row = page.locator(f"#gpu-use-{cluster.pk}")
    expect(row.locator(".efficiency")).to_have_text(f"{answer['efficiency_percent']} %")
    expect(row.locator(".unused")).to_have_text(str(unused))
    expect(row.locator(".in-use")).to_have_text(str(in_use))
    assert sum(gpu["status"] == "requested but unused" for gpu in answer["results"]) == unused
    with override_settings(METRICS_TOKEN="scrape"):
        text = Client(HTTP_AUTHORIZATION="Bearer scrape").get("/metrics").content.decode()
    samples = {
        (family.name, sample.labels.get("use", "")): sample.value
        for family in text_string_to_metric_families(text)
        for sample in family.samples
        if sample.labels.get("cluster") == cluster.name
    }
    assert samples[("capvco_gpus_by_use", "unused")] == unused
    assert samples[("capvco_gpus_by_use", "in_use")] == in_use
    efficiency = Decimal(answer["efficiency_percent"]) / 100
    assert Decimal(str(samples[("capvco_gpu_use_efficiency_ratio", "")])) == efficiency


def test_a_cluster_without_the_exporter_says_no_gpu_use_data_not_0_percent(
    page: Page, live_server: Any, transactional_db: None, recorded: Cluster, kube_sim: KubeSimulator
) -> None:
    User.objects.create_superuser("admin", password=PASSWORD)
    log_in(page, live_server)
    page.goto(f"{live_server.url}/clusters/{recorded.pk}/")
    expect(page.locator("#gpu-use-none")).to_have_text("No GPU use data: not read yet.")
    answer, _ = api_figures(recorded)
    assert (answer["has_data"], answer["efficiency_percent"]) == (False, None)


def test_a_locations_page_shows_the_gpu_use_of_the_nodes_whose_machines_are_there(
    page: Page,
    live_server: Any,
    transactional_db: None,
    spanning: Cluster,
    kube_sim: KubeSimulator,
    picture: Any,
) -> None:
    admin = User.objects.create_superuser("admin", password=PASSWORD)
    now = timezone.now()
    for n in range(3):  # gpu-0 (nl-1) at 3, 0, 0 %; remote-0 (de-1) at 40 % and idle
        read(spanning, now - (2 - n) * STEP)
    api = APIClient()
    api.force_authenticate(admin)
    log_in(page, live_server)
    totals = {"in_use": 0, "requested_but_unused": 0, "idle": 0}
    for name, figures in (
        ("nl-1", ("1.0 %", "1 in use", "0 requested but unused", "0 idle")),
        ("de-1", ("40.0 %", "1 in use", "0 requested but unused", "1 idle")),
    ):
        location = Location.objects.get(name=name)
        url = f"/api/v1/locations/{location.pk}/gpu-use/"
        answer = api.get(url).json()
        rows = list(csv.DictReader(io.StringIO(api.get(url, {"format": "csv"}).content.decode())))
        page.goto(f"{live_server.url}/locations/{location.pk}/")

        shown = tuple(
            page.locator(f"#gpu-use-{part}").inner_text()
            for part in ("efficiency", "in-use", "unused", "idle")
        )
        assert shown == figures
        assert shown == (
            f"{answer['efficiency_percent']} %", f"{answer['in_use']} in use",
            f"{answer['requested_but_unused']} requested but unused", f"{answer['idle']} idle",
        )  # fmt: skip
        (part,) = answer["results"]
        row = page.locator(f'#gpu-use-clusters tr[data-cluster="{spanning.pk}"]')
        cells = [
            row.locator(f".{c}").inner_text() for c in ("efficiency", "in-use", "unused", "idle")
        ]
        assert cells == [f"{part['efficiency_percent']} %", *(
            str(part[k]) for k in ("in_use", "requested_but_unused", "idle")
        )]  # fmt: skip
        assert rows == [{k: "" if v is None else str(v) for k, v in part.items()}]
        expect(page.locator("#gpu-use-csv")).to_have_attribute("href", f"{url}?format=csv")
        if name == "de-1":
            picture("location-gpu-use", page.locator("#gpu-use"))
        for key in totals:
            totals[key] += answer[key]

    # A cluster spans locations: its row of the overview adds them up.
    page.goto(f"{live_server.url}/")
    overview = page.locator(f"#gpu-use-{spanning.pk}")
    expect(overview.locator(".in-use")).to_have_text(str(totals["in_use"]))
    expect(overview.locator(".unused")).to_have_text(str(totals["requested_but_unused"]))
    expect(overview.locator(".idle")).to_have_text(str(totals["idle"]))
    expect(overview.locator(".efficiency")).to_have_text("20.5 %")  # (3 + 0 + 0 + 3 * 40) / 6

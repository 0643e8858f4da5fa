"""`/metrics`: what an operator's Prometheus reads, who may read it, and what a scrape costs."""

from __future__ import annotations

import shutil
import subprocess
import sys
from collections import Counter
from datetime import timedelta
from pathlib import Path
from typing import Any

import pytest
from django.conf import settings
from django.db import connection
from django.test import Client
from django.test.utils import CaptureQueriesContext
from django.utils import timezone
from prometheus_client.parser import text_string_to_metric_families

from capvco_web.counters import FileCounters
from cloud.models import Location
from clusters.models import Machine
from gpus.models import HOURS_PER_MONTH, GpuProfile, VgpuReservation
from tests.factories import (
    AccountFactory,
    GpuProfileFactory,
    LocationFactory,
    VgpuReservationFactory,
)
from tests.gpus.conftest import NL, Plane

State = VgpuReservation.State


Samples = dict[tuple[str, tuple[tuple[str, str], ...]], float]


def scraped(client: Client, **headers: str) -> Samples:
    response = client.get("/metrics", **headers)
    assert response.status_code == 200, response.content
    return {
        (sample.name, tuple(sorted(sample.labels.items()))): sample.value
        for family in text_string_to_metric_families(response.content.decode())
        for sample in family.samples
    }


def value(
    samples: dict[tuple[str, tuple[tuple[str, str], ...]], float], name: str, **labels: str
) -> float:
    return samples[(name, tuple(sorted(labels.items())))]


@pytest.fixture
def allowed(settings: Any) -> None:
    settings.METRICS_ALLOWED_IPS = ["127.0.0.1"]  # the test client's address


def test_nobody_scrapes_without_the_token_or_an_allowed_address(settings: Any, db: None) -> None:
    settings.METRICS_TOKEN = "s3cret-scrape-token"
    settings.METRICS_ALLOWED_IPS = []
    client = Client()
    refused = client.get("/metrics")
    assert refused.status_code == 401
    assert refused["WWW-Authenticate"].startswith("Bearer")
    assert b"capvco_" not in refused.content
    assert client.get("/metrics", HTTP_AUTHORIZATION="Bearer wrong").status_code == 401
    assert (
        client.get("/metrics", HTTP_AUTHORIZATION="Bearer s3cret-scrape-token").status_code == 200
    )
    settings.METRICS_TOKEN = ""  # no token set: an empty bearer is no key
    assert client.get("/metrics", HTTP_AUTHORIZATION="Bearer ").status_code == 401
    settings.METRICS_ALLOWED_IPS = ["127.0.0.1"]
    assert client.get("/metrics").status_code == 200


@pytest.mark.usefixtures("allowed")
def test_capacity_leaks_and_machines_as_an_operator_reads_them(plane: Plane) -> None:
    before = scraped(Client())
    cluster = plane.cluster()
    plane.pool(cluster, "a100", gpu_type="NVIDIA A100", gpu_count=1, replicas=2)
    plane.converge(cluster)
    location = plane.location(NL)
    # A leak: a reservation nobody owns, billed and attached to no VM, flagged an orphan.
    card = GpuProfile.objects.filter(location=location, model__startswith="A100").first()
    assert card is not None
    VgpuReservationFactory(
        machine=None, location=location, name="leftover", gpu_id=card.profile_id,
        vgpu_id="v-leak", state=State.RESERVED, orphaned_since=timezone.now() - timedelta(hours=2),
    )  # fmt: skip

    samples = scraped(Client())

    here = {"account": str(location.account_id), "location": NL}
    a100 = {**here, "gpu_type": "NVIDIA A100"}
    assert value(samples, "capvco_gpu_instances", **a100, state="attached") == 2
    assert value(samples, "capvco_gpu_instances", **a100, state="reserved") == 1
    free = sum(
        c.available_instances
        for c in GpuProfile.objects.filter(location=location, model__startswith="A100")
    )
    assert value(samples, "capvco_gpu_instances", **a100, state="free") == free
    price = Location.objects.get(pk=location.pk).vgu_price
    assert price > 0
    per_hour = float(price / HOURS_PER_MONTH)
    for kind in ("unassigned", "orphaned"):
        assert value(samples, f"capvco_reservations_{kind}", **here) == 1
        cost = value(
            samples, f"capvco_reservations_{kind}_cost_per_hour", **here,
            currency=location.currency,
        )  # fmt: skip
        assert cost == pytest.approx(per_hour)
    account = here["account"]
    assert value(samples, "capvco_machines", account=account, phase="running") == 2
    assert value(samples, "capvco_machines", account=account, phase="failed") == 0
    age = value(samples, "capvco_observation_age_seconds", **here)
    assert 0 <= age < 60

    # Counted by the calls and steps made since the first scrape, through the store every
    # process shares (the counters of the whole test run are in it too: compared as a rise).
    def rise(name: str, **labels: str) -> float:
        key = (name, tuple(sorted(labels.items())))
        return samples[key] - before.get(key, 0)

    calls = {"name": "capvco_whitesky_calls_total", "account": account, "status": "200"}
    assert rise(**calls, operation="listCustomerVGPUS") >= 2
    assert rise(**calls, operation="createVirtualMachine") == 2
    assert rise("capvco_reconcile_steps_total", action="provision", outcome="applied") == 2


@pytest.mark.usefixtures("allowed")
def test_a_scrape_costs_the_same_queries_at_10_and_at_2000_reservations(plane: Plane) -> None:
    plane.observe()
    location = plane.location(NL)
    card = GpuProfile.objects.filter(location=location).first()
    assert card is not None

    def reservations(n: int) -> None:
        VgpuReservation.objects.bulk_create(
            VgpuReservation(
                location=location,
                name=f"r-{location.pk}-{i}",
                gpu_id=card.profile_id,
                vgpu_id=f"v-{i}",
                state=State.RESERVED,
            )
            for i in range(VgpuReservation.objects.count(), n)
        )

    def queries() -> int:
        with CaptureQueriesContext(connection) as captured:
            scraped(Client())
        return len(captured.captured_queries)

    reservations(10)
    small = queries()
    reservations(2000)
    assert queries() == small
    # One of them: the clusters' Kubernetes observations; one the accounts whose machines are
    # counted, one the orphan VMs, one the GPU nodes by verdict, one the GPU use as each
    # cluster's last read left it; most of the rest the money
    # (billing.metrics: each month read asks once, in its snapshot, where the summed days
    # end, and reads the ledger's leaks); three the pool autoscaler's (the oldest waiting GPU
    # pod, the shortfalls, the paid idle GPU-hours).
    assert small <= 37


def test_counts_from_several_processes_add_up_in_the_file_store(tmp_path: Path) -> None:
    """The embedded default (no Redis): web and worker processes count into one file."""
    count = (
        "import sys; from pathlib import Path; from capvco_web.counters import FileCounters; "
        "store = FileCounters(Path(sys.argv[1])); "
        "[store.add('calls', ('op', '200')) for _ in range(300)]"
    )
    processes = [
        subprocess.Popen([sys.executable, "-c", count, str(tmp_path)], cwd=settings.BASE_DIR)
        for _ in range(3)
    ]
    assert [p.wait(60) for p in processes] == [0, 0, 0]
    assert FileCounters(tmp_path).read("calls") == {("op", "200"): 900}


def test_the_file_store_keeps_the_last_stamp_of_a_key_beside_the_counts(tmp_path: Path) -> None:
    store = FileCounters(tmp_path)
    store.add("calls", ("op", "200"))
    store.stamp("calls", "7:answered", "1.5")
    store.stamp("calls", "7:answered", "2.5")
    assert store.stamps("calls") == {"7:answered": "2.5"}
    assert store.read("calls") == {("op", "200"): 1}


@pytest.mark.usefixtures("allowed")
def test_machines_of_every_phase_are_shown_even_when_none(db: None) -> None:
    account = str(AccountFactory().pk)
    samples = scraped(Client())
    shown = {
        p: value(samples, "capvco_machines", account=account, phase=p) for p in Machine.Phase.values
    }
    assert shown == {p: 0 for p in Machine.Phase.values}


def promtool() -> str:
    found = shutil.which("promtool")
    if found is None:
        pytest.fail("promtool is missing: bin/test installs Debian's prometheus package")
    return found


def series_checked(client: Client) -> Counter[tuple[str, tuple[tuple[str, str], ...]]]:
    """Each series of a scrape with how often it stands in the answer, once `promtool check
    metrics` found the answer valid and no series there twice (promtool 2.42 does not look
    for duplicate series, so they are counted from the parsed answer)."""
    text = client.get("/metrics").content.decode()
    checked = subprocess.run(
        [promtool(), "check", "metrics"], input=text, capture_output=True, text=True, timeout=30
    )
    series = Counter(
        (sample.name, tuple(sorted(sample.labels.items())))
        for family in text_string_to_metric_families(text)
        for sample in family.samples
    )
    assert checked.returncode == 0, checked.stdout + checked.stderr
    assert [key for key, n in series.items() if n > 1] == []
    return series


@pytest.mark.usefixtures("allowed")
def test_two_accounts_with_the_same_location_names_give_separate_series(db: None) -> None:
    """Each per-location series names its account (by id, which a rename leaves alone):
    two accounts' `nl-1` are two series each, and neither account's GPUs are added to the
    other's. `promtool check metrics` finds the answer valid; promtool 2.42 does not look
    for duplicate series, so they are counted from the parsed answer."""
    accounts = [AccountFactory(name="acme"), AccountFactory(name="globex")]
    for account, free, reserved in zip(accounts, (3, 5), (1, 2), strict=True):
        location = LocationFactory(account=account, name="nl-1")
        card = GpuProfileFactory(location=location, available_instances=free, model="A100")
        for _ in range(reserved):
            VgpuReservationFactory(
                orphaned=True, location=location, gpu_id=card.profile_id, vm_id=None
            )

    series_checked(Client())
    samples = scraped(Client())
    for account, free, reserved in zip(accounts, (3, 5), (1, 2), strict=True):
        here = {"account": str(account.pk), "location": "nl-1"}
        a100 = {**here, "gpu_type": "NVIDIA A100"}
        assert value(samples, "capvco_gpu_instances", **a100, state="free") == free
        assert value(samples, "capvco_gpu_instances", **a100, state="reserved") == reserved
        assert value(samples, "capvco_reservations_orphaned", **here) == reserved
        assert value(samples, "capvco_reservations_unassigned", **here) == reserved
        assert value(samples, "capvco_observation_age_seconds", **here) >= 0
        info = {"account": str(account.pk), "account_name": account.name}
        assert value(samples, "capvco_account_info", **info) == 1

"""One account whose whitesky answers every call after 25 s holds no other account back:
a real Celery worker with beat, at `make run`'s concurrency, each account on a simulator
of its own over HTTP."""

from __future__ import annotations

import json
import time
from collections.abc import Callable
from datetime import datetime
from pathlib import Path

import pytest

from cloud.models import Account, Location
from cloud.observe import account_locations_observe
from cloud.whitesky import whitesky_client
from clusters.models import Cluster, ClusterSite, Machine, MachinePool
from clusters.observe import location_observe
from tests.e2e.processes import broker_flush, celery_worker
from tests.whitesky_sim import WhiteskySimulator

pytestmark = [pytest.mark.e2e, pytest.mark.django_db(transaction=True)]
NL = "nl-rmd-dc01-001"
DEMO_WORLD = Path(__file__).resolve().parents[2] / "simulator/whitesky/worlds/demo.json"
SLOW_ANSWER_MS = 25_000
# `make run`'s worker (bin/run): two prefork processes.
MAKE_RUN_WORKER = ("--pool", "prefork", "--concurrency", "2")
FAST = {
    "OBSERVE_INTERVAL_SECONDS": "1",
    "RECONCILE_INTERVAL_SECONDS": "1",
    "ORPHAN_SWEEP_INTERVAL_SECONDS": "1",
}
# Well below one slow answer: the healthy account is served while the slow one still
# waits for its first.
HEALTHY_WITHIN = 15.0


def wait_for(condition: Callable[[], bool], what: str, log: Path, seconds: float) -> float:
    """Seconds until `condition` held."""
    started = time.monotonic()
    while time.monotonic() - started < seconds:
        if condition():
            return time.monotonic() - started
        time.sleep(0.2)
    pytest.fail(f"timed out waiting for {what}; worker log:\n{log.read_text()[-6000:]}")


def account_observed(name: str, sim: WhiteskySimulator) -> Account:
    """An account with every location observed whole, before its whitesky slows down."""
    account = Account.objects.create(
        name=name, api_url=sim.api_url, iam_url=sim.iam_url,
        customer_id=sim.customer_id, credential=sim.token(),
    )  # fmt: skip
    with whitesky_client(account) as client:
        for location in account_locations_observe(client=client, account=account):
            location_observe(client=client, location=location)
    return account


def gpu_cluster(account: Account) -> Cluster:
    """A cluster of the account that wants one GPU machine."""
    cluster = Cluster.objects.create(name=account.name, account=account)
    site = ClusterSite.objects.create(
        cluster=cluster, location=Location.objects.get(account=account, name=NL),
        cloudspace_id="cs-demo-nl", image_id=11,
    )  # fmt: skip
    MachinePool.objects.create(
        cluster=cluster, site=site, name="gpu", replicas=1, gpu_type="NVIDIA A100", gpu_count=1
    )
    return cluster


def observed_since(account: Account, moment: datetime) -> bool:
    """Every location of the account observed whole by a pass begun after `moment`."""
    return all(
        loc.last_complete_observation_at is not None and loc.last_complete_observation_at > moment
        for loc in Location.objects.filter(account=account)
    )


def running(cluster: Cluster) -> bool:
    return Machine.objects.filter(pool__cluster=cluster, phase="running").exists()


def test_a_slow_account_holds_no_other_account_back(
    tmp_path: Path, whitesky_sim: WhiteskySimulator, require_postgres: None
) -> None:
    healthy = gpu_cluster(account_observed("healthy", whitesky_sim))
    with WhiteskySimulator() as slow_sim:
        # Observed whole before it slowed down: its machine's steps go on too, each call
        # waiting 25 s, besides its observations.
        slow = gpu_cluster(account_observed("slow", slow_sim))
        slow_sim.fault(operation="*", latency_ms=SLOW_ANSWER_MS)
        slow_sim.clear_calls()
        broker_flush()
        log = tmp_path / "celery.log"
        started = datetime.now().astimezone()

        with celery_worker(tmp_path, *MAKE_RUN_WORKER, **FAST):
            wait_for(lambda: " ready." in log.read_text(), "the worker", log, seconds=30)
            took = wait_for(
                lambda: observed_since(healthy.account, started) and running(healthy),
                "the healthy account's locations observed and its machine running",
                log,
                seconds=HEALTHY_WITHIN,
            )
            # The slow account is still waiting for its first answer (the log holds
            # answered calls).
            assert slow_sim.calls()["calls"] == []
            assert slow_sim.faults()[0]["seen"] > 0
            assert not observed_since(slow.account, started)
            assert not running(slow)
    print(f"the healthy account was served {took:.1f} s after the worker was ready")


def test_a_slow_accounts_observation_ends_in_its_time_with_the_reasons_recorded(
    tmp_path: Path, whitesky_sim: WhiteskySimulator, require_postgres: None
) -> None:
    healthy = account_observed("healthy", whitesky_sim)
    pass_seconds = 4
    # One location: its pass is the slow account's only task, so when it ends is known.
    world = json.loads(DEMO_WORLD.read_text())
    world["locations"] = [loc for loc in world["locations"] if loc["name"] == NL]
    (tmp_path / "world.json").write_text(json.dumps(world))
    with WhiteskySimulator(world=tmp_path / "world.json") as slow_sim:
        slow = account_observed("slow", slow_sim)
        (location,) = Location.objects.filter(account=slow)
        before = location.last_complete_observation_at
        slow_sim.fault(operation="*", latency_ms=SLOW_ANSWER_MS)
        broker_flush()
        log = tmp_path / "celery.log"
        started = datetime.now().astimezone()

        with celery_worker(
            tmp_path,
            *MAKE_RUN_WORKER,
            WHITESKY_OBSERVE_PASS_SECONDS=str(pass_seconds),
            **FAST,
        ):
            # Its pass ends when its time is up, long before the first answer.
            wait_for(
                lambda: Location.objects.filter(
                    pk=location.pk, observation_started_at__gt=started
                ).exists(),
                "the slow account's location recorded",
                log,
                seconds=SLOW_ANSWER_MS / 1000 - 1,
            )
            assert observed_since(healthy, started)

    location.refresh_from_db()
    assert not location.observation_complete
    assert location.last_complete_observation_at == before
    # The one call sent timed out; the pass sent nothing after its time was up.
    error = location.observation_error
    assert "GPU profiles: listAvailableGPUProfiles: no answer (ReadTimeout)" in error
    assert "vGPU listing: listCustomerVGPUS: the pass's time is up: not sent" in error

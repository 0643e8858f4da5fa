"""Injected faults per operation: status, Retry-After, latency, rate, skip, lost answers."""

from __future__ import annotations

import contextlib
import threading
import time
from collections.abc import Callable

import pytest
import requests

from tests.simulator.support import CS_NL, NL, Api
from tests.whitesky_sim import WhiteskySimulator


def test_a_429_fault_answers_retry_after(whitesky_sim: WhiteskySimulator, api: Api) -> None:
    whitesky_sim.fault(operation="listCustomerVGPUS", status=429, retry_after=7)

    response = api.get(f"/customers/cust-demo/locations/{NL}/vgpus")

    assert response.status_code == 429
    assert response.headers["Retry-After"] == "7"
    assert response.json()["message"]


def test_a_429_fault_without_retry_after_still_sends_the_header(
    whitesky_sim: WhiteskySimulator, api: Api
) -> None:
    whitesky_sim.fault(operation="getCurrentUserInfo", status=429)

    assert api.get("/me").headers["Retry-After"] == "1"


def test_a_fault_hits_only_its_operation(whitesky_sim: WhiteskySimulator, api: Api) -> None:
    whitesky_sim.fault(operation="listCustomerVGPUS", status=503)

    assert api.get("/me").status_code == 200
    assert api.get(f"/customers/cust-demo/locations/{NL}/vgpus").status_code == 503


def test_latency_delays_the_answer(whitesky_sim: WhiteskySimulator, api: Api) -> None:
    whitesky_sim.fault(operation="getCurrentUserInfo", latency_ms=300)

    started = time.monotonic()
    response = api.get("/me")

    assert response.status_code == 200
    assert time.monotonic() - started >= 0.3


def test_a_fault_on_every_operation_delays_each_call_and_the_iam_refresh(
    whitesky_sim: WhiteskySimulator, api: Api
) -> None:
    whitesky_sim.fault(operation="*", latency_ms=300)

    started = time.monotonic()
    me = api.get("/me")
    vgpus = api.get(f"/customers/cust-demo/locations/{NL}/vgpus")
    refresh = requests.get(
        f"{whitesky_sim.iam_url}/v1/oauth/jwt/refresh",
        headers={"Authorization": f"Bearer {whitesky_sim.token()}"},
        timeout=10,
    )

    assert (me.status_code, vgpus.status_code, refresh.status_code) == (200, 200, 200)
    assert time.monotonic() - started >= 0.9
    assert whitesky_sim.faults()[0]["fired"] == 3


def test_times_limits_how_often_a_fault_fires(whitesky_sim: WhiteskySimulator, api: Api) -> None:
    whitesky_sim.fault(operation="getCurrentUserInfo", status=500, times=2)

    statuses = [api.get("/me").status_code for _ in range(4)]

    assert statuses == [500, 500, 200, 200]


def test_skip_lets_the_first_page_pass_and_fails_the_second(
    whitesky_sim: WhiteskySimulator, api: Api
) -> None:
    whitesky_sim.seed(CS_NL, vgpus=24)  # every instance of the location
    whitesky_sim.fault(operation="listCustomerVGPUS", status=503, skip=1, times=1)
    path = f"/customers/cust-demo/locations/{NL}/vgpus"

    first = api.get(path, limit=10, start_after=0)
    second = api.get(path, limit=10, start_after=10)
    retry = api.get(path, limit=10, start_after=10)

    assert first.status_code == 200 and len(first.json()["data"]) == 10
    assert second.status_code == 503
    assert retry.status_code == 200


def _statuses_with_rate(sim: WhiteskySimulator) -> list[int]:
    sim.reset()
    client = Api(sim)
    sim.fault(operation="getCurrentUserInfo", status=503, rate=0.5, seed=7)
    return [client.get("/me").status_code for _ in range(24)]


def test_a_rate_with_a_seed_is_deterministic(whitesky_sim: WhiteskySimulator) -> None:
    first = _statuses_with_rate(whitesky_sim)
    second = _statuses_with_rate(whitesky_sim)

    assert first == second
    assert set(first) == {200, 503}


def test_lost_response_504_commits_the_change(whitesky_sim: WhiteskySimulator, api: Api) -> None:
    whitesky_sim.fault(operation="reserveVGPU", lost_response="504", times=1)

    response = api.reserve(name="ghost")

    assert response.status_code == 504
    assert [item["vgpu_name"] for item in api.vgpus()["data"]] == ["ghost"]


def test_lost_response_drop_closes_the_connection_and_commits_the_change(
    whitesky_sim: WhiteskySimulator, api: Api
) -> None:
    whitesky_sim.fault(operation="createVirtualMachine", lost_response="drop", times=1)

    with pytest.raises(requests.ConnectionError):
        api.create_vm("ghost-vm")

    listed = Api(whitesky_sim).get(f"/customers/cust-demo/cloudspaces/{CS_NL}/vms").json()
    assert [vm["name"] for vm in listed["result"]] == ["ghost-vm"]


def test_the_call_log_records_faulted_and_dropped_calls(
    whitesky_sim: WhiteskySimulator, api: Api
) -> None:
    whitesky_sim.fault(operation="reserveVGPU", lost_response="drop", times=1)
    with pytest.raises(requests.ConnectionError):
        api.reserve()

    calls = whitesky_sim.calls()["calls"]

    assert [(c["operation"], c["status"]) for c in calls] == [("reserveVGPU", None)]


def test_clear_faults_removes_every_fault(whitesky_sim: WhiteskySimulator, api: Api) -> None:
    whitesky_sim.fault(operation="getCurrentUserInfo", status=500)
    whitesky_sim.clear_faults()

    assert api.get("/me").status_code == 200


def test_a_fault_on_an_unknown_operation_is_refused(whitesky_sim: WhiteskySimulator) -> None:
    with pytest.raises(RuntimeError, match="400"):
        whitesky_sim.fault(operation="noSuchOperation", status=500)


def test_a_fault_can_hit_the_iam_refresh(whitesky_sim: WhiteskySimulator) -> None:
    whitesky_sim.fault(operation="refreshJWT", status=503)

    response = requests.get(
        f"{whitesky_sim.iam_url}/v1/oauth/jwt/refresh",
        headers={"Authorization": f"Bearer {whitesky_sim.token()}"},
        timeout=10,
    )

    assert response.status_code == 503


def test_reset_clears_faults(whitesky_sim: WhiteskySimulator) -> None:
    whitesky_sim.fault(operation="getCurrentUserInfo", status=500)
    whitesky_sim.reset()

    assert Api(whitesky_sim).get("/me").status_code == 200


def test_a_call_delayed_past_a_reset_never_acts_on_the_new_world(
    whitesky_sim: WhiteskySimulator, api: Api
) -> None:
    """A test that timed out on a slow reservation leaves the call sleeping in the
    simulator; the next test's reset must not receive that reservation."""
    whitesky_sim.fault(operation="reserveVGPU", latency_ms=600)
    late = threading.Thread(target=lambda: suppress_errors(api.reserve))
    late.start()
    time.sleep(0.2)  # the call is in the simulator, asleep in its latency
    whitesky_sim.reset()
    late.join()

    fresh = Api(whitesky_sim)
    assert fresh.vgpus()["data"] == []  # a complete listing taken after the call ended
    assert [call["operation"] for call in whitesky_sim.calls()["calls"]] == ["listCustomerVGPUS"]


def suppress_errors(call: Callable[[], object]) -> None:
    with contextlib.suppress(requests.RequestException):
        call()

"""The control API, the call log, the CLI process and the state file."""

from __future__ import annotations

import signal
import subprocess
import sys
from pathlib import Path

import pytest
import requests

from tests.simulator.support import CS_NL, NL, NL_A100, Api, demo_world
from tests.whitesky_sim import PROJECT_ROOT, WhiteskySimulator


def test_the_call_log_counts_api_reads_and_writes_only(
    whitesky_sim: WhiteskySimulator, api: Api
) -> None:
    api.get("/me")
    api.profiles()
    api.reserved()
    api.get("/no/such/path")
    whitesky_sim.state()  # control calls are not logged
    requests.get(f"{whitesky_sim.iam_url}/v1/oauth/jwt/refresh", timeout=10)  # nor the IAM

    log = whitesky_sim.calls()

    assert [c["operation"] for c in log["calls"]] == [
        "getCurrentUserInfo",
        "listAvailableGPUProfiles",
        "reserveVGPU",
        None,
    ]
    assert [c["status"] for c in log["calls"]] == [200, 200, 200, 404]
    assert log["reads"] == 3 and log["writes"] == 1
    assert log["calls"][2]["method"] == "POST"
    assert log["calls"][2]["path"] == f"/api/1/customers/cust-demo/locations/{NL}/gpus/{NL_A100}"


def test_clear_calls_empties_the_log(whitesky_sim: WhiteskySimulator, api: Api) -> None:
    api.get("/me")
    whitesky_sim.clear_calls()

    assert whitesky_sim.calls() == {"calls": [], "reads": 0, "writes": 0}


def test_reset_restores_the_world_and_clears_calls_clock_and_switches(
    whitesky_sim: WhiteskySimulator, api: Api
) -> None:
    api.reserved()
    whitesky_sim.advance(3600)
    whitesky_sim.configure(vgpu_names_unique=True, token_ttl=5)

    whitesky_sim.reset()

    state = whitesky_sim.state()
    assert state["vgpus"] == []
    assert state["clock_offset"] == 0.0
    assert state["switches"]["vgpu_names_unique"] is False
    assert state["token_ttl"] == 3600
    assert whitesky_sim.calls()["calls"] == []


def test_reset_with_a_world_serves_that_world(whitesky_sim: WhiteskySimulator) -> None:
    world = demo_world()
    world["customer"]["customer_id"] = "cust-other"
    world["locations"] = world["locations"][:1]

    whitesky_sim.reset(world)

    assert whitesky_sim.customer_id == "cust-other"
    response = Api(whitesky_sim).get("/customers/cust-other/locations")
    assert [row["location"] for row in response.json()["locations"]] == [NL]


def test_reset_with_a_broken_world_is_refused(whitesky_sim: WhiteskySimulator) -> None:
    with pytest.raises(RuntimeError, match="400"):
        whitesky_sim.reset({"customer": {"customer_id": "x"}, "locations": []})


def test_the_state_dump_shows_cards_vgpus_and_vms(
    whitesky_sim: WhiteskySimulator, api: Api
) -> None:
    vm_id = api.created_vm(body={"gpu_id": NL_A100, "vgpu_name": "g"})

    state = whitesky_sim.state()

    card = next(c for c in state["cards"] if c["gpu_id"] == NL_A100)
    assert card["available_instances"] == 3
    assert [v["vm_id"] for v in state["vgpus"]] == [vm_id]
    assert [v["vm_id"] for v in state["vms"]] == [vm_id]
    assert {c["cloudspace_id"] for c in state["cloudspaces"]} == {"cs-demo-nl", "cs-demo-be"}


def test_an_unknown_switch_is_refused(whitesky_sim: WhiteskySimulator) -> None:
    with pytest.raises(RuntimeError, match="unknown switch"):
        whitesky_sim.configure(no_such_switch=True)


def test_the_clock_only_moves_forward(whitesky_sim: WhiteskySimulator) -> None:
    with pytest.raises(RuntimeError, match="400"):
        whitesky_sim.advance(-1)


def test_seeding_creates_vms_and_reservations_by_the_ordinary_rules(
    whitesky_sim: WhiteskySimulator, api: Api
) -> None:
    seeded = whitesky_sim.seed(CS_NL, vms=3, vgpus=5)

    assert len(seeded["vm_ids"]) == 3
    assert api.vgpus()["pagination"]["count"] == 5
    assert sum(p["available_instances"] for p in api.profiles().values()) == 24 - 5


def test_seeding_makes_running_vms_with_their_vgpus_attached_on_one_card(
    whitesky_sim: WhiteskySimulator, api: Api
) -> None:
    seeded = whitesky_sim.seed(
        CS_NL, vm_names=["capvco-c-p-0", "capvco-c-p-1"], vm_gpus=2, running=True
    )

    vms = [api.vm(vm_id) for vm_id in seeded["vm_ids"]]
    assert [vm["status"] for vm in vms] == ["RUNNING", "RUNNING"]
    listed = {v["vgpu_name"]: v for v in api.vgpus(limit=0)["data"]}
    for vm_id, name in zip(seeded["vm_ids"], ["capvco-c-p-0", "capvco-c-p-1"], strict=True):
        mine = [listed[f"{name}-gpu-{n}"] for n in range(2)]
        assert {v["virtual_machine"]["id"] for v in mine} == {vm_id}
        assert len({v["gpu_id"] for v in mine}) == 1
    assert sorted(seeded["vgpu_ids"]) == sorted(v["vgpu_id"] for v in listed.values())


def test_seeding_refuses_a_count_and_names_together(whitesky_sim: WhiteskySimulator) -> None:
    with pytest.raises(RuntimeError, match="400"):
        whitesky_sim.seed(CS_NL, vms=1, vm_names=["a"])


def test_state_file_survives_a_restart(tmp_path: Path) -> None:
    state = tmp_path / "whitesky-state.json"
    with WhiteskySimulator(state=state) as first:
        api = Api(first)
        vgpu_id = api.reserved(name="kept")
        vm_id = api.created_vm("kept-vm", start_vm=False)
        first.advance(7200)
    assert state.exists()

    with WhiteskySimulator(state=state) as second:
        api = Api(second)  # a new process signs with a new secret: new token
        assert api.vgpu(vgpu_id)["vgpu_name"] == "kept"
        assert api.vm(vm_id)["status"] == "HALTED"
        assert api.available() == 3
        assert second.state()["clock_offset"] == 7200.0
        assert api.reserved(name="next") == "vgpu-000002", "id counters survive too"


def test_the_cli_prints_where_it_listens_and_stops_cleanly_on_sigterm_and_sigint() -> None:
    for stop_signal in (signal.SIGTERM, signal.SIGINT):
        process = subprocess.Popen(
            [sys.executable, "-m", "simulator.whitesky", "--port", "0", "--token-ttl", "60"],
            cwd=PROJECT_ROOT,
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            text=True,
        )
        try:
            assert process.stdout is not None
            line = process.stdout.readline()
            assert line.startswith("whitesky simulator listening on http://127.0.0.1:")
            url = line.rsplit(" ", 1)[1].strip()
            assert requests.get(f"{url}/_sim/token", timeout=10).status_code == 200
            process.send_signal(stop_signal)
            assert process.wait(timeout=10) == 0
        finally:
            if process.poll() is None:
                process.kill()
                process.wait()
            for stream in (process.stdout, process.stderr):
                if stream is not None:
                    stream.close()


def test_the_cli_refuses_a_missing_world_file(tmp_path: Path) -> None:
    result = subprocess.run(
        [sys.executable, "-m", "simulator.whitesky", "--port", "0", "--world", str(tmp_path / "x")],
        cwd=PROJECT_ROOT,
        capture_output=True,
        text=True,
        timeout=30,
        check=False,
    )

    assert result.returncode == 2
    assert "cannot read world file" in result.stderr

"""The machine plan's steps: one frozen class per kind, each carrying only what its kind
needs; the worker's message carries each back as it was planned; the dry run shows every
kind in the API's one shape."""

from __future__ import annotations

import json
from datetime import UTC, datetime
from typing import get_args

import pytest

from clusters.api.serializers import PlanStepSerializer
from clusters.plan import (
    KINDS,
    STEP_CLASSES,
    ClusterReclaim,
    MachineCreate,
    MachineProvision,
    MachineReplace,
    MachineStep,
    MachineTeardown,
    VgpuRelease,
    VgpuSlot,
    VmRemoval,
    VmReplace,
    step_from_data,
)

NOW = datetime(2026, 12, 1, 12, 30, tzinfo=UTC)
SPEC = (("vcpus", 4), ("memory_mib", 8192))
SLOT = VgpuSlot(1, "capvco-demo-a100-0-gpu-1")
GONE = VmRemoval(7, "cs-1", "capvco-demo-a100-0", "HALTED")
RELEASE = VgpuRelease(3, "vgpu-3", "capvco-demo-a100-0-gpu-0")
MACHINE = {"target": "a100-0", "cluster_id": 1, "pool_id": 2, "vm_name": "capvco-demo-a100-0"}

EVERY_KIND: list[MachineStep] = [
    MachineCreate(
        **MACHINE, reason="pool a100 has 0 of 1 machines", index=0, spec=SPEC,
        create_vm=True, start_vm=True, card_id="card-1", reserve=(SLOT,),
    ),
    MachineProvision(
        **MACHINE, reason="phase failed", machine_id=5, seen=NOW, vm_id=9, spec=SPEC,
        attach=("vgpu-4",), blocked="failed 2 time(s) in a row", blocked_by="backoff",
        next_try_at=NOW,
    ),
    VmReplace(
        **MACHINE, reason="its VM 9 is not in the listing", machine_id=5, seen=NOW, spec=SPEC,
        create_vm=True, start_vm=True, attach=("vgpu-4",), remove_vms=(GONE,),
    ),
    MachineTeardown(
        **MACHINE, reason="pool a100 scaled to 0", machine_id=5, seen=NOW, vm_id=9,
        location="nl", release=(RELEASE,), remove_vms=(GONE,),
    ),
    MachineReplace(
        **MACHINE, reason="pool spec changed: vcpus", machine_id=5, seen=NOW, vm_id=9,
        location="nl", release=(RELEASE,),
    ),
    ClusterReclaim(
        target="demo", reason="VMs and vGPUs named for the cluster", cluster_id=1,
        release=(RELEASE,), release_locations=("nl",), remove_vms=(GONE,),
    ),
]  # fmt: skip


def test_one_class_per_kind_and_every_kind_has_one() -> None:
    assert set(STEP_CLASSES) == set(KINDS)
    assert set(STEP_CLASSES.values()) == set(get_args(MachineStep))
    assert sorted(step.kind for step in EVERY_KIND) == sorted(KINDS)


@pytest.mark.parametrize("step", EVERY_KIND, ids=lambda s: s.kind)
def test_a_step_reaches_the_worker_as_it_was_planned(step: MachineStep) -> None:
    message = json.loads(json.dumps(step.as_data()))  # what the broker carries

    assert step_from_data(message) == step
    assert type(step_from_data(message)) is type(step)


@pytest.mark.parametrize("step", EVERY_KIND, ids=lambda s: s.kind)
def test_the_dry_run_shows_every_kind_in_one_shape(step: MachineStep) -> None:
    shown = PlanStepSerializer(step).data

    assert set(shown) == set(PlanStepSerializer().fields)
    assert (shown["action"], shown["target"], shown["description"]) == (
        step.kind,
        step.target,
        step.describe(),
    )
    assert [(c["verb"], c["object"]) for c in shown["calls"]] == [
        (c.verb, c.object) for c in step.calls()
    ]


def test_what_a_kind_does_not_carry_is_shown_empty() -> None:
    reclaim = PlanStepSerializer(EVERY_KIND[-1]).data

    assert (reclaim["pool_id"], reclaim["machine_id"], reclaim["index"]) == (None, None, None)
    assert (reclaim["reserve"], reclaim["attach"], reclaim["card_id"]) == ([], [], "")
    assert reclaim["release"] == [str(RELEASE)]


def test_a_created_machine_is_provisioned_as_planned() -> None:
    create = EVERY_KIND[0]
    assert isinstance(create, MachineCreate)

    provision = create.made(machine_id=11, seen=NOW)

    assert type(provision) is MachineProvision
    assert (provision.machine_id, provision.seen, provision.vm_id) == (11, NOW, None)
    assert provision.calls() == create.calls()  # the same VM, card and vGPUs


def test_a_replacement_is_the_teardown_of_the_same_machine() -> None:
    teardown = EVERY_KIND[3]
    assert isinstance(teardown, MachineTeardown)

    replace = teardown.replacing()

    assert (type(replace), replace.kind) == (MachineReplace, "replace")
    assert replace.calls() == teardown.calls()

"""The factories make rows that the models accept, and chains that hang together."""

from __future__ import annotations

import pytest
from django.db.models import Model
from factory.django import DjangoModelFactory

from tests import factories as f

pytestmark = pytest.mark.django_db

EVERY_FACTORY = [
    f.UserFactory,
    f.AccountFactory,
    f.MembershipFactory,
    f.LocationFactory,
    f.ClusterFactory,
    f.ClusterSiteFactory,
    f.MachinePoolFactory,
    f.MachineFactory,
    f.VirtualMachineFactory,
    f.GpuProfileFactory,
    f.VgpuReservationFactory,
    f.KubeNodeFactory,
    f.KubePodFactory,
    f.HeartbeatFactory,
]


@pytest.mark.parametrize("factory", EVERY_FACTORY, ids=lambda factory: factory.__name__)
def test_factories_make_rows_the_models_accept(factory: type[DjangoModelFactory]) -> None:
    # Two of each: the sequences keep unique fields apart (beat's tick is one of a kind).
    rows = [factory() for _ in range(1 if factory is f.HeartbeatFactory else 2)]
    for row in rows:
        row.full_clean()  # fields, clean() and constraints, against the rows in the database


def test_traits_make_rows_the_models_accept() -> None:
    rows: list[Model] = [
        f.MachinePoolFactory(gpus=True),
        f.VgpuReservationFactory(orphaned=True),
    ]
    for row in rows:
        row.full_clean()


def test_a_machine_brings_a_whole_chain_in_one_account() -> None:
    machine = f.MachineFactory()
    pool = machine.pool
    assert pool.cluster == pool.site.cluster
    assert pool.site.location.account == pool.cluster.account
    assert machine.name == f"{pool.name}-{machine.index}"


def test_a_reservation_is_named_and_owned_as_provisioning_leaves_it() -> None:
    row = f.VgpuReservationFactory()
    machine = row.machine
    assert row.name == machine.vgpu_name(0)
    assert (row.owner_cluster, row.owner_machine) == (machine.pool.cluster.name, machine.name)
    assert (row.location, row.vm_id) == (machine.pool.site.location, machine.vm_id)
    assert machine.pool.wants_gpus


def test_the_user_logs_in_with_the_factory_password(client) -> None:  # type: ignore[no-untyped-def]
    user = f.UserFactory()
    # Through the login page: the login lockout needs the request (client.login has none).
    response = client.post("/login/", {"username": user.username, "password": f.PASSWORD})
    assert response.status_code == 302
    assert client.get("/").status_code == 200

"""Only the system's own components act on every account unchecked, each by its
SystemActor; a plain string is no actor (it used to skip the permission check).

(codemod: skip: this file passes string actors on purpose.)"""

from __future__ import annotations

import pytest

from capvco_web.audit import SystemActor, audit_record
from capvco_web.models import AuditEvent
from capvco_web.permissions import permission_require
from clusters import services
from tests.access.conftest import World


@pytest.mark.parametrize("actor", ["reconciler", "anyone", ""])
def test_a_string_actor_is_refused_by_the_permission_check(world: World, actor: str) -> None:
    with pytest.raises(TypeError, match="no actor"):
        permission_require(actor, "clusters.scale_machinepool", world.other.pool)  # type: ignore[arg-type]


def test_a_string_actor_writes_no_audit_record_and_changes_nothing(world: World) -> None:
    with pytest.raises(TypeError):
        audit_record(actor="reconciler", action="pool.scale", obj=world.own.pool)  # type: ignore[arg-type]
    with pytest.raises(TypeError):
        services.pool_scale(pool=world.other.pool, replicas=0, actor="autoscaler", reason="x")  # type: ignore[arg-type]
    world.other.pool.refresh_from_db()
    assert world.other.pool.replicas != 0
    assert not AuditEvent.objects.exists()


def test_a_system_actor_is_recorded_by_the_name_it_always_had(world: World) -> None:
    permission_require(SystemActor.ORPHAN_SWEEP, "clusters.scale_machinepool", world.other.pool)
    event = audit_record(actor=SystemActor.ORPHAN_SWEEP, action="x", obj=world.own.pool)
    assert AuditEvent.objects.get(pk=event.pk).actor_name == "orphan-sweep"
    assert event.actor is None

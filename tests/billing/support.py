"""The leak ledger's rows for tests/billing/test_costs.py's world."""

from __future__ import annotations

from datetime import datetime
from decimal import Decimal

from billing.models import Leak
from tests.billing.test_costs import World


def world_leaks(world: World, since: datetime, until: datetime) -> None:
    """The ledger's rows of the world's two orphans in nl-ams, leaked over [since, until):
    a vGPU at 1 EUR an hour and a VM of 2 vCPUs and 2 GiB at 0.03 EUR an hour."""
    for kind, external_id, name, monthly in (
        (Leak.Kind.VGPU, "v-orphan", "capvco-prod-gone-gpu-0", Decimal("730")),
        (Leak.Kind.VM, "900", "capvco-prod-gone", Decimal("21.90")),
    ):
        Leak.objects.create(
            account=world.account, location=world.ams, kind=kind, external_id=external_id,
            name=name, currency="EUR", monthly_price=monthly, billed_since=since,
            leaked_since=since, ended_at=until, end=Leak.End.RELEASED,
        )  # fmt: skip

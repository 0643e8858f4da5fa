from __future__ import annotations

from datetime import datetime
from decimal import Decimal
from typing import Any

from django.conf import settings
from django.db import models
from django.utils import timezone

from capvco_web.rows import joined_forget
from cloud.models import VirtualMachine
from gpus import naming

HOURS_PER_MONTH = Decimal(730)  # whitesky prices are per month; 365 * 24 / 12
CENT = Decimal("0.01")
# What an hourly figure is shown to: a cent a month is 0.0000137 per hour.
HOURLY_PLACES = Decimal("0.0001")
# Every state but released: whitesky bills the reservation (VgpuReservation.State).
BILLED_STATES = ("reserving", "reserved", "attached", "releasing")


def hourly_price(monthly: Decimal) -> Decimal:
    """What one vGPU costs per hour at a location's monthly vGPU price."""
    return monthly / HOURS_PER_MONTH


def vm_hourly_cost(vm: VirtualMachine) -> Decimal:
    """What a VM's vCPUs and memory cost per hour, as shown (the API, the admin, the VM
    list): its monthly price at its location's prices, per hour, to HOURLY_PLACES."""
    return hourly_price(vm.compute_monthly_price()).quantize(HOURLY_PLACES)


def hours_between(start: datetime, end: datetime) -> Decimal:
    """The hours from `start` to `end`, as billing counts them (to the second)."""
    return Decimal((end - start).total_seconds()) / Decimal(3600)


def cost_of(hours: Decimal, monthly: Decimal) -> Decimal:
    """What one vGPU billed for `hours` cost, at a monthly price, to the cent."""
    return (hours * hourly_price(monthly)).quantize(CENT)


class GpuProfile(models.Model):
    """One physical GPU card in a location, as whitesky lists it (mirrored)."""

    location = models.ForeignKey(
        "cloud.Location", on_delete=models.CASCADE, related_name="gpu_profiles"
    )
    profile_id = models.CharField(max_length=100)
    vendor = models.CharField(max_length=100)
    model = models.CharField(max_length=200, help_text="As listed, PCI address included")
    pci_address = models.CharField(max_length=32, blank=True)
    description = models.TextField(blank=True)
    available_instances = models.PositiveIntegerField(default=0)

    class Meta:
        constraints = [
            models.UniqueConstraint(
                fields=["location", "profile_id"], name="gpu_profile_unique_per_location"
            )
        ]

    def __str__(self) -> str:
        return f"{self.vendor} {self.model}"


class ListedVgpu(models.Model):
    """A vGPU reservation as the location's listings show it: observe's row, written by
    the mirror alone (gpus/mirror.py), and by nothing that acts.

    It keeps what only observation can know: when a listing first showed it, since when it
    has been attached to no VM, and since when (and over how many complete listings) no
    machine of ours owns it. A complete listing without it deletes it.
    """

    location = models.ForeignKey(
        "cloud.Location", on_delete=models.CASCADE, related_name="listed_vgpus"
    )
    vgpu_id = models.CharField(max_length=100)
    name = models.CharField(max_length=200)
    gpu_id = models.CharField(max_length=100, blank=True, help_text="The profile (card) id")
    vm_id = models.BigIntegerField(null=True, blank=True)
    first_seen_at = models.DateTimeField(help_text="When a listing first showed it")
    unassigned_since = models.DateTimeField(
        null=True, blank=True, help_text="Since when the listings show it attached to no VM"
    )
    orphaned_since = models.DateTimeField(
        null=True, blank=True, help_text="Since when complete listings show it owned by no machine"
    )
    orphan_confirmations = models.PositiveSmallIntegerField(
        default=0, help_text="Consecutive complete listings that showed it orphaned"
    )

    class Meta:
        constraints = [
            models.UniqueConstraint(
                fields=["location", "vgpu_id"], name="listed_vgpu_unique_per_location"
            )
        ]
        indexes = [
            models.Index(
                fields=["location", "orphaned_since"],
                condition=models.Q(orphaned_since__isnull=False),
                name="listed_vgpu_orphaned",
            )
        ]

    def __str__(self) -> str:
        return f"{self.name} ({self.vgpu_id})"


class VgpuReservation(models.Model):
    """A vGPU reservation: billed from the moment it exists, attached or not.

    Our own rows are written before the reserve call (state `reserving`, no vgpu id yet), so
    that a crash or a lost answer leaves a record to resolve by name. Rows for reservations
    we did not make are mirrored from the listing, and their owner parsed from the name.
    """

    class State(models.TextChoices):
        RESERVING = "reserving", "reserving (asked for, not yet confirmed)"
        RESERVED = "reserved", "reserved, not attached"
        ATTACHED = "attached"
        RELEASING = "releasing"
        RELEASED = "released"

    location = models.ForeignKey(
        "cloud.Location", on_delete=models.PROTECT, related_name="reservations"
    )
    name = models.CharField(max_length=200)
    # NULL, not "": unique only once whitesky gave the id.
    vgpu_id = models.CharField(max_length=100, null=True, blank=True)  # noqa: DJ001
    gpu_id = models.CharField(max_length=100, blank=True, help_text="The profile (card) id")
    state = models.CharField(max_length=16, choices=State, default=State.RESERVING)
    vm_id = models.BigIntegerField(null=True, blank=True)
    machine = models.ForeignKey(
        "clusters.Machine",
        null=True,
        blank=True,
        on_delete=models.SET_NULL,
        related_name="reservations",
    )
    owner_cluster = models.CharField(max_length=64, blank=True)
    owner_machine = models.CharField(max_length=64, blank=True)
    owner_index = models.PositiveSmallIntegerField(null=True, blank=True)
    reserve_deadline = models.DateTimeField(
        null=True,
        blank=True,
        help_text="While reserving: the reserve call may still land until then, so only a "
        "listing begun later can tell that it never happened.",
    )
    # What the last listings say of it: observe's row, joined on (location, vgpu id).
    listed = models.ForeignObject(
        "gpus.ListedVgpu",
        from_fields=["location", "vgpu_id"],
        to_fields=["location", "vgpu_id"],
        on_delete=models.DO_NOTHING,
        null=True,
        related_name="reservations",
    )
    released_at = models.DateTimeField(null=True, blank=True)
    # A person's release request, recorded before any worker acts on it, so that a lost
    # task message or a killed worker cannot lose it: the orphan sweep carries it out.
    release_requested_at = models.DateTimeField(null=True, blank=True)
    release_requested_by = models.ForeignKey(
        settings.AUTH_USER_MODEL,
        null=True,
        blank=True,
        on_delete=models.SET_NULL,
        related_name="+",
    )
    release_reason = models.TextField(blank=True)
    release_attempted_at = models.DateTimeField(
        null=True, blank=True, help_text="When a worker last claimed the row to release it"
    )
    release_error = models.TextField(blank=True, help_text="Why the last release was refused")
    created_at = models.DateTimeField(auto_now_add=True)
    updated_at = models.DateTimeField(
        auto_now=True,
        help_text="Last change by us or by an observation: a listing begun before it does "
        "not overwrite the row.",
    )

    class Meta:
        constraints = [
            models.UniqueConstraint(
                fields=["location", "vgpu_id"],
                condition=models.Q(vgpu_id__isnull=False),
                name="vgpu_id_unique_per_location",
            ),
            models.UniqueConstraint(
                fields=["location", "name"],
                condition=models.Q(vgpu_id__isnull=True),
                name="one_pending_reservation_per_name",
            ),
        ]
        indexes = [
            models.Index(fields=["location", "name"]),
            models.Index(fields=["owner_cluster"]),
            # The dashboard's list over a table that keeps released history: keyset pages
            # in either order, the reservations of a VM and of a card (a GPU type is
            # cards), the few rows still billed (also the capacity and money figures), and
            # the few not named by us. A trigram index on the name, for the list's search,
            # exists on PostgreSQL only (migration 0005).
            models.Index(fields=["created_at", "id"], name="reservation_created"),
            models.Index(fields=["name", "id"], name="reservation_name"),
            models.Index(fields=["location", "vm_id"], name="reservation_vm"),
            models.Index(fields=["location", "gpu_id"], name="reservation_card"),
            models.Index(
                fields=["created_at", "id"],
                condition=models.Q(state__in=BILLED_STATES),
                name="reservation_billed",
            ),
            models.Index(
                fields=["created_at", "id"],
                condition=~models.Q(name__startswith=naming.PREFIX),
                name="reservation_not_ours",
            ),
        ]
        permissions = [("release_vgpureservation", "Can release vGPU reservation")]

    def __str__(self) -> str:
        return self.name

    def refresh_from_db(self, *args: Any, **kwargs: Any) -> None:
        super().refresh_from_db(*args, **kwargs)
        joined_forget(self, "listed")

    def _observed(self) -> ListedVgpu | None:
        try:
            return self.listed
        except ListedVgpu.DoesNotExist:
            return None  # not listed (yet, or any more)

    @property
    def first_seen_at(self) -> datetime | None:
        """When a listing first showed it (None: no listing has yet)."""
        return seen.first_seen_at if (seen := self._observed()) else None

    @property
    def unassigned_since(self) -> datetime | None:
        """Since when the listings show it attached to no VM."""
        return seen.unassigned_since if (seen := self._observed()) else None

    @property
    def orphaned_since(self) -> datetime | None:
        """Since when complete listings show it owned by no machine, while it is billed."""
        if self.state == self.State.RELEASED:
            return None
        return seen.orphaned_since if (seen := self._observed()) else None

    @property
    def orphan_confirmations(self) -> int:
        """Consecutive complete listings that showed it orphaned."""
        return (
            seen.orphan_confirmations if self.orphaned_since and (seen := self._observed()) else 0
        )

    @property
    def owner(self) -> str:
        """Who holds it, as people read it: the machine its name gives while that machine
        is there; once the machine is gone (force-deleted) its name says so, never that
        machine as the owner."""
        if not (self.owner_cluster and self.owner_machine):
            return "unknown"  # not named by us
        named = f"{self.owner_cluster}/{self.owner_machine}"
        return named if self.machine_id is not None else f"machine {named} does not exist"

    def accrued_cost(self, now: datetime | None = None) -> Decimal:
        """What this orphan cost since it was flagged, at the location's vGPU price."""
        if self.orphaned_since is None:
            return Decimal(0)
        hours = hours_between(self.orphaned_since, now or timezone.now())
        return cost_of(hours, self.location.vgu_price)

    @property
    def hourly_cost(self) -> Decimal:
        """What it costs per hour while it is billed (every state but released)."""
        if self.state == self.State.RELEASED:
            return Decimal(0)
        return hourly_price(self.location.vgu_price)

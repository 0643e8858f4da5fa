"""Audit events belong to the account of their object: its members read them, others do
not, and the history of an account outlives the account."""

from __future__ import annotations

import importlib

from django.apps import apps
from django.db.models import Model
from django.test import Client

from capvco_web.audit import SystemActor, audit_record
from capvco_web.models import AuditEvent
from capvco_web.permissions import visible
from tests.access.conftest import World, caller_make
from tests.factories import AccountFactory

fill = importlib.import_module("capvco_web.migrations.0006_audit_events_by_account").accounts_fill


class AppsOfThen:
    """Today's models under the labels the migration names: those it names as `clusters`'
    are `cloud`'s now (cloud.0001)."""

    def get_model(self, app_label: str, name: str) -> type[Model]:
        try:
            return apps.get_model(app_label, name)
        except LookupError:
            return apps.get_model("cloud", name)


def test_members_read_the_events_of_their_accounts_only(world: World) -> None:
    ours = audit_record(actor=SystemActor.RECONCILER, action="pool.scale", obj=world.own.pool)
    theirs = audit_record(actor=SystemActor.RECONCILER, action="pool.scale", obj=world.other.pool)
    token_event = audit_record(
        actor=SystemActor.RECONCILER, action="x", obj=caller_make("viewer", world)
    )
    assert (ours.account_id, theirs.account_id) == (world.own.account.pk, world.other.account.pk)
    assert token_event.account_id is None  # a user belongs to no account: superusers only

    viewer = caller_make("viewer", world)
    assert list(visible(viewer, AuditEvent.objects.all())) == [ours]
    superuser = caller_make("superuser", world)
    assert set(visible(superuser, AuditEvent.objects.all())) == {ours, theirs, token_event}


def test_the_history_of_a_deleted_account_keeps_its_account(world: World) -> None:
    account = AccountFactory()
    event = audit_record(actor=SystemActor.RECONCILER, action="account.delete", obj=account)
    account_id = account.pk
    account.delete()  # no constraint ties the event to the row
    assert AuditEvent.objects.get(pk=event.pk).account_id == account_id


def test_events_written_before_accounts_were_recorded_are_given_theirs(world: World) -> None:
    event = audit_record(
        actor=SystemActor.RECONCILER, action="machine.delete", obj=world.own.machine
    )
    gone = audit_record(
        actor=SystemActor.RECONCILER, action="machine.delete", obj=world.own.machine
    )
    AuditEvent.objects.update(account=None)
    AuditEvent.objects.filter(pk=gone.pk).update(object_id="987654321")  # deleted since

    fill(AppsOfThen(), None)

    assert AuditEvent.objects.get(pk=event.pk).account_id == world.own.account.pk
    assert AuditEvent.objects.get(pk=gone.pk).account_id is None


def test_the_admin_audit_log_shows_a_member_their_accounts_events(world: World) -> None:
    ours = audit_record(actor=SystemActor.RECONCILER, action="pool.scale", obj=world.own.pool)
    theirs = audit_record(actor=SystemActor.RECONCILER, action="pool.scale", obj=world.other.pool)
    viewer = caller_make("viewer", world)
    viewer.is_staff = True
    viewer.save()
    client = Client()
    client.force_login(viewer)

    page = client.get("/admin/capvco_web/auditevent/")

    assert page.status_code == 200
    assert list(page.context["cl"].result_list) == [ours]
    assert client.get(f"/admin/capvco_web/auditevent/{theirs.pk}/change/").status_code == 302

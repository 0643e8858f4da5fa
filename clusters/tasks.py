"""Periodic, idempotent tasks: observe every location (and, on a slower beat, each
account's locations and prices, cloudspaces and images), reconcile every cluster, sweep
orphans. Each cluster's Kubernetes is observed on its own beat (kube.tasks).

Tasks take ids and call one reconciler; beat sends the fan-out ones (see settings). Each
task that calls an account's whitesky first takes one of the account's share of the
worker's slots (capvco_web.worker_slots), or is sent again shortly: an account whose
whitesky answers slowly never holds every slot.
"""

from __future__ import annotations

import logging
from typing import Any

from celery import Task, shared_task
from django.conf import settings
from django.db.models import F, QuerySet
from django.utils import timezone

from capvco_web.integrations import whitesky as ws
from capvco_web.integrations.kube import KubeconfigInvalid
from capvco_web.locks import object_lock
from capvco_web.plans import plan_apply
from capvco_web.queued import queued_clear
from capvco_web.tasks import (
    retry_if_transient,
    send_again_later,
    send_each_unless_queued,
    send_on_commit,
)
from capvco_web.worker_slots import account_worker_slot
from cloud.kube import management_client
from cloud.models import Account, Location
from cloud.observe import account_catalog_observe, account_locations_observe
from cloud.whitesky import whitesky_client
from clusters.capi_import import account_capi_import
from clusters.models import Cluster
from clusters.observe import location_observe
from clusters.plan import MachineProvision, MachineTeardown, step_from_data
from clusters.reconcile import MachineWork, PassContext, cluster_reconcile, machine_reconcile
from clusters.releases import locations_to_sweep, orphan_sweep, release_request_carry_out
from gpus.models import VgpuReservation
from gpus.services import ReleaseRefused, release_request_pending

logger = logging.getLogger(__name__)


@shared_task
def observe_all() -> None:
    """Each location its own task: it waits neither for a listing of its account nor for
    another account. The one observed longest ago goes first, so an account whose whitesky
    is slow gets through its share of the workers to each of its locations in turn. A
    location whose observation is still queued from an earlier tick is not sent again: that
    one is run when its turn comes (capvco_web.queued). The accounts' own listings
    (locations and prices, which seldom change) go on the catalog's beat."""
    locations = Location.objects.order_by(F("observation_started_at").asc(nulls_first=True), "pk")
    send_each_unless_queued(
        observe_location,
        locations.values_list("pk", flat=True),
        interval=settings.OBSERVE_INTERVAL,
    )
    for account_id in capi_imported_accounts().values_list("pk", flat=True):
        send_on_commit(import_capi_account, account_id)


@shared_task(bind=True, max_retries=3)
def observe_account(self: Task[Any, Any], account_id: int, catalog: bool = False) -> None:
    """The account's locations and their prices, then a first observation of each new one
    (beat observes the known ones); with `catalog` (beat's observe_catalog_all, and a new
    account: see account_create), its cloudspaces and images too."""
    account = Account.objects.get(pk=account_id)
    known = set(account.locations.values_list("pk", flat=True))
    locations: list[Location] = []
    with account_worker_slot(account_id) as slot:
        if not slot:
            send_again_later(self)
            return
        with object_lock(f"observe-account:{account_id}") as taken:
            if taken:  # else another observe of the account lists its locations
                with observe_client(account) as client:
                    try:
                        locations = account_locations_observe(client=client, account=account)
                    except ws.WhiteskyError as exc:
                        retry_if_transient(self, exc)
                        raise
    for location in locations:
        if location.pk not in known:
            send_on_commit(observe_location, location.pk)
    if catalog:
        send_on_commit(observe_catalog, account_id)


def observe_client(account: Account) -> ws.WhiteskyClient:
    """The account's client for one observation pass: its calls end within the pass's
    time, so a slow whitesky ends the pass with typed errors, recorded."""
    return whitesky_client(account, seconds=settings.WHITESKY_OBSERVE_PASS_SECONDS)


@shared_task
def observe_catalog_all() -> None:
    """Each account's locations and prices, cloudspaces and images: what seldom changes."""
    expires = settings.CATALOG_OBSERVE_INTERVAL.total_seconds()
    for account_id in Account.objects.values_list("pk", flat=True):
        send_on_commit(observe_account, account_id, True, expires=expires)


@shared_task(bind=True)
def observe_catalog(self: Task[Any, Any], account_id: int) -> None:
    """The account's cloudspaces and images: the choices a new cluster is set up with."""
    account = Account.objects.filter(pk=account_id).first()
    if account is None:
        return
    with account_worker_slot(account_id) as slot:
        if not slot:
            send_again_later(self)
            return
        with object_lock(f"observe-catalog:{account_id}") as taken:
            if not taken:
                return
            with observe_client(account) as client:
                account_catalog_observe(
                    client=client, account=account, locations=list(account.locations.all())
                )


@shared_task(bind=True)
def observe_location(self: Task[Any, Any], location_id: int) -> None:
    location = Location.objects.select_related("account").get(pk=location_id)
    with account_worker_slot(location.account_id) as slot:
        if not slot:
            send_again_later(self)  # still queued: no tick sends it meanwhile
            return
        queued_clear(self.name, location_id)
        with object_lock(f"observe-location:{location_id}") as taken:
            if not taken:
                return
            with observe_client(location.account) as client:
                location_observe(client=client, location=location)


def capi_imported_accounts() -> QuerySet[Account]:
    """Accounts with a management cluster to import clusters from."""
    return Account.objects.exclude(capi_kubeconfig="")


@shared_task
def import_capi_account(account_id: int) -> None:
    """Mirror the Cluster API clusters of the account's management cluster into clusters
    and pools (clusters.capi_import)."""
    account = capi_imported_accounts().filter(pk=account_id).first()
    if account is None:
        return  # deleted, or its management kubeconfig removed since the fan-out
    with object_lock(f"capi-import:{account_id}") as taken:
        if not taken:
            return
        try:
            client = management_client(account)
        except KubeconfigInvalid as exc:
            Account.objects.filter(pk=account_id).update(
                capi_import_complete=False, capi_import_error=str(exc)
            )
            logger.warning("capi import of %s: %s", account.name, exc)
            return
        with client:
            account_capi_import(client=client, account=account)


@shared_task
def reconcile_all() -> None:
    """Each cluster not still queued from an earlier tick (capvco_web.queued)."""
    send_each_unless_queued(
        reconcile_cluster,
        Cluster.objects.values_list("pk", flat=True),
        interval=settings.RECONCILE_INTERVAL,
    )


@shared_task
def reconcile_cluster(cluster_id: int) -> None:
    """The cluster's own part of the plan here; each machine's step, as planned, on the
    worker pool."""
    queued_clear(reconcile_cluster.name, cluster_id)
    cluster = Cluster.objects.select_related("account").filter(pk=cluster_id).first()
    if cluster is None:
        return  # deleted since the fan-out

    def fan_out(step: MachineWork) -> None:
        # Dropped when it waited two ticks: those sent it again (the machine's lock and
        # the step's precondition make a duplicate cheap); one tick would leave slots idle
        # between ticks.
        reconcile_machine.apply_async(
            (step.as_data(),), expires=2 * settings.RECONCILE_INTERVAL.total_seconds()
        )

    with whitesky_client(cluster.account) as client:
        cluster_reconcile(client=client, cluster=cluster, fan_out=fan_out)


@shared_task(bind=True)
def reconcile_machine(self: Task[Any, Any], step: dict[str, Any]) -> None:
    """One machine's step, as the plan made it (`as_data`)."""
    planned = step_from_data(step)
    assert isinstance(planned, MachineProvision | MachineTeardown), planned.kind
    account = Account.objects.filter(clusters__pools__machines=planned.machine_id).first()
    if account is None:
        return  # torn down since the fan-out
    with account_worker_slot(account.pk) as slot:
        if not slot:
            send_again_later(self)
            return
        with whitesky_client(account) as client:
            ctx = PassContext(client)
            # The cluster's pass recorded this step as sent; its outcome is logged here.
            record = plan_apply(
                [planned],
                lambda step: machine_reconcile(ctx, planned),
                scope="cluster",
                scope_id=planned.cluster_id,
                on_blocked=lambda step: machine_reconcile(ctx, planned),
            )
    for outcome in record.of("dropped", "waiting", "failed"):
        logger.warning("reconcile machine %s: %s", planned.machine_id, outcome)


@shared_task
def orphan_sweep_all() -> None:
    """Sent by beat: the requests and releases it carries on depend on no other message.
    A location whose sweep is still queued is not sent again (capvco_web.queued)."""
    send_each_unless_queued(
        orphan_sweep_location,
        locations_to_sweep(timezone.now()).values_list("pk", flat=True),
        interval=settings.ORPHAN_SWEEP_INTERVAL,
    )


@shared_task(bind=True)
def orphan_sweep_location(self: Task[Any, Any], location_id: int) -> None:
    location = Location.objects.select_related("account").get(pk=location_id)
    with account_worker_slot(location.account_id) as slot:
        if not slot:
            send_again_later(self)  # still queued: no tick sends it meanwhile
            return
        queued_clear(self.name, location_id)
        # The observe lock: no sweep while the location's listing is being rewritten.
        with object_lock(f"observe-location:{location_id}") as taken:
            if not taken:
                return
            with whitesky_client(location.account) as client:
                result = orphan_sweep(client=client, location=location)
    for name in result.removed:
        logger.info("orphan sweep %s: removed VM %s", location.name, name)
    for name in result.released:
        logger.info("orphan sweep %s: released %s", location.name, name)
    for error in result.errors:
        logger.warning("orphan sweep %s: %s", location.name, error)


@shared_task(bind=True)
def reservation_release_task(self: Task[Any, Any], reservation_id: int) -> None:
    """Carry out the release a person asked for (clusters.releases.reservation_release_request),
    as recorded on the row (who, why), audited with that person as actor. If this message is
    lost, the orphan sweep does it."""
    row = (
        VgpuReservation.objects.select_related("location__account", "release_requested_by")
        .filter(pk=reservation_id)
        .first()
    )
    if row is None or not release_request_pending(row):
        return  # done already (by the sweep), or refused since
    with account_worker_slot(row.location.account_id) as slot:
        if not slot:
            send_again_later(self)
            return
        with whitesky_client(row.location.account) as client:
            try:
                release_request_carry_out(client=client, reservation=row)
            except (ws.WhiteskyError, ReleaseRefused) as exc:
                # Refusals are on the row and in the audit log; a lost outcome is sent
                # again by the sweep: a task retry would add nothing.
                logger.warning("release of %s refused or unknown: %s", row.name, exc)

"""External networks of a location: mirrored from whitesky, and the one a cluster's
configuration names, resolved in a VM's location."""

from __future__ import annotations

from datetime import datetime

from django.db import IntegrityError, transaction
from django.utils import timezone

from capvco_web.integrations import whitesky as ws
from capvco_web.rows import fields_assign
from cloud.models import Location
from sriov.models import ExternalNetwork


class NetworkUnknown(Exception):
    """The configured network is not one of the location's; the message names those."""


def external_networks_mirror(
    *, client: ws.WhiteskyClient, location: Location, now: datetime | None = None
) -> list[ExternalNetwork]:
    """List the location's external networks and mirror them; a row is written only when
    a mirrored field changed (the listing is whole or raises, so what it lacks is gone)."""
    now = now or timezone.now()
    listed = client.list_external_networks(location=location.name)
    existing = {row.network_id: row for row in ExternalNetwork.objects.filter(location=location)}
    rows = []
    for network in listed:
        data = {
            "name": network.name[:200],
            "network": network.network[:64],
            "gateway": network.gateway[:64],
            "prefix_len": network.prefix_len,
        }
        row = existing.pop(network.external_network_id, None)
        if row is None:
            try:
                with transaction.atomic():
                    row = ExternalNetwork.objects.create(
                        location=location,
                        network_id=network.external_network_id,
                        last_seen_at=now,
                        **data,
                    )
            except IntegrityError:  # mirrored by a concurrent request a moment ago
                row = ExternalNetwork.objects.get(
                    location=location, network_id=network.external_network_id
                )
        elif changed := fields_assign(row, data):
            row.last_seen_at = now
            row.save(update_fields=[*changed, "last_seen_at"])
        rows.append(row)
    if existing:
        ExternalNetwork.objects.filter(pk__in=[row.pk for row in existing.values()]).delete()
    return rows


def network_match(networks: list[ExternalNetwork], wanted: str) -> ExternalNetwork | None:
    """The network named `wanted`: by id when it is a number, else by name (exact, then
    ignoring case)."""
    wanted = wanted.strip()
    if wanted.isdigit():
        return next((n for n in networks if n.network_id == int(wanted)), None)
    exact = [n for n in networks if n.name == wanted]
    if len(exact) == 1:
        return exact[0]
    folded = [n for n in networks if n.name.casefold() == wanted.casefold()]
    return folded[0] if len(folded) == 1 else None


def network_resolve(
    *, client: ws.WhiteskyClient | None, location: Location, wanted: str
) -> ExternalNetwork:
    """The location's network `wanted`, from the mirror, else listed now (with `client`).
    Raises NetworkUnknown naming the networks the location has."""
    networks = list(ExternalNetwork.objects.filter(location=location))
    found = network_match(networks, wanted)
    if found is None and client is not None:
        networks = external_networks_mirror(client=client, location=location)
        found = network_match(networks, wanted)
    if found is None:
        offered = ", ".join(f"{n.name} ({n.network_id})" for n in networks) or "none"
        raise NetworkUnknown(
            f"{location.name} has no external network {wanted!r}; it has: {offered}."
        )
    return found

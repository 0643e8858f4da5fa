"""What a person changes: a cluster's SR-IOV configuration (enabled, network, credential,
MTU) and a request to detach a leaked NIC. Each needs the role in the cluster's account
and is audited; a secret is recorded as "(secret)", never its value."""

from __future__ import annotations

import copy
from typing import Any

from django.core.exceptions import ValidationError
from django.db import transaction
from django.utils import timezone

from capvco_web.audit import audit_changes, audit_record
from capvco_web.permissions import Actor, permission_require
from clusters.models import Cluster, MachinePool
from clusters.services import IMPORT_ACTOR
from sriov.models import LeakedNic, SriovConfig


def credential_refs(cluster: Cluster) -> list[str]:
    """The Secrets (`<namespace>/<name>`) an imported cluster's pools name for SR-IOV
    (`spec.sriov.credentialSecretRef` of their VCOMachineTemplate)."""
    if not cluster.imported_from:
        return []
    refs = MachinePool.objects.filter(cluster=cluster).exclude(capi_sriov_secret_ref="")
    return sorted(set(refs.values_list("capi_sriov_secret_ref", flat=True)))


_SETTABLE = ("enabled", "external_network", "credential", "mtu", "install_node_side")


def sriov_config_of(cluster: Cluster) -> SriovConfig:
    """The cluster's configuration, or a new (disabled, unsaved) one."""
    found = SriovConfig.objects.filter(cluster=cluster).first()
    return found or SriovConfig(cluster=cluster)


def sriov_config_check(config: SriovConfig) -> None:
    """Raise ValidationError, by field, when `config` may not be saved as it is. What is
    missing to enable it (a stored credential or network, the cluster's kubeconfig, the
    cluster being active) is a `conflict`: the same change may be made later."""
    errors: dict[str, ValidationError] = {}
    cluster = config.cluster
    if config.credential and config.credential == cluster.account.credential:
        errors["credential"] = ValidationError(
            "This is the account's own credential. SR-IOV needs one of its own, made for "
            "NIC attach and detach: give that JWT."
        )
    if config.enabled:
        if not config.credential:
            errors["credential"] = ValidationError(
                "SR-IOV cannot be enabled without a credential of its own: give the JWT made "
                "for NIC attach and detach. The account's credential is never used for NICs.",
                code="conflict",
            )
        if not config.external_network.strip():
            errors["external_network"] = ValidationError(
                "Name the external network pods get NICs on.", code="conflict"
            )
        if not cluster.kubeconfig:
            errors["enabled"] = ValidationError(
                "Give the cluster a kubeconfig first: NICs are reclaimed from its pod "
                "listings, and pods are checked against it.",
                code="conflict",
            )
        elif cluster.state != Cluster.State.ACTIVE:
            errors["enabled"] = ValidationError(
                f"Cluster {cluster.name} is being deleted.", code="conflict"
            )
    try:
        config.full_clean(exclude=["cluster"], validate_unique=False, validate_constraints=False)
    except ValidationError as exc:
        for field, messages in exc.message_dict.items():
            errors.setdefault(field, ValidationError(" ".join(messages)))
    if errors:
        raise ValidationError(errors)
    # The table's constraints say what the checks above say; met, unless a check is missing.
    config.validate_constraints(exclude=["cluster"])


def sriov_config_set(
    *, cluster: Cluster, changes: dict[str, Any], actor: Actor, reason: str = ""
) -> SriovConfig:
    """Change the cluster's SR-IOV configuration (`enabled`, `external_network`,
    `credential`, `mtu`; a credential left out is kept). Needs the admin role. Enabling
    needs a credential of its own, the network and the cluster's kubeconfig. Audited."""
    permission_require(actor, "sriov.change_sriovconfig", cluster)
    settable = set(_SETTABLE) | ({"credential_source"} if actor is IMPORT_ACTOR else set())
    unknown = set(changes) - settable
    if unknown:
        raise ValidationError({name: "Not a setting of SR-IOV." for name in sorted(unknown)})
    if "credential" in changes and actor is not IMPORT_ACTOR and (refs := credential_refs(cluster)):
        said = (
            f"Cluster {cluster.name} is imported: its SR-IOV credential is read from the "
            f"Secret {', '.join(refs)} of its management cluster; change it there."
        )
        raise ValidationError({"credential": ValidationError(said, code="conflict")})
    with transaction.atomic():
        stored = SriovConfig.objects.select_for_update().filter(cluster=cluster).first()
        if stored is None:
            # By id: the cluster's cached `sriov` must not become this unsaved row.
            stored = SriovConfig(cluster_id=cluster.pk)
        config = copy.copy(stored)
        config.cluster = cluster
        for name, value in changes.items():
            if name == "credential":
                value = str(value or "").strip()
                if not value:
                    continue  # write-only: leaving it out (or empty) keeps it
            if name == "external_network":
                value = str(value).strip()
            setattr(config, name, value)
        sriov_config_check(config)
        if config.credential != stored.credential:
            config.credential_set_at = timezone.now()
        before, after = audit_changes(stored, config)
        if stored.pk is not None and not after:
            return stored
        config.save()
        audit_record(
            actor=actor,
            action="sriov.config_set",
            obj=config,
            reason=reason,
            before=before,
            after=after,
        )
    cluster.sriov = config
    return config


def leaked_nic_detach_request(*, nic: LeakedNic, actor: Actor, reason: str) -> LeakedNic:
    """A person asks for a leaked NIC to be detached; the next reclaim pass does it (with
    the cluster's SR-IOV credential). Needs the operator role. Audited."""
    permission_require(actor, "sriov.detach_leakednic", nic)
    if not reason.strip():
        raise ValidationError({"reason": "Say why the NIC is detached."})
    user = None if isinstance(actor, str) else actor
    with transaction.atomic():
        LeakedNic.objects.filter(pk=nic.pk).update(
            detach_requested_at=timezone.now(),
            detach_requested_by=user if user is not None and user.is_authenticated else None,
            detach_reason=reason.strip()[:1000],
        )
        audit_record(
            actor=actor,
            action="sriov.leaked_nic_detach_request",
            obj=nic,
            reason=reason,
            before={"mac": nic.mac, "ip": nic.ip, "vm_id": nic.vm_id},
        )
    nic.refresh_from_db()
    return nic

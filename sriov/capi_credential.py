"""Imported clusters: the SR-IOV credential is read from the Secret that the Cluster API
names (`spec.sriov.credentialSecretRef` of the pools' VCOMachineTemplate), in the
account's management cluster, key `token` (or the Secret's only key).

A change is stored through the configuration service as the `capi-import` actor (audited,
the value never shown); a Secret that cannot be read leaves the stored credential as it
is and says why (`SriovConfig.credential_error`). Nothing is written when nothing changed.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import TYPE_CHECKING

from django.core.exceptions import ValidationError

from capvco_web.integrations import kube
from capvco_web.rows import model_update
from clusters.models import Cluster
from clusters.services import IMPORT_ACTOR
from sriov.models import SriovConfig
from sriov.services import credential_refs, sriov_config_of, sriov_config_set

if TYPE_CHECKING:
    from capvco_web.integrations.kube.client import KubeClient

TOKEN_KEY = "token"  # noqa: S105 - the name of a key


def _management_client(cluster: Cluster) -> KubeClient:
    from cloud.kube import management_client

    return management_client(cluster.account)


def imported_credential_sync(
    *, cluster: Cluster, client: Callable[[Cluster], KubeClient] = _management_client
) -> bool:
    """Read the imported cluster's SR-IOV credential from its Secret; True when the
    stored one changed."""
    refs = credential_refs(cluster)
    if not refs:
        return False
    config = sriov_config_of(cluster)
    try:
        if len(refs) > 1:
            raise _Problem(f"its pools name different Secrets: {', '.join(refs)}")
        namespace, _, name = refs[0].partition("/")
        if not cluster.account.capi_kubeconfig:
            raise _Problem("its account has no management cluster kubeconfig")
        with client(cluster) as api:
            data = api.get_secret_data(namespace=namespace, name=name)
        value = data.get(TOKEN_KEY) or (next(iter(data.values())) if len(data) == 1 else "")
        if not value.strip():
            raise _Problem(f"the Secret {refs[0]} has no key {TOKEN_KEY!r}")
        if config.pk is not None and value.strip() == config.credential:
            model_update(config, {"credential_source": refs[0], "credential_error": ""})
            return False
        sriov_config_set(
            cluster=cluster,
            changes={"credential": value, "credential_source": refs[0]},
            actor=IMPORT_ACTOR,
            reason=f"spec.sriov.credentialSecretRef {refs[0]}",
        )
    except _Problem as exc:
        _error_set(config, f"SR-IOV credential of {cluster.name}: {exc}")
        return False
    except (kube.KubeError, kube.KubeconfigInvalid) as exc:
        _error_set(config, f"SR-IOV credential of {cluster.name} from {refs[0]}: {exc}")
        return False
    except ValidationError as exc:
        problems = "; ".join(" ".join(v) for v in exc.message_dict.values())
        _error_set(config, f"SR-IOV credential of {cluster.name} from {refs[0]}: {problems}")
        return False
    _error_set(SriovConfig.objects.get(cluster=cluster), "")
    return True


class _Problem(Exception):
    pass


def _error_set(config: SriovConfig, error: str) -> None:
    if config.pk is None:
        if error:  # say why on a row of its own, SR-IOV still off
            config.credential_error = error[:1000]
            config.save()
        return
    model_update(config, {"credential_error": error[:1000]})

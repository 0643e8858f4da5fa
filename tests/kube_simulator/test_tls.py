"""The fake API server speaks https with a CA of its own, which its kubeconfigs carry:
the project's kube client verifies the server against it, and refuses one it does not
sign."""

from __future__ import annotations

import base64
import copy
from pathlib import Path

import yaml

from capvco_web.integrations import kube
from capvco_web.integrations.kube.client import KubeClient
from simulator.kube.tls import certificates
from tests.kube_sim import KubeSimulator, SimCluster, node_object


def test_the_project_client_verifies_the_server_with_the_kubeconfigs_ca(
    cluster: SimCluster, kube_sim: KubeSimulator, tmp_path: Path
) -> None:
    kube_sim.put("prod", node_object("n1"))
    other_ca = certificates(tmp_path / "other", "127.0.0.1").ca_pem
    forged = copy.deepcopy(cluster.kubeconfig)
    forged["clusters"][0]["cluster"]["certificate-authority-data"] = base64.b64encode(
        other_ca
    ).decode()

    with KubeClient.from_text(
        cluster.kubeconfig_yaml, allowed_servers=cluster.allowed_servers()
    ) as client:
        names = [node.name for node in client.list_nodes().items]
    with KubeClient.from_text(
        yaml.safe_dump(forged), allowed_servers=cluster.allowed_servers()
    ) as client:
        refused = client.list_nodes()

    assert cluster.server.startswith("https://127.0.0.1:")
    assert names == ["n1"]
    assert refused.items == () and isinstance(refused.error, kube.Unreachable)
    assert "CERTIFICATE_VERIFY_FAILED" in refused.error.message


def test_the_certificates_are_kept_and_reused(tmp_path: Path) -> None:
    first = certificates(tmp_path, "127.0.0.1")
    ca, cert = first.ca_file.read_bytes(), first.cert_file.read_bytes()
    again = certificates(tmp_path, "127.0.0.1")
    assert (again.ca_file.read_bytes(), again.cert_file.read_bytes()) == (ca, cert)

    elsewhere = certificates(tmp_path, "10.1.2.3")  # a host it does not name: a new cert

    assert elsewhere.ca_file.read_bytes() == ca
    assert elsewhere.cert_file.read_bytes() != cert
    assert oct((tmp_path / "ca.key").stat().st_mode & 0o777) == "0o600"

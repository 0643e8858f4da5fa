"""The node side of a cluster's SR-IOV, as Kubernetes manifests: a Secret with the
cluster's enrollment token, a DaemonSet that installs the CNI plugin on every node and
exchanges that token for the node's own (sriov/cni/install.py), and the
NetworkAttachmentDefinition (Multus) that pods name to get a NIC.

The token is in the manifests only when it was just made (a rotation answers both): only
its hash is kept. Downloaded later, the Secret holds a placeholder to fill in.
"""

from __future__ import annotations

import json
from typing import Any

import yaml
from django.conf import settings

from clusters.models import Cluster

NAMESPACE = "kube-system"
NAME = "capvco-sriov"
TOKEN_PLACEHOLDER = "REPLACE-WITH-THE-AGENT-TOKEN"  # noqa: S105 - a placeholder
HOST_CONF_DIR = "/etc/cni/net.d/capvco-sriov.d"
HOST_BIN_DIR = "/opt/cni/bin"


ADD_TIMEOUT = 80


def cni_config() -> dict[str, Any]:
    """The plugin's network configuration, as the NetworkAttachmentDefinition carries it.
    Where to call and with which token the plugin reads from HOST_CONF_DIR only."""
    return {
        "cniVersion": "1.0.0",
        "name": NAME,
        "type": NAME,
        "interfaceWaitSeconds": 30,
        # The ADD's exchange, polls included: with interfaceWaitSeconds inside the
        # kubelet's 2-minute runtime timeout; and a DEL's polls of its queued detach.
        "requestTimeoutSeconds": max(ADD_TIMEOUT, int(settings.SRIOV_ATTACH_WAIT_SECONDS) + 20),
    }


def sriov_manifests(
    *, cluster: Cluster, agent_url: str, token: str | None = None, image: str | None = None
) -> list[dict[str, Any]]:
    labels = {"app.kubernetes.io/name": NAME, "capvco.io/cluster": cluster.name}
    secret = {
        "apiVersion": "v1",
        "kind": "Secret",
        "metadata": {"name": f"{NAME}-agent", "namespace": NAMESPACE, "labels": labels},
        "type": "Opaque",
        "stringData": {"token": token or TOKEN_PLACEHOLDER, "agent-url": agent_url},
    }
    install = [
        "python", "-m", "sriov.cni.install",
        "--bin-dir", f"/host{HOST_BIN_DIR}",
        "--conf-dir", f"/host{HOST_CONF_DIR}",
        "--token-file", "/var/run/capvco-sriov/token",
        "--node-name", "$(NODE_NAME)",
        "--agent-url", agent_url,
        "--keep-running",
    ]  # fmt: skip
    daemonset = {
        "apiVersion": "apps/v1",
        "kind": "DaemonSet",
        "metadata": {"name": f"{NAME}-installer", "namespace": NAMESPACE, "labels": labels},
        "spec": {
            "selector": {"matchLabels": {"app.kubernetes.io/name": NAME}},
            "updateStrategy": {"type": "RollingUpdate"},
            "template": {
                "metadata": {"labels": labels},
                "spec": {
                    "priorityClassName": "system-node-critical",
                    "tolerations": [{"operator": "Exists"}],
                    "automountServiceAccountToken": False,
                    "containers": [
                        {
                            "name": "install",
                            "image": image or settings.SRIOV_AGENT_IMAGE,
                            "command": install,
                            "env": [
                                {
                                    "name": "NODE_NAME",
                                    "valueFrom": {"fieldRef": {"fieldPath": "spec.nodeName"}},
                                }
                            ],
                            # Writes the plugin into the host's CNI directories.
                            "securityContext": {"runAsUser": 0, "runAsNonRoot": False},
                            "resources": {
                                "requests": {"cpu": "10m", "memory": "32Mi"},
                                "limits": {"memory": "64Mi"},
                            },
                            "volumeMounts": [
                                {"name": "cni-bin", "mountPath": f"/host{HOST_BIN_DIR}"},
                                {"name": "cni-conf", "mountPath": f"/host{HOST_CONF_DIR}"},
                                {
                                    "name": "agent",
                                    "mountPath": "/var/run/capvco-sriov",
                                    "readOnly": True,
                                },
                            ],
                        }
                    ],
                    "volumes": [
                        {"name": "cni-bin", "hostPath": {"path": HOST_BIN_DIR}},
                        {
                            "name": "cni-conf",
                            "hostPath": {"path": HOST_CONF_DIR, "type": "DirectoryOrCreate"},
                        },
                        {
                            "name": "agent",
                            "secret": {"secretName": f"{NAME}-agent", "defaultMode": 0o400},
                        },
                    ],
                },
            },
        },
    }
    attachment = {
        "apiVersion": "k8s.cni.cncf.io/v1",
        "kind": "NetworkAttachmentDefinition",
        "metadata": {"name": NAME, "namespace": "default", "labels": labels},
        "spec": {"config": json.dumps(cni_config(), indent=2)},
    }
    return [secret, daemonset, attachment]


def manifests_yaml(objects: list[dict[str, Any]]) -> str:
    header = (
        "# SR-IOV node side of a capvco-web cluster: apply with kubectl apply -f.\n"
        "# Pods ask for a NIC with the annotations\n"
        f"#   k8s.v1.cni.cncf.io/networks: default/{NAME}\n"
        "#   capvco.io/sriov-network: <the external network>\n"
    )
    return header + yaml.safe_dump_all(objects, sort_keys=False, default_flow_style=False)

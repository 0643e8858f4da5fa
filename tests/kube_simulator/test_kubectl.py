"""Real kubectl drives the fake API server with the kubeconfig it hands out, as an
operator would: the commands below, in order, each with the outcome it must have. The
table of docs/simulator-contract.md ("kubectl against the simulator") is made from
them: `KUBECTL_TABLE_UPDATE=1 pytest tests/kube_simulator/test_kubectl.py` rewrites it,
otherwise the test fails when it differs from what ran.

Outcomes: `works` (as on a real cluster), `refused` (refused with the real server's
answer, e.g. 422 Invalid), `not simulated` (fails because the simulator leaves that API
out; docs/simulator-contract.md says what)."""

from __future__ import annotations

import base64
import os
import shlex
import subprocess
import time
from collections import Counter
from dataclasses import dataclass, field
from pathlib import Path

import pytest
import yaml

from clusters.models import Cluster
from kube.gpu_addon import ADDON_NAME, addon_manifest
from sriov.manifests import TOKEN_PLACEHOLDER, manifests_yaml, sriov_manifests
from tests.kube_sim import PROJECT_ROOT, KubeSimulator, node_object

# Real kubectl, a third-party runtime, holds the fake API server to its contract.
pytestmark = pytest.mark.contract

KUBECTL = "/usr/bin/kubectl"
CONTRACT = PROJECT_ROOT / "docs" / "simulator-contract.md"
TABLE_START = "<!-- kubectl table: made by tests/kube_simulator/test_kubectl.py -->"
TABLE_END = "<!-- end of kubectl table -->"


WORKS, REFUSED, NOT_SIMULATED = "works", "refused", "not simulated"
PROTOBUF = "a protobuf body: 415, as a JSON-only server; the `apply -f -` form below works"

NAD_CRD = {
    "apiVersion": "apiextensions.k8s.io/v1",
    "kind": "CustomResourceDefinition",
    "metadata": {"name": "network-attachment-definitions.k8s.cni.cncf.io"},
    "spec": {
        "group": "k8s.cni.cncf.io",
        "scope": "Namespaced",
        "names": {
            "plural": "network-attachment-definitions",
            "singular": "network-attachment-definition",
            "kind": "NetworkAttachmentDefinition",
            "shortNames": ["net-attach-def"],
        },
        "versions": [
            {
                "name": "v1",
                "served": True,
                "storage": True,
                "schema": {
                    "openAPIV3Schema": {
                        "type": "object",
                        "x-kubernetes-preserve-unknown-fields": True,
                    }
                },
            }
        ],
    },
}

INVALID_DEPLOYMENT = {
    "apiVersion": "apps/v1",
    "kind": "Deployment",
    "metadata": {"name": "mismatch", "namespace": "ml"},
    "spec": {
        "selector": {"matchLabels": {"app": "one"}},
        "template": {
            "metadata": {"labels": {"app": "other"}},
            "spec": {"containers": [{"name": "main", "image": "busybox"}]},
        },
    },
}

TRIAL_CONFIGMAP = {
    "apiVersion": "v1",
    "kind": "ConfigMap",
    "metadata": {"name": "trial", "namespace": "ml"},
    "data": {"a": "1"},
}


@dataclass(frozen=True)
class Step:
    command: str  # kubectl's arguments; {dir} is where the manifests are
    outcome: str
    expect: str = ""  # in its output (stdout and stderr)
    note: str = ""
    env: dict[str, str] = field(default_factory=dict)
    during: str = ""  # a watch: this command runs while the step's command watches
    stdin_of: str = ""  # the output of this command is the step's input (`... | kubectl`)

    @property
    def succeeds(self) -> bool:
        return self.outcome == WORKS


STEPS = [
    Step("version", WORKS, "Server Version: v1.33.0", "the version the simulator says"),
    Step("cluster-info", WORKS, "Kubernetes control plane is running at", "services stored"),
    Step("api-resources", WORKS, "deployments", "discovery: the verbs served only"),
    Step("api-versions", WORKS, "rbac.authorization.k8s.io/v1"),
    Step("get nodes", WORKS, "n1"),
    Step("get nodes -o wide", WORKS, "n2"),
    Step("get nodes -l capvco.io/gpu-type=a100 -o name", WORKS, "node/n1"),
    Step("get nodes --chunk-size=1", WORKS, "n2", "paged with continue tokens"),
    Step(r"get node n1 -o jsonpath='{.status.capacity.nvidia\.com/gpu}'", WORKS, "2"),
    Step("describe node n1", WORKS, "capvco.io/gpu-type=a100", "events are not served"),
    Step("label node n2 capvco.io/gpu-type=t4", WORKS, "node/n2 labeled"),
    Step("label node n2 capvco.io/gpu-type-", WORKS, "node/n2 unlabeled"),
    Step("annotate node n1 example.com/note=hello", WORKS, "node/n1 annotated"),
    Step("cordon n2", WORKS, "node/n2 cordoned"),
    Step("get nodes --field-selector spec.unschedulable=true -o name", WORKS, "node/n2"),
    Step("uncordon n2", WORKS, "node/n2 uncordoned"),
    Step("taint nodes n1 gpu=true:NoSchedule", WORKS, "node/n1 tainted"),
    Step("create namespace ml", NOT_SIMULATED, "unknown format", PROTOBUF),
    Step(
        "apply -f -",
        WORKS,
        "namespace/ml created",
        stdin_of="create namespace ml --dry-run=client -o yaml",
    ),
    Step("get namespaces", WORKS, "kube-system"),
    Step("apply -f {dir}/gpu-addon.yaml", WORKS, f"daemonset.apps/{ADDON_NAME} created"),
    Step("apply -f {dir}/gpu-addon.yaml", WORKS, f"daemonset.apps/{ADDON_NAME} unchanged"),
    Step("diff -f {dir}/gpu-addon.yaml", WORKS, "", "no difference: exit status 0"),
    Step(
        "replace -f {dir}/gpu-addon-stale.yaml",
        REFUSED,
        "the object has been modified; please apply your changes to the latest version",
        "409 Conflict: its resourceVersion is not the stored one",
    ),
    Step(
        f"rollout status daemonset/{ADDON_NAME} -n kube-system --timeout=20s",
        WORKS,
        "successfully rolled out",
        "the simulator rolls out at once",
    ),
    Step("apply -f {dir}/nad-crd.yaml", WORKS, "created"),
    Step("apply -f {dir}/sriov.yaml", WORKS, "daemonset.apps/capvco-sriov-installer created"),
    Step(
        "apply -f {dir}/sriov.yaml",
        WORKS,
        "networkattachmentdefinition.k8s.cni.cncf.io/capvco-sriov unchanged",
        "the Secret says configured, as on a real server: stringData is never read back",
    ),
    Step(
        "get secret capvco-sriov-agent -n kube-system -o jsonpath={.data.token}",
        WORKS,
        base64.b64encode(TOKEN_PLACEHOLDER.encode()).decode(),
        "stringData is stored as base64 data",
    ),
    Step("get network-attachment-definitions -n default", WORKS, "capvco-sriov"),
    Step(
        "create secret generic creds -n ml --from-literal=password=s3cret",
        NOT_SIMULATED,
        "unknown format",
        PROTOBUF,
    ),
    Step(
        "apply -f -",
        WORKS,
        "secret/creds created",
        stdin_of="create secret generic creds -n ml --from-literal=password=s3cret "
        "--dry-run=client -o yaml",
    ),
    Step("get secret creds -n ml -o jsonpath={.data.password}", WORKS, "czNjcmV0"),
    Step(
        "apply -f -",
        WORKS,
        "configmap/settings created",
        stdin_of="create configmap settings -n ml --from-literal=mode=fast "
        "--dry-run=client -o yaml",
    ),
    Step("get configmap settings -n ml -o yaml", WORKS, "mode: fast"),
    Step(
        """patch configmap settings -n ml --type merge -p '{"data":{"mode":"slow"}}'""",
        WORKS,
        "patched",
    ),
    Step(
        "patch configmap settings -n ml --type json "
        """-p '[{"op":"replace","path":"/data/mode","value":"medium"}]'""",
        WORKS,
        "patched",
    ),
    Step("""patch node n1 -p '{"metadata":{"labels":{"zone":"a"}}}'""", WORKS, "patched"),
    Step(
        "edit configmap settings -n ml",
        WORKS,
        "edited",
        "KUBE_EDITOR changes the file",
        env={"KUBE_EDITOR": "sed -i s/medium/edited/"},
    ),
    Step("get configmap settings -n ml -o jsonpath={.data.mode}", WORKS, "edited"),
    Step(
        "create deployment web -n ml --image=nginx --replicas=2",
        NOT_SIMULATED,
        "unknown format",
        PROTOBUF,
    ),
    Step(
        "apply -f -",
        WORKS,
        "deployment.apps/web created",
        stdin_of="create deployment web -n ml --image=nginx --replicas=2 --dry-run=client -o yaml",
    ),
    Step("rollout status deployment/web -n ml --timeout=20s", WORKS, "successfully rolled out"),
    Step("set image deployment/web nginx=nginx:1.27 -n ml", WORKS, "image updated"),
    Step("rollout status deployment/web -n ml --timeout=20s", WORKS, "successfully rolled out"),
    Step("scale deployment web -n ml --replicas=3", WORKS, "deployment.apps/web scaled"),
    Step("get deployment web -n ml -o jsonpath={.status.availableReplicas}", WORKS, "3"),
    Step("get all -n ml", WORKS, "web", "no Table output: kubectl's default columns"),
    Step("run pod1 -n ml --image=busybox", WORKS, "pod/pod1 created"),
    Step(
        "get pods -n ml -w",
        WORKS,
        "pod2",
        "a pod made meanwhile shows up",
        during="run pod2 -n ml --image=busybox",
    ),
    Step("get pods -A --field-selector status.phase=Pending", WORKS, "pod2"),
    Step("delete pod pod2 -n ml", WORKS, 'pod "pod2" deleted'),
    Step("wait --for=delete pod/pod2 -n ml --timeout=10s", WORKS, ""),
    Step("wait --for=jsonpath={.status.phase}=Active namespace/ml", WORKS, "condition met"),
    Step(
        "create -f {dir}/invalid-deployment.yaml",
        REFUSED,
        "`selector` does not match template `labels`",
        "422 Invalid",
    ),
    Step(
        "apply -f -",
        REFUSED,
        "metadata.name: Invalid value",
        "422 Invalid",
        stdin_of="create configmap Bad_Name -n ml --dry-run=client -o yaml",
    ),
    Step("apply --dry-run=server -f {dir}/trial.yaml", WORKS, "created (server dry run)"),
    Step("get configmap trial -n ml", REFUSED, 'configmaps "trial" not found', "nothing stored"),
    Step("delete deployment web -n ml --dry-run=server", WORKS, "deleted (server dry run)"),
    Step("get deployment web -n ml -o name", WORKS, "deployment.apps/web"),
    Step(
        "apply --server-side -f {dir}/trial.yaml",
        NOT_SIMULATED,
        "the body of the request was in an unknown format",
        "server-side apply: 415",
    ),
    Step("explain pods.spec.containers.image", WORKS, "FIELD: image <string>"),
    Step("explain deployment.spec.selector", WORKS, "LabelSelector"),
    Step(
        "get --raw /clusters/prod/openapi/v3",
        WORKS,
        "apis/apps/v1",
        "--raw takes the path from the host's root, which has each cluster under /clusters/",
    ),
    Step("logs pod1 -n ml", NOT_SIMULATED, "", "no pods/log"),
    Step("auth can-i list pods", NOT_SIMULATED, "", "no SelfSubjectAccessReview"),
    Step("get events -n ml", NOT_SIMULATED, "doesn't have a resource type", "no events"),
    Step("delete -f {dir}/gpu-addon.yaml", WORKS, "deleted"),
    Step("delete namespace ml", WORKS, 'namespace "ml" deleted'),
    Step("get pods -n ml", WORKS, "No resources found", "deleting a namespace is immediate"),
]


def _manifests(directory: Path) -> None:
    manifest, _ = addon_manifest()
    (directory / "gpu-addon.yaml").write_text(yaml.safe_dump(manifest))
    stale = {**manifest, "metadata": {**manifest["metadata"], "resourceVersion": "1"}}
    (directory / "gpu-addon-stale.yaml").write_text(yaml.safe_dump(stale))
    cluster = Cluster(name="demo")
    objects = sriov_manifests(cluster=cluster, agent_url="https://capvco.example/api/v1/sriov/")
    (directory / "sriov.yaml").write_text(manifests_yaml(objects))
    (directory / "nad-crd.yaml").write_text(yaml.safe_dump(NAD_CRD))
    (directory / "invalid-deployment.yaml").write_text(yaml.safe_dump(INVALID_DEPLOYMENT))
    (directory / "trial.yaml").write_text(yaml.safe_dump(TRIAL_CONFIGMAP))


def _run(step: Step, directory: Path, env: dict[str, str]) -> tuple[int, str]:
    def argv(command: str) -> list[str]:
        return [KUBECTL, *shlex.split(command.replace("{dir}", str(directory)))]

    env = {**env, **step.env}
    if not step.during:
        given = None
        if step.stdin_of:
            given = subprocess.run(
                argv(step.stdin_of), env=env, capture_output=True, text=True, check=True
            ).stdout
        done = subprocess.run(
            argv(step.command), env=env, capture_output=True, text=True, timeout=60, input=given
        )
        return done.returncode, done.stdout + done.stderr
    watching = subprocess.Popen(
        argv(step.command), env=env, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True
    )
    try:
        time.sleep(2)
        subprocess.run(argv(step.during), env=env, capture_output=True, timeout=60, check=True)
        time.sleep(2)
    finally:
        watching.terminate()
        out, _ = watching.communicate(timeout=10)
    return 0, out


def _table(results: list[tuple[Step, str]]) -> str:
    counts = Counter(step.outcome for step, _ in results)
    lines = [
        TABLE_START,
        "",
        f"{len(results)} commands, in this order: "
        + ", ".join(f"{counts[o]} {o}" for o in (WORKS, REFUSED, NOT_SIMULATED)),
        "",
        "| # | `kubectl ...` | outcome | note |",
        "|---|---|---|---|",
    ]
    for index, (step, _) in enumerate(results, 1):
        command = step.command.replace("{dir}/", "").replace("|", "\\|")
        if step.during:
            command += f"` while `{step.during}"
        if step.stdin_of:
            command = f"{step.stdin_of}` \\| `{command}"
        lines.append(f"| {index} | `{command}` | {step.outcome} | {step.note} |")
    lines += ["", TABLE_END]
    return "\n".join(lines)


@pytest.mark.django_db
def test_kubectl_drives_the_fake_api_server_as_an_operator_would(
    kube_sim: KubeSimulator, tmp_path: Path
) -> None:
    cluster = kube_sim.cluster("prod")
    kube_sim.put(
        "prod",
        node_object("n1", gpus=2, labels={"capvco.io/gpu-type": "a100"}),
        node_object("n2"),
    )
    _manifests(tmp_path)
    env = {
        "PATH": os.environ.get("PATH", "/usr/bin:/bin"),
        "HOME": str(tmp_path),  # kubectl's discovery and OpenAPI caches: this run's own
        "KUBECONFIG": str(cluster.kubeconfig_file(tmp_path)),
    }

    results = [(step, _run(step, tmp_path, env)) for step in STEPS]

    wrong = [
        f"kubectl {step.command}: rc {rc}, wanted {step.outcome} with {step.expect!r}:\n{out}"
        for step, (rc, out) in results
        if (rc == 0) != step.succeeds or step.expect not in out
    ]
    assert not wrong, "\n\n".join(wrong)
    table = _table([(step, "") for step, _ in results])
    if os.environ.get("KUBECTL_TABLE_UPDATE"):
        text = CONTRACT.read_text()
        before, _, rest = text.partition(TABLE_START)
        _, _, after = rest.partition(TABLE_END)
        CONTRACT.write_text(before + table + after)
    assert table in CONTRACT.read_text(), "run with KUBECTL_TABLE_UPDATE=1 to update the table"
    assert len(STEPS) >= 40

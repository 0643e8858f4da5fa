"""`make run`'s SR-IOV demo, the node manifests and the plugin's installer, the reclaim
beat entry, and which way imports go."""

from __future__ import annotations

import ast
import io
import subprocess
import zipfile
from pathlib import Path
from typing import Any

import yaml
from django.conf import settings
from django.core.management import call_command

from capvco_web.models import AuditEvent
from sriov.cni.install import install
from sriov.manifests import sriov_manifests
from sriov.models import PodNic, SriovConfig
from tests.kube_sim import KubeSimulator, node_object
from tests.sriov.support import World, queue_worker, world_build
from tests.whitesky_sim import WhiteskySimulator

ROOT = Path(__file__).resolve().parents[2]


def test_the_demo_gives_pods_nics_through_the_agent_api(
    whitesky_sim: WhiteskySimulator, kube_sim: KubeSimulator, live_server: Any
) -> None:
    world = world_build(whitesky_sim, kube_sim)
    SriovConfig.objects.filter(cluster=world.cluster).delete()
    # The demo's joiner names each node after its VM.
    kube_sim.put(
        "demo",
        *[
            node_object(machine.vm_name, provider_id=f"vco://{world.location.name}/{machine.vm_id}")
            for machine in world.machines
        ],
    )
    out = io.StringIO()
    with queue_worker():  # the demo's worker, which attaches the NICs its ADDs queue
        call_command(
            "demo_sriov",
            simulator=whitesky_sim.base_url,
            kube=kube_sim.base_url,
            kube_ca=kube_sim.ca_file,
            web=live_server.url,
            wait=5,
            stdout=out,
        )
    config = SriovConfig.objects.get(cluster=world.cluster)
    assert config.enabled and config.credential != world.account.credential
    nics = PodNic.objects.filter(state=PodNic.State.ATTACHED)
    assert nics.count() == 3
    assert "3 pods have NICs" in out.getvalue()
    subjects = {c["subject"] for c in whitesky_sim.calls()["calls"] if "Nic" in str(c)}
    attaches = [
        c for c in whitesky_sim.calls()["calls"]
        if c["operation"] == "attachExternalNetworksVirtualMachine"
    ]  # fmt: skip
    assert {c["subject"] for c in attaches} == {"sriov-demo"}
    assert subjects <= {"sriov-demo", None}


def test_manifests_hold_a_daemonset_secret_and_attachment(world: World) -> None:
    objects = sriov_manifests(
        cluster=world.cluster, agent_url="https://cp.example/api/v1/sriov/agent/", token="t0k"
    )
    kinds = [o["kind"] for o in objects]
    assert kinds == ["Secret", "DaemonSet", "NetworkAttachmentDefinition"]
    assert objects[0]["stringData"]["token"] == "t0k"
    config = yaml.safe_load(objects[2]["spec"]["config"])
    assert config["type"] == "capvco-sriov" and config["cniVersion"] == "1.0.0"
    # The node's plugin takes the agent URL and token only from its own directory,
    # where the installer puts them; the attachment names neither.
    assert not {"agentUrl", "tokenFile", "nodeName", "nodeNameFile", "caFile"} & set(config)
    command = objects[1]["spec"]["template"]["spec"]["containers"][0]["command"]
    assert command[command.index("--agent-url") + 1] == "https://cp.example/api/v1/sriov/agent/"


def test_the_secret_and_daemonset_pass_the_kubernetes_schemas(world: World) -> None:
    import kubernetes_validate

    objects = sriov_manifests(cluster=world.cluster, agent_url="https://cp.example/a/")
    for document in objects[:2]:  # the attachment is a custom kind (Multus' CRD)
        kubernetes_validate.validate(document, "1.30.0", strict=True)
        kubernetes_validate.validate(document, kubernetes_validate.latest_version(), strict=True)


def test_the_installer_puts_a_runnable_plugin_and_the_token_in_place(
    world: World, live_server: Any, tmp_path: Path
) -> None:
    token = tmp_path / "secret-token"
    token.write_text(world.enrollment_token + "\n")
    options: dict[str, Any] = {
        "bin_dir": tmp_path / "bin",
        "conf_dir": tmp_path / "conf",
        "token_file": token,
        "node_name": "node-1",
        "agent_url": f"{live_server.url}/api/v1/sriov/agent/",
    }
    changed = install(**options)
    assert len(changed) == 5  # the plugin, the node's token, its name, which Secret, the URL
    assert (tmp_path / "conf" / "agent-url").read_text() == options["agent_url"] + "\n"
    plugin = tmp_path / "bin" / "capvco-sriov"
    assert plugin.stat().st_mode & 0o111
    assert (tmp_path / "conf" / "token").stat().st_mode & 0o777 == 0o600
    with zipfile.ZipFile(plugin) as archive:
        assert "pyroute2/__init__.py" in archive.namelist()
    # Runs without the project (only python3 and what the zip holds).
    result = subprocess.run(
        ["python3", str(plugin)], env={"CNI_COMMAND": "VERSION"}, cwd=tmp_path,
        capture_output=True, text=True, check=False,
    )  # fmt: skip
    assert result.returncode == 0, result.stderr
    assert '"supportedVersions"' in result.stdout
    assert install(**options) == []


def test_reclaim_runs_on_beat() -> None:
    entry = settings.CELERY_BEAT_SCHEDULE["sriov-reclaim"]
    assert entry["task"] == "sriov.tasks.sriov_reclaim_all"


def test_reclaim_task_reclaims_through_the_task(world: World, run_tasks: Any) -> None:
    from sriov.tasks import sriov_reclaim_all

    world.pod("web")
    world.add("web")
    with run_tasks():
        sriov_reclaim_all.delay()
    assert PodNic.objects.get().state == PodNic.State.ATTACHED  # its pod is alive
    assert not AuditEvent.objects.filter(action="sriov.nic_release").exists()


def _imports(path: Path) -> set[str]:
    found: set[str] = set()
    for node in ast.walk(ast.parse(path.read_text())):
        if isinstance(node, ast.Import):
            found.update(alias.name for alias in node.names)
        elif isinstance(node, ast.ImportFrom) and node.module and node.level == 0:
            found.add(node.module)
    return found


def test_clusters_and_gpus_import_nothing_from_sriov() -> None:
    offending = {
        str(path.relative_to(ROOT)): names
        for app in ("clusters", "gpus")
        for path in sorted((ROOT / app).rglob("*.py"))
        if (names := {m for m in _imports(path) if m.split(".")[0] == "sriov"})
    }
    assert offending == {}


def test_the_node_side_imports_no_django() -> None:
    for path in sorted((ROOT / "sriov" / "cni").glob("*.py")):
        roots = {m.split(".")[0] for m in _imports(path)}
        assert "django" not in roots and "rest_framework" not in roots, path

"""The deployment in deploy/: the image definition and the Kubernetes manifests, checked
against the Kubernetes schemas and against the application they run (its settings, its
URLs, its requirements)."""

from __future__ import annotations

import ast
import json
import re
import shutil
import subprocess
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import kubernetes_validate
import pytest
import yaml
from django.test import Client
from django.urls import resolve
from pytest_django.fixtures import Settings

from capvco_web import health

ROOT = Path(__file__).resolve().parent.parent
DOCKERFILE = ROOT / "deploy" / "Dockerfile"
KUBE = ROOT / "deploy" / "kubernetes"
KUSTOMIZATION = KUBE / "kustomization.yaml"
EXAMPLE_SECRET = KUBE / "secret.example.yaml"
# The oldest Kubernetes the manifests are for (preStop `sleep` is on by default from
# 1.30) and the newest whose schemas the pinned kubernetes-validate knows.
KUBERNETES_VERSIONS = ("1.30.0", kubernetes_validate.latest_version())
NAMESPACE = "capvco"
TMP = "/tmp"  # noqa: S108  the pods' own writable /tmp, an emptyDir


def load_all(path: Path) -> list[dict[str, Any]]:
    return [doc for doc in yaml.safe_load_all(path.read_text()) if doc]


def manifest_files() -> list[Path]:
    return sorted(p for p in KUBE.glob("*.yaml") if p != KUSTOMIZATION)


def kustomization() -> dict[str, Any]:
    [doc] = load_all(KUSTOMIZATION)
    return doc


def deployed() -> list[dict[str, Any]]:
    """Every resource that `kubectl apply -k deploy/kubernetes` applies."""
    return [doc for name in kustomization()["resources"] for doc in load_all(KUBE / name)]


def find(kind: str, name: str) -> dict[str, Any]:
    [doc] = [d for d in deployed() if d["kind"] == kind and d["metadata"]["name"] == name]
    return doc


def pod_specs() -> Iterator[tuple[str, dict[str, Any]]]:
    for doc in deployed():
        if doc["kind"] in ("Deployment", "Job"):
            yield doc["metadata"]["name"], doc["spec"]["template"]["spec"]


def containers(pod: dict[str, Any]) -> list[dict[str, Any]]:
    return [*pod.get("initContainers", []), *pod["containers"]]


def all_containers() -> Iterator[tuple[str, dict[str, Any]]]:
    for name, pod in pod_specs():
        for container in containers(pod):
            yield f"{name}/{container['name']}", container


def config_map() -> dict[str, str]:
    data: dict[str, str] = find("ConfigMap", "capvco-config")["data"]
    return data


def settings_read_from_environment() -> set[str]:
    """The variable names capvco_web/settings.py reads: env.X("NAME", ...) and
    os.environ.get("NAME") / os.environ["NAME"]."""
    tree = ast.parse((ROOT / "capvco_web" / "settings.py").read_text())

    def is_os_environ(node: ast.expr) -> bool:
        return (
            isinstance(node, ast.Attribute)
            and node.attr == "environ"
            and isinstance(node.value, ast.Name)
            and node.value.id == "os"
        )

    names: set[str] = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.Call) and isinstance(node.func, ast.Attribute) and node.args:
            first = node.args[0]
            reader = node.func.value
            by_env = isinstance(reader, ast.Name) and reader.id == "env"
            by_os = node.func.attr == "get" and is_os_environ(reader)
            if (by_env or by_os) and isinstance(first, ast.Constant):
                names.add(str(first.value))
        subscript = isinstance(node, ast.Subscript) and is_os_environ(node.value)
        if subscript and isinstance(node.slice, ast.Constant):
            names.add(str(node.slice.value))
    return names


# The image definition ---------------------------------------------------------------


def dockerfile_instructions() -> list[tuple[str, str]]:
    """(INSTRUCTION, arguments) with continuation lines joined and comments dropped."""
    instructions: list[tuple[str, str]] = []
    pending = ""
    for line in DOCKERFILE.read_text().splitlines():
        if line.strip().startswith("#") or (not line.strip() and not pending):
            continue
        pending += line.rstrip().removesuffix("\\") + " "
        if not line.rstrip().endswith("\\"):
            keyword, _, arguments = pending.strip().partition(" ")
            instructions.append((keyword.upper(), " ".join(arguments.split())))
            pending = ""
    return instructions


def dockerfile_env() -> dict[str, str]:
    values: dict[str, str] = {}
    for keyword, arguments in dockerfile_instructions():
        if keyword == "ENV":
            values.update(dict(pair.split("=", 1) for pair in arguments.split()))
    return values


INSTALLERS = re.compile(
    r"\b(pip3?|python3?(\.\d+)?\s+-m\s+pip)\s+install\b|\bapt(-get)?\s+install\b|\bapk\s+add\b"
    r"|\buv\s+(pip\s+install|add|sync)\b|\bpoetry\s+(install|add)\b|\bconda\s+install\b"
    r"|\beasy_install\b|\bpipx\s+install\b"
)


def test_image_installs_requirements_txt_with_pip_and_nothing_else() -> None:
    instructions = dockerfile_instructions()
    assert instructions[0] == ("FROM", "python:3.11-slim")
    commands = [
        " ".join(command.split())
        for keyword, arguments in instructions
        if keyword == "RUN"
        for command in re.split(r"&&|\|\||;", arguments)
    ]
    assert [c for c in commands if INSTALLERS.search(c)] == [
        "pip install --no-cache-dir -r requirements.txt"
    ]
    copied_before_install = instructions[
        : instructions.index(("RUN", "pip install --no-cache-dir -r requirements.txt"))
    ]
    assert ("COPY", "requirements.txt ./") in copied_before_install


def test_requirements_txt_pins_every_requirement_exactly() -> None:
    for line in (ROOT / "requirements.txt").read_text().splitlines():
        requirement = line.split("#", 1)[0].strip()
        if requirement:
            assert re.fullmatch(
                r"[A-Za-z0-9_.\-]+(\[[a-z,]+\])?==[0-9][0-9A-Za-z.]*", requirement
            ), line


def test_image_collects_static_files_with_production_storage_and_throwaway_keys() -> None:
    [collect] = [a for k, a in dockerfile_instructions() if k == "RUN" and "collectstatic" in a]
    # DEBUG off: the manifest storage that production serves with; keys made on the spot.
    assert "DEBUG=false" in collect
    assert re.search(r"SECRET_KEY=\"\$\(python -c", collect)
    assert re.search(r"FIELD_ENCRYPTION_KEY=\"\$\(python -c", collect)


def test_image_runs_gunicorn_as_a_non_root_user() -> None:
    instructions = dockerfile_instructions()
    [user] = [a for k, a in instructions if k == "USER"]
    uid, _, gid = user.partition(":")
    assert int(uid) > 0 and int(gid) > 0
    [cmd] = [a for k, a in instructions if k == "CMD"]
    assert json.loads(cmd)[:2] == ["gunicorn", "capvco_web.wsgi"]


def test_dockerignore_keeps_local_state_and_tests_out_of_the_image() -> None:
    # var/ holds `make run`'s run.env (DEBUG on) and generated keys.
    ignored = {
        line.strip().rstrip("/")
        for line in (ROOT / ".dockerignore").read_text().splitlines()
        if line.strip() and not line.startswith("#")
    }
    assert {".git", ".venv", "var", "tests", "**/__pycache__"} <= ignored


# The manifests ----------------------------------------------------------------------


@pytest.mark.parametrize("version", KUBERNETES_VERSIONS)
@pytest.mark.parametrize("path", manifest_files(), ids=lambda p: p.name)
def test_manifest_is_valid_kubernetes_with_no_unknown_field(path: Path, version: str) -> None:
    documents = load_all(path)
    assert documents
    for document in documents:
        kubernetes_validate.validate(document, version, strict=True)


def test_schema_validation_refuses_an_unknown_field() -> None:
    web = find("Deployment", "capvco-web")
    web["spec"]["template"]["spec"]["containers"][0]["readinesProbe"] = {}  # a typo
    with pytest.raises(kubernetes_validate.ValidationError, match="readinesProbe"):
        kubernetes_validate.validate(web, KUBERNETES_VERSIONS[-1], strict=True)


def test_kustomization_lists_every_manifest_but_the_example_secret() -> None:
    listed = kustomization()["resources"]
    assert len(listed) == len(set(listed))
    assert set(listed) == {p.name for p in manifest_files()} - {EXAMPLE_SECRET.name}
    assert kustomization()["namespace"] == NAMESPACE


def test_kustomize_builds_valid_resources_in_one_namespace() -> None:
    kubectl = shutil.which("kubectl")
    if kubectl is None:
        pytest.skip("kubectl is not installed")
    built = subprocess.run(
        [kubectl, "kustomize", str(KUBE)], capture_output=True, text=True, check=True, timeout=60
    ).stdout
    resources = [doc for doc in yaml.safe_load_all(built) if doc]
    # The manifests, and the ConfigMaps generated from files (the alert rules).
    generated = kustomization().get("configMapGenerator", [])
    assert len(resources) == len(deployed()) + len(generated)
    for resource in resources:
        kubernetes_validate.validate(resource, KUBERNETES_VERSIONS[-1], strict=True)
        if resource["kind"] != "Namespace":
            assert resource["metadata"]["namespace"] == NAMESPACE
        if resource["kind"] in ("Deployment", "Job"):
            for container in containers(resource["spec"]["template"]["spec"]):
                assert container["image"].startswith("registry.example.com/capvco-web:")


def test_settings_parser_finds_the_settings() -> None:
    # The checks below compare against this set: it must not come back empty.
    assert {"SECRET_KEY", "DATABASE_URL", "ALLOWED_HOSTS", "CAPVCO_VAR_DIR"} <= (
        settings_read_from_environment()
    )


def test_every_configured_variable_is_a_setting_or_used_by_its_container() -> None:
    read = settings_read_from_environment()
    assert set(config_map()) - read == set()
    for name, container in all_containers():
        arguments = " ".join([*container.get("command", []), *container.get("args", [])])
        for variable in container.get("env", []):
            assert variable["name"] in read or f"$({variable['name']})" in arguments, (
                f"{name} sets {variable['name']}, which neither settings.py nor its command reads"
            )


def test_every_secret_reference_names_a_key_of_the_example_secret() -> None:
    [example] = load_all(EXAMPLE_SECRET)
    keys = set(example["stringData"])
    referenced = set()
    for name, container in all_containers():
        for variable in container.get("env", []):
            ref = variable.get("valueFrom", {}).get("secretKeyRef")
            if ref:
                assert ref["name"] == example["metadata"]["name"], name
                assert ref["key"] in keys, f"{name}: no key {ref['key']} in the example Secret"
                referenced.add(ref["key"])
    assert referenced == keys  # and no key that nothing reads
    assert keys <= settings_read_from_environment()


def test_production_settings_behind_the_ingress() -> None:
    settings = config_map()
    assert settings["DEBUG"] == "false"
    assert not any(v["name"] == "DEBUG" for _, c in all_containers() for v in c.get("env", []))
    hosts = [rule["host"] for rule in find("Ingress", "capvco-web")["spec"]["rules"]]
    allowed = settings["ALLOWED_HOSTS"].split(",")
    origins = settings["CSRF_TRUSTED_ORIGINS"].split(",")
    for host in hosts:
        assert host in allowed
        assert f"https://{host}" in origins
    assert settings["TRUST_X_FORWARDED_PROTO"] == "true"
    # Empty allows no whitesky host at all: no account could be added.
    assert settings["WHITESKY_ALLOWED_HOSTS"]


def http_probes() -> Iterator[tuple[str, str, dict[str, Any]]]:
    for name, container in all_containers():
        for kind in ("startupProbe", "livenessProbe", "readinessProbe"):
            probe = container.get(kind, {}).get("httpGet")
            if probe:
                yield name, kind, probe


def test_probe_paths_are_the_health_views() -> None:
    views = {"startupProbe": health.healthz, "livenessProbe": health.healthz}
    views["readinessProbe"] = health.readyz
    probes = list(http_probes())
    assert {kind for _, kind, _ in probes} == set(views)
    for name, kind, probe in probes:
        path, _, query = probe["path"].partition("?")
        assert resolve(path).func is views[kind], f"{name} {kind}"
        checks = re.findall(r"check=(\w+)", query)
        assert set(checks) <= set(health.READINESS_CHECKS)
    [(_, _, readiness)] = [p for p in probes if p[1] == "readinessProbe"]
    # A web pod stays in its Service when beat stops: beat is not its to mend.
    assert readiness["path"] == "/readyz?check=database&check=broker"


@pytest.mark.django_db
def test_web_probes_answer_ok_over_http_with_the_production_host_settings(
    client: Client, settings: Settings
) -> None:
    settings.ALLOWED_HOSTS = config_map()["ALLOWED_HOSTS"].split(",")
    settings.SECURE_SSL_REDIRECT = True  # on in production: DEBUG is off
    pod_address = "10.244.1.7:8000"  # what the kubelet would send as Host by default
    # No beat tick was recorded: the web pod's readiness does not wait for beat.
    for name, kind, probe in http_probes():
        headers = {h["name"]: h["value"] for h in probe.get("httpHeaders", [])}
        response = client.get(probe["path"], HTTP_HOST=headers.get("Host", pod_address))
        assert response.status_code == 200, f"{name} {kind}: {response.status_code}"
        assert client.get(probe["path"], HTTP_HOST=pod_address).status_code == 400


def test_beat_runs_exactly_once() -> None:
    beat = find("Deployment", "capvco-beat")
    assert beat["spec"]["replicas"] == 1
    assert beat["spec"]["strategy"] == {"type": "Recreate"}
    beats = [
        name
        for name, container in all_containers()
        if "beat" in container.get("command", []) or "-B" in container.get("command", [])
    ]
    assert beats == ["capvco-beat/beat"]
    [container] = beat["spec"]["template"]["spec"]["containers"]
    assert container["command"][:4] == ["celery", "-A", "capvco_web", "beat"]


def test_the_kube_watch_runs_exactly_once_and_waits_for_the_migrations() -> None:
    watch = find("Deployment", "capvco-kube-watch")
    assert watch["spec"]["replicas"] == 1
    assert watch["spec"]["strategy"] == {"type": "Recreate"}
    pod = watch["spec"]["template"]["spec"]
    [container] = pod["containers"]
    assert container["command"] == ["python", "manage.py", "kube_watch"]
    [wait] = pod["initContainers"]
    assert "manage.py migrate --check" in " ".join(wait["command"])
    watches = [n for n, c in all_containers() if "kube_watch" in c.get("command", [])]
    assert watches == ["capvco-kube-watch/kube-watch"]


def test_workers_scale_out_with_their_concurrency_from_the_environment() -> None:
    worker = find("Deployment", "capvco-worker")
    [container] = worker["spec"]["template"]["spec"]["containers"]
    command = container["command"]
    assert command[:4] == ["celery", "-A", "capvco_web", "worker"]
    assert command[command.index("--concurrency") + 1] == "$(WORKER_CONCURRENCY)"
    assert "WORKER_CONCURRENCY" in {v["name"] for v in container["env"]}
    ping = " ".join(container["livenessProbe"]["exec"]["command"])
    assert 'inspect ping --destination "celery@$HOSTNAME"' in ping  # its own node only


def test_migration_job_migrates_and_new_pods_wait_for_it() -> None:
    job = find("Job", "capvco-migrate")
    [container] = job["spec"]["template"]["spec"]["containers"]
    assert container["command"] == ["python", "manage.py", "migrate", "--noinput"]
    for name in ("capvco-web", "capvco-worker"):
        pod = find("Deployment", name)["spec"]["template"]["spec"]
        [wait] = pod["initContainers"]
        assert "manage.py migrate --check" in " ".join(wait["command"])


def test_pods_run_unprivileged_with_a_read_only_root_filesystem() -> None:
    uid, _, gid = next(a for k, a in dockerfile_instructions() if k == "USER").partition(":")
    for name, pod in pod_specs():
        security = pod["securityContext"]
        assert security["runAsNonRoot"] is True, name
        assert (security["runAsUser"], security["runAsGroup"]) == (int(uid), int(gid)), name
        assert pod["automountServiceAccountToken"] is False, name
        for container in containers(pod):
            assert container["securityContext"] == {
                "allowPrivilegeEscalation": False,
                "readOnlyRootFilesystem": True,
                "capabilities": {"drop": ["ALL"]},
            }, name
            for bound in ("requests", "limits"):
                assert set(container["resources"][bound]) == {"cpu", "memory"}, name
            assert TMP in {m["mountPath"] for m in container["volumeMounts"]}, name


def test_beat_can_write_its_schedule_under_the_var_dir() -> None:
    pod = find("Deployment", "capvco-beat")["spec"]["template"]["spec"]
    [container] = pod["containers"]
    mounts = {m["mountPath"]: m["name"] for m in container["volumeMounts"]}
    var_dir = dockerfile_env()["CAPVCO_VAR_DIR"]
    volumes = {v["name"]: v for v in pod["volumes"]}
    assert "emptyDir" in volumes[mounts[var_dir]]


def test_service_and_disruption_budget_select_the_web_pods_only() -> None:
    def selected(selector: dict[str, str]) -> set[str]:
        return {
            name
            for name, labels in pod_labels.items()
            if all(labels.get(k) == v for k, v in selector.items())
        }

    pod_labels = {
        doc["metadata"]["name"]: doc["spec"]["template"]["metadata"]["labels"]
        for doc in deployed()
        if doc["kind"] in ("Deployment", "Job")
    }
    assert selected(find("Service", "capvco-web")["spec"]["selector"]) == {"capvco-web"}
    budget = find("PodDisruptionBudget", "capvco-web")["spec"]
    assert selected(budget["selector"]["matchLabels"]) == {"capvco-web"}
    assert budget["minAvailable"] < find("Deployment", "capvco-web")["spec"]["replicas"]
    for doc in deployed():
        if doc["kind"] == "Deployment":
            assert selected(doc["spec"]["selector"]["matchLabels"]) == {doc["metadata"]["name"]}

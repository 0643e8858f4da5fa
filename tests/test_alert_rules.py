"""The alert rules the deployment ships (deploy/kubernetes/capvco.rules.yml), held to a real
Prometheus' promtool: valid; each alert fires naming its account (`account_name`) once its
condition held for its `for`, for that account alone, and not before
(tests/alert_rules.test.yml); and each reads series that /metrics answers, with the
account they name."""

from __future__ import annotations

import re
import shutil
import subprocess
from pathlib import Path
from typing import Any

import pytest
import yaml
from django.test import Client
from django.utils import timezone
from prometheus_client.parser import text_string_to_metric_families

from autoscale.models import GpuShortfall
from capvco_web.counters import whitesky_call_count
from clusters.models import Machine, MachinePool
from tests.factories import (
    KubeNodeFactory,
    MachineFactory,
    VgpuReservationFactory,
    VirtualMachineFactory,
)

ROOT = Path(__file__).resolve().parent.parent
RULES = ROOT / "deploy" / "kubernetes" / "capvco.rules.yml"
UNIT_TESTS = ROOT / "tests" / "alert_rules.test.yml"
GUIDE = ROOT / "docs" / "guides" / "metrics.md"


def promtool() -> str:
    found = shutil.which("promtool")
    if found is None:
        pytest.fail("promtool is missing: bin/test installs Debian's prometheus package")
    return found


def alerts() -> list[dict[str, Any]]:
    groups = yaml.safe_load(RULES.read_text())["groups"]
    return [rule for group in groups for rule in group["rules"] if "alert" in rule]


def test_promtool_finds_the_rules_valid() -> None:
    checked = subprocess.run(
        [promtool(), "check", "rules", str(RULES)], capture_output=True, text=True, timeout=30
    )

    assert checked.returncode == 0, checked.stdout + checked.stderr
    assert f"SUCCESS: {len(alerts())} rules found" in checked.stdout


def test_each_alert_fires_naming_its_account_and_only_when_it_should() -> None:
    tested = subprocess.run(
        [promtool(), "test", "rules", str(UNIT_TESTS)], capture_output=True, text=True, timeout=60
    )

    assert tested.returncode == 0, tested.stdout + tested.stderr
    tests = yaml.safe_load(UNIT_TESTS.read_text())["tests"]
    cases = [case for test in tests for case in test["alert_rule_test"]]
    for alert in alerts():
        mine = [case for case in cases if case["alertname"] == alert["alert"]]
        fired = [expected for case in mine for expected in case["exp_alerts"]]
        assert fired, f"{alert['alert']}: no case where it fires"
        assert any(not case["exp_alerts"] for case in mine), f"{alert['alert']}: never quiet"
        for expected in fired:
            assert {"account", "account_name"} <= set(expected["exp_labels"]), alert["alert"]


def test_the_rules_read_series_that_metrics_answers_with_their_account(
    db: None, settings: Any
) -> None:
    settings.METRICS_ALLOWED_IPS = ["127.0.0.1"]  # the test client's address
    machine = MachineFactory(phase=Machine.Phase.FAILED)
    MachinePool.objects.filter(pk=machine.pool_id).update(gpu_type="NVIDIA A100", gpu_count=1)
    KubeNodeFactory(cluster=machine.pool.cluster, machine=machine)  # a GPU node, not verified
    location = VgpuReservationFactory(orphaned=True).location
    VirtualMachineFactory(location=location, orphaned_since=timezone.now())
    whitesky_call_count(location.account_id, "listVMs", "503")
    now = timezone.now()
    GpuShortfall.objects.create(
        cluster=machine.pool.cluster, gpu_type="nvidia-a100", gpus=2, pods=1, text="a100 x 2",
        since=now, oldest_pod_since=now, updated_at=now,
    )  # fmt: skip

    response = Client().get("/metrics")

    assert response.status_code == 200
    labels: dict[str, list[dict[str, str]]] = {}
    for family in text_string_to_metric_families(response.content.decode()):
        for sample in family.samples:
            labels.setdefault(sample.name, []).append(sample.labels)
    read = {name for alert in alerts() for name in re.findall(r"capvco_[a-z_]+", alert["expr"])}
    assert "capvco_vms_orphaned" in read
    for name in read:
        assert labels.get(name), f"/metrics answers no {name}"
        assert all("account" in series for series in labels[name]), name
    account = str(machine.pool.cluster.account_id)
    assert {"account": account, "phase": "failed"} in labels["capvco_machines"]


def test_the_deployment_ships_the_rules_and_the_guide_points_to_them() -> None:
    kustomization = yaml.safe_load((RULES.parent / "kustomization.yaml").read_text())
    generators = kustomization["configMapGenerator"]
    [generated] = [g for g in generators if g["name"] == "capvco-prometheus-rules"]
    assert generated["files"] == [RULES.name]
    guide = GUIDE.read_text()
    assert "deploy/kubernetes/capvco.rules.yml" in guide
    assert "- alert:" not in guide, "the guide refers to the rules file, not a copy"

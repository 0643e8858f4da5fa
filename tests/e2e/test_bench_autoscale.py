"""The autoscaling benchmark's short trace, end to end on the real processes (a worker
with beat, the whitesky simulator, the fake Kubernetes API with its scheduler and
joiner): every pod runs, following the pods (the model of cluster-autoscaler, and the
control plane's own autoscaler) pays less than static pools sized for the peak, the
autoscaler pays mostly at the cheaper location, and once the pools are at 0 nothing is
billed."""

from __future__ import annotations

from pathlib import Path

import pytest
from django.conf import settings

from tests.bench.bench_autoscale import arguments, policies_run, trace_of
from tests.conftest import require

pytestmark = [pytest.mark.e2e, pytest.mark.django_db(transaction=True)]


def test_a_short_trace_runs_every_pod_and_following_the_pods_pays_less_than_static_pools(
    tmp_path: Path, require_postgres: None
) -> None:
    require(settings.CELERY_BROKER_URL.startswith("redis://"), "needs Redis (set REDIS_URL)")
    args = arguments(["--short", "--policies", "static,ca-model,autoscaler"])
    jobs = trace_of(args)

    static, *following = policies_run(jobs, args, tmp_path)

    for result in (static, *following):
        assert (result.never_ran, result.lost) == (0, 0), result.as_json()
        assert result.left_billed == 0, result.as_json()
        assert result.run_gpu_hours > 0
    for result in following:
        assert result.machines_made > 0
        assert result.waste < static.waste, (result.as_json(), static.as_json())
    autoscaler = following[-1]
    assert autoscaler.cheaper_share > 0.5, autoscaler.as_json()  # ca-model's is by chance

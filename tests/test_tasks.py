"""How tasks are sent: only once the transaction that asked for them has committed."""

from __future__ import annotations

from collections.abc import Callable
from contextlib import AbstractContextManager

import pytest
from django.db import transaction

from capvco_web.models import Heartbeat
from capvco_web.tasks import WORKERS, heartbeat, send_on_commit

pytestmark = pytest.mark.django_db


def test_a_task_sent_in_a_transaction_runs_only_once_it_commits(
    run_tasks: Callable[[], AbstractContextManager[None]],
) -> None:
    with run_tasks():
        with transaction.atomic():
            send_on_commit(heartbeat)
        assert not Heartbeat.objects.filter(name=WORKERS).exists()
    assert Heartbeat.objects.filter(name=WORKERS).exists()


def test_a_task_sent_in_a_transaction_that_rolls_back_is_never_sent(
    run_tasks: Callable[[], AbstractContextManager[None]],
) -> None:
    with run_tasks():
        try:
            with transaction.atomic():
                send_on_commit(heartbeat)
                raise RuntimeError("the change failed")
        except RuntimeError:
            pass
    assert not Heartbeat.objects.filter(name=WORKERS).exists()

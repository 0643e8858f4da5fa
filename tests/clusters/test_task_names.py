"""Services start tasks by name (they never import a tasks module, which imports them):
each name they send is a task the workers know."""

from __future__ import annotations

from typing import Any

import pytest
from celery import current_app
from django.contrib.auth.models import Permission

from capvco_web.celery import app
from cloud.models import Account
from clusters.services import OBSERVE_ACCOUNT, account_create
from tests.factories import JWT, UserFactory


def test_the_task_names_services_send_are_tasks_the_workers_know() -> None:
    app.loader.import_default_modules()  # what a worker imports at start
    assert OBSERVE_ACCOUNT in app.tasks


@pytest.mark.django_db
def test_a_new_account_is_observed_at_once(
    monkeypatch: pytest.MonkeyPatch, django_capture_on_commit_callbacks: Any
) -> None:
    sent: list[tuple[str, tuple[Any, ...]]] = []
    monkeypatch.setattr(current_app, "send_task", lambda name, args: sent.append((name, args)))
    creator = UserFactory()
    creator.user_permissions.add(Permission.objects.get(codename="add_account"))
    with django_capture_on_commit_callbacks(execute=True):
        account = account_create(
            account=Account(
                name="new",
                api_url="https://vco.example/api/1",
                iam_url="https://iam.example",
                customer_id="c-new",
                credential=JWT,
            ),
            actor=creator,
        )
    assert sent == [(OBSERVE_ACCOUNT, (account.pk, True))]

"""Settings for the test suite: production settings (DEBUG off) with test secrets.

The environment wins: bin/test sets DATABASE_URL and REDIS_URL to the real services.
"""

import os
import secrets

# One id per test run, inherited by the processes the tests start: the test database and
# the broker's Redis keys carry it, so two runs on one host never clobber each other.
RUN_ID = os.environ.setdefault("CAPVCO_TEST_RUN", secrets.token_hex(4))
# Production settings, whatever a `make run` in this checkout chose (var/run.env).
os.environ.setdefault("DEBUG", "false")
os.environ.setdefault("SECRET_KEY", "test-only-secret-key-0123456789-abcdefghijklmnopqrstuvwxyz")
os.environ.setdefault("FIELD_ENCRYPTION_KEY", "htgXJP0UgilcdVIebSR-PxKBoKLHkse9A0IAUXYzPSI=")
os.environ.setdefault("ALLOWED_HOSTS", "testserver,127.0.0.1,localhost")
# The test client and the live server speak plain HTTP.
for name in ("SECURE_SSL_REDIRECT", "SESSION_COOKIE_SECURE", "CSRF_COOKIE_SECURE"):
    os.environ.setdefault(name, "false")
# The hosts the factories' accounts name; a whitesky simulator adds its own address when it
# starts (tests/whitesky_sim.py).
os.environ.setdefault("WHITESKY_ALLOWED_HOSTS", "vco.example,iam.example")
# The Kubernetes API servers the tests' kubeconfigs name; a fake Kubernetes API adds its own
# origin when it starts (tests/kube_sim.py).
os.environ.setdefault("KUBE_ALLOWED_HOSTS", "api.prod.example,api.other.example,mgmt.example")
# GPU verification makes a Job per GPU node: the tests of other things count the calls a
# pass makes without it; tests/kube/test_gpu_verify.py turns it on.
os.environ.setdefault("GPU_VERIFY", "false")
REDIS_URL = os.environ.setdefault("REDIS_URL", "redis://127.0.0.1:6379")
# Database 15 keeps the tests' queues apart from a control plane running beside them;
# the run's key prefix keeps two test runs apart, and an xdist worker's name in it (gw0,
# inherited by the processes it starts) two workers of one run: one worker's Celery
# worker never takes the other's tasks, nor its counters. pytest-django gives each
# worker's test database the same suffix.
os.environ.setdefault("CELERY_BROKER_URL", f"{REDIS_URL}/15")
XDIST_WORKER = os.environ.get("PYTEST_XDIST_WORKER", "")
BROKER_KEY_PREFIX = f"capvco-test-{RUN_ID}{f'-{XDIST_WORKER}' if XDIST_WORKER else ''}:"

from capvco_web.settings import *  # noqa: E402,F403

METRICS_KEY_PREFIX = BROKER_KEY_PREFIX

STORAGES = {
    "default": {"BACKEND": "django.core.files.storage.FileSystemStorage"},
    "staticfiles": {"BACKEND": "django.contrib.staticfiles.storage.StaticFilesStorage"},
}
# Throttle counts in this process's memory, emptied before each test (conftest).
CACHES = {"default": {"BACKEND": "django.core.cache.backends.locmem.LocMemCache"}}
PASSWORD_HASHERS = ["django.contrib.auth.hashers.MD5PasswordHasher"]  # fast, tests only
WHITENOISE_USE_FINDERS = True  # serve static/ without collectstatic
STATIC_ROOT.mkdir(parents=True, exist_ok=True)  # noqa: F405

if DATABASES["default"]["ENGINE"] != "django.db.backends.sqlite3":  # noqa: F405
    DATABASES["default"]["TEST"] = {"NAME": f"test_capvco_{RUN_ID}"}  # noqa: F405
if CELERY_BROKER_URL.startswith("redis://"):  # noqa: F405
    CELERY_BROKER_TRANSPORT_OPTIONS = {
        **CELERY_BROKER_TRANSPORT_OPTIONS,  # noqa: F405
        "global_keyprefix": BROKER_KEY_PREFIX,
    }

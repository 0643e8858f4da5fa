"""Settings, all read in this one place from the environment, over what `make run` chose
(see docs/configuration.md)."""

from __future__ import annotations

import os
from datetime import timedelta
from pathlib import Path

import django_stubs_ext
import environ
from django.core.exceptions import ImproperlyConfigured

from capvco_web.environment import (
    broker_transport_options,
    cache_config,
    database_config,
    default_broker_url,
    encryption_keys,
    kube_resync_seconds,
    new_encryption_key,
    new_secret_key,
    notify_webhook_hosts,
    observe_pass_seconds,
    pool_max_replicas,
    secret_from_env,
    settings_environment,
    throttle_rate,
    whitesky_allowed_hosts,
    whitesky_proxy_url,
)
from capvco_web.integrations.kube.servers import AllowedServers

django_stubs_ext.monkeypatch()

BASE_DIR = Path(__file__).resolve().parent.parent
VAR_DIR = Path(os.environ.get("CAPVCO_VAR_DIR") or BASE_DIR / "var")

# The environment, over what `make run` chose for this checkout (var/run.env, when there is
# one): a later manage.py or celery gets the same settings as the processes it started.
env = environ.Env()
env.ENVIRON = settings_environment(VAR_DIR, os.environ)

DEBUG = env.bool("DEBUG", default=False)

SECRET_KEY = secret_from_env(
    env.str("SECRET_KEY", default=""),
    name="SECRET_KEY",
    path=VAR_DIR / "secret_key",
    debug=DEBUG,
    make=new_secret_key,
)
# Secrets at rest (whitesky credentials, kubeconfigs, agent tokens) are encrypted with
# the first key; the others still decrypt, so keys can be rotated.
FIELD_ENCRYPTION_KEYS = encryption_keys(
    secret_from_env(
        env.str("FIELD_ENCRYPTION_KEY", default=""),
        name="FIELD_ENCRYPTION_KEY",
        path=VAR_DIR / "field_encryption_key",
        debug=DEBUG,
        make=new_encryption_key,
    )
)

ALLOWED_HOSTS = env.list("ALLOWED_HOSTS", default=["127.0.0.1", "localhost"])
CSRF_TRUSTED_ORIGINS = env.list("CSRF_TRUSTED_ORIGINS", default=[])

INSTALLED_APPS = [
    "django.contrib.admin",
    "django.contrib.auth",
    "django.contrib.contenttypes",
    "django.contrib.sessions",
    "django.contrib.messages",
    "django.contrib.staticfiles",
    "rest_framework",
    "drf_spectacular",
    "drf_spectacular_sidecar",
    "django_filters",
    "django_htmx",
    "template_partials",
    "axes",
    "capvco_web",
    "cloud",
    "clusters",
    "kube",
    "gpus",
    "sriov",
    "billing",
    "autoscale",
    "dashboard",
    "notify",
]

# A user's role in an account (capvco_web.permissions): the one model the permission
# machinery reads, named so that capvco_web imports no app.
MEMBERSHIP_MODEL = "cloud.Membership"

MIDDLEWARE = [
    "django.middleware.security.SecurityMiddleware",
    "capvco_web.security.SecurityHeadersMiddleware",
    "whitenoise.middleware.WhiteNoiseMiddleware",
    # The database unreachable answers 503 (within the security headers above).
    "capvco_web.middleware.DatabaseUnavailableMiddleware",
    "django.contrib.sessions.middleware.SessionMiddleware",
    "django.middleware.common.CommonMiddleware",
    "django.middleware.csrf.CsrfViewMiddleware",
    "django.contrib.auth.middleware.AuthenticationMiddleware",
    "capvco_web.auth.SessionIdleTimeoutMiddleware",
    "capvco_web.auth.LoginRequiredMiddleware",
    "django.contrib.messages.middleware.MessageMiddleware",
    "django.middleware.clickjacking.XFrameOptionsMiddleware",
    "django_htmx.middleware.HtmxMiddleware",
    # Last, as django-axes asks: turns a locked-out login into its 429 page.
    "axes.middleware.AxesMiddleware",
]

ROOT_URLCONF = "capvco_web.urls"
WSGI_APPLICATION = "capvco_web.wsgi.application"

TEMPLATES = [
    {
        "BACKEND": "django.template.backends.django.DjangoTemplates",
        "DIRS": [BASE_DIR / "templates"],
        "APP_DIRS": True,
        "OPTIONS": {
            "context_processors": [
                "django.template.context_processors.request",
                "django.contrib.auth.context_processors.auth",
                "django.contrib.messages.context_processors.messages",
                "dashboard.context.dashboard",
            ],
        },
    },
]

DATABASES = {
    "default": database_config(
        env.str("DATABASE_URL", default=f"sqlite:///{VAR_DIR / 'capvco.sqlite3'}")
    )
}
DEFAULT_AUTO_FIELD = "django.db.models.BigAutoField"

AUTH_PASSWORD_VALIDATORS = [
    {"NAME": "django.contrib.auth.password_validation.UserAttributeSimilarityValidator"},
    {"NAME": "django.contrib.auth.password_validation.MinimumLengthValidator"},
    {"NAME": "django.contrib.auth.password_validation.CommonPasswordValidator"},
    {"NAME": "django.contrib.auth.password_validation.NumericPasswordValidator"},
]
# django-axes sees every login (form and admin) first, to count failures and lock out.
AUTHENTICATION_BACKENDS = [
    "axes.backends.AxesStandaloneBackend",
    "django.contrib.auth.backends.ModelBackend",
]
LOGIN_URL = "login"
LOGIN_REDIRECT_URL = "dashboard:overview"
LOGOUT_REDIRECT_URL = "login"

LANGUAGE_CODE = "en-us"
TIME_ZONE = "UTC"
USE_I18N = False
USE_TZ = True

STATIC_URL = "static/"
STATICFILES_DIRS = [BASE_DIR / "static"]
STATIC_ROOT = VAR_DIR / "static"
STORAGES = {
    "default": {"BACKEND": "django.core.files.storage.FileSystemStorage"},
    "staticfiles": {
        "BACKEND": (
            "django.contrib.staticfiles.storage.StaticFilesStorage"
            if DEBUG
            else "whitenoise.storage.CompressedManifestStaticFilesStorage"
        )
    },
}

# Transport security. Defaults are strict whenever DEBUG is off; health probes stay on HTTP.
SECURE_SSL_REDIRECT = env.bool("SECURE_SSL_REDIRECT", default=not DEBUG)
SECURE_REDIRECT_EXEMPT = [r"^healthz$", r"^readyz$"]
SESSION_COOKIE_SECURE = env.bool("SESSION_COOKIE_SECURE", default=not DEBUG)
CSRF_COOKIE_SECURE = env.bool("CSRF_COOKIE_SECURE", default=not DEBUG)
SECURE_HSTS_SECONDS = env.int("SECURE_HSTS_SECONDS", default=0 if DEBUG else 31536000)
SECURE_HSTS_INCLUDE_SUBDOMAINS = env.bool("SECURE_HSTS_INCLUDE_SUBDOMAINS", default=not DEBUG)
SECURE_HSTS_PRELOAD = env.bool("SECURE_HSTS_PRELOAD", default=not DEBUG)
if env.bool("TRUST_X_FORWARDED_PROTO", default=False):
    SECURE_PROXY_SSL_HEADER = ("HTTP_X_FORWARDED_PROTO", "https")
SESSION_COOKIE_HTTPONLY = True
# Database sessions whose update a database out of reach does not turn into a 400.
SESSION_ENGINE = "capvco_web.sessions"
X_FRAME_OPTIONS = "DENY"
# A browser session ends after this long without activity (capvco_web.auth slides it).
SESSION_COOKIE_AGE = env.int("SESSION_IDLE_TIMEOUT_SECONDS", default=8 * 3600)
# Scripts and styles from our own static files only: no inline script or style (htmx is
# told not to inject its indicator style: see base.html).
CONTENT_SECURITY_POLICY = "; ".join(
    [
        "default-src 'self'",
        "script-src 'self'",
        "style-src 'self'",
        "img-src 'self' data:",
        "connect-src 'self'",
        "object-src 'none'",
        "base-uri 'none'",
        "form-action 'self'",
        "frame-ancestors 'none'",
    ]
)

# Login lockout (django-axes), for the login page and the admin's: after
# LOGIN_FAILURE_LIMIT wrong passwords for one user name from one address, that pair is
# refused for LOGIN_LOCKOUT_MINUTES (each further try starts the wait again). An admin
# unlocks earlier: docs/runbook.md.
AXES_FAILURE_LIMIT = env.int("LOGIN_FAILURE_LIMIT", default=5)
AXES_COOLOFF_TIME = timedelta(minutes=env.int("LOGIN_LOCKOUT_MINUTES", default=15))
AXES_LOCKOUT_PARAMETERS = [["username", "ip_address"]]
AXES_RESET_ON_SUCCESS = True
AXES_LOCKOUT_CALLABLE = "capvco_web.auth.login_lockout_response"
AXES_CLIENT_IP_CALLABLE = "capvco_web.auth.client_address"
AXES_VERBOSE = False  # no banner on every start; lockouts are still logged
# Proxies in front of the web server that append the caller's address to
# X-Forwarded-For; 0 trusts no such header.
TRUSTED_PROXY_COUNT = env.int("TRUSTED_PROXY_COUNT", default=0)

REST_FRAMEWORK = {
    # Tokens first: a call without credentials answers 401 with WWW-Authenticate. No HTTP
    # Basic (a password hash per call): see capvco_web/auth.py.
    "DEFAULT_AUTHENTICATION_CLASSES": [
        "capvco_web.auth.ApiTokenAuthentication",
        "rest_framework.authentication.SessionAuthentication",
    ],
    "DEFAULT_PERMISSION_CLASSES": ["rest_framework.permissions.IsAuthenticated"],
    "DEFAULT_THROTTLE_CLASSES": [
        "capvco_web.auth.AnonRateThrottle",
        "capvco_web.auth.UserRateThrottle",
    ],
    "DEFAULT_THROTTLE_RATES": {
        "anon": throttle_rate(env.str("API_RATE_ANON", default="60/minute"), "API_RATE_ANON"),
        "user": throttle_rate(env.str("API_RATE_USER", default="1200/minute"), "API_RATE_USER"),
        "failed_token_auth": throttle_rate(
            env.str("API_RATE_FAILED_AUTH", default="10/minute"), "API_RATE_FAILED_AUTH"
        ),
        # The agent API's own (sriov/api/agent.py): calls per node token, and refused
        # agent tokens per address (a valid token is never refused for those).
        "sriov_agent": throttle_rate(
            env.str("SRIOV_AGENT_RATE", default="600/minute"), "SRIOV_AGENT_RATE"
        ),
        "sriov_agent_failed_auth": throttle_rate(
            env.str("SRIOV_AGENT_RATE_FAILED_AUTH", default="10/minute"),
            "SRIOV_AGENT_RATE_FAILED_AUTH",
        ),
    },
    "NUM_PROXIES": TRUSTED_PROXY_COUNT,
    # JSON in (bounded in depth), JSON or the browsable API out.
    "DEFAULT_PARSER_CLASSES": ["capvco_web.api_input.JSONParser"],
    "DEFAULT_SCHEMA_CLASS": "capvco_web.api_schema.ApiSchema",
    "EXCEPTION_HANDLER": "capvco_web.api.exception_handler",
    "DEFAULT_FILTER_BACKENDS": ["django_filters.rest_framework.DjangoFilterBackend"],
    "DEFAULT_PAGINATION_CLASS": "capvco_web.api_input.Pagination",
    "PAGE_SIZE": 100,
    "TEST_REQUEST_DEFAULT_FORMAT": "json",
}
SPECTACULAR_SETTINGS = {
    "TITLE": "capvco-web API",
    "DESCRIPTION": "GPUs and SR-IOV NICs of Kubernetes clusters on whitesky.cloud. Every "
    "error answers `{detail, code}`, and invalid input also `fields`: the messages per field.",
    "VERSION": "1",
    "SERVE_INCLUDE_SCHEMA": False,
    "SERVE_PERMISSIONS": ["rest_framework.permissions.IsAuthenticated"],
    # Several models have a `state`; each set of choices gets a name of its own.
    "ENUM_NAME_OVERRIDES": {
        "PodNicStateEnum": "sriov.models.PodNic.State",
        "VgpuReservationStateEnum": "gpus.models.VgpuReservation.State",
        # Named, so that another `kind` (a leak's) leaves the agent token's name alone.
        "KindEnum": ["enrollment", "node"],
        "LeakKindEnum": "billing.models.Leak.Kind",
        "LeakEndEnum": "billing.models.Leak.End",
        "CostSeriesStepEnum": "billing.selectors.SERIES_STEPS",
    },
    # Request bodies get their own components: without read-only fields, and strict.
    "COMPONENT_SPLIT_REQUEST": True,
    # Swagger UI from our own static files (drf-spectacular-sidecar), never a CDN.
    "SWAGGER_UI_DIST": "SIDECAR",
    "SWAGGER_UI_FAVICON_HREF": "SIDECAR",
    "REDOC_DIST": "SIDECAR",
    # No badge fetched from validator.swagger.io: the page talks to us only (and the CSP
    # would block it).
    "SWAGGER_UI_SETTINGS": {"deepLinking": True, "validatorUrl": None},
}

# Celery. Tasks are idempotent: they are acknowledged after they ran and redelivered
# when a worker dies mid-task.
CELERY_TASK_SOFT_TIME_LIMIT = env.int("CELERY_TASK_SOFT_TIME_LIMIT", default=120)
CELERY_TASK_TIME_LIMIT = env.int("CELERY_TASK_TIME_LIMIT", default=180)
# Unset, the private Redis of this var dir, on a unix socket (`make run` starts it): never
# one another checkout on the host uses.
CELERY_BROKER_URL = env.str("CELERY_BROKER_URL", default="") or default_broker_url(VAR_DIR)
# With Redis, the task of a killed worker is delivered again a little after the time limit.
CELERY_BROKER_TRANSPORT_OPTIONS = broker_transport_options(
    CELERY_BROKER_URL, task_time_limit=CELERY_TASK_TIME_LIMIT
)
CELERY_BROKER_CONNECTION_RETRY_ON_STARTUP = True
CELERY_TASK_IGNORE_RESULT = True
CELERY_TASK_ACKS_LATE = True
CELERY_TASK_REJECT_ON_WORKER_LOST = True
CELERY_WORKER_PREFETCH_MULTIPLIER = 1
CELERY_BEAT_SCHEDULE_FILENAME = str(VAR_DIR / "celerybeat-schedule")

# The cache, shared by the web processes: the API's throttle counts. By default the
# broker's Redis, else (a broker that is not Redis) each process counts on its own.
CACHES = {"default": cache_config(env.str("CACHE_URL", default=""), broker_url=CELERY_BROKER_URL)}

# The beat schedule, in one place. Readiness fails when the last heartbeat is older than
# twice its interval.
HEARTBEAT_INTERVAL = timedelta(seconds=env.float("HEARTBEAT_INTERVAL_SECONDS", default=15))
OBSERVE_INTERVAL = timedelta(seconds=env.float("OBSERVE_INTERVAL_SECONDS", default=30))
RECONCILE_INTERVAL = timedelta(seconds=env.float("RECONCILE_INTERVAL_SECONDS", default=30))
# A cluster whose plan's inputs did not change since its last empty plan is not planned
# again, except at least this often (the resync).
RECONCILE_RESYNC = timedelta(seconds=env.float("RECONCILE_RESYNC_SECONDS", default=600))
ORPHAN_SWEEP_INTERVAL = timedelta(seconds=env.float("ORPHAN_SWEEP_INTERVAL_SECONDS", default=60))
# The record of each plan pass (capvco_web.PlanPass): the last this many per cluster/location.
PLAN_PASSES_KEPT = max(1, env.int("PLAN_PASSES_KEPT", default=50))
SRIOV_RECLAIM_INTERVAL = timedelta(seconds=env.float("SRIOV_RECLAIM_INTERVAL_SECONDS", default=60))
# A VM's queue of NIC requests whose runner died goes on within this.
SRIOV_QUEUE_RESUME_INTERVAL = timedelta(
    seconds=env.float("SRIOV_QUEUE_RESUME_INTERVAL_SECONDS", default=10)
)
HISTORY_PRUNE_INTERVAL = timedelta(days=1)
# Cloudspaces and images change seldom: the choices a new cluster is set up with.
CATALOG_OBSERVE_INTERVAL = timedelta(
    seconds=env.float("CATALOG_OBSERVE_INTERVAL_SECONDS", default=300)
)

# Webhook notifications: leaks, failed machines and stale locations looked for and due
# messages sent this often.
NOTIFY_INTERVAL = timedelta(seconds=env.float("NOTIFY_INTERVAL_SECONDS", default=60))
# Notifications: at most this many webhook targets per account (each is posted to in the
# account's own pass, which ends after NOTIFY_SEND_SECONDS).
NOTIFY_TARGETS_PER_ACCOUNT = env.int("NOTIFY_TARGETS_PER_ACCOUNT", default=20)
# Notifications: at most this many test messages an account may ask for in a minute (and
# one at a time per target); a worker posts them, never the web request.
NOTIFY_TESTS_PER_ACCOUNT_MINUTE = env.int("NOTIFY_TESTS_PER_ACCOUNT_MINUTE", default=10)
# Notifications: an account's pass stops posting after this many seconds (a post waits at
# most 5 s to connect and 10 s for an answer); what is left goes in its next pass.
NOTIFY_SEND_SECONDS = env.float("NOTIFY_SEND_SECONDS", default=45)
# Notifications: a GPU node's GPUs idle (attached, asked for by no pod) this long are told.
NOTIFY_IDLE_GPU_AFTER = timedelta(hours=env.float("NOTIFY_IDLE_GPU_HOURS", default=24))
# Money: the hour's cost and capacity rollup (taken by the first pass in each hour, so this
# must be well under an hour) and the idle GPU nodes, this often.
BILLING_INTERVAL = timedelta(seconds=env.float("BILLING_INTERVAL_SECONDS", default=300))
# The leak ledger follows observe's flags and our releases: as often as observe.
LEAK_LEDGER_INTERVAL = timedelta(
    seconds=env.float("LEAK_LEDGER_INTERVAL_SECONDS", default=OBSERVE_INTERVAL.total_seconds())
)
# whitesky's bill against what we own (billing.bills): each pass checks, per location, the
# last BILL_CHECK_HOURS_BACK finished hours not checked yet, oldest first, with at most
# BILL_CHECK_CALLS_PER_PASS consumption calls per account.
BILL_CHECK_INTERVAL = timedelta(seconds=env.float("BILL_CHECK_INTERVAL_SECONDS", default=300))
BILL_CHECK_HOURS_BACK = env.int("BILL_CHECK_HOURS_BACK", default=6)
BILL_CHECK_CALLS_PER_PASS = env.int("BILL_CHECK_CALLS_PER_PASS", default=12)


# The pool autoscaler (docs/guides/gpu.md, "Let pools follow the pods"): how often it
# plans; how long a machine's GPUs go unrequested before it is drained (cluster-
# autoscaler's --scale-down-unneeded-time, 10 min); and how long after a pool grew none of
# its machines is drained (its --scale-down-delay-after-add, 10 min).
AUTOSCALE_INTERVAL = timedelta(seconds=env.float("AUTOSCALE_INTERVAL_SECONDS", default=15))
AUTOSCALE_IDLE = timedelta(minutes=env.float("AUTOSCALE_IDLE_MINUTES", default=10))
AUTOSCALE_DOWN_DELAY_AFTER_UP = timedelta(
    minutes=env.float("AUTOSCALE_DOWN_DELAY_AFTER_UP_MINUTES", default=10)
)


def _every(task: str, interval: timedelta) -> dict[str, object]:
    # A tick that waited longer than its interval is dropped: the next one does the same.
    return {"task": task, "schedule": interval, "options": {"expires": interval.total_seconds()}}


CELERY_BEAT_SCHEDULE = {
    "heartbeat": _every("capvco_web.tasks.heartbeat", HEARTBEAT_INTERVAL),
    "observe": _every("clusters.tasks.observe_all", OBSERVE_INTERVAL),
    "observe-kube": _every("kube.tasks.observe_kube_all", OBSERVE_INTERVAL),
    "reconcile": _every("clusters.tasks.reconcile_all", RECONCILE_INTERVAL),
    "orphan-sweep": _every("clusters.tasks.orphan_sweep_all", ORPHAN_SWEEP_INTERVAL),
    "sriov-reclaim": _every("sriov.tasks.sriov_reclaim_all", SRIOV_RECLAIM_INTERVAL),
    "sriov-queues": _every("sriov.tasks.sriov_vm_queues_resume", SRIOV_QUEUE_RESUME_INTERVAL),
    "history-prune": _every("capvco_web.tasks.history_prune", HISTORY_PRUNE_INTERVAL),
    "observe-catalog": _every("clusters.tasks.observe_catalog_all", CATALOG_OBSERVE_INTERVAL),
    "notify": _every("notify.tasks.notify_pass", NOTIFY_INTERVAL),
    "billing": _every("billing.tasks.billing_pass", BILLING_INTERVAL),
    "leak-ledger": _every("billing.tasks.leak_ledger_pass", LEAK_LEDGER_INTERVAL),
    "bill-check": _every("billing.tasks.bill_check_all", BILL_CHECK_INTERVAL),
    "autoscale": _every("autoscale.tasks.autoscale_all", AUTOSCALE_INTERVAL),
}

# History kept: released vGPU reservations and audit events older than this many days are
# deleted once a day (and by `manage.py history_prune`); 0 keeps them for ever.
RESERVATION_HISTORY_DAYS = env.int("RESERVATION_HISTORY_DAYS", default=90)
AUDIT_HISTORY_DAYS = env.int("AUDIT_HISTORY_DAYS", default=365)
# Money history (billing.history): hourly cost and capacity rollups and bill checks, and
# the day rollups and ended leaks, kept this many days (0: for ever). An hourly row is
# deleted only once its day is summed.
COST_HOURLY_HISTORY_DAYS = env.int("COST_HOURLY_HISTORY_DAYS", default=60)
COST_HISTORY_DAYS = env.int("COST_HISTORY_DAYS", default=400)

# The most machines one pool may ask for. A GPU pool of 1,000 machines is ordinary at large
# sites; past that, split the pool (each pool is planned and rolled out on its own, and a
# pass over 10,000 machines of one cluster is what tests/bench/bench_plan.py measures).
POOL_MAX_REPLICAS = pool_max_replicas(env.int("POOL_MAX_REPLICAS", default=1000))

# How often the dashboard's panels refresh themselves.
DASHBOARD_POLL_SECONDS = env.int("DASHBOARD_POLL_SECONDS", default=10)

# whitesky: the hosts an account's API and IAM URLs may name, so the credential goes nowhere
# else: `host` (https on port 443), `https://host:port`, or `http://host:port` (plain http to
# exactly that origin, e.g. the simulator). `make run` adds its simulator's.
WHITESKY_ALLOWED_HOSTS = whitesky_allowed_hosts(env.str("WHITESKY_ALLOWED_HOSTS", default=""))
# Notifications: the hosts a webhook target's URL may name, written as
# WHITESKY_ALLOWED_HOSTS is ("": no webhook may be sent anywhere). `make run` adds
# http://127.0.0.1:$NOTIFY_RECEIVER_PORT (8090), for a receiver on that machine.
NOTIFY_WEBHOOK_HOSTS = notify_webhook_hosts(env.str("NOTIFY_WEBHOOK_HOSTS", default=""))
# Notifications: the CA bundle webhook receivers' certificates are checked with ("": the
# one requests ships).
NOTIFY_CA_BUNDLE = env.str("NOTIFY_CA_BUNDLE", default="")
# whitesky: calls go through this proxy only ("": straight); HTTP(S)_PROXY of the
# environment are never used for whitesky. And the CA bundle its TLS certificates are
# checked with ("": the one requests ships; REQUESTS_CA_BUNDLE is not read).
WHITESKY_PROXY_URL = whitesky_proxy_url(env.str("WHITESKY_PROXY_URL", default=""))
WHITESKY_CA_BUNDLE = env.str("WHITESKY_CA_BUNDLE", default="")
# whitesky: vGPU reservations are listed in pages of this size (all pages, always).
WHITESKY_VGPU_PAGE_SIZE = env.int("WHITESKY_VGPU_PAGE_SIZE", default=500)
# Seconds to wait for whitesky: to connect, for an answer, for the answer of a long call
# (VM create, reserve). A create or reserve whose answer was lost is judged "did not
# happen" only from a listing begun after connect + long read have passed.
WHITESKY_CONNECT_TIMEOUT = env.float("WHITESKY_CONNECT_TIMEOUT_SECONDS", default=5)
WHITESKY_READ_TIMEOUT = env.float("WHITESKY_READ_TIMEOUT_SECONDS", default=30)
WHITESKY_LONG_READ_TIMEOUT = env.float("WHITESKY_LONG_READ_TIMEOUT_SECONDS", default=300)
# At most this many machines of one account acted on (whitesky writes in flight) at once,
# over all workers; observation reads are not counted.
WHITESKY_CALLS_IN_FLIGHT_PER_ACCOUNT = env.int("WHITESKY_CALLS_IN_FLIGHT_PER_ACCOUNT", default=8)
# An observation of an account or a location makes its whitesky calls within this many
# seconds: a slow whitesky ends the pass with its listings incomplete and the reason
# recorded on the location, before the task's soft time limit stops it with nothing recorded.
# Unset: 90, or three quarters of a lower soft time limit.
WHITESKY_OBSERVE_PASS_SECONDS = observe_pass_seconds(
    env.float("WHITESKY_OBSERVE_PASS_SECONDS", default=min(90, 0.75 * CELERY_TASK_SOFT_TIME_LIMIT)),
    soft_time_limit=CELERY_TASK_SOFT_TIME_LIMIT,
)
# At most this many of a worker's slots run one account's whitesky tasks at once (observe,
# sweep, machine steps); 0: all but one of them, at least one. The account's other tasks
# are sent again after ACCOUNT_BUSY_AGAIN_SECONDS and hold no slot meanwhile
# (capvco_web/worker_slots.py).
WORKER_SLOTS_PER_ACCOUNT = env.int("WORKER_SLOTS_PER_ACCOUNT", default=0)
ACCOUNT_BUSY_AGAIN_SECONDS = env.float("ACCOUNT_BUSY_AGAIN_SECONDS", default=1)
# A machine that failed is tried again after MACHINE_RETRY_BASE_SECONDS, doubled per
# failure in a row, at most MACHINE_RETRY_MAX_SECONDS; not on every tick.
MACHINE_RETRY_BASE_SECONDS = env.float("MACHINE_RETRY_BASE_SECONDS", default=30)
MACHINE_RETRY_MAX_SECONDS = env.float("MACHINE_RETRY_MAX_SECONDS", default=900)
# A machine waiting for capacity this long is flagged stuck at its next look, with what its
# location offers of every type, and told (notify reason machine_stuck); it keeps waiting.
MACHINE_CAPACITY_STUCK_SECONDS = env.float("MACHINE_CAPACITY_STUCK_SECONDS", default=3600)

# /metrics: scraped with `Authorization: Bearer <METRICS_TOKEN>` or from an allowed
# address; with neither, nobody. Counters live under this key prefix in the broker's Redis.
METRICS_TOKEN = env.str("METRICS_TOKEN", default="")
METRICS_ALLOWED_IPS = env.list("METRICS_ALLOWED_IPS", default=[])
METRICS_KEY_PREFIX = env.str("METRICS_KEY_PREFIX", default="capvco:")
# Kubernetes of each workload cluster: seconds to wait for its API server (to connect, for
# an answer), and the page size of its node and pod listings (all pages are always read).
# Kubernetes API servers a kubeconfig (a cluster's, an account's management cluster's) may
# name, so its credential goes nowhere else; a non-public address only where an entry names
# it or its range (capvco_web/integrations/kube/servers.py). `make run` adds its fake API.
try:
    KUBE_ALLOWED_HOSTS = list(
        AllowedServers(env.str("KUBE_ALLOWED_HOSTS", default="").split(",")).entries
    )
except ValueError as exc:
    raise ImproperlyConfigured(str(exc)) from None
KUBE_CONNECT_TIMEOUT = env.float("KUBE_CONNECT_TIMEOUT_SECONDS", default=5)
KUBE_READ_TIMEOUT = env.float("KUBE_READ_TIMEOUT_SECONDS", default=30)
KUBE_LIST_PAGE_SIZE = env.int("KUBE_LIST_PAGE_SIZE", default=500)
# The watch process (`manage.py kube_watch`) lists each cluster's nodes and pods again this
# often, whatever its watches showed; between, changes come by watch (kube.watch).
KUBE_RESYNC_SECONDS = kube_resync_seconds(env.float("KUBE_RESYNC_SECONDS", default=600))
# A running machine with no node this long after its VM started is flagged ("never joined").
NODE_JOIN_TIMEOUT_SECONDS = env.float("NODE_JOIN_TIMEOUT_SECONDS", default=900)
# A node of a GPU machine that advertises no nvidia.com/gpu this long after it joined (or
# the GPU add-on was applied) is flagged.
GPU_ADVERTISE_TIMEOUT_SECONDS = env.float("GPU_ADVERTISE_TIMEOUT_SECONDS", default=600)
# GPU use, read from NVIDIA's dcgm-exporter where a cluster runs it (kube.gpu_use): its
# Service found by this label selector, read at most every GPU_USE_READ_SECONDS, samples
# kept GPU_USE_WINDOW_HOURS; a GPU a pod holds below GPU_UNUSED_PERCENT for at least
# GPU_UNUSED_HOURS is "requested but unused".
GPU_USE_EXPORTER_SELECTOR = env.str("GPU_USE_EXPORTER_SELECTOR", default="app=nvidia-dcgm-exporter")
GPU_USE_READ_SECONDS = env.float("GPU_USE_READ_SECONDS", default=300)
GPU_USE_WINDOW_HOURS = env.float("GPU_USE_WINDOW_HOURS", default=24)
GPU_UNUSED_PERCENT = env.float("GPU_UNUSED_PERCENT", default=5)
GPU_UNUSED_HOURS = env.float("GPU_UNUSED_HOURS", default=2)
# The image of the GPU add-on (the NVIDIA device plugin's DaemonSet), pinned: a new one is
# rolled out to every cluster with the add-on on.
GPU_DEVICE_PLUGIN_IMAGE = env.str(
    "GPU_DEVICE_PLUGIN_IMAGE", default="nvcr.io/nvidia/k8s-device-plugin:v0.17.0"
)
# Each GPU node is verified by a Job pinned to it that runs nvidia-smi over all its GPUs
# (kube.gpu_verify): what its pods can use, held against what whitesky bills for it.
GPU_VERIFY = env.bool("GPU_VERIFY", default=True)
# NVIDIA's CUDA base image: the container toolkit mounts nvidia-smi and the driver into it.
GPU_VERIFY_IMAGE = env.str(
    "GPU_VERIFY_IMAGE", default="nvcr.io/nvidia/cuda:12.4.1-base-ubuntu22.04"
)
# An image that runs a small CUDA kernel after nvidia-smi (NVIDIA's vectorAdd sample, e.g.
# nvcr.io/nvidia/k8s/cuda-sample:vectoradd-cuda12.5.0); empty: nvidia-smi only.
GPU_VERIFY_CUDA_IMAGE = env.str("GPU_VERIFY_CUDA_IMAGE", default="")
GPU_VERIFY_NAMESPACE = env.str("GPU_VERIFY_NAMESPACE", default="capvco-gpu-verify")
GPU_VERIFY_TIMEOUT_SECONDS = env.int("GPU_VERIFY_TIMEOUT_SECONDS", default=600)
# A node's verifications that a newer one replaced, finished longer ago than this, are
# deleted once a day with the other history (0 keeps them); a node's newest is kept.
GPU_VERIFY_HISTORY_DAYS = env.int("GPU_VERIFY_HISTORY_DAYS", default=90)

# SR-IOV NICs per pod (docs/guides/sriov.md). No agent API request waits for a VM: ADD,
# DEL and GC are queued on it (one attach or detach at a time per VM, in order). The
# plugin's DEL polls its queued detach at least this long (its requestTimeoutSeconds is
# this plus 20 s, or the ADD's timeout if longer), then says "try again later".
SRIOV_ATTACH_WAIT_SECONDS = env.float("SRIOV_ATTACH_WAIT_SECONDS", default=60)
# A NIC whose pod is gone or finished (from complete pod listings), or a NIC nobody owns,
# is detached once this long has passed since it was first seen so.
SRIOV_RECLAIM_GRACE_SECONDS = env.float("SRIOV_RECLAIM_GRACE_SECONDS", default=300)
# The agent API's address as the nodes reach it, written into the node manifests; empty:
# the address the manifests were downloaded from.
SRIOV_AGENT_URL = env.str("SRIOV_AGENT_URL", default="")
# The image of the node DaemonSet that installs the CNI plugin (the control plane's own).
SRIOV_AGENT_IMAGE = env.str("SRIOV_AGENT_IMAGE", default="capvco-web:latest")

LOGGING = {
    "version": 1,
    "disable_existing_loggers": False,
    "formatters": {"plain": {"format": "%(asctime)s %(levelname)s %(name)s %(message)s"}},
    "handlers": {"console": {"class": "logging.StreamHandler", "formatter": "plain"}},
    "root": {"handlers": ["console"], "level": env.str("LOG_LEVEL", default="INFO")},
    # urllib3's debug lines hold each request's path, and a webhook URL's path is a
    # credential (a Slack incoming webhook's): never logged, whatever LOG_LEVEL says.
    "loggers": {"urllib3.connectionpool": {"level": "INFO"}},
}

from django.contrib import admin
from django.contrib.auth import views as auth_views
from django.contrib.auth.decorators import login_not_required
from django.http import HttpRequest, HttpResponsePermanentRedirect
from django.templatetags.static import static
from django.urls import include, path, re_path

from capvco_web import health, metrics
from capvco_web.api import api_not_found


@login_not_required
def favicon(request: HttpRequest) -> HttpResponsePermanentRedirect:
    # Browsers ask for it on pages that name none (the API's, the admin's).
    return HttpResponsePermanentRedirect(static("favicon.svg"))


urlpatterns = [
    path("", include("dashboard.urls")),
    path("notifications/", include("notify.urls")),
    path("healthz", health.healthz, name="healthz"),
    path("readyz", health.readyz, name="readyz"),
    path("metrics", metrics.metrics, name="metrics"),
    path("login/", auth_views.LoginView.as_view(), name="login"),
    path("logout/", auth_views.LogoutView.as_view(), name="logout"),
    path("favicon.ico", favicon),
    path("admin/", admin.site.urls),
    path("api/v1/", include("capvco_web.api_urls")),
    re_path(r"^api(?P<rest>/.*)?$", api_not_found),  # last: what no endpoint under /api has
]

handler404 = "capvco_web.api.page_not_found"
handler500 = "capvco_web.api.server_error"

from django.contrib import admin
from django.contrib.auth import views as auth_views
from django.urls import include, path

from capvco_web import health, metrics, views

urlpatterns = [
    path("", views.dashboard, name="dashboard"),
    path("healthz", health.healthz, name="healthz"),
    path("readyz", health.readyz, name="readyz"),
    path("metrics", metrics.metrics, name="metrics"),
    path("login/", auth_views.LoginView.as_view(), name="login"),
    path("logout/", auth_views.LogoutView.as_view(), name="logout"),
    path("admin/", admin.site.urls),
    path("api/v1/", include("capvco_web.api_urls")),
]

handler404 = "capvco_web.api.page_not_found"
handler500 = "capvco_web.api.server_error"

from django.contrib import admin
from django.contrib.auth import views as auth_views
from django.urls import include, path
from drf_spectacular.views import SpectacularAPIView

from capvco_web import health, views

api_v1 = [
    path("", views.ApiRootView.as_view(), name="api-root"),
    path("schema/", SpectacularAPIView.as_view(), name="api-schema"),
]

urlpatterns = [
    path("", views.dashboard, name="dashboard"),
    path("healthz", health.healthz, name="healthz"),
    path("readyz", health.readyz, name="readyz"),
    path("login/", auth_views.LoginView.as_view(), name="login"),
    path("logout/", auth_views.LogoutView.as_view(), name="logout"),
    path("admin/", admin.site.urls),
    path("api/v1/", include(api_v1)),
]

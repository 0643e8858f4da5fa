"""The dashboard's own endpoint, on the one router of capvco_web.api_urls: a person's
saved views of the lists."""

from dashboard.api import views

routes = [("saved-views", views.SavedViewViewSet, "saved-view")]

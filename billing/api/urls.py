"""The money endpoints, on the one router of capvco_web.api_urls."""

from django.urls import path

from billing.api import views

routes = [("leaks", views.LeakViewSet, None), ("idle-gpus", views.IdleSpellViewSet, None)]
urlpatterns = [
    path("costs/", views.CostsView.as_view(), name="costs"),
    path("costs/month/", views.CostsMonthView.as_view(), name="costs-month"),
    # Before the router's leaks/<id>/.
    path("leaks/summary/", views.LeakSummaryView.as_view(), name="leak-summary"),
    path(
        "clusters/<int:pk>/cost-by-label/",
        views.ClusterCostByLabelView.as_view(),
        name="cluster-cost-by-label",
    ),
]
# Endpoints outside the router that the API root lists, by URL name.
listed = {"costs": "costs", "costs-month": "costs-month"}

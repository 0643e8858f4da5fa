"""The API of the accounts' members and what their locations offer, on the one router of
capvco_web.api_urls. Accounts and locations are the clusters' API's to route: their
viewsets there add what needs the clusters (cloud.api.views)."""

from cloud.api import views

routes = [
    ("memberships", views.MembershipViewSet, None),
    ("cloudspaces", views.CloudspaceViewSet, None),
    ("images", views.ImageViewSet, None),
]

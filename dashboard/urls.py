from django.urls import path

from dashboard.views import (
    actions,
    audit,
    clusters,
    edits,
    idle,
    locations,
    money,
    nics,
    nodes,
    overview,
    pods,
    reservations,
    search,
    setup,
)

app_name = "dashboard"

urlpatterns = [
    path("", overview.overview, name="overview"),
    path("reservations/", reservations.reservation_list, name="reservations"),
    path("reservations/csv/", reservations.reservation_csv, name="reservations-csv"),
    path("reservations/<int:pk>/release/", actions.reservation_release, name="reservation-release"),
    path("orphans/release/", actions.orphans_release, name="orphans-release"),
    path(
        "locations/<int:location_id>/orphans/release/",
        actions.orphans_release,
        name="location-orphans-release",
    ),
    path("vms/<int:pk>/remove/", actions.vm_remove, name="vm-remove"),
    path("clusters/", clusters.cluster_list, name="clusters"),
    path("clusters/new/", setup.cluster_new, name="cluster-new"),
    path("clusters/<int:pk>/", clusters.cluster_detail, name="cluster"),
    path("clusters/<int:pk>/delete/", actions.cluster_delete, name="cluster-delete"),
    path("pools/<int:pk>/scale/", actions.pool_scale, name="pool-scale"),
    path("machines/<int:pk>/delete/", actions.machine_delete, name="machine-delete"),
    path(
        "machines/<int:pk>/force-delete/",
        actions.machine_force_delete,
        name="machine-force-delete",
    ),
    path("nodes/", nodes.node_list, name="nodes"),
    path("pods/pending/", pods.pending_pods, name="pending-pods"),
    path("locations/<int:pk>/", locations.location_detail, name="location"),
    path("nics/", nics.nic_list, name="nics"),
    path("nics/leaked/<int:pk>/detach/", actions.leaked_nic_detach, name="leaked-nic-detach"),
    path("audit/", audit.audit_list, name="audit"),
    path("search/", search.search_page, name="search"),
    path("pools/<int:pk>/edit/", edits.pool_edit, name="pool-edit"),
    path("clusters/<int:pk>/kubeconfig/", edits.cluster_kubeconfig, name="cluster-kubeconfig"),
    path("dismiss/", actions.dismiss, name="dismiss"),
    path("leaks/", money.leak_list, name="leaks"),
    path("idle-gpus/", idle.idle_gpu_list, name="idle-gpus"),
    path("bills/", money.bill_checks, name="bills"),
    path("money/<slug:chart>.csv", money.overview_chart_csv, name="money-csv"),
    path(
        "clusters/<int:pk>/money/<slug:chart>.csv",
        money.cluster_chart_csv,
        name="cluster-money-csv",
    ),
]

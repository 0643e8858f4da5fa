from django.apps import AppConfig


class SriovConfig(AppConfig):
    name = "sriov"
    verbose_name = "SR-IOV NICs"

    def ready(self) -> None:
        from clusters.plan import planner_register
        from sriov.reclaim_plan import KINDS, cluster_reclaim_plan

        planner_register(cluster_reclaim_plan, kinds=KINDS)

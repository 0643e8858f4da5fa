from django.apps import AppConfig


class ClustersConfig(AppConfig):
    name = "clusters"
    verbose_name = "Clusters"

    def ready(self) -> None:
        from clusters.kube_plan import KINDS, kube_plan
        from clusters.plan import planner_register

        planner_register(kube_plan, kinds=KINDS)

from django.apps import AppConfig


class AutoscaleConfig(AppConfig):
    name = "autoscale"
    verbose_name = "Pool autoscaler"

    def ready(self) -> None:
        from autoscale import metrics
        from autoscale.models import GpuShortfall
        from autoscale.plan import KINDS, autoscale_steps
        from capvco_web.metrics import metrics_register
        from capvco_web.ownership import account_paths_register
        from clusters.plan import planner_register

        account_paths_register({GpuShortfall: "cluster__account"})
        # The dry run of a cluster lists the autoscaler's steps beside the machines'.
        planner_register(autoscale_steps, kinds=KINDS)
        metrics_register(metrics.collect)

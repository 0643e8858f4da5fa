from django.apps import AppConfig


class SriovConfig(AppConfig):
    name = "sriov"
    verbose_name = "SR-IOV NICs"

    def ready(self) -> None:
        from capvco_web.metrics import metrics_register
        from capvco_web.ownership import account_paths_register
        from capvco_web.permissions import roles_grant
        from sriov import metrics
        from sriov.models import AgentToken, ExternalNetwork, LeakedNic, PodNic, SriovConfig

        account_paths_register(
            {
                ExternalNetwork: "location__account",
                SriovConfig: "cluster__account",
                AgentToken: "cluster__account",
                PodNic: "cluster__account",
                LeakedNic: "cluster__account",
            }
        )
        roles_grant(
            view={
                "sriov.view_externalnetwork",
                "sriov.view_sriovconfig",
                "sriov.view_podnic",
                "sriov.view_leakednic",
            },
            operate={"sriov.detach_leakednic"},
            # Enable SR-IOV: its credential and network, the agent tokens.
            administer={"sriov.change_sriovconfig"},
        )
        metrics_register(metrics.collect)

        from clusters.plan import planner_register
        from sriov.reclaim_plan import KINDS, cluster_reclaim_plan

        planner_register(cluster_reclaim_plan, kinds=KINDS)

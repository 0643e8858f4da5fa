from django.apps import AppConfig


class ClustersConfig(AppConfig):
    name = "clusters"
    verbose_name = "Clusters"

    def ready(self) -> None:
        from capvco_web.metrics import metrics_register
        from capvco_web.ownership import account_paths_register
        from capvco_web.permissions import roles_grant
        from cloud.models import CUSTOMER_MOVE_CHECKS
        from clusters import metrics
        from clusters.models import (
            Cluster,
            ClusterSite,
            Machine,
            MachinePool,
            VmRemovalRequest,
            account_customer_move_refusal,
        )

        account_paths_register(
            {
                Cluster: "account",
                ClusterSite: "cluster__account",
                MachinePool: "cluster__account",
                Machine: "pool__cluster__account",
                VmRemovalRequest: "location__account",
            }
        )
        roles_grant(
            view={
                "clusters.view_cluster",
                "clusters.view_clustersite",
                "clusters.view_machinepool",
                "clusters.view_machine",
            },
            operate={
                "clusters.scale_machinepool",
                "clusters.delete_machine",
                "clusters.force_delete_machine",
                "clusters.delete_cluster",
            },
            administer={
                "clusters.add_cluster",
                "clusters.change_cluster",
                "clusters.add_clustersite",
                "clusters.change_clustersite",
                "clusters.delete_clustersite",
                "clusters.add_machinepool",
                "clusters.change_machinepool",
                "clusters.delete_machinepool",
            },
        )
        metrics_register(metrics.collect)
        # Cluster names are VM names: unambiguous per whitesky customer.
        if account_customer_move_refusal not in CUSTOMER_MOVE_CHECKS:
            CUSTOMER_MOVE_CHECKS.append(account_customer_move_refusal)

from django.apps import AppConfig


class ClustersConfig(AppConfig):
    name = "clusters"
    verbose_name = "Clusters"

    def ready(self) -> None:
        from cloud.models import CUSTOMER_MOVE_CHECKS
        from clusters.models import account_customer_move_refusal
        from clusters.releases import release_blocker, release_request_carry_out
        from gpus.release_requests import ReleaseOrchestration, release_orchestration_set

        # Cluster names are VM names: unambiguous per whitesky customer.
        if account_customer_move_refusal not in CUSTOMER_MOVE_CHECKS:
            CUSTOMER_MOVE_CHECKS.append(account_customer_move_refusal)
        # Machines hold vGPUs on their VMs: they decide whether and how a release goes.
        release_orchestration_set(
            ReleaseOrchestration(
                refusal_check=release_blocker,
                carry_out=lambda client, row: release_request_carry_out(
                    client=client, reservation=row
                ),
            )
        )

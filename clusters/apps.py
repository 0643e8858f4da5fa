from django.apps import AppConfig


class ClustersConfig(AppConfig):
    name = "clusters"
    verbose_name = "Clusters"

    def ready(self) -> None:
        from cloud.models import CUSTOMER_MOVE_CHECKS
        from clusters.models import account_customer_move_refusal

        CUSTOMER_MOVE_CHECKS.append(account_customer_move_refusal)

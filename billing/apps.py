from django.apps import AppConfig


class BillingConfig(AppConfig):
    name = "billing"
    verbose_name = "Billing"

    def ready(self) -> None:
        from billing import history, metrics
        from billing.models import (
            BillCheck,
            BillItem,
            CapacityRollup,
            CostRollup,
            IdleSpell,
            LabelCostRollup,
            Leak,
        )
        from capvco_web.metrics import metrics_register
        from capvco_web.ownership import account_paths_register
        from capvco_web.permissions import roles_grant
        from capvco_web.retention import history_register

        account_paths_register(
            {
                CostRollup: "account",
                LabelCostRollup: "account",
                CapacityRollup: "location__account",
                Leak: "account",
                IdleSpell: "account",
                BillCheck: "location__account",
                BillItem: "bill__location__account",
            }
        )
        roles_grant(
            view={
                "billing.view_costrollup",
                "billing.view_capacityrollup",
                "billing.view_leak",
                "billing.view_billcheck",
                "billing.view_billitem",
                "billing.view_idlespell",
            }
        )
        history_register(history.HOURLY)
        history_register(history.DAILY)
        metrics_register(metrics.collect)

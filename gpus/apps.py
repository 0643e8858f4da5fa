from django.apps import AppConfig


class GpusConfig(AppConfig):
    name = "gpus"
    verbose_name = "GPUs"

    def ready(self) -> None:
        from capvco_web.metrics import metrics_register
        from capvco_web.ownership import account_paths_register
        from capvco_web.permissions import roles_grant
        from capvco_web.retention import History, history_register
        from gpus import metrics
        from gpus.models import GpuProfile, VgpuReservation
        from gpus.selectors import released_before
        from gpus.services import reservations_history_prune

        account_paths_register(
            {GpuProfile: "location__account", VgpuReservation: "location__account"}
        )
        roles_grant(
            view={"gpus.view_gpuprofile", "gpus.view_vgpureservation"},
            operate={"gpus.release_vgpureservation"},
        )
        metrics_register(metrics.collect)
        history_register(
            History(
                name="released reservations",
                short="reservations",
                key="released_reservations",
                before_key="released_before",
                days_setting="RESERVATION_HISTORY_DAYS",
                count=lambda before: released_before(before).count(),
                prune=lambda before, batch: reservations_history_prune(before=before, batch=batch),
            )
        )

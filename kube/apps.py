from django.apps import AppConfig


class KubeConfig(AppConfig):
    name = "kube"
    verbose_name = "Kubernetes"

    def ready(self) -> None:
        from capvco_web.metrics import metrics_register
        from capvco_web.ownership import account_paths_register
        from capvco_web.permissions import roles_grant
        from capvco_web.retention import History, history_register
        from kube import metrics
        from kube.gpu_verify import verifications_history_prune, verifications_superseded
        from kube.models import GpuUseLocation, KubeNode, KubePod

        account_paths_register(
            {
                KubeNode: "cluster__account",
                KubePod: "cluster__account",
                GpuUseLocation: "state__cluster__account",
            }
        )
        roles_grant(
            view={"kube.view_kubenode", "kube.view_kubepod"}, operate={"kube.verify_kubenode"}
        )
        metrics_register(metrics.collect)
        history_register(
            History(
                name="superseded GPU verifications",
                short="GPU verifications",
                key="gpu_verifications",
                before_key="gpu_verifications_before",
                days_setting="GPU_VERIFY_HISTORY_DAYS",
                count=lambda before: verifications_superseded(before).count(),
                prune=lambda before, batch: verifications_history_prune(before=before, batch=batch),
            )
        )

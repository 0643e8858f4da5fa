from django.apps import AppConfig


class KubeConfig(AppConfig):
    name = "kube"
    verbose_name = "Kubernetes"

    def ready(self) -> None:
        from capvco_web.metrics import metrics_register
        from capvco_web.ownership import account_paths_register
        from capvco_web.permissions import roles_grant
        from kube import metrics
        from kube.models import KubeNode, KubePod

        account_paths_register({KubeNode: "cluster__account", KubePod: "cluster__account"})
        roles_grant(
            view={"kube.view_kubenode", "kube.view_kubepod"}, operate={"kube.verify_kubenode"}
        )
        metrics_register(metrics.collect)

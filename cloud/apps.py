from django.apps import AppConfig


class CloudConfig(AppConfig):
    """What the account and the cloud have: accounts, memberships, and the mirror of what
    whitesky shows them (locations, cloudspaces, images, VMs), with the clients to reach
    them. Below every other app; it imports none of them."""

    name = "cloud"
    verbose_name = "Cloud"

    def ready(self) -> None:
        from capvco_web.health import readiness_check_register
        from capvco_web.metrics import metrics_register
        from capvco_web.ownership import account_paths_register
        from capvco_web.permissions import roles_grant
        from cloud import metrics
        from cloud.models import Account, Cloudspace, Image, Location, Membership, VirtualMachine
        from cloud.reach import check_whitesky

        account_paths_register(
            {
                Account: "pk",
                Membership: "account",
                Location: "account",
                VirtualMachine: "location__account",
                Cloudspace: "location__account",
                Image: "location__account",
            }
        )
        roles_grant(
            view={
                "cloud.view_account",
                "cloud.view_location",
                "cloud.view_virtualmachine",
                "cloud.view_membership",
                "cloud.view_cloudspace",
                "cloud.view_image",
            },
            operate={"cloud.remove_virtualmachine"},
            administer={
                "cloud.remove_foreign_virtualmachine",
                "cloud.change_account",
                "cloud.delete_account",
                "cloud.add_membership",
                "cloud.change_membership",
                "cloud.delete_membership",
            },
        )
        metrics_register(metrics.collect)
        readiness_check_register("whitesky", check_whitesky)

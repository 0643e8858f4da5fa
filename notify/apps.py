from django.apps import AppConfig


class NotifyConfig(AppConfig):
    name = "notify"
    verbose_name = "Notifications"

    def ready(self) -> None:
        from capvco_web.ownership import account_paths_register
        from capvco_web.permissions import roles_grant
        from notify.models import Notice, WebhookTarget

        account_paths_register({WebhookTarget: "account", Notice: "target__account"})
        # Where an account's alerts go is the admins' alone: a target's URL and secret decide
        # who learns of the account's leaks.
        roles_grant(
            administer={
                "notify.view_webhooktarget",
                "notify.add_webhooktarget",
                "notify.change_webhooktarget",
                "notify.delete_webhooktarget",
                "notify.view_notice",
            }
        )

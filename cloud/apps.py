from django.apps import AppConfig


class CloudConfig(AppConfig):
    """What the account and the cloud have: accounts, memberships, and the mirror of what
    whitesky shows them (locations, cloudspaces, images, VMs), with the clients to reach
    them. Below every other app; it imports none of them."""

    name = "cloud"
    verbose_name = "Cloud"

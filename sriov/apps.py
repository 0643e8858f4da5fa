from django.apps import AppConfig


class SriovConfig(AppConfig):
    name = "sriov"
    verbose_name = "SR-IOV NICs"

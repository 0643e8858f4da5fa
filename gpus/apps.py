from django.apps import AppConfig


class GpusConfig(AppConfig):
    name = "gpus"
    verbose_name = "GPUs"

from __future__ import annotations

from django.db import models


class PodNic(models.Model):
    """An external NIC that belongs to one pod, on the VM the pod runs on."""

    class State(models.TextChoices):
        ATTACHING = "attaching"
        ATTACHED = "attached"
        DETACHING = "detaching"
        DETACHED = "detached"

    pod_uid = models.CharField(max_length=64)
    vm_id = models.BigIntegerField()
    network_id = models.BigIntegerField()
    mac = models.CharField(max_length=17, blank=True)
    ip = models.GenericIPAddressField(null=True, blank=True)
    state = models.CharField(max_length=16, choices=State, default=State.ATTACHING)
    created_at = models.DateTimeField(auto_now_add=True)

    class Meta:
        constraints = [
            models.UniqueConstraint(
                fields=["pod_uid", "network_id"], name="one_nic_per_pod_network"
            )
        ]

    def __str__(self) -> str:
        return f"{self.pod_uid} on VM {self.vm_id}"

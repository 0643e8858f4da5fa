"""The forms of the dashboard's actions: each asks for the reason the audit log keeps."""

from __future__ import annotations

from django import forms
from django.core.validators import MaxValueValidator, MinValueValidator


class ReasonForm(forms.Form):
    reason = forms.CharField(
        max_length=1000,
        widget=forms.Textarea(attrs={"rows": 3, "autofocus": True}),
        help_text="Recorded in the audit log with your name.",
    )
    next = forms.CharField(required=False, widget=forms.HiddenInput)


class ScaleForm(ReasonForm):
    replicas = forms.IntegerField(
        validators=[MinValueValidator(0), MaxValueValidator(100)],
        help_text="0 to 100 machines. Fewer: the surplus is torn down (machines that do "
        "not run first, then the newest); more: new machines are made.",
    )
    field_order = ["replicas", "reason", "next"]

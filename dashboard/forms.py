"""The forms of the dashboard: its actions, each asking for the reason the audit log keeps;
a new cluster; the node list's filter form (the lists' filters: dashboard.filtersets)."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from django import forms
from django.core.validators import MaxValueValidator, MinValueValidator
from django.db.models import QuerySet
from django.forms.utils import ErrorDict

from cloud.models import Account, Cloudspace, Image, Location


class ReasonForm(forms.Form):
    reason = forms.CharField(
        max_length=1000,
        widget=forms.Textarea(attrs={"rows": 3, "autofocus": True}),
        help_text="Recorded in the audit log with your name.",
    )
    next = forms.CharField(required=False, widget=forms.HiddenInput)


class ConfirmNameForm(ReasonForm):
    """A destructive action that also asks for the name of what it ends, typed again (the
    service compares it: clusters.services.name_confirmed)."""

    confirm = forms.CharField(
        max_length=200,
        widget=forms.TextInput(attrs={"autocomplete": "off", "spellcheck": "false"}),
    )
    field_order = ["reason", "confirm", "next"]
    confirm_label = "Type the name to confirm"

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self.fields["confirm"].label = self.confirm_label


def confirm_name_form(name: str) -> type[ConfirmNameForm]:
    """The form that asks for `name` by name in its label."""

    class Named(ConfirmNameForm):
        confirm_label = f"Type {name} to confirm"

    return Named


class ScaleForm(ReasonForm):
    replicas = forms.IntegerField(
        validators=[MinValueValidator(0), MaxValueValidator(100)],
        help_text="0 to 100 machines. Fewer: the surplus is torn down (machines that do "
        "not run first, then the newest); more: new machines are made.",
    )
    field_order = ["replicas", "reason", "next"]


class ClusterSetupForm(forms.Form):
    """A new cluster: its account and name (its sites and pools are forms of their own)."""

    account = forms.ModelChoiceField(queryset=Account.objects.none(), empty_label=None)
    name = forms.CharField(
        max_length=40,
        required=False,
        help_text="Lowercase letters, digits and dashes; its VMs and vGPUs carry it.",
    )

    def __init__(self, *args: Any, accounts: QuerySet[Account], **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self.fields["account"].queryset = accounts  # type: ignore[attr-defined]


class SiteForm(forms.Form):
    """Whether the cluster runs in one location of its account, and with what there."""

    use = forms.BooleanField(required=False, label="Run here")
    cloudspace = forms.ChoiceField(required=False)
    image = forms.TypedChoiceField(coerce=int, required=False, empty_value=None)

    def __init__(
        self,
        *args: Any,
        location: Location,
        cloudspaces: list[Cloudspace],
        images: list[Image],
        **kwargs: Any,
    ) -> None:
        super().__init__(*args, **kwargs)
        self.location = location
        self.fields["cloudspace"].choices = [("", "---")] + [  # type: ignore[attr-defined]
            (c.cloudspace_id, f"{c.name} ({c.cloudspace_id}, {c.status.lower()})")
            for c in cloudspaces
        ]
        self.fields["image"].choices = [("", "---")] + [  # type: ignore[attr-defined]
            (i.image_id, f"{i.name} ({i.image_id})") for i in images
        ]

    def clean(self) -> dict[str, Any]:
        data = super().clean() or {}
        if data.get("use"):
            for field in ("cloudspace", "image"):
                if not data.get(field):
                    self.add_error(field, f"Choose the {field} in {self.location.name}.")
        return data


class PoolForm(forms.Form):
    """A machine pool of the new cluster; a row without a name is left out. Its GPU types
    are those of the location chosen for it (`types_by_location`), each location's own;
    one asked for that the location does not offer stays shown, marked so, and
    cluster_setup refuses it naming what the location offers."""

    name = forms.CharField(max_length=20, required=False)
    location = forms.TypedChoiceField(coerce=int)
    replicas = forms.IntegerField(
        initial=1, validators=[MinValueValidator(0), MaxValueValidator(100)]
    )
    gpu_type = forms.CharField(
        required=False, max_length=100, label="GPU type", widget=forms.Select
    )
    gpu_count = forms.IntegerField(
        initial=1, label="GPUs each", validators=[MinValueValidator(0), MaxValueValidator(8)]
    )
    vcpus = forms.IntegerField(initial=4, validators=[MinValueValidator(1)])
    memory_mib = forms.IntegerField(
        initial=8192, label="Memory (MiB)", validators=[MinValueValidator(512)]
    )
    disk_gib = forms.IntegerField(
        initial=50, label="Disk (GiB)", validators=[MinValueValidator(10)]
    )

    def __init__(
        self,
        *args: Any,
        locations: list[Location],
        types_by_location: Mapping[int, list[str]],
        **kwargs: Any,
    ) -> None:
        super().__init__(*args, **kwargs)
        self.fields["location"].choices = [(loc.pk, loc.name) for loc in locations]  # type: ignore[attr-defined]
        self.chosen_location = self._chosen_location(locations)
        offered = list(types_by_location.get(self.chosen_location or 0, []))
        asked = str(self.data.get(self.add_prefix("gpu_type")) or "") if self.is_bound else ""
        choices = [("", "no GPU"), *((t, t) for t in offered)]
        if asked and asked not in offered:
            choices.append((asked, f"{asked} (not offered here)"))
        widget = self.fields["gpu_type"].widget
        assert isinstance(widget, forms.Select)
        widget.choices = choices

    def _chosen_location(self, locations: list[Location]) -> int | None:
        """The location the row runs in as last sent; the first one offered before that."""
        ids = [loc.pk for loc in locations]
        sent = str(self.data.get(self.add_prefix("location")) or "") if self.is_bound else ""
        if sent.isdigit() and int(sent) in ids:
            return int(sent)
        return ids[0] if ids else None

    @property
    def wanted(self) -> bool:
        return bool(self.is_bound and (self.data.get(self.add_prefix("name")) or "").strip())

    def full_clean(self) -> None:
        if self.is_bound and not self.wanted:
            self.cleaned_data = {}
            self._errors = ErrorDict()
            return
        super().full_clean()


class LocationChoiceField(forms.ModelChoiceField):  # type: ignore[type-arg]
    """A location picked from those the user sees (any other: "Select a valid choice");
    the API's filter takes its id."""

    def to_python(self, value: Any) -> int | None:
        location = super().to_python(value)
        return None if location is None else int(location.pk)


class NodeFilterForm(forms.Form):
    """The node list's form (its fields are `dashboard.filtersets.NodeListFilterSet`'s):
    the flags it offers, and what they cannot be combined with."""

    NODE_MISSING, GPUS_MISSING, UNOWNED = "node-missing", "gpus-missing", "unowned"
    FLAGS = {
        NODE_MISSING: "machines whose node never joined, or left",
        GPUS_MISSING: "GPU nodes that advertise no GPU",
        UNOWNED: "nodes no machine owns",
    }

    def clean(self) -> dict[str, Any]:
        data = super().clean() or {}
        if data.get("flag") == self.NODE_MISSING and data.get("gpu_type"):
            self.add_error(
                "gpu_type",
                "Machines with no node carry no node label: filter them by cluster or location.",
            )
        return data

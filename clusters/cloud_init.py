"""The user data a machine's VM boots with: the pool's own, plus what the control plane
adds (the NVIDIA driver version a GPU pool asks for), as cloud-init reads it."""

from __future__ import annotations

from email.charset import Charset
from email.mime.multipart import MIMEMultipart
from email.mime.text import MIMEText

from clusters.models import MachinePool

DRIVER_VERSION_FILE = "/etc/capvco/nvidia-driver-version"


def driver_cloud_config(version: str) -> str:
    """Tells the VM which driver to install: the image's first-boot script reads the file
    (the GPU add-on's device plugin installs no driver); empty version, no file: the image
    has the driver."""
    return (
        "#cloud-config\n"
        "write_files:\n"
        f"  - path: {DRIVER_VERSION_FILE}\n"
        "    permissions: '0644'\n"
        f'    content: "{version}\\n"\n'
    )


def machine_user_data(pool: MachinePool) -> str | None:
    """The pool's user data, with the driver part added when the pool names a driver.
    Both present: a MIME multipart archive, which cloud-init runs part by part."""
    driver = pool.gpu_driver_version if pool.wants_gpus else ""
    if not driver:
        return pool.user_data or None
    ours = driver_cloud_config(driver)
    if not pool.user_data:
        return ours
    archive = MIMEMultipart(boundary="capvco-user-data")
    readable = Charset("utf-8")
    readable.body_encoding = None  # type: ignore[assignment]  # 8bit: readable, not base64
    for text, subtype in ((pool.user_data, _subtype(pool.user_data)), (ours, "cloud-config")):
        archive.attach(MIMEText(text, subtype, readable))  # type: ignore[arg-type]
    return archive.as_string()


def _subtype(user_data: str) -> str:
    """cloud-init's part type for user data, from its first line."""
    first = user_data.lstrip().split("\n", 1)[0]
    if first.startswith("#cloud-config"):
        return "cloud-config"
    if first.startswith("#!"):
        return "x-shellscript"
    return "plain"

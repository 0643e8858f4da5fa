"""Whether a real GPU name is of a GPU type: one rule for a location's cards and for what
a node's pods see.

Names come from whitesky's card models ("A100 0000:17:00.0", with the vendor "NVIDIA"),
from a passthrough guest's nvidia-smi ("NVIDIA A100-SXM4-80GB", "Tesla T4") and from a
vGPU guest's ("GRID A100-40C", "NVIDIA A100D-4C"). The rule, in words (the GPU guide's
"What is verified and how" shows it on real names):

* A trailing PCI address is dropped; the rest splits into words at spaces and hyphens,
  case ignored.
* Vendor words (NVIDIA, Tesla, GRID, GeForce, Quadro) are dropped.
* The first word left is the model. In a vGPU profile name (a model followed by a size
  such as "40C" or "16Q") the board variant letters after the model's digits (D, DX,
  XM, XL, L, X) are dropped: "A100D-4C" is an A100, "H100XM-80C" an H100.
* A name is of a type when their models are the same word (an A10 is not an A100, an
  L40 not an L40S) and every other word of the type (a qualifier such as "80GB") is a
  word of the name.
"""

from __future__ import annotations

import re

VENDOR_WORDS = frozenset({"nvidia", "tesla", "grid", "geforce", "quadro"})

_PCI_SUFFIX = re.compile(r"\s*\(?(?:[0-9a-fA-F]{4}:)?[0-9a-fA-F]{2}:[0-9a-fA-F]{2}\.[0-7]\)?\s*$")
# "40c", "4c", "16q", "1b", "2a": a vGPU profile's frame buffer in GB and its series.
_VGPU_SIZE = re.compile(r"\d+[abcq]")
_VGPU_BOARD = re.compile(r"([a-z]+\d+)(?:dx|xm|xl|d|l|x)")


def without_pci_address(model: str) -> str:
    """ "A100" for whitesky's "A100 0000:3b:00.0"."""
    return _PCI_SUFFIX.sub("", model).strip()


def name_words(name: str) -> tuple[str, ...]:
    """The model word first, then the qualifiers: ("a100", "sxm4", "80gb")."""
    words = [
        w
        for w in re.split(r"[\s\-]+", without_pci_address(name).lower())
        if w and w not in VENDOR_WORDS
    ]
    vgpu = len(words) >= 2 and _VGPU_SIZE.fullmatch(words[1])
    if vgpu and (board := _VGPU_BOARD.fullmatch(words[0])):
        words[0] = board.group(1)
    return tuple(words)


def is_of_type(name: str, gpu_type: str) -> bool:
    """Whether a GPU named `name` is of `gpu_type`, by the rule above."""
    seen, wanted = name_words(name), name_words(gpu_type)
    if not seen or not wanted:
        return False
    return seen[0] == wanted[0] and set(wanted[1:]) <= set(seen[1:])

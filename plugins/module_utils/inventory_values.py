# -*- coding: utf-8 -*-
# Copyright: (c) 2026, gpufleet.nvidia contributors
# GNU General Public License v3.0+ (see COPYING or https://www.gnu.org/licenses/gpl-3.0.txt)
"""What every reader of the GPU inventory shares.

``InventoryError``, the normalisation of the values that NVML and nvidia-smi
print ('81920 MiB', 'Enabled', 'N/A', '00000000:01:00.0'), the empty records
(one GPU, its fabric, one MIG device) that each reader fills, and the small
file and text helpers of the readers. Pure: no Ansible imports.
"""

from __future__ import annotations

import re


# Values that nvidia-smi prints where it has no value. Compared lower-cased,
# with and without the brackets that the CSV output adds. "REDACTED" is how
# people mask identifiers in published captures.
_ABSENT_TOKENS = frozenset((
    "",
    "n/a",
    "not supported",
    "requested functionality has been deprecated",
    "insufficient permissions",
    "unknown error",
    "gpu is lost",
    "redacted",
))


_NUMBER_RE = re.compile(r"^\s*(-?\d+(?:\.\d+)?)\s*([A-Za-z%/()]*)\s*$")
_PCI_BUS_ID_RE = re.compile(
    r"^(?P<domain>[0-9a-fA-F]{4,8}):(?P<bus>[0-9a-fA-F]{2}):(?P<device>[0-9a-fA-F]{2})\.(?P<function>[0-7])$"
)


class InventoryError(Exception):
    """A tool answered, but not in a way the inventory can trust.

    ``details`` holds rc/stdout/stderr (or the NVML code) for the failure.
    """

    def __init__(self, message, **details):
        super().__init__(message)
        self.details = details


# --------------------------------------------------------------------------
# Value normalisation
# --------------------------------------------------------------------------

def clean(value):
    """Return ``value`` as a stripped string, or None for an absent-value marker."""
    if value is None:
        return None
    if isinstance(value, bytes):
        value = value.decode("utf-8", "replace")
    text = str(value).strip()
    token = text.lower()
    if token.startswith("[") and token.endswith("]"):
        token = token[1:-1].strip()
    if token in _ABSENT_TOKENS:
        return None
    return text


def to_number(value, integer=False):
    """Parse '81920 MiB', '300.00 W', '-7 C', '16x' into a number (None if absent)."""
    text = clean(value)
    if text is None:
        return None
    match = _NUMBER_RE.match(text)
    if not match:
        return None
    number = match.group(1)
    if integer:
        return int(float(number))
    return float(number)


def to_bool(value):
    """Map Enabled/Disabled, Yes/No, On/Off, 1/0 to True/False (None if absent)."""
    text = clean(value)
    if text is None:
        return None
    token = text.lower()
    if token in ("enabled", "yes", "on", "true", "1", "supported"):
        return True
    if token in ("disabled", "no", "off", "false", "0", "not supported"):
        return False
    return None


def to_mode(value):
    """Map Enabled/Disabled (and NVML's 1/0) to 'enabled'/'disabled' (None if absent)."""
    flag = to_bool(value)
    if flag is None:
        return None
    return "enabled" if flag else "disabled"


def pci_address(bus_id):
    """'00000000:01:00.0' (NVIDIA's form) -> '0000:01:00.0' (sysfs form), else None."""
    text = clean(bus_id)
    if text is None:
        return None
    match = _PCI_BUS_ID_RE.match(text)
    if not match:
        return None
    domain = int(match.group("domain"), 16)
    return "%04x:%s:%s.%s" % (
        domain,
        match.group("bus").lower(),
        match.group("device").lower(),
        match.group("function"),
    )


def cuda_version_string(value):
    """NVML's CUDA driver version integer (12020) -> '12.2'."""
    if value is None:
        return None
    try:
        number = int(value)
    except (TypeError, ValueError):
        return clean(value)
    if number <= 0:
        return None
    return "%d.%d" % (number // 1000, (number % 1000) // 10)


_VERSION_RE = re.compile(r"^\d+(?:\.\d+)*")


def plain_version(value):
    """'610.47 [Deprecated; ... Use KMD Version instead]' -> '610.47'.

    Driver 610 appends a deprecation note to the driver and CUDA versions of
    ``nvidia-smi -q``, and ``nvidia-smi --version`` prints only a notice
    ('Deprecated, see "KMD version" instead') where the driver version was.
    A version is the number the text starts with; a text that starts with
    none (a notice, 'N/A') is no version, and the caller falls back to the
    KMD version. The numbers inside a notice ('CUDA 14.0') are never taken.
    """
    text = clean(value)
    if text is None:
        return None
    match = _VERSION_RE.match(text)
    return match.group(0) if match else None


# nvmlGpuVirtualizationMode_t values and nvidia-smi's words for them, as one vocabulary.
_NVML_VIRTUALIZATION_MODES = {
    0: "none",
    1: "passthrough",
    2: "vgpu",
    3: "host_vgpu",
    4: "host_vsga",
}
_SMI_VIRTUALIZATION_MODES = {
    "none": "none",
    "pass-through": "passthrough",
    "vgpu": "vgpu",
    "host vgpu": "host_vgpu",
    "host vsga": "host_vsga",
}


def virtualization_mode(text):
    """nvidia-smi's <virtualization_mode> in the vocabulary of the NVML path."""
    value = clean(text)
    if value is None:
        return None
    return _SMI_VIRTUALIZATION_MODES.get(value.lower(), value.lower().replace(" ", "_"))


def empty_gpu(index):
    """The shape of one GPU entry, every value unknown."""
    return {
        "index": index,
        "uuid": None,
        "name": None,
        "brand": None,
        "serial": None,
        "pci_bus_id": None,
        "pci_address": None,
        "pci_device_id": None,
        "minor_number": None,
        "vbios_version": None,
        "architecture": None,
        "compute_capability": None,
        "memory_total_mib": None,
        "persistence_mode": None,
        "power_limit_w": None,
        "numa_node": None,
        "virtualization_mode": None,
        "mig": {
            "capable": False,
            "current_mode": None,
            "pending_mode": None,
            "devices": [],
            "profiles": [],
        },
        "ecc": {
            "current_mode": None,
            "pending_mode": None,
            "volatile_correctable": None,
            "volatile_uncorrectable": None,
            "aggregate_correctable": None,
            "aggregate_uncorrectable": None,
        },
        "health": {
            "retired_pages_pending": None,
            "retired_pages_single_bit": None,
            "retired_pages_double_bit": None,
            "remapped_rows_correctable": None,
            "remapped_rows_uncorrectable": None,
            "remapped_rows_pending": None,
            "remapped_rows_failure": None,
        },
        "fabric": empty_fabric(),
        "xids": [],
        "error": None,
    }


def empty_fabric():
    """The NVSwitch fabric block of one GPU, every value unknown."""
    return {
        "state": None,
        "status": None,
        "clique_id": None,
        "cluster_uuid": None,
        "health": None,
    }


def empty_mig_device(index):
    return {
        "index": index,
        "gpu_instance_id": None,
        "compute_instance_id": None,
        "profile": None,
        "gpu_instance_profile": None,
        "memory_total_mib": None,
        "multiprocessor_count": None,
        "uuid": None,
    }


# --------------------------------------------------------------------------
# Files and command output
# --------------------------------------------------------------------------

def _read(path):
    try:
        with open(path) as handle:
            return handle.read().strip()
    except (IOError, OSError):
        return None


def _first_line(*texts):
    for text in texts:
        for line in (text or "").splitlines():
            if line.strip():
                return line.strip()
    return ""

# -*- coding: utf-8 -*-
# Copyright: (c) 2026, gpufleet.nvidia contributors
# GNU General Public License v3.0+ (see COPYING or https://www.gnu.org/licenses/gpl-3.0.txt)
"""The PCI scan: NVIDIA functions (vendor 0x10de) as sysfs shows them.

GPUs, NVSwitch bridges and virtual functions, with the driver each is bound
to and its NUMA node. The inventory explains a driver that does not answer
by it, and finds the GPUs that a driver that answers has lost (``health``).
"""

from __future__ import annotations

import os

from ansible_collections.gpufleet.nvidia.plugins.module_utils.inventory_values import (
    _read,
)


NVIDIA_PCI_VENDOR = "0x10de"


def is_nvswitch_class(pci_class):
    """An NVIDIA function of PCI class 0x0680xx (bridge, other) is an NVSwitch."""
    return bool(pci_class and pci_class.lower()[:6] == "0x0680")


def scan_pci(root="/sys/bus/pci/devices"):
    """NVIDIA PCI functions (vendor 0x10de) seen in sysfs, sorted by address."""
    devices = []
    try:
        names = sorted(os.listdir(root))
    except OSError:
        return devices
    for name in names:
        base = os.path.join(root, name)
        if (_read(os.path.join(base, "vendor")) or "").lower() != NVIDIA_PCI_VENDOR:
            continue
        pci_class = (_read(os.path.join(base, "class")) or "").lower() or None
        driver = None
        if os.path.islink(os.path.join(base, "driver")):
            driver = os.path.basename(os.readlink(os.path.join(base, "driver")))
        numa = _read(os.path.join(base, "numa_node"))
        try:
            numa_node = int(numa) if numa is not None else None
        except ValueError:
            numa_node = None
        devices.append({
            "address": name.lower(),
            "vendor_id": NVIDIA_PCI_VENDOR,
            "device_id": (_read(os.path.join(base, "device")) or "").lower() or None,
            "class": pci_class,
            # 0x0300xx VGA, 0x0302xx 3D controller: the GPU functions, as
            # opposed to a board's audio, USB or NVSwitch bridge functions.
            "is_gpu": bool(pci_class and pci_class[:6] in ("0x0300", "0x0302")),
            # 0x0680xx "bridge, other": the NVSwitch chips of HGX/DGX boards.
            "is_nvswitch": is_nvswitch_class(pci_class),
            # An SR-IOV virtual function (vGPU hosts) has a physfn link; it is
            # no GPU of its own that the driver would report.
            "is_virtual_function": os.path.islink(os.path.join(base, "physfn")),
            "driver": driver,
            "numa_node": numa_node if numa_node is not None and numa_node >= 0 else None,
        })
    return devices

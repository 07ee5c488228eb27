#!/usr/bin/env python
# Copyright: (c) 2026, gpufleet.nvidia contributors
# GNU General Public License v3.0+ (see COPYING or https://www.gnu.org/licenses/gpl-3.0.txt)
"""Lay out STAND-IN PCI buses as sysfs does, for bind mounts at /sys/bus/pci/devices.

    pci-bus.py OUT

For every pci-bus/<board>.txt next to this script, writes OUT/<board>/<address>/
with the files nvml_facts reads there: vendor, device, class, numa_node. The
boards are stand-ins described in the text files, not recordings. Directory
names are PCI addresses (colons), which the repository cannot hold as files,
hence the text form. Directories are updated in place, never replaced, since
running containers have them bind-mounted.
"""

import os
import shutil
import sys

HERE = os.path.dirname(os.path.abspath(__file__))


def main(out):
    source = os.path.join(HERE, "pci-bus")
    for name in sorted(os.listdir(source)):
        if not name.endswith(".txt"):
            continue
        board = os.path.join(out, name[:-4])
        os.makedirs(board, exist_ok=True)
        addresses = []
        with open(os.path.join(source, name)) as handle:
            for line in handle:
                fields = line.split("#", 1)[0].split()
                if not fields:
                    continue
                address, vendor, device, pci_class, numa_node = fields
                addresses.append(address)
                function = os.path.join(board, address)
                os.makedirs(function, exist_ok=True)
                for field, value in (("vendor", vendor), ("device", device), ("class", pci_class),
                                     ("numa_node", numa_node)):
                    with open(os.path.join(function, field), "w") as target:
                        target.write(value + "\n")
        for stale in set(os.listdir(board)) - set(addresses):
            shutil.rmtree(os.path.join(board, stale))
    return 0


if __name__ == "__main__":
    if len(sys.argv) != 2:
        sys.exit(__doc__)
    sys.exit(main(sys.argv[1]))

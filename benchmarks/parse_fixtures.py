# Copyright: (c) 2026, gpufleet.nvidia contributors
# GNU General Public License v3.0+ (see COPYING or https://www.gnu.org/licenses/gpl-3.0.txt)
"""Time parse_smi_xml() on every nvidia-smi XML capture in the unit fixtures.

Prints the median and best time per file over repeated runs, largest file
last, and exits non-zero when the largest capture's median is over the goal
(5 ms). Run with `make bench`.
"""

from __future__ import annotations

import atexit
import importlib
import os
import shutil
import statistics
import sys
import tempfile
import timeit

HERE = os.path.dirname(os.path.abspath(__file__))
REPO = os.path.dirname(HERE)
# The module_utils import one another by the collection's name, as Ansible ships them: this
# checkout is put under that name (ansible_collections/gpufleet/nvidia) in a scratch folder.
TREE = tempfile.mkdtemp(prefix="gpufleet-bench-")
atexit.register(shutil.rmtree, TREE)
os.makedirs(os.path.join(TREE, "ansible_collections", "gpufleet"))
os.symlink(REPO, os.path.join(TREE, "ansible_collections", "gpufleet", "nvidia"))
sys.path.insert(0, TREE)
nvml_inventory = importlib.import_module("ansible_collections.gpufleet.nvidia.plugins.module_utils.nvml_inventory")

FIXTURES = os.path.join(REPO, "tests", "unit", "plugins", "module_utils", "fixtures", "nvidia-smi")
GOAL_MS = 5.0
REPEAT = 7


def measure(data):
    number = 20
    times = timeit.repeat(lambda: nvml_inventory.parse_smi_xml(data), number=number, repeat=REPEAT)
    per_call = [t / number * 1000.0 for t in times]
    return statistics.median(per_call), min(per_call)


def main():
    files = [name for name in os.listdir(FIXTURES) if name.endswith(".xml")]
    sized = []
    for name in files:
        with open(os.path.join(FIXTURES, name), "rb") as handle:
            sized.append((len(handle.read()), name))
    sized.sort()
    print("%-72s %8s %10s %9s" % ("fixture", "bytes", "median ms", "best ms"))
    result = None
    for size, name in sized:
        with open(os.path.join(FIXTURES, name), "rb") as handle:
            data = handle.read()
        median, best = measure(data)
        print("%-72s %8d %10.3f %9.3f" % (name, size, median, best))
        result = (name, median)
    name, median = result
    verdict = "within" if median < GOAL_MS else "OVER"
    print("largest: %s parses in %.3f ms (median), %s the %.1f ms goal" % (name, median, verdict, GOAL_MS))
    return 0 if median < GOAL_MS else 1


if __name__ == "__main__":
    sys.exit(main())

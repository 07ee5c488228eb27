#!/usr/bin/python
# -*- coding: utf-8 -*-
# Copyright: (c) 2026, gpufleet.nvidia contributors
# GNU General Public License v3.0+ (see COPYING or https://www.gnu.org/licenses/gpl-3.0.txt)

from __future__ import annotations

DOCUMENTATION = r"""
---
module: nvml_facts
short_description: Gather the NVIDIA GPU inventory of a host as facts
version_added: 0.1.0
description:
  - Reads the NVIDIA driver's view of the host through NVML (NVIDIA's Python
    bindings C(pynvml)) or through C(nvidia-smi -q -x), and returns it as
    C(ansible_facts['nvidia']).
  - Also scans sysfs for NVIDIA PCI functions (vendor C(0x10de)). The scan
    only explains a driver that does not answer (no GPU, driver not installed,
    driver not loaded); it never overrides a driver that answers, since inside
    containers and some VMs the PCI device is hidden while the driver works.
  - A missing GPU or driver is a normal RV(ansible_facts.nvidia.state), not a failure. The module
    fails only when a tool that is present answers something it cannot read,
    and then returns the tool's rc, stdout and stderr.
  - Values that the source reports as V(N/A), V([Not Supported]), deprecated
    markers or masked (V(REDACTED)) become null; units are stripped into numbers.
author:
  - gpufleet.nvidia contributors (@gpufleet)
options:
  source:
    description:
      - Where to read the inventory from.
      - V(auto) uses NVML when the Python module C(pynvml) can be imported on
        the target (from the C(nvidia-ml-py) package or Debian's
        C(python3-pynvml)), otherwise C(nvidia-smi).
      - V(nvml) requires C(pynvml) and fails with a clear message without it.
      - V(nvidia_smi) runs C(nvidia-smi -q -x), and C(nvidia-smi -L) when MIG
        devices need the profile names and UUIDs that the XML lacks.
      - An explicit source is always queried, whatever the PCI scan shows.
    type: str
    choices: [auto, nvml, nvidia_smi]
    default: auto
attributes:
  check_mode:
    description: Can run in check mode and return the same facts.
    support: full
    details: The module only reads, so check mode changes nothing in what it does.
  diff_mode:
    description: Would show a diff of what changed.
    support: none
    details: The module never changes anything.
  facts:
    description: Returns facts under C(ansible_facts['nvidia']).
    support: full
  idempotent:
    description: A second run with the same arguments reports no change.
    support: full
    details: The module never reports a change.
  platform:
    description: Targets the module runs on.
    support: full
    platforms: posix
notes:
  - Compute capability is only known through NVML; C(nvidia-smi -q -x) does not print it.
  - C(numa_node) is the GPU's PCI locality from sysfs (null where sysfs does not show the device).
  - Two GPUs that report the same UUID (masked or cloned boards) stay two GPUs.
seealso:
  - plugin: gpufleet.nvidia.node_labels
    plugin_type: filter
    description: Turn these facts into Kubernetes node labels.
"""

EXAMPLES = r"""
- name: Gather the NVIDIA inventory
  gpufleet.nvidia.nvml_facts:

- name: Stop early on hosts whose driver does not answer
  ansible.builtin.assert:
    that: ansible_facts['nvidia']['state'] == 'ok'
    fail_msg: "{{ inventory_hostname }}: {{ ansible_facts['nvidia']['message'] }}"
    quiet: true

- name: Read the inventory through nvidia-smi even where pynvml is installed
  gpufleet.nvidia.nvml_facts:
    source: nvidia_smi

- name: Show every GPU's health
  ansible.builtin.debug:
    msg: "{{ item.index }} {{ item.name }} {{ item.health }}"
  loop: "{{ ansible_facts['nvidia']['gpus'] }}"
  loop_control:
    label: "{{ item.pci_bus_id }}"
"""

RETURN = r"""
ansible_facts:
  description: Facts to add to ansible_facts.
  returned: always
  type: complex
  contains:
    nvidia:
      description: The NVIDIA inventory of the host.
      returned: always
      type: complex
      contains:
        state:
          description:
            - V(ok) the driver answered and every GPU is readable;
              V(no_gpu) no NVIDIA GPU on the PCI bus and the driver reports none (or is absent);
              V(driver_not_installed) GPUs on the PCI bus, no NVML library;
              V(driver_not_loaded) GPUs on the PCI bus, driver installed, kernel module not loaded;
              V(driver_mismatch) the loaded kernel module and the libraries differ (upgrade without reboot);
              V(error) the driver answered with a fault (for example a GPU that fell off the bus).
          type: str
          sample: ok
        message:
          description: What the state means on this host, keeping NVML's or nvidia-smi's own words.
          type: str
          sample: "no NVIDIA GPU on the PCI bus; NVML: Driver Not Loaded"
        source:
          description: The source that was queried.
          type: str
          sample: nvml
        driver_installed:
          description: The NVML library (C(libnvidia-ml.so.1)) is present, or the driver answered.
          type: bool
        driver_loaded:
          description:
            - The driver answered (even with a fault or a version mismatch); false when it reports
              it is not loaded; otherwise whether C(/proc/driver/nvidia/version) shows a loaded module.
          type: bool
        kernel_module_version:
          description: Version of the loaded kernel module, from C(/proc/driver/nvidia/version).
          type: str
          sample: 535.261.03
        driver_version:
          description: Driver version reported by the source.
          type: str
          sample: 535.54.03
        cuda_driver_version:
          description: Highest CUDA version the driver supports.
          type: str
          sample: "12.2"
        gpu_count:
          description: Number of GPUs the driver reports.
          type: int
          sample: 8
        gpus:
          description:
            - One entry per GPU, in the driver's index order.
            - Keys are C(index), C(uuid), C(name), C(brand), C(serial), C(pci_bus_id) (NVIDIA's form),
              C(pci_address) (sysfs form), C(pci_device_id), C(minor_number), C(vbios_version),
              C(architecture), C(compute_capability), C(memory_total_mib), C(persistence_mode),
              C(power_limit_w), C(numa_node), C(virtualization_mode), C(mig), C(ecc), C(health), C(error).
            - C(mig) has C(capable), C(current_mode), C(pending_mode) and C(devices), each device with
              C(index), C(gpu_instance_id), C(compute_instance_id), C(profile), C(memory_total_mib),
              C(multiprocessor_count), C(uuid).
            - C(ecc) has C(current_mode), C(pending_mode) and volatile/aggregate correctable and
              uncorrectable error counts.
            - C(health) has C(retired_pages_pending), C(retired_pages_single_bit),
              C(retired_pages_double_bit), C(remapped_rows_correctable), C(remapped_rows_uncorrectable),
              C(remapped_rows_pending), C(remapped_rows_failure).
            - C(error) is null, or the driver's words for a fault of this GPU.
          type: list
          elements: dict
        pci_devices:
          description:
            - NVIDIA PCI functions seen in sysfs (vendor C(0x10de)), GPUs and their companion functions.
            - Keys are C(address), C(vendor_id), C(device_id), C(class), C(is_gpu), C(driver), C(numa_node).
          type: list
          elements: dict
"""

import ctypes.util
import importlib

from ansible.module_utils.basic import AnsibleModule
from ansible_collections.gpufleet.nvidia.plugins.module_utils.nvml_inventory import (
    SOURCES,
    InventoryError,
    gather,
    kernel_module_version,
    scan_pci,
)


class SystemProbe(object):
    """The host, as the pure inventory code sees it."""

    def __init__(self, module):
        self.module = module

    def pynvml(self):
        try:
            return importlib.import_module("pynvml")
        except ImportError:
            return None

    def which(self, name):
        return self.module.get_bin_path(name)

    def run(self, argv):
        return self.module.run_command(argv)

    def pci_devices(self):
        return scan_pci()

    def nvml_library_present(self):
        return ctypes.util.find_library("nvidia-ml") is not None

    def kernel_module_version(self):
        return kernel_module_version()


def main():
    module = AnsibleModule(
        argument_spec=dict(
            source=dict(type="str", default="auto", choices=list(SOURCES)),
        ),
        supports_check_mode=True,
    )
    module.run_command_environ_update = dict(LANG="C", LC_ALL="C", LC_MESSAGES="C")
    try:
        facts = gather(module.params, SystemProbe(module))
    except InventoryError as err:
        module.fail_json(msg=str(err), **err.details)
    module.exit_json(changed=False, ansible_facts=dict(nvidia=facts))


if __name__ == "__main__":
    main()

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
    explains a driver that does not answer (no GPU, driver not installed,
    driver not loaded). Where the driver answers, the scan never hides a GPU
    it reports (inside containers and some VMs the PCI device is hidden while
    the driver works), but a GPU function on the bus that the driver does not
    report makes the state V(gpu_lost).
  - Reports GPU health in RV(ansible_facts.nvidia.health) - lost GPUs, XID events
    found in the kernel log since boot, the NVSwitch fabric state, pending or
    failed row remapping, pending page retirement and uncorrectable ECC errors.
    The kernel log is read with one command per run.
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
  kernel_log:
    description:
      - "Where to look for XID events (C(NVRM: Xid) lines) since boot."
      - "V(auto) runs C(journalctl -k -b 0 --no-pager -o short-monotonic --grep 'NVRM: Xid') when
        C(journalctl) exists and answers, otherwise C(dmesg)."
      - V(journal) and V(dmesg) run only that command; V(none) reads nothing.
      - A kernel log that cannot be read (no journal, C(dmesg) restricted to root) is not an
        error; RV(ansible_facts.nvidia.kernel_log.read) is then false with the reason, and no
        XID event is known.
      - Ignored when O(kernel_log_path) is set.
    type: str
    choices: [auto, journal, dmesg, none]
    default: auto
  kernel_log_path:
    description:
      - Read XID events from this saved kernel log on the target (C(dmesg), C(journalctl -k) or
        syslog output) instead of the running system's, for offline analysis and tests.
      - A file that cannot be read is reported like a kernel log that cannot be read.
    type: path
  unhealthy_xids:
    description:
      - XIDs after which a GPU should get no new work until it is reset or the node rebooted.
        One of these since boot makes RV(ansible_facts.nvidia.health.status) V(unhealthy).
      - The default follows NVIDIA's Xid catalog (immediate action "reset GPU" or reboot) -
        48 double-bit ECC error, 61/62 internal micro-controller breakpoint/halt, 64 page
        retirement or row remapping failure, 74 NVLink error, 79 GPU fallen off the bus,
        95 uncontained ECC error, 119/120 GSP RPC timeout/GSP error, and 154 the driver's
        recovery action, counted while its latest line names an action other than None (V(0x0)).
      - The events are counted since boot, so a GPU reset does not clear them; a node whose
        GPUs were reset can be accepted with an empty list.
    type: list
    elements: int
    default: [48, 61, 62, 64, 74, 79, 95, 119, 120, 154]
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
  - A GPU is lost when the driver names it lost (NVML C(GPU is lost); C(nvidia-smi)'s
    C(Unable to determine the device handle) lines; C(GPU is lost) printed by C(nvidia-smi -q -x)
    in place of any of a GPU's values, the GPU then staying listed with that C(error)), when the
    PCI bus shows a GPU function bound to the C(nvidia) driver or to none that the driver does not report, or when
    C(nvidia-smi)'s attached GPU count exceeds the GPUs it prints. GPU functions bound to
    another driver (C(vfio-pci) for VMs, C(nouveau)) and SR-IOV virtual functions are not
    counted. Run the module on the host, not in a container that was given a subset of
    the GPUs but sees the host's sysfs.
  - Driver 610 appends a deprecation note to the driver and CUDA versions of C(nvidia-smi),
    or prints only a notice where they were (C(Deprecated, see "KMD version" instead));
    the facts keep the plain numbers, and a driver version that is only a notice is
    taken from the KMD version, else from the loaded kernel module. The XML element names C(kmd_version) and
    C(cuda_umd_version) are inferred from the query field names (no 610 XML capture was
    available); the older elements are read too.
  - A fabric state that is null or V(not_supported) is not a problem, also beside NVSwitches;
    A100-generation HGX boards report no fabric state although they need the fabric manager.
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

- name: Keep new GPU work off nodes whose GPUs are not healthy
  ansible.builtin.assert:
    that: ansible_facts['nvidia']['health']['status'] != 'unhealthy'
    fail_msg: "{{ ansible_facts['nvidia']['health']['problems'] | map(attribute='message') | join('; ') }}"
    quiet: true

- name: Look for XID events in a kernel log saved from another machine
  gpufleet.nvidia.nvml_facts:
    kernel_log_path: /var/tmp/gpu-node-17-kern.log
    unhealthy_xids: [48, 64, 74, 79, 95]

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
              V(gpu_lost) the driver answers but one or more GPUs are lost (see RV(ansible_facts.nvidia.lost_gpus));
              V(error) the driver answered with another fault (for example a corrupted infoROM).
          type: str
          sample: ok
        message:
          description:
            - What the state means on this host, keeping NVML's or nvidia-smi's own words.
            - For V(gpu_lost) it names the lost GPUs by PCI address.
          type: str
          sample: "2 of 8 GPUs lost: 0000:3b:00.0, 0000:5d:00.0 (on the PCI bus, not reported by the driver)"
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
          description:
            - Driver version reported by the source, always the plain number (driver 610's
              deprecation note is dropped; where the source gives only the notice, the KMD version).
          type: str
          sample: "610.47"
        cuda_driver_version:
          description: Highest CUDA version the driver supports, the plain number.
          type: str
          sample: "13.3"
        kmd_version:
          description:
            - Version of the kernel-mode driver, as C(nvidia-smi) 610 and later prints it (C(KMD Version));
              otherwise the loaded kernel module's version (RV(ansible_facts.nvidia.kernel_module_version));
              null when neither is known.
          type: str
          sample: "610.47"
        cuda_umd_version:
          description:
            - CUDA user-mode driver version, as C(nvidia-smi) 610 and later prints it (C(CUDA UMD Version));
              otherwise RV(ansible_facts.nvidia.cuda_driver_version).
          type: str
          sample: "13.3"
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
              C(power_limit_w), C(numa_node), C(virtualization_mode), C(mig), C(ecc), C(health), C(fabric),
              C(xids), C(error).
            - C(mig) has C(capable), C(current_mode), C(pending_mode), C(devices), each device with
              C(index), C(gpu_instance_id), C(compute_instance_id), C(profile), C(gpu_instance_profile) (from
              C(nvidia-smi mig -lgi), which alone names a C(+me) instance), C(memory_total_mib),
              C(multiprocessor_count), C(uuid), and C(profiles), the GPU instance profiles C(nvidia-smi mig -lgip)
              lists for a MIG-capable GPU (C(name), C(id), C(instances_free), C(instances_total), C(memory_gib));
              empty where nvidia-smi lists none (older drivers list them only for GPUs in MIG mode).
            - C(ecc) has C(current_mode), C(pending_mode) and volatile/aggregate correctable and
              uncorrectable error counts.
            - C(health) has C(retired_pages_pending), C(retired_pages_single_bit),
              C(retired_pages_double_bit), C(remapped_rows_correctable), C(remapped_rows_uncorrectable),
              C(remapped_rows_pending), C(remapped_rows_failure).
            - C(fabric) is the GPU's NVSwitch fabric as the fabric manager left it - C(state)
              (V(not_supported), V(not_started), V(in_progress), V(completed) or null), C(status)
              (V(success), the error, or null before completion), C(clique_id), C(cluster_uuid) and
              C(health) (the fabric's health summary, null where not reported).
            - C(xids) are the entries of RV(ansible_facts.nvidia.xid_events) of this GPU.
            - C(error) is null, or the driver's words for a fault of this GPU.
            - GPUs the driver lost but still enumerates (NVML, or C(nvidia-smi) printing C(GPU is lost) in their
              fields) stay listed with their C(error).
          type: list
          elements: dict
        lost_gpus:
          description:
            - GPUs the driver should report and does not; empty unless the state is V(gpu_lost).
            - Keys are C(pci_address) (null when unknown), C(gpu_index) (the driver's index when it
              enumerates the GPU, else null), C(source) (V(pci_bus), V(nvidia_smi) or V(nvml)) and
              C(message).
          type: list
          elements: dict
          sample:
            - pci_address: "0000:3b:00.0"
              gpu_index: null
              source: pci_bus
              message: on the PCI bus, not reported by the driver
        pci_devices:
          description:
            - NVIDIA PCI functions seen in sysfs (vendor C(0x10de)), GPUs and their companion functions.
            - Keys are C(address), C(vendor_id), C(device_id), C(class), C(is_gpu), C(is_nvswitch),
              C(is_virtual_function), C(driver), C(numa_node).
          type: list
          elements: dict
        nvswitches:
          description: PCI addresses of the NVSwitch functions on the bus (NVIDIA, class C(0x0680xx)), sorted.
          type: list
          elements: str
          sample: ["0000:05:00.0", "0000:06:00.0"]
        xid_events:
          description:
            - XID events in the kernel log since boot, one entry per PCI address and XID, in the
              order first seen.
            - Keys are C(pci_address) (the GPU's address; an XID line has no function, C(.0) is
              assumed where no GPU matches), C(gpu_index) (null when no GPU of this host matches),
              C(xid), C(name) and C(action) (after NVIDIA's Xid catalog; null for an XID not in
              it), C(fatal) (the XID is in O(unhealthy_xids)), C(count) and C(last) (the last line).
          type: list
          elements: dict
          sample:
            - pci_address: "0000:3b:00.0"
              gpu_index: 2
              xid: 79
              name: GPU has fallen off the bus
              action: reboot
              fatal: true
              count: 1
              last: "[ 5107.644336] host kernel: NVRM: Xid (PCI:0000:3b:00): 79, GPU has fallen off the bus."
        kernel_log:
          description: How the kernel log was read for XID events.
          type: dict
          contains:
            source:
              description: V(journal), V(dmesg), V(file) (O(kernel_log_path)), or null when nothing was run.
              type: str
              sample: journal
            read:
              description: The log was read; false when it could not be (then no XID event is known).
              type: bool
              sample: true
            message:
              description: Why the log could not be read, else null.
              type: str
              sample: "journalctl -k failed with rc=1: No journal files were found.; dmesg failed with rc=1:
                dmesg: read kernel buffer failed: Operation not permitted"
        kernels:
          description:
            - The kernels installed to boot (an image C(/boot/vmlinuz-<release>)), newest first, and which one
              the node boots next, each with the NVIDIA kernel module installed for it.
            - The next boot's kernel is the one GRUB's one-time C(next_entry) names, else its C(saved_entry)
              under C(GRUB_DEFAULT=saved), else the entry C(GRUB_DEFAULT) names, else the newest installed
              (GRUB's first entry and Debian's C(/vmlinuz) link). An entry named by its place other than the
              first (C(1>2)), or Ubuntu's C(GRUB_FLAVOUR_ORDER), cannot be told from here - then C(next_boot) is
              null, C(next_boot_source) says why, and any installed kernel may boot next.
            - Images dpkg or an editor left behind (C(.dpkg-*), C(.bak), C(.sig), C(~)) are no kernels, as GRUB
              skips them.
            - A container sees no kernel image; the list is empty there.
          type: dict
          contains:
            running:
              description: The running kernel's release (C(uname -r)).
              type: str
              sample: 6.1.0-50-cloud-amd64
            installed:
              description:
                - One entry per installed kernel with C(release), C(nvidia_module) (the module's path under
                  C(/lib/modules/<release>) in C(updates/), C(extra/) or C(kernel/nvidia*/), as C(nvidia.ko),
                  Debian's C(nvidia-current.ko) or C(nvidia-tesla*.ko), compressed or not; null when there is
                  none), C(running) and C(next_boot).
              type: list
              elements: dict
            next_boot:
              description: The release the node boots next; null when no kernel image is installed.
              type: str
              sample: 6.12.95+deb12-cloud-amd64
            next_boot_source:
              description: How it was found - V(grub next_entry), V(grub saved_entry), V(GRUB_DEFAULT) or
                V(newest installed), or why it cannot be told (beginning with C(unknown)).
              type: str
            without_module:
              description: The installed kernels that have no NVIDIA module, newest first.
              type: list
              elements: str
        health:
          description: Whether the node should get new GPU work, and why not.
          type: dict
          contains:
            status:
              description:
                - V(unhealthy) when any problem is found; V(healthy) when the state is V(ok) and none
                  is; V(unknown) otherwise (no GPU, no driver installed).
              type: str
              sample: unhealthy
            problems:
              description:
                - Each problem has C(code), C(pci_address), C(gpu_index) (null when not known) and C(message).
                - Codes - V(gpu_lost) one per lost GPU; V(xid) an XID of O(unhealthy_xids) since boot;
                  V(fabric_not_ready) a fabric state V(not_started) or V(in_progress), completed with a
                  status other than success, a fabric state that could not be read, or an Unhealthy
                  fabric health summary; V(row_remap_pending); V(row_remap_failed); V(retired_pages_pending);
                  V(ecc_uncorrectable) (volatile uncorrectable ECC errors above zero); V(driver) (state
                  V(driver_mismatch), V(driver_not_loaded) or V(error)); V(next_boot_no_module) the kernel
                  the node boots next has no NVIDIA module while the driver runs through one (a module is
                  loaded or another installed kernel has one) - the GPUs are gone after the next reboot.
              type: list
              elements: dict
              sample:
                - code: fabric_not_ready
                  pci_address: "0000:18:00.0"
                  gpu_index: 0
                  message: "GPU 0 (0000:18:00.0): fabric manager has not set up the NVSwitch fabric (state in_progress)"
"""

import ctypes.util
import importlib
import platform

from ansible.module_utils.basic import AnsibleModule
from ansible_collections.gpufleet.nvidia.plugins.module_utils.nvml_inventory import (
    DEFAULT_UNHEALTHY_XIDS,
    KERNEL_LOG_MODES,
    SOURCES,
    InventoryError,
    gather,
    kernel_module_version,
    scan_kernels,
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

    def kernels(self):
        return scan_kernels(running=platform.release())

    def read_text(self, path):
        with open(path, "rb") as handle:
            return handle.read().decode("utf-8", "replace")


def main():
    module = AnsibleModule(
        argument_spec=dict(
            source=dict(type="str", default="auto", choices=list(SOURCES)),
            kernel_log=dict(type="str", default="auto", choices=list(KERNEL_LOG_MODES)),
            kernel_log_path=dict(type="path"),
            unhealthy_xids=dict(type="list", elements="int", default=list(DEFAULT_UNHEALTHY_XIDS)),
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

# Copyright: (c) 2026, gpufleet.nvidia contributors
# GNU General Public License v3.0+ (see COPYING or https://www.gnu.org/licenses/gpl-3.0.txt)

from __future__ import annotations

# Expected parse results for the real nvidia-smi fixtures in fixtures/nvidia-smi/.
#
# Values were read from the fixture files by hand (grep/sed), not produced by a parser.
# Absent-value tokens (N/A, [N/A], 'Requested functionality has been deprecated', REDACTED,
# [REDACTED], empty, 'Unknown Error', [Not Supported]) are expected as None. An all-zero
# serial such as '0000000000000' stays a string.
#
# power_limit_w: first number among <gpu_power_readings><current_power_limit>,
# <power_readings><enforced_power_limit>, <gpu_power_readings><enforced_power_limit>,
# <power_readings><power_limit>, <gpu_power_readings><power_limit>.
# retired_pages_pending: <retired_pages><pending_blacklist>, else <pending_retirement>.

# MIG devices of the A100 fixture. Field paths read, relative to <mig_device>:
#   index                -> <index>
#   gpu_instance_id      -> <gpu_instance_id>
#   compute_instance_id  -> <compute_instance_id>
#   memory_total_mib     -> <fb_memory_usage><total>  ('19968 MiB'; <bar1_memory_usage><total> is 32767 MiB, not this)
#   multiprocessor_count -> <device_attributes><shared><multiprocessor_count>
# The XML carries no profile name (1g.20gb) and no MIG UUID.
_A100_MIG_DEVICES = [
    {"index": 0, "gpu_instance_id": 3, "compute_instance_id": 0,
     "memory_total_mib": 19968, "multiprocessor_count": 14},
    {"index": 1, "gpu_instance_id": 4, "compute_instance_id": 0,
     "memory_total_mib": 19968, "multiprocessor_count": 14},
    {"index": 2, "gpu_instance_id": 5, "compute_instance_id": 0,
     "memory_total_mib": 19968, "multiprocessor_count": 14},
    {"index": 3, "gpu_instance_id": 6, "compute_instance_id": 0,
     "memory_total_mib": 19968, "multiprocessor_count": 14},
]

XML_EXPECTED = {
    # Windows WDDM: minor_number, persistence_mode, serial, ECC all N/A; legacy <power_readings>
    "netdata-rtx-2080-windows-wddm-driver-516.59-v11.xml": {
        "driver_version": "516.59",
        "cuda_driver_version": "11.7",
        "attached_gpus": 1,
        "gpus": [
            {
                "pci_bus_id": "00000000:0A:00.0",
                "uuid": "GPU-fbd55ed4-1eec-4423-0a47-ad594b4333e3",
                "name": "NVIDIA GeForce RTX 2080",
                "serial": None,
                "memory_total_mib": 8192,
                "architecture": "Turing",
                "persistence_mode": None,
                "minor_number": None,
                "power_limit_w": 275.0,
                "ecc_mode_current": None,
                "mig_current_mode": None,
                "mig_pending_mode": None,
                "mig_devices": [],
                "retired_pages_pending": None,
                "remapped_rows_pending": None,
                "remapped_rows_failure": None,
            },
        ],
    },
    # laptop GPU: every power limit N/A (power_limit_w None) although <power_draw> is set
    "netdata-rtx-3060-laptop-driver-515.65.01-v11.xml": {
        "driver_version": "515.65.01",
        "cuda_driver_version": "11.7",
        "attached_gpus": 1,
        "gpus": [
            {
                "pci_bus_id": "00000000:01:00.0",
                "uuid": "GPU-473d8d0f-d462-185c-6b36-6fc23e23e571",
                "name": "NVIDIA GeForce RTX 3060 Laptop GPU",
                "serial": None,
                "memory_total_mib": 6144,
                "architecture": "Ampere",
                "persistence_mode": False,
                "minor_number": 0,
                "power_limit_w": None,
                "ecc_mode_current": None,
                "mig_current_mode": None,
                "mig_pending_mode": None,
                "mig_devices": [],
                "retired_pages_pending": None,
                "remapped_rows_pending": None,
                "remapped_rows_failure": None,
            },
        ],
    },
    # Pascal datacenter in pass-through VM: ECC Enabled, <pending_blacklist>No</pending_blacklist>, <remapped_rows>N/A</remapped_rows>
    "netdata-tesla-p100-pcie-16gb-passthrough-driver-510.47.03-v11.xml": {
        "driver_version": "510.47.03",
        "cuda_driver_version": "11.6",
        "attached_gpus": 1,
        "gpus": [
            {
                "pci_bus_id": "00000000:00:04.0",
                "uuid": "GPU-d3da8716-eaab-75db-efc1-60e88e1cd55e",
                "name": "Tesla P100-PCIE-16GB",
                "serial": "0324217145110",
                "memory_total_mib": 16384,
                "architecture": "Pascal",
                "persistence_mode": False,
                "minor_number": 0,
                "power_limit_w": 250.0,
                "ecc_mode_current": "enabled",
                "mig_current_mode": None,
                "mig_pending_mode": None,
                "mig_devices": [],
                "retired_pages_pending": False,
                "remapped_rows_pending": None,
                "remapped_rows_failure": None,
            },
        ],
    },
    # oldest DTD v7: no <cuda_version>, 4-digit PCI domain in gpu id, no product_architecture/mig_mode/remapped_rows, only <pending_retirement>
    "rai-grid-k520-aws-driver-352.99-v7.xml": {
        "driver_version": "352.99",
        "cuda_driver_version": None,
        "attached_gpus": 1,
        "gpus": [
            {
                "pci_bus_id": "0000:00:03.0",
                "uuid": "GPU-cc96d6f4-7f66-e1fc-8179-a45dbd47664c",
                "name": "GRID K520",
                "serial": "0321014026924",
                "memory_total_mib": 4095,
                "architecture": None,
                "persistence_mode": True,
                "minor_number": 0,
                "power_limit_w": 125.0,
                "ecc_mode_current": None,
                "mig_current_mode": None,
                "mig_pending_mode": None,
                "mig_devices": [],
                "retired_pages_pending": None,
                "remapped_rows_pending": None,
                "remapped_rows_failure": None,
            },
        ],
    },
    # two <gpu> elements; masked but distinct UUIDs; <gpu_power_readings><current_power_limit>
    "telegraf-2x-rtx-2070-driver-590.44.01-v13.xml": {
        "driver_version": "590.44.01",
        "cuda_driver_version": "13.1",
        "attached_gpus": 2,
        "gpus": [
            {
                "pci_bus_id": "00000000:01:00.0",
                "uuid": "GPU-12345678-aaaa-bbbb-cccc-0123456789ab",
                "name": "NVIDIA GeForce RTX 2070",
                "serial": None,
                "memory_total_mib": 8192,
                "architecture": "Turing",
                "persistence_mode": True,
                "minor_number": 0,
                "power_limit_w": 175.0,
                "ecc_mode_current": None,
                "mig_current_mode": None,
                "mig_pending_mode": None,
                "mig_devices": [],
                "retired_pages_pending": None,
                "remapped_rows_pending": None,
                "remapped_rows_failure": None,
            },
            {
                "pci_bus_id": "00000000:02:00.0",
                "uuid": "GPU-12345678-aaaa-bbbb-cccc-0123456789cd",
                "name": "NVIDIA GeForce RTX 2070",
                "serial": None,
                "memory_total_mib": 8192,
                "architecture": "Turing",
                "persistence_mode": True,
                "minor_number": 1,
                "power_limit_w": 175.0,
                "ecc_mode_current": None,
                "mig_current_mode": None,
                "mig_pending_mode": None,
                "mig_devices": [],
                "retired_pages_pending": None,
                "remapped_rows_pending": None,
                "remapped_rows_failure": None,
            },
        ],
    },
    # two <gpu> elements; minor_number order (1, 0) differs from document/PCI order; ECC Disabled; remapped_rows No/No
    "telegraf-2x-rtx-a5000-driver-590.44.01-v13.xml": {
        "driver_version": "590.44.01",
        "cuda_driver_version": "13.1",
        "attached_gpus": 2,
        "gpus": [
            {
                "pci_bus_id": "00000000:81:00.0",
                "uuid": "GPU-12345678-aaaa-bbbb-cccc-0123456789ab",
                "name": "NVIDIA RTX A5000",
                "serial": "0123456789012",
                "memory_total_mib": 24564,
                "architecture": "Ampere",
                "persistence_mode": True,
                "minor_number": 1,
                "power_limit_w": 230.0,
                "ecc_mode_current": "disabled",
                "mig_current_mode": None,
                "mig_pending_mode": None,
                "mig_devices": [],
                "retired_pages_pending": None,
                "remapped_rows_pending": False,
                "remapped_rows_failure": False,
            },
            {
                "pci_bus_id": "00000000:C1:00.0",
                "uuid": "GPU-12345678-aaaa-bbbb-cccc-0123456789cd",
                "name": "NVIDIA RTX A5000",
                "serial": "1234567890123",
                "memory_total_mib": 24564,
                "architecture": "Ampere",
                "persistence_mode": True,
                "minor_number": 0,
                "power_limit_w": 230.0,
                "ecc_mode_current": "disabled",
                "mig_current_mode": None,
                "mig_pending_mode": None,
                "mig_devices": [],
                "retired_pages_pending": None,
                "remapped_rows_pending": False,
                "remapped_rows_failure": False,
            },
        ],
    },
    # 4 attached_gpus, one <gpu> element; MIG Enabled/Enabled with 4 <mig_device> (gpu_instance_id 3..6); <remapped_rows>N/A</remapped_rows>
    "telegraf-a100-sxm4-80gb-mig-4x1g.20gb-driver-535.54.03-v12.xml": {
        "driver_version": "535.54.03",
        "cuda_driver_version": "12.2",
        "attached_gpus": 4,
        "gpus": [
            {
                "pci_bus_id": "00000000:01:00.0",
                "uuid": "GPU-513536b6-7d19-9063-b049-1e69664bb298",
                "name": "NVIDIA A100-SXM4-80GB",
                "serial": "1650522003820",
                "memory_total_mib": 81920,
                "architecture": "Ampere",
                "persistence_mode": False,
                "minor_number": 1,
                "power_limit_w": 500.0,
                "ecc_mode_current": "enabled",
                "mig_current_mode": "enabled",
                "mig_pending_mode": "enabled",
                "mig_devices": _A100_MIG_DEVICES,
                "retired_pages_pending": None,
                "remapped_rows_pending": None,
                "remapped_rows_failure": None,
            },
        ],
    },
    # all-zero serial kept as a string; ECC Enabled; full <remapped_rows> block (No/No)
    "telegraf-a10g-aws-passthrough-driver-515.105.01-v11.xml": {
        "driver_version": "515.105.01",
        "cuda_driver_version": "11.7",
        "attached_gpus": 1,
        "gpus": [
            {
                "pci_bus_id": "00000000:00:1E.0",
                "uuid": "GPU-9a9a6c50-2a47-2f51-a902-b82c3b127e94",
                "name": "NVIDIA A10G",
                "serial": "0000000000000",
                "memory_total_mib": 23028,
                "architecture": "Ampere",
                "persistence_mode": False,
                "minor_number": 0,
                "power_limit_w": 300.0,
                "ecc_mode_current": "enabled",
                "mig_current_mode": None,
                "mig_pending_mode": None,
                "mig_devices": [],
                "retired_pages_pending": None,
                "remapped_rows_pending": False,
                "remapped_rows_failure": False,
            },
        ],
    },
    # vGPU guest on Windows: 1024 MiB framebuffer, power limits, minor_number, persistence, serial all N/A
    "telegraf-grid-p4-1q-vgpu-guest-windows-driver-513.46-v11.xml": {
        "driver_version": "513.46",
        "cuda_driver_version": "11.6",
        "attached_gpus": 1,
        "gpus": [
            {
                "pci_bus_id": "00000000:00:0B.0",
                "uuid": "GPU-1b1ea7c7-1c4b-ed49-1c72-26c65f2dd207",
                "name": "GRID P4-1Q",
                "serial": None,
                "memory_total_mib": 1024,
                "architecture": "Pascal",
                "persistence_mode": None,
                "minor_number": None,
                "power_limit_w": None,
                "ecc_mode_current": None,
                "mig_current_mode": None,
                "mig_pending_mode": None,
                "mig_devices": [],
                "retired_pages_pending": None,
                "remapped_rows_pending": None,
                "remapped_rows_failure": None,
            },
        ],
    },
    # no <product_architecture>; two-part driver version; power_draw N/A but power limits 30 W
    "telegraf-gt-1030-driver-470.74-v11.xml": {
        "driver_version": "470.74",
        "cuda_driver_version": "11.4",
        "attached_gpus": 1,
        "gpus": [
            {
                "pci_bus_id": "00000000:2D:00.0",
                "uuid": "GPU-857c6374-f681-cf3a-f99f-9063a87b8ac0",
                "name": "NVIDIA GeForce GT 1030",
                "serial": None,
                "memory_total_mib": 1998,
                "architecture": None,
                "persistence_mode": False,
                "minor_number": 0,
                "power_limit_w": 30.0,
                "ecc_mode_current": None,
                "mig_current_mode": None,
                "mig_pending_mode": None,
                "mig_devices": [],
                "retired_pages_pending": None,
                "remapped_rows_pending": None,
                "remapped_rows_failure": None,
            },
        ],
    },
    # hand-trimmed minimal document: no driver/cuda/attached_gpus header, no serial/minor/persistence/ecc/mig/retired/remapped, only <power_draw>N/A
    "telegraf-gtx-1070-ti-trimmed-v10.xml": {
        "driver_version": None,
        "cuda_driver_version": None,
        "attached_gpus": None,
        "gpus": [
            {
                "pci_bus_id": "00000000:01:00.0",
                "uuid": "GPU-f9ba66fc-a7f5-94c5-da19-019ef2f9c665",
                "name": "GeForce GTX 1070 Ti",
                "serial": None,
                "memory_total_mib": 4096,
                "architecture": None,
                "persistence_mode": None,
                "minor_number": None,
                "power_limit_w": None,
                "ecc_mode_current": None,
                "mig_current_mode": None,
                "mig_pending_mode": None,
                "mig_devices": [],
                "retired_pages_pending": None,
                "remapped_rows_pending": None,
                "remapped_rows_failure": None,
            },
        ],
    },
    # DTD v12 but legacy <power_readings> (<enforced_power_limit>/<power_limit>) element names
    "telegraf-quadro-p2000-driver-525.125.06-v12-legacy-power-readings.xml": {
        "driver_version": "525.125.06",
        "cuda_driver_version": "12.0",
        "attached_gpus": 1,
        "gpus": [
            {
                "pci_bus_id": "00000000:17:00.0",
                "uuid": "GPU-396caaed-39ca-3199-2e68-717cdb786ec6",
                "name": "Quadro P2000",
                "serial": "0322218049033",
                "memory_total_mib": 5120,
                "architecture": "Pascal",
                "persistence_mode": True,
                "minor_number": 0,
                "power_limit_w": 75.0,
                "ecc_mode_current": None,
                "mig_current_mode": None,
                "mig_pending_mode": None,
                "mig_devices": [],
                "retired_pages_pending": None,
                "remapped_rows_pending": None,
                "remapped_rows_failure": None,
            },
        ],
    },
    # no DOCTYPE; no <product_architecture>, <mig_mode>, <mig_devices>, <remapped_rows>; all power limits N/A
    "telegraf-quadro-p400-driver-418.43-no-doctype.xml": {
        "driver_version": "418.43",
        "cuda_driver_version": "10.1",
        "attached_gpus": 1,
        "gpus": [
            {
                "pci_bus_id": "00000000:43:00.0",
                "uuid": "GPU-8f750be4-dfbc-23b9-b33f-da729a536494",
                "name": "Quadro P400",
                "serial": "0424418054852",
                "memory_total_mib": 1998,
                "architecture": None,
                "persistence_mode": False,
                "minor_number": 0,
                "power_limit_w": None,
                "ecc_mode_current": None,
                "mig_current_mode": None,
                "mig_pending_mode": None,
                "mig_devices": [],
                "retired_pages_pending": None,
                "remapped_rows_pending": None,
                "remapped_rows_failure": None,
            },
        ],
    },
    # new <gpu_power_readings> layout (instant/average draw, <current_power_limit>), no <power_limit>
    "telegraf-rtx-3060-driver-570.124.04-v12.xml": {
        "driver_version": "570.124.04",
        "cuda_driver_version": "12.8",
        "attached_gpus": 1,
        "gpus": [
            {
                "pci_bus_id": "00000000:2D:00.0",
                "uuid": "GPU-d6889ff6-2523-9142-ca3c-1ca3f396a625",
                "name": "NVIDIA GeForce RTX 3060",
                "serial": None,
                "memory_total_mib": 12288,
                "architecture": "Ampere",
                "persistence_mode": True,
                "minor_number": 0,
                "power_limit_w": 170.0,
                "ecc_mode_current": None,
                "mig_current_mode": None,
                "mig_pending_mode": None,
                "mig_devices": [],
                "retired_pages_pending": None,
                "remapped_rows_pending": None,
                "remapped_rows_failure": None,
            },
        ],
    },
    # <serial>REDACTED</serial> -> None; same UUID as the Windows RTX 3080 file; power_state deprecated token
    "telegraf-rtx-3080-driver-595.58.03-v13.xml": {
        "driver_version": "595.58.03",
        "cuda_driver_version": "13.2",
        "attached_gpus": 1,
        "gpus": [
            {
                "pci_bus_id": "00000000:0C:00.0",
                "uuid": "GPU-19d6d965-2acc-f646-00f8-4c76979aabb4",
                "name": "NVIDIA GeForce RTX 3080",
                "serial": None,
                "memory_total_mib": 10240,
                "architecture": "Ampere",
                "persistence_mode": False,
                "minor_number": 0,
                "power_limit_w": 320.0,
                "ecc_mode_current": None,
                "mig_current_mode": None,
                "mig_pending_mode": None,
                "mig_devices": [],
                "retired_pages_pending": None,
                "remapped_rows_pending": None,
                "remapped_rows_failure": None,
            },
        ],
    },
    # Windows WDDM: minor_number/persistence N/A; current_power_limit 336 W != default 320 W (current wins)
    "telegraf-rtx-3080-windows-wddm-driver-536.40-v12.xml": {
        "driver_version": "536.40",
        "cuda_driver_version": "12.2",
        "attached_gpus": 1,
        "gpus": [
            {
                "pci_bus_id": "00000000:04:00.0",
                "uuid": "GPU-19d6d965-2acc-f646-00f8-4c76979aabb4",
                "name": "NVIDIA GeForce RTX 3080",
                "serial": None,
                "memory_total_mib": 10240,
                "architecture": "Ampere",
                "persistence_mode": None,
                "minor_number": None,
                "power_limit_w": 336.0,
                "ecc_mode_current": None,
                "mig_current_mode": None,
                "mig_pending_mode": None,
                "mig_devices": [],
                "retired_pages_pending": None,
                "remapped_rows_pending": None,
                "remapped_rows_failure": None,
            },
        ],
    },
    # masked UUID GPU-12345678-aaaa-...-89ab (shared by several files); many deprecated tokens
    "telegraf-rtx-3090-driver-590.44.01-v13.xml": {
        "driver_version": "590.44.01",
        "cuda_driver_version": "13.1",
        "attached_gpus": 1,
        "gpus": [
            {
                "pci_bus_id": "00000000:09:00.0",
                "uuid": "GPU-12345678-aaaa-bbbb-cccc-0123456789ab",
                "name": "NVIDIA GeForce RTX 3090",
                "serial": None,
                "memory_total_mib": 24576,
                "architecture": "Ampere",
                "persistence_mode": True,
                "minor_number": 0,
                "power_limit_w": 350.0,
                "ecc_mode_current": None,
                "mig_current_mode": None,
                "mig_pending_mode": None,
                "mig_devices": [],
                "retired_pages_pending": None,
                "remapped_rows_pending": None,
                "remapped_rows_failure": None,
            },
        ],
    },
    # [REDACTED] masks; masked duplicate-looking UUID; enforced_power_limit 200 W below default 350 W (enforced wins)
    "telegraf-rtx-3090-passthrough-driver-525.147.05-v12-redacted.xml": {
        "driver_version": "525.147.05",
        "cuda_driver_version": "12.0",
        "attached_gpus": 1,
        "gpus": [
            {
                "pci_bus_id": "00000000:00:10.0",
                "uuid": "GPU-12345678-aaaa-bbbb-cccc-0123456789ab",
                "name": "NVIDIA GeForce RTX 3090",
                "serial": None,
                "memory_total_mib": 24576,
                "architecture": "Ampere",
                "persistence_mode": True,
                "minor_number": 0,
                "power_limit_w": 200.0,
                "ecc_mode_current": None,
                "mig_current_mode": None,
                "mig_pending_mode": None,
                "mig_devices": [],
                "retired_pages_pending": None,
                "remapped_rows_pending": None,
                "remapped_rows_failure": None,
            },
        ],
    },
    # two-word architecture 'Ada Lovelace'; serial REDACTED; ECC Disabled; extra *_inactive remapped-row elements
    "telegraf-rtx-4000-sff-ada-driver-595.84-v13.xml": {
        "driver_version": "595.84",
        "cuda_driver_version": "13.2",
        "attached_gpus": 1,
        "gpus": [
            {
                "pci_bus_id": "00000000:06:00.0",
                "uuid": "GPU-37037c3f-65c8-ec4d-24a9-420204ad8026",
                "name": "NVIDIA RTX 4000 SFF Ada Generation",
                "serial": None,
                "memory_total_mib": 20475,
                "architecture": "Ada Lovelace",
                "persistence_mode": True,
                "minor_number": 0,
                "power_limit_w": 70.0,
                "ecc_mode_current": "disabled",
                "mig_current_mode": None,
                "mig_pending_mode": None,
                "mig_devices": [],
                "retired_pages_pending": None,
                "remapped_rows_pending": False,
                "remapped_rows_failure": False,
            },
        ],
    },
    # Blackwell, long product name, 97887 MiB; largest file; ECC Disabled; remapped_rows No/No
    "telegraf-rtx-pro-6000-blackwell-maxq-driver-590.44.01-v13.xml": {
        "driver_version": "590.44.01",
        "cuda_driver_version": "13.1",
        "attached_gpus": 1,
        "gpus": [
            {
                "pci_bus_id": "00000000:61:00.0",
                "uuid": "GPU-12345678-aaaa-bbbb-cccc-0123456789ab",
                "name": "NVIDIA RTX PRO 6000 Blackwell Max-Q Workstation Edition",
                "serial": "0123456789012",
                "memory_total_mib": 97887,
                "architecture": "Blackwell",
                "persistence_mode": True,
                "minor_number": 0,
                "power_limit_w": 300.0,
                "ecc_mode_current": "disabled",
                "mig_current_mode": None,
                "mig_pending_mode": None,
                "mig_devices": [],
                "retired_pages_pending": None,
                "remapped_rows_pending": False,
                "remapped_rows_failure": False,
            },
        ],
    },
    # all-zero serial kept; ECC Enabled; <pending_blacklist>No; <remapped_rows>N/A</remapped_rows> on Turing
    "telegraf-tesla-t4-aws-driver-515.105.01-v11.xml": {
        "driver_version": "515.105.01",
        "cuda_driver_version": "11.7",
        "attached_gpus": 1,
        "gpus": [
            {
                "pci_bus_id": "00000000:00:1E.0",
                "uuid": "GPU-d37e67a5-91dd-3774-a5cb-99096249601a",
                "name": "Tesla T4",
                "serial": "0000000000000",
                "memory_total_mib": 15360,
                "architecture": "Turing",
                "persistence_mode": False,
                "minor_number": 0,
                "power_limit_w": 70.0,
                "ecc_mode_current": "enabled",
                "mig_current_mode": None,
                "mig_pending_mode": None,
                "mig_devices": [],
                "retired_pages_pending": False,
                "remapped_rows_pending": None,
                "remapped_rows_failure": None,
            },
        ],
    },
}

# `nvidia-smi -L` section of the multi-command text captures. The section starts at the
# first line equal to LIST_SECTION_MARKER; the line right after it is a banner line of 80
# '#' characters (closing the section header). The section body ends at the NEXT line of
# '#' hashes (the banner that opens the following 'topo -m' section); blank lines before
# it are padding. GPU lines: 'GPU <i>: <name> (UUID: GPU-...)'. MIG lines are indented:
# '  MIG <profile>     Device  <j>: (UUID: MIG-...)' (runs of spaces between fields).
LIST_SECTION_MARKER = "# $ nvidia-smi -L"

LIST_EXPECTED = {
    # single H100, masked all-zero UUID, no MIG lines
    "nvgpuexp-capture-linux-h100-80gb-hbm3-driver-590.48.01.txt": [
        {"index": 0, "name": "NVIDIA H100 80GB HBM3", "uuid": "GPU-00000000-0000-0000-0000-000000000000",
         "mig_devices": []},
    ],
    # MIG lines are indented 2 spaces, profile padded with spaces, 'Device  N:' has two spaces
    "nvgpuexp-capture-linux-h100-mig-driver-590.48.01.txt": [
        {"index": 0, "name": "NVIDIA H100 80GB HBM3", "uuid": "GPU-00000000-0000-0000-0000-000000000000",
         "mig_devices": [
             {"index": 0, "profile": "3g.40gb", "uuid": "MIG-00000000-0000-0000-0000-000000000000"},
             {"index": 1, "profile": "2g.20gb", "uuid": "MIG-00000001-0000-0000-0000-000000000001"},
             {"index": 2, "profile": "1g.10gb", "uuid": "MIG-00000002-0000-0000-0000-000000000002"},
             {"index": 3, "profile": "1g.10gb", "uuid": "MIG-00000003-0000-0000-0000-000000000003"},
         ]},
    ],
    # single H200, short product name
    "nvgpuexp-capture-linux-h200-driver-590.48.01.txt": [
        {"index": 0, "name": "NVIDIA H200", "uuid": "GPU-00000000-0000-0000-0000-000000000000",
         "mig_devices": []},
    ],
    # single L40S; section sits at a different line than in the 590 captures
    "nvgpuexp-capture-linux-l40s-driver-595.80.txt": [
        {"index": 0, "name": "NVIDIA L40S", "uuid": "GPU-00000000-0000-0000-0000-000000000000",
         "mig_devices": []},
    ],
}

# The state nvml_facts reports for each XML capture alone (nvidia-smi printing it, no PCI
# scan, no kernel log), with the number of lost GPUs. Every capture prints as many <gpu>
# as its <attached_gpus> says, except the A100 one: <attached_gpus>4</attached_gpus> and
# one <gpu>. That is three GPUs nvidia-smi counts and does not show, so its facts say
# gpu_lost with three GPUs of unknown address (they said ok before lost GPUs were counted).
# The trimmed GTX 1070 Ti excerpt has no <attached_gpus>; nothing is counted as lost there.
SUMMARY_EXPECTED = {
    "netdata-rtx-2080-windows-wddm-driver-516.59-v11.xml": ("ok", 0),
    "netdata-rtx-3060-laptop-driver-515.65.01-v11.xml": ("ok", 0),
    "netdata-tesla-p100-pcie-16gb-passthrough-driver-510.47.03-v11.xml": ("ok", 0),
    "rai-grid-k520-aws-driver-352.99-v7.xml": ("ok", 0),
    "telegraf-2x-rtx-2070-driver-590.44.01-v13.xml": ("ok", 0),
    "telegraf-2x-rtx-a5000-driver-590.44.01-v13.xml": ("ok", 0),
    "telegraf-a100-sxm4-80gb-mig-4x1g.20gb-driver-535.54.03-v12.xml": ("gpu_lost", 3),
    "telegraf-a10g-aws-passthrough-driver-515.105.01-v11.xml": ("ok", 0),
    "telegraf-grid-p4-1q-vgpu-guest-windows-driver-513.46-v11.xml": ("ok", 0),
    "telegraf-gt-1030-driver-470.74-v11.xml": ("ok", 0),
    "telegraf-gtx-1070-ti-trimmed-v10.xml": ("ok", 0),
    "telegraf-quadro-p2000-driver-525.125.06-v12-legacy-power-readings.xml": ("ok", 0),
    "telegraf-quadro-p400-driver-418.43-no-doctype.xml": ("ok", 0),
    "telegraf-rtx-3060-driver-570.124.04-v12.xml": ("ok", 0),
    "telegraf-rtx-3080-driver-595.58.03-v13.xml": ("ok", 0),
    "telegraf-rtx-3080-windows-wddm-driver-536.40-v12.xml": ("ok", 0),
    "telegraf-rtx-3090-driver-590.44.01-v13.xml": ("ok", 0),
    "telegraf-rtx-3090-passthrough-driver-525.147.05-v12-redacted.xml": ("ok", 0),
    "telegraf-rtx-4000-sff-ada-driver-595.84-v13.xml": ("ok", 0),
    "telegraf-rtx-pro-6000-blackwell-maxq-driver-590.44.01-v13.xml": ("ok", 0),
    "telegraf-tesla-t4-aws-driver-515.105.01-v11.xml": ("ok", 0),
}

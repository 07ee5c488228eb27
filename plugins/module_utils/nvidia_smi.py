# -*- coding: utf-8 -*-
# Copyright: (c) 2026, gpufleet.nvidia contributors
# GNU General Public License v3.0+ (see COPYING or https://www.gnu.org/licenses/gpl-3.0.txt)
"""nvidia-smi: run it and parse what it prints.

``nvidia-smi -q -x`` (the XML report) into GPU entries, ``nvidia-smi -L``
(the list, with MIG devices), the lines it prints for GPUs it cannot open,
its exit codes, and the MIG profiles of ``nvidia-smi mig -lgip`` / ``-lgi``.
"""

from __future__ import annotations

import re
import xml.etree.ElementTree as ET

from ansible_collections.gpufleet.nvidia.plugins.module_utils.inventory_values import (
    InventoryError,
    _first_line,
    clean,
    empty_fabric,
    empty_gpu,
    empty_mig_device,
    pci_address,
    plain_version,
    to_bool,
    to_mode,
    to_number,
    virtualization_mode,
)


_SMI_LIST_GPU_RE = re.compile(r"^GPU\s+(?P<index>\d+):\s*(?P<name>.*?)\s*\(UUID:\s*(?P<uuid>[^)]*)\)\s*$")
_SMI_LIST_MIG_RE = re.compile(
    r"^\s+MIG\s+(?P<profile>\S+)\s+Device\s+(?P<index>\d+):\s*\(UUID:\s*(?P<uuid>[^)]*)\)\s*$"
)


def _sum_known(values):
    known = [v for v in values if v is not None]
    return sum(known) if known else None


# --------------------------------------------------------------------------
# nvidia-smi -q -x
# --------------------------------------------------------------------------

def _text(element, path):
    """Text of the first element at ``path`` below ``element`` (None if missing)."""
    if element is None:
        return None
    found = element.find(path)
    if found is None:
        return None
    return found.text


def _first_number(element, paths, integer=False):
    for path in paths:
        number = to_number(_text(element, path), integer=integer)
        if number is not None:
            return number
    return None


def _smi_ecc_counts(block):
    """(correctable, uncorrectable) totals of one <volatile>/<aggregate> block.

    Pascal and older: <single_bit>/<double_bit> with a <total>.
    Volta and newer: <sram_*>/<dram_*> counters, split further into
    parity/secded SRAM counters from driver 570 on.
    """
    if block is None:
        return None, None
    if block.find("single_bit") is not None or block.find("double_bit") is not None:
        return (
            to_number(_text(block, "single_bit/total"), integer=True),
            to_number(_text(block, "double_bit/total"), integer=True),
        )
    correctable = _sum_known([
        to_number(_text(block, name), integer=True)
        for name in ("sram_correctable", "dram_correctable", "device_memory_correctable")
    ])
    uncorrectable = _sum_known([
        to_number(_text(block, name), integer=True)
        for name in (
            "sram_uncorrectable",
            "sram_uncorrectable_parity",
            "sram_uncorrectable_secded",
            "dram_uncorrectable",
        )
    ])
    return correctable, uncorrectable


def _smi_mig_devices(gpu):
    devices = []
    for node in gpu.findall("mig_devices/mig_device"):
        index = to_number(_text(node, "index"), integer=True)
        device = empty_mig_device(index if index is not None else len(devices))
        device["gpu_instance_id"] = to_number(_text(node, "gpu_instance_id"), integer=True)
        device["compute_instance_id"] = to_number(_text(node, "compute_instance_id"), integer=True)
        device["memory_total_mib"] = to_number(_text(node, "fb_memory_usage/total"), integer=True)
        device["multiprocessor_count"] = to_number(
            _text(node, "device_attributes/shared/multiprocessor_count"), integer=True
        )
        devices.append(device)
    return devices


def _smi_gpu(index, node):
    gpu = empty_gpu(index)
    bus_id = clean(node.get("id")) or clean(_text(node, "pci/pci_bus_id"))
    gpu["pci_bus_id"] = bus_id
    gpu["pci_address"] = pci_address(bus_id)
    device_id = clean(_text(node, "pci/pci_device_id"))
    if device_id and re.match(r"^[0-9A-Fa-f]{8}$", device_id):
        # 20B210DE: device id in the upper half, vendor id in the lower half.
        gpu["pci_device_id"] = "0x" + device_id[:4].lower()
    gpu["uuid"] = clean(_text(node, "uuid"))
    gpu["name"] = clean(_text(node, "product_name"))
    gpu["brand"] = clean(_text(node, "product_brand"))
    gpu["serial"] = clean(_text(node, "serial"))
    gpu["minor_number"] = to_number(_text(node, "minor_number"), integer=True)
    gpu["vbios_version"] = clean(_text(node, "vbios_version"))
    gpu["architecture"] = clean(_text(node, "product_architecture"))
    gpu["memory_total_mib"] = to_number(_text(node, "fb_memory_usage/total"), integer=True)
    gpu["persistence_mode"] = to_bool(_text(node, "persistence_mode"))
    gpu["virtualization_mode"] = virtualization_mode(_text(node, "gpu_virtualization_mode/virtualization_mode"))
    # 530+ renamed <power_readings> to <gpu_power_readings> and the enforced
    # limit to <current_power_limit>; some v12 documents keep the old names.
    gpu["power_limit_w"] = _first_number(node, (
        "gpu_power_readings/current_power_limit",
        "power_readings/enforced_power_limit",
        "gpu_power_readings/enforced_power_limit",
        "power_readings/power_limit",
        "gpu_power_readings/power_limit",
    ))

    mig = gpu["mig"]
    mig["current_mode"] = to_mode(_text(node, "mig_mode/current_mig"))
    mig["pending_mode"] = to_mode(_text(node, "mig_mode/pending_mig"))
    mig["capable"] = mig["current_mode"] is not None
    mig["devices"] = _smi_mig_devices(node)

    ecc = gpu["ecc"]
    ecc["current_mode"] = to_mode(_text(node, "ecc_mode/current_ecc"))
    ecc["pending_mode"] = to_mode(_text(node, "ecc_mode/pending_ecc"))
    ecc["volatile_correctable"], ecc["volatile_uncorrectable"] = _smi_ecc_counts(
        node.find("ecc_errors/volatile"))
    ecc["aggregate_correctable"], ecc["aggregate_uncorrectable"] = _smi_ecc_counts(
        node.find("ecc_errors/aggregate"))

    health = gpu["health"]
    pending = to_bool(_text(node, "retired_pages/pending_retirement"))
    if pending is None:
        pending = to_bool(_text(node, "retired_pages/pending_blacklist"))
    health["retired_pages_pending"] = pending
    health["retired_pages_single_bit"] = to_number(
        _text(node, "retired_pages/multiple_single_bit_retirement/retired_count"), integer=True)
    health["retired_pages_double_bit"] = to_number(
        _text(node, "retired_pages/double_bit_retirement/retired_count"), integer=True)
    health["remapped_rows_correctable"] = to_number(_text(node, "remapped_rows/remapped_row_corr"), integer=True)
    health["remapped_rows_uncorrectable"] = to_number(_text(node, "remapped_rows/remapped_row_unc"), integer=True)
    health["remapped_rows_pending"] = to_bool(_text(node, "remapped_rows/remapped_row_pending"))
    health["remapped_rows_failure"] = to_bool(_text(node, "remapped_rows/remapped_row_failure"))
    gpu["fabric"] = _smi_fabric(node.find("fabric"))
    if _smi_says_lost(node):
        # NVML_ERROR_GPU_IS_LOST: the driver still enumerates the GPU but cannot read it, and nvidia-smi
        # prints the error's text where the values would be.
        gpu["error"] = _SMI_GPU_IS_LOST
    return gpu


# NVML's text for NVML_ERROR_GPU_IS_LOST (nvmlErrorString), which nvidia-smi prints in place of a value.
_SMI_GPU_IS_LOST = "GPU is lost"


def _smi_says_lost(node):
    """Whether nvidia-smi printed 'GPU is lost' in place of any value of this <gpu>."""
    for element in node.iter():
        token = (element.text or "").strip().lower()
        if token.startswith("[") and token.endswith("]"):
            token = token[1:-1].strip()
        if token == _SMI_GPU_IS_LOST.lower():
            return True
    return False


def _smi_printed_lost(gpus):
    """Lost entries for the GPUs nvidia-smi printed with 'GPU is lost' in place of their values."""
    return [{"pci_address": gpu["pci_address"], "gpu_index": gpu["index"], "source": "nvidia_smi",
             "message": "nvidia-smi: %s" % _SMI_GPU_IS_LOST}
            for gpu in gpus if gpu["error"] == _SMI_GPU_IS_LOST]


def _merge_lost(named, printed):
    """The GPUs nvidia-smi named as lost in its lines, with those it printed as lost: one entry per GPU,
    the printed one's index added to the line's entry of the same address."""
    lost = [dict(entry) for entry in named]
    for entry in printed:
        same = next((known for known in lost if entry["pci_address"] and known["pci_address"] == entry["pci_address"]),
                    None)
        if same is None:
            lost.append(dict(entry))
        elif same.get("gpu_index") is None:
            same["gpu_index"] = entry["gpu_index"]
    return lost


def _smi_fabric(block):
    """<fabric>: <state>/<status> since 525, <cliqueId>/<clusterUuid>/<health> later.

    "Not Supported" is a state here (the GPU has no NVSwitch fabric), not an
    absent value; N/A stays null.
    """
    fabric = empty_fabric()
    if block is None:
        return fabric
    state = (_text(block, "state") or "").strip()
    if state.lower() == "not supported":
        fabric["state"] = "not_supported"
    elif clean(state) is not None:
        fabric["state"] = clean(state).lower().replace(" ", "_")
    status = clean(_text(block, "status"))
    if status is not None:
        fabric["status"] = "success" if status.lower() == "success" else status
    fabric["clique_id"] = to_number(_text(block, "cliqueId"), integer=True)
    fabric["cluster_uuid"] = clean(_text(block, "clusterUuid"))
    fabric["health"] = clean(_text(block, "health/summary"))
    return fabric


def parse_smi_xml(text):
    """Parse ``nvidia-smi -q -x`` output.

    Returns ``{"driver_version", "cuda_driver_version", "attached_gpus", "gpus"}``.
    Elements are detected by name, never by the DTD version (the DTD line is
    missing in some releases, and a v12 DTD still carries v11 element names).
    Raises InventoryError when the text is not an nvidia-smi XML log.
    """
    if isinstance(text, bytes):
        text = text.decode("utf-8", "replace")
    try:
        root = ET.fromstring(text.strip())
    except ET.ParseError as err:
        raise InventoryError("nvidia-smi -q -x did not print XML: %s" % err)
    if root.tag != "nvidia_smi_log":
        raise InventoryError(
            "nvidia-smi -q -x printed XML whose root is <%s>, expected <nvidia_smi_log>" % root.tag)
    gpus = [_smi_gpu(index, node) for index, node in enumerate(root.findall("gpu"))]
    # Driver 610 deprecates "Driver Version" and "CUDA Version" in favour of
    # "KMD Version" and "CUDA UMD Version" and appends a note to the old ones
    # in `nvidia-smi -q`. No 610 XML capture is available: the element names
    # <kmd_version> and <cuda_umd_version> are inferred from the query field
    # names; the old elements are read too, and any note is stripped.
    kmd = plain_version(_text(root, "kmd_version"))
    umd = plain_version(_text(root, "cuda_umd_version"))
    return {
        "driver_version": plain_version(_text(root, "driver_version")) or kmd,
        "cuda_driver_version": plain_version(_text(root, "cuda_version")) or umd,
        "kmd_version": kmd,
        "cuda_umd_version": umd,
        "attached_gpus": to_number(_text(root, "attached_gpus"), integer=True),
        "gpus": gpus,
    }


def parse_smi_list(text):
    """Parse ``nvidia-smi -L``: GPUs with their MIG devices' profiles and UUIDs."""
    if isinstance(text, bytes):
        text = text.decode("utf-8", "replace")
    gpus = []
    for line in text.splitlines():
        match = _SMI_LIST_GPU_RE.match(line)
        if match:
            gpus.append({
                "index": int(match.group("index")),
                "name": match.group("name"),
                "uuid": clean(match.group("uuid")),
                "mig_devices": [],
            })
            continue
        match = _SMI_LIST_MIG_RE.match(line)
        if match and gpus:
            gpus[-1]["mig_devices"].append({
                "index": int(match.group("index")),
                "profile": match.group("profile"),
                "uuid": clean(match.group("uuid")),
            })
    return gpus


def merge_smi_list(gpus, listed):
    """Add MIG profiles and UUIDs from ``nvidia-smi -L`` to the XML's GPUs.

    GPUs are matched by index (both come from the same NVML enumeration);
    a GPU whose name differs is left alone rather than mislabelled.
    """
    by_index = {entry["index"]: entry for entry in listed}
    for gpu in gpus:
        entry = by_index.get(gpu["index"])
        if entry is None or (gpu["name"] and entry["name"] != gpu["name"]):
            continue
        mig_by_index = {mig["index"]: mig for mig in entry["mig_devices"]}
        for device in gpu["mig"]["devices"]:
            listed_mig = mig_by_index.get(device["index"])
            if listed_mig is None:
                continue
            device["profile"] = device["profile"] or listed_mig["profile"]
            device["uuid"] = device["uuid"] or listed_mig["uuid"]
    return gpus


# nvidia-smi's exit codes (nvidia-smi(1), RETURN VALUE) and the words it
# prints for the states the inventory reports rather than fails on.
_SMI_OUTCOMES = (
    ("mismatch", (18,), "version mismatch"),
    ("not_loaded", (9,), "couldn't communicate with the nvidia driver"),
    ("no_devices", (6,), "no devices were found"),
    ("not_installed", (12,), "couldn't find libnvidia-ml"),
    ("not_installed", (12,), "shared library not found"),
    ("gpu_lost", (15,), "gpu is lost"),
    ("gpu_lost", (15,), "unable to determine the device handle"),
)

# What nvidia-smi prints for a GPU that NVML enumerates but cannot open, e.g.
# "Unable to determine the device handle for GPU 0000:3B:00.0: GPU is lost.
# Reboot the system to recover this GPU" or "... for GPU0000:07:00.0: Unknown
# Error" (fixtures/nvidia-smi-lost/SOURCES.md lists the real lines).
_SMI_LOST_RE = re.compile(
    r"Unable to determine the device handle for GPU\s*"
    r"(?P<domain>[0-9A-Fa-f]{1,8}):(?P<bus>[0-9A-Fa-f]{2}):(?P<device>[0-9A-Fa-f]{2})\.(?P<function>[0-7])"
    r"\s*:\s*(?P<reason>.*?)\s*$"
)


def parse_smi_lost(*texts):
    """GPUs that nvidia-smi names as lost: [{"pci_address", "source", "message"}]."""
    lost = []
    seen = set()
    for text in texts:
        if isinstance(text, bytes):
            text = text.decode("utf-8", "replace")
        for line in (text or "").splitlines():
            match = _SMI_LOST_RE.search(line)
            if not match:
                continue
            address = "%04x:%s:%s.%s" % (
                int(match.group("domain"), 16), match.group("bus").lower(),
                match.group("device").lower(), match.group("function"))
            if address in seen:
                continue
            seen.add(address)
            reason = re.sub(r"\s+", " ", match.group("reason")) or "unknown error"
            lost.append({"pci_address": address, "gpu_index": None, "source": "nvidia_smi",
                         "message": "nvidia-smi: %s" % reason})
    return lost


def classify_smi_failure(rc, stdout, stderr):
    """Name the state behind a failed nvidia-smi run, or None if unknown."""
    words = ("%s\n%s" % (stdout or "", stderr or "")).lower()
    for outcome, codes, phrase in _SMI_OUTCOMES:
        if phrase in words:
            return outcome
    for outcome, codes, phrase in _SMI_OUTCOMES:
        if rc in codes:
            return outcome
    return None


def _smi_answer_fields(parsed):
    return {
        "driver_version": parsed["driver_version"],
        "cuda_driver_version": parsed["cuda_driver_version"],
        "kmd_version": parsed["kmd_version"],
        "cuda_umd_version": parsed["cuda_umd_version"],
        "attached_gpus": parsed["attached_gpus"],
        "gpus": parsed["gpus"],
    }


def query_nvidia_smi(run, executable):
    """Ask nvidia-smi. ``run(argv) -> (rc, stdout, stderr)``.

    Returns an answer dict (see ``query_nvml``); raises InventoryError when
    nvidia-smi answers something that is neither an inventory nor a known state.
    """
    rc, out, err = run([executable, "-q", "-x"])
    if rc != 0:
        outcome = classify_smi_failure(rc, out, err)
        if outcome is None:
            raise InventoryError(
                "nvidia-smi -q -x failed with rc=%s: %s" % (rc, _first_line(err, out) or "no output"),
                rc=rc, stdout=out, stderr=err, cmd=[executable, "-q", "-x"])
        answer = {"outcome": outcome, "message": "nvidia-smi: %s" % _first_line(err, out)}
        if outcome == "gpu_lost":
            answer["lost"] = parse_smi_lost(out, err)
        if outcome == "gpu_lost" and "<nvidia_smi_log" in (out or ""):
            # The GPUs that still answer are printed before the failure.
            try:
                partial = parse_smi_xml(out[out.index("<"):])
            except InventoryError:
                partial = None
            if partial:
                answer.update(_smi_answer_fields(partial))
                answer["lost"] = _merge_lost(answer["lost"], _smi_printed_lost(partial["gpus"]))
        return answer
    try:
        parsed = parse_smi_xml(out[out.index("<"):] if "<" in (out or "") else out)
    except InventoryError as exc:
        raise InventoryError(str(exc), rc=rc, stdout=out, stderr=err, cmd=[executable, "-q", "-x"])
    answer = {
        "outcome": "ok" if parsed["gpus"] else "no_devices",
        "message": None,
        # A GPU that cannot be opened is named on stderr (or before the XML)
        # while the others are printed and nvidia-smi may still exit 0.
        "lost": _merge_lost(parse_smi_lost(out[:out.index("<")] if "<" in (out or "") else "", err),
                            _smi_printed_lost(parsed["gpus"])),
    }
    answer.update(_smi_answer_fields(parsed))
    needs_list = any(
        device["uuid"] is None or device["profile"] is None
        for gpu in parsed["gpus"] for device in gpu["mig"]["devices"]
    )
    if needs_list:
        list_rc, list_out, dummy = run([executable, "-L"])
        if list_rc == 0:
            merge_smi_list(parsed["gpus"], parse_smi_list(list_out))
    return answer


# One profile row of `nvidia-smi mig -lgip` (both widths: drivers up to 535 and 570 on):
# |   0  MIG 1g.10gb         19     7/7        9.75       No     16     1     0   |
_SMI_PROFILE_RE = re.compile(
    r"^\|\s*(?P<gpu>\d+)\s+MIG\s+(?P<name>\S+)\s+(?P<id>\d+)\s+(?P<free>\d+)/(?P<total>\d+)\s+"
    r"(?P<memory>[0-9.]+)\s")


def parse_smi_profiles(text):
    """``nvidia-smi mig -lgip`` -> {GPU index: [{name, id, instances_free, instances_total, memory_gib}]}."""
    profiles = {}
    for line in (text or "").splitlines():
        match = _SMI_PROFILE_RE.match(line)
        if not match:
            continue
        profiles.setdefault(int(match.group("gpu")), []).append({
            "name": match.group("name"),
            "id": int(match.group("id")),
            "instances_free": int(match.group("free")),
            "instances_total": int(match.group("total")),
            "memory_gib": float(match.group("memory")),
        })
    return profiles


# One GPU instance row of `nvidia-smi mig -lgi` (both widths):
# |   0  MIG 1g.10gb+me        20       11          4:1     |
_SMI_GPU_INSTANCE_RE = re.compile(
    r"^\|\s*(?P<gpu>\d+)\s+MIG\s+(?P<name>\S+)\s+(?P<profile_id>\d+)\s+(?P<id>\d+)\s+\d+:\d+\s*\|$")


def parse_smi_gpu_instances(text):
    """``nvidia-smi mig -lgi`` -> {GPU index: {GPU instance ID: profile name}}."""
    instances = {}
    for line in (text or "").splitlines():
        match = _SMI_GPU_INSTANCE_RE.match(line)
        if match:
            instances.setdefault(int(match.group("gpu")), {})[int(match.group("id"))] = match.group("name")
    return instances


def add_mig_profiles(run, executable, gpus):
    """Add what ``nvidia-smi mig`` lists to the MIG-capable GPUs: the GPU instance profiles
    (``-lgip``) and, for GPUs in MIG mode, each MIG device's GPU instance profile (``-lgi``;
    ``-L`` names a ``1g.10gb+me`` instance's device ``1g.10gb``).

    Recent drivers list the profiles whatever the MIG mode; older ones only for GPUs
    in MIG mode ("No MIG-enabled devices found."), and then the list stays empty.
    """
    if not any(((gpu.get("mig") or {}).get("capable")) for gpu in gpus or []):
        return
    rc, out, dummy = run([executable, "mig", "-lgip"])
    listed = parse_smi_profiles(out) if rc == 0 else {}
    for gpu in gpus:
        if (gpu.get("mig") or {}).get("capable") and gpu.get("index") in listed:
            gpu["mig"]["profiles"] = listed[gpu["index"]]
    if not any(((gpu.get("mig") or {}).get("devices")) for gpu in gpus):
        return
    rc, out, dummy = run([executable, "mig", "-lgi"])
    instances = parse_smi_gpu_instances(out) if rc == 0 else {}
    for gpu in gpus:
        for device in (gpu.get("mig") or {}).get("devices") or []:
            device["gpu_instance_profile"] = (instances.get(gpu.get("index")) or {}).get(device["gpu_instance_id"])

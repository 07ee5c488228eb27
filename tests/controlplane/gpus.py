"""The GPUs of the test cluster's nodes, NVIDIA's device plugin, and what a container sees.

A node's GPUs come from a recorded capture: the ``nvidia-smi -L`` section of a
multi-command text capture, or the product names and UUIDs of an
``nvidia-smi -q -x`` capture. ``count`` replicates a single-GPU capture into a
multi-GPU board; the copies get distinct UUIDs (the capture's own UUID with
the last twelve hex digits replaced), and that is the only invented part.

The device plugin model follows NVIDIA's k8s-device-plugin documentation
(README "Configuration Options", "Shared Access to GPUs", MIG strategies in
docs/gpu-feature-discovery and the MIG support design): resources per MIG
strategy, time-slicing replicas and renaming, the config file read through
CONFIG_FILE / --config-file, and the config manager choosing a per-node config
from a node label.
"""

import hashlib
import os
import re
import subprocess
import xml.etree.ElementTree as ET

import yaml

CAPTURE_DIRS = [os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "unit", "plugins", "module_utils",
                             "fixtures", "nvidia-smi")]
_GPU_LINE = re.compile(r"^GPU (\d+): (.*) \(UUID: (GPU-[0-9a-fA-F-]+)\)\s*$")
_MIG_LINE = re.compile(r"^\s+MIG (\S+)\s+Device\s+(\d+): \(UUID: (MIG-[0-9a-fA-F-]+)\)\s*$")


def find_capture(name, base=None):
    for folder in ([base] if base else []) + CAPTURE_DIRS:
        path = os.path.join(folder, name)
        if os.path.exists(path):
            return path
    raise FileNotFoundError(f"capture {name} not found in {[base] + CAPTURE_DIRS}")


def _section(text, command):
    """The output of one command of a multi-command text capture, or None."""
    marker = f"# $ {command}\n"
    if marker not in text:
        return None
    return text.split(marker, 1)[1].split("\n", 1)[1].split("\n####", 1)[0]


def _q_tree(text):
    """``nvidia-smi -q`` as nested [key, value, children] by indentation."""
    root = ["", "", []]
    stack = [(-1, root)]
    for line in text.split("\n"):
        if not line.strip() or line.startswith("="):
            continue
        indent = len(line) - len(line.lstrip(" "))
        key, _sep, value = line.strip().partition(":")
        node = [key.strip(), value.strip(), []]
        while stack[-1][0] >= indent:
            stack.pop()
        stack[-1][1][2].append(node)
        stack.append((indent, node))
    return root


def _child(node, key):
    return next((c for c in node[2] if c[0] == key), None)


def _value(node, *keys):
    for key in keys:
        node = _child(node, key) if node else None
    return node[1] if node else None


def _mib_bytes(text):
    match = re.match(r"^(\d+)\s*MiB$", (text or "").strip())
    return int(match.group(1)) * 1024 * 1024 if match else None


def _int(text):
    try:
        return int(str(text).strip())
    except (TypeError, ValueError):
        return None


def _text_details(text):
    """What ``nvidia-smi -q`` and ``--query-gpu`` of a text capture say of each GPU, in order."""
    tree = _q_tree(_section(text, "nvidia-smi -q") or "")
    driver, cuda = _value(tree, "Driver Version"), _value(tree, "CUDA Version")
    caps = {}
    csv_text = next((_section(text, line[4:]) for line in text.split("\n")
                     if line.startswith("# $ nvidia-smi --query-gpu=")), None)
    if csv_text:
        rows = [[cell.strip() for cell in row.split(",")] for row in csv_text.strip().split("\n") if row.strip()]
        header = rows[0] if rows else []
        for row in rows[1:]:
            entry = dict(zip(header, row))
            caps[entry.get("uuid")] = entry.get("compute_cap")
    out = []
    for gpu in (c for c in tree[2] if c[0].startswith("GPU ")):
        migs = []
        for mig in (c for c in gpu[2] if c[0] == "MIG Device"):
            shared = _child(_child(mig, "Device Attributes") or ["", "", []], "Shared") or ["", "", []]
            migs.append({"memory": _mib_bytes(_value(mig, "Shared FB Memory Usage", "Total")),
                         "giId": _int(_value(mig, "GPU Instance ID")),
                         "multiprocessors": _int(_value(shared, "Multiprocessor count")),
                         "copyEngines": _int(_value(shared, "Copy Engine count")),
                         "decoders": _int(_value(shared, "Decoder count")),
                         "encoders": _int(_value(shared, "Encoder count")),
                         "jpegEngines": _int(_value(shared, "JPG count")),
                         "ofaEngines": _int(_value(shared, "OFA count"))})
        uuid = _value(gpu, "GPU UUID")
        out.append({"uuid": uuid, "brand": _value(gpu, "Product Brand"), "addressingMode": _value(gpu, "Addressing Mode"),
                    "architecture": _value(gpu, "Product Architecture"), "minor": _int(_value(gpu, "Minor Number")),
                    "pciBusID": _value(gpu, "PCI", "Bus Id"),
                    "memory": _mib_bytes(_value(gpu, "FB Memory Usage", "Total")),
                    "driverVersion": driver, "cudaVersion": cuda, "computeCap": caps.get(uuid), "migs": migs})
    return out


def _xml_details(gpu, root):
    return {"uuid": (gpu.findtext("uuid") or "").strip(), "brand": (gpu.findtext("product_brand") or "").strip(),
            "addressingMode": (gpu.findtext("addressing_mode") or "").strip() or None,
            "architecture": (gpu.findtext("product_architecture") or "").strip() or None,
            "minor": _int(gpu.findtext("minor_number")), "pciBusID": (gpu.findtext("pci/pci_bus_id") or "").strip(),
            "memory": _mib_bytes(gpu.findtext("fb_memory_usage/total")),
            "driverVersion": (root.findtext("driver_version") or "").strip() or None,
            "cudaVersion": (root.findtext("cuda_version") or "").strip() or None, "computeCap": None, "migs": []}


def load_capture(path):
    """[{name, uuid, mig: [{profile, uuid, details}], details}] from a text capture's -L section (its -q
    and --query-gpu sections give the details) or an XML capture. ``details`` holds what NVIDIA's DRA
    driver publishes of a device and the capture records: brand, architecture, minor number, PCI bus
    id, memory in bytes, driver and CUDA versions, compute capability (text captures only: the XML
    log has none) and, for a MIG device, its memory and engine counts."""
    with open(path, encoding="utf-8") as handle:
        text = handle.read()
    gpus = []
    if "# $ nvidia-smi -L" in text:
        gpus = parse_list(_section(text, "nvidia-smi -L"))
        details = _text_details(text)
        for index, gpu in enumerate(gpus):
            found = next((d for d in details if d["uuid"] == gpu["uuid"]), details[index] if index < len(details)
                         else None)
            if found:
                gpu["details"] = {k: v for k, v in found.items() if k not in ("uuid", "migs")}
                for mig, extra in zip(gpu["mig"], found["migs"]):
                    mig["details"] = extra
        return gpus
    root = ET.fromstring(re.sub(r"<!DOCTYPE[^>]*>", "", text))
    for gpu in root.findall("gpu"):
        details = _xml_details(gpu, root)
        gpus.append({"name": (gpu.findtext("product_name") or "").strip(), "uuid": details.pop("uuid"), "mig": [],
                     "details": {k: v for k, v in details.items() if k != "migs"}})
    return gpus


def parse_list(text):
    """[{name, uuid, mig: [{profile, uuid}]}] from what ``nvidia-smi -L`` prints."""
    gpus = []
    for line in text.split("\n"):
        gpu = _GPU_LINE.match(line)
        mig = _MIG_LINE.match(line)
        if gpu:
            gpus.append({"name": gpu.group(2), "uuid": gpu.group(3), "mig": []})
        elif mig and gpus:
            gpus[-1]["mig"].append({"profile": mig.group(1), "uuid": mig.group(3)})
    return gpus


def listed_by_command(argv):
    """The GPUs a command that prints ``nvidia-smi -L`` names (the node's own nvidia-smi, reached
    through ``podman exec`` or ``ssh``); none when it fails, as a node whose driver does not answer."""
    try:
        result = subprocess.run(argv, stdout=subprocess.PIPE, stderr=subprocess.DEVNULL, timeout=60, check=False,
                                universal_newlines=True)
    except (OSError, subprocess.TimeoutExpired):
        return []
    return parse_list(result.stdout) if result.returncode == 0 else []


def _unique(uuid, node, index):
    digest = hashlib.sha1(f"{node}/{index}".encode()).hexdigest()[:12]
    return uuid[:-12] + digest


def node_gpus(spec, node, base=None):
    """GPUs of a node from its cluster-file entry: {capture, count}, or {command}: a command that
    prints the node's ``nvidia-smi -L``, run again each time the device plugin starts there, so that
    what the node advertises follows its MIG layout as a restarted plugin's would."""
    if not spec:
        return []
    if spec.get("command"):
        return listed_by_command([str(word) for word in spec["command"]])
    gpus = load_capture(find_capture(spec["capture"], base))
    count = spec.get("count")
    if not count or count == len(gpus):
        return gpus
    out = []
    for index in range(count):
        source = gpus[index % len(gpus)]
        copied = {"name": source["name"], "uuid": _unique(source["uuid"], node, index),
                  "mig": [dict(m, uuid=_unique(m["uuid"], node, f"{index}/{j}")) for j, m in enumerate(source["mig"])]}
        if "details" in source:
            # A copy is the board's next GPU: its own minor number and PCI bus (invented, as the UUIDs are).
            copied["details"] = dict(source["details"], minor=index, pciBusID=_next_bus(source["details"].get(
                "pciBusID"), index))
        out.append(copied)
    return out


def _next_bus(bus_id, offset):
    """The PCI address ``offset`` buses after ``bus_id`` (00000000:00:09.0 -> 00000000:01:09.0)."""
    match = re.match(r"^([0-9A-Fa-f]+):([0-9A-Fa-f]{2}):(.*)$", bus_id or "")
    if not match:
        return bus_id
    return f"{match.group(1)}:{(int(match.group(2), 16) + offset) % 256:02X}:{match.group(3)}"


def list_output(devices):
    """nvidia-smi -L for the devices a container sees: [(gpu, [mig...] or None)], renumbered from 0."""
    lines = []
    for index, (gpu, migs) in enumerate(devices):
        lines.append(f"GPU {index}: {gpu['name']} (UUID: {gpu['uuid']})")
        for number, mig in enumerate(migs or []):
            lines.append(f"  MIG {mig['profile']:<11} Device {number:>2}: (UUID: {mig['uuid']})")
    return "\n".join(lines) + "\n"


# ------------------------------------------------------------ device plugin

class PluginError(Exception):
    """The plugin exits with this message (and, with failOnInitError, crash-loops)."""


def _flag(argv, name):
    for index, arg in enumerate(argv):
        if arg.startswith(f"--{name}="):
            return arg.split("=", 1)[1]
        if arg == f"--{name}" and index + 1 < len(argv):
            return argv[index + 1]
    return None


def plugin_config(argv, env, read_file):
    """Effective config of a device plugin container: flags > env > config file > defaults."""
    config = {"migStrategy": "none", "failOnInitError": True, "deviceListStrategy": ["envvar"],
              "deviceIDStrategy": "uuid", "sharing": {}}
    path = _flag(argv, "config-file") or env.get("CONFIG_FILE")
    if path:
        text = read_file(path)
        if text is None:
            raise PluginError(f"unable to load config: unable to parse config file: error reading config file: "
                              f"open {path}: no such file or directory")
        try:
            loaded = yaml.safe_load(text) or {}
        except yaml.YAMLError as err:
            raise PluginError(f"unable to load config: unable to parse config file: {err}") from err
        if loaded.get("version") != "v1":
            raise PluginError(f"unable to load config: unable to parse config file: unknown version: "
                              f"{loaded.get('version')}")
        flags = loaded.get("flags") or {}
        for key in ("migStrategy", "failOnInitError", "deviceIDStrategy"):
            if key in flags:
                config[key] = flags[key]
        plugin_flags = flags.get("plugin") or {}
        if "deviceListStrategy" in plugin_flags:
            value = plugin_flags["deviceListStrategy"]
            config["deviceListStrategy"] = value if isinstance(value, list) else [value]
        config["sharing"] = loaded.get("sharing") or {}
    for key, env_name, flag in (("migStrategy", "MIG_STRATEGY", "mig-strategy"),
                                ("deviceListStrategy", "DEVICE_LIST_STRATEGY", "device-list-strategy"),
                                ("failOnInitError", "FAIL_ON_INIT_ERROR", "fail-on-init-error")):
        value = _flag(argv, flag) or env.get(env_name)
        if value is not None:
            if key == "failOnInitError":
                value = str(value).lower() == "true"
            if key == "deviceListStrategy":
                value = value.split(",")
            config[key] = value
    if config["migStrategy"] not in ("none", "single", "mixed"):
        raise PluginError(f"unable to load config: invalid --mig-strategy option: {config['migStrategy']}")
    return config


def advertised(gpus, config):
    """{resource: [device ids]} the plugin registers with the kubelet for these GPUs and config."""
    if not gpus:
        raise PluginError("Incompatible strategy detected auto\nIf this is a GPU node, did you configure the "
                          "NVIDIA Container Toolkit?")
    strategy = config["migStrategy"]
    devices = {}
    if strategy == "none":
        devices["nvidia.com/gpu"] = [g["uuid"] for g in gpus]
    elif strategy == "single":
        migs = [g for g in gpus if g["mig"]]
        profiles = {m["profile"] for g in migs for m in g["mig"]}
        if migs and (len(migs) != len(gpus) or len(profiles) != 1):
            raise PluginError("error starting plugins: error creating plugin manager: unable to create plugin "
                              "manager: invalid MIG configuration: at least one device with migEnabled=true was "
                              "not configured correctly: for mig strategy single, all MIG devices must be the same "
                              "profile and every GPU must have MIG enabled")
        devices["nvidia.com/gpu"] = [m["uuid"] for g in migs for m in g["mig"]] or [g["uuid"] for g in gpus]
    else:
        for gpu in gpus:
            if not gpu["mig"]:
                devices.setdefault("nvidia.com/gpu", []).append(gpu["uuid"])
            for mig in gpu["mig"]:
                # A compute instance smaller than its GPU instance (1c.3g.40gb) is not advertised; '+' in a
                # profile becomes '.' in the resource name (nvidia.com/mig-1g.10gb.me).
                if re.match(r"^\d+g\.\d+gb", mig["profile"]):
                    devices.setdefault("nvidia.com/mig-" + mig["profile"].replace("+", "."), []).append(mig["uuid"])
    slicing = (config.get("sharing") or {}).get("timeSlicing") or {}
    out = {}
    for resource, ids in devices.items():
        rule = next((r for r in slicing.get("resources") or [] if r.get("name") == resource), None)
        if rule is None:
            out[resource] = ids
            continue
        replicas = int(rule.get("replicas", 1))
        name = rule.get("rename") or (f"{resource}.shared" if slicing.get("renameByDefault") else resource)
        out[name] = [f"{i}::{r}" for i in ids for r in range(replicas)]
    return out


def visible_devices(gpus, granted):
    """[(gpu, migs or None)] for device ids granted (uuid, MIG uuid, or replica 'uuid::n')."""
    wanted = []
    for device in granted:
        base = device.split("::", 1)[0]
        if base not in wanted:
            wanted.append(base)
    out = []
    for gpu in gpus:
        if gpu["uuid"] in wanted:
            out.append((gpu, None))
        migs = [m for m in gpu["mig"] if m["uuid"] in wanted]
        if migs:
            out.append((gpu, migs))
    return out


def all_devices(gpus):
    return [(g, g["mig"] or None) for g in gpus]


# ------------------------------------------------------- DRA kubelet plugin

DRA_DRIVER = "gpu.nvidia.com"
# go-nvlib's GetBrandAsString for the brands nvidia-smi prints.
_BRANDS = {"NVIDIA": "Nvidia", "NVIDIA RTX": "NvidiaRTX", "Quadro RTX": "QuadroRTX", "GeForce RTX": "GeForceRTX",
           "Titan RTX": "TitanRTX", "NVIDIA Virtual Applications": "NvidiaVApps", "NVIDIA Virtual PC": "NvidiaVPC",
           "NVIDIA Virtual Compute Server": "NvidiaVCS", "NVIDIA Virtual Workstation": "NvidiaVWS",
           "NVIDIA Cloud Gaming": "NvidiaCloudGaming", "Quadro": "Quadro", "Tesla": "Tesla", "NVS": "NVS",
           "GRID": "Grid", "GeForce": "GeForce", "Titan": "Titan"}
MEMORY_SLICES = 8


def _version(text, parts=3):
    """A driver or CUDA version as the semver the driver publishes (590.48.01 -> 590.48.1, 13.1 -> 13.1.0)."""
    numbers = [int(p) for p in re.findall(r"\d+", text or "")][:parts]
    return ".".join(str(n) for n in numbers + [0] * (parts - len(numbers))) if numbers else None


def binary_si(count):
    """Bytes as the BinarySI quantity Kubernetes prints (85520809984 -> 81559Mi)."""
    for suffix, size in (("Ei", 2 ** 60), ("Pi", 2 ** 50), ("Ti", 2 ** 40), ("Gi", 2 ** 30), ("Mi", 2 ** 20),
                         ("Ki", 2 ** 10)):
        if count and count % size == 0:
            return f"{count // size}{suffix}"
    return str(count)


def _pci(bus_id):
    """nvidia-smi's 00000000:00:09.0 as the standard attribute writes a PCI address: 0000:00:09.0."""
    match = re.match(r"^([0-9A-Fa-f]+):([0-9A-Fa-f]{2}:[0-9A-Fa-f]{2}\.[0-7])$", bus_id or "")
    return f"{int(match.group(1), 16):04x}:{match.group(2).lower()}" if match else None


# GPU instance ID -> placement start, by GPU instance profile id, on the A100/H100 80GB (NVIDIA's MIG
# User Guide, "A100 MIG profiles" and the placements table: the IDs follow the placements).
_GI_STARTS = {19: {7 + s: s for s in range(7)}, 20: {7 + s: s for s in range(7)},
              15: {3: 0, 4: 2, 5: 4, 6: 6}, 14: {3: 0, 4: 2, 5: 4}, 9: {1: 0, 2: 4}, 5: {1: 0}, 0: {0: 0}}


def _mig_layout(gpu):
    """[(profile id, placement start, memory slices)] of the GPU's MIG devices. The GPU instance profile
    ids are nvidia-smi's (``mig -lgip``: 0 for 7g, 5 for 4g, 9 for 3g, 14 for 2g, 15 for a 1g with two
    memory slices, 19 for 1g, 20 for 1g+me); the memory slices follow from the profile's share of the
    GPU's memory; the placement from the GPU instance ID the capture records. STAND-IN: without one, a
    device takes the lowest aligned free start, in nvidia-smi's order."""
    total = (gpu.get("details") or {}).get("memory") or 0
    taken, out = set(), []
    for mig in gpu["mig"]:
        extra = mig.get("details") or {}
        memory = extra.get("memory") or 0
        size = max(1, round(memory * MEMORY_SLICES / total)) if total else 1
        size = 4 if size == 3 else size
        compute = int(re.match(r"^(\d+)", mig["profile"]).group(1)) if re.match(r"^\d", mig["profile"]) else 1
        profile_id = {7: 0, 4: 5, 3: 9, 2: 14}.get(compute)
        if profile_id is None:
            profile_id = 20 if mig["profile"].endswith("+me") else 15 if size == 2 else 19
        start = _GI_STARTS.get(profile_id, {}).get(extra.get("giId"))
        if start is None:
            # Seven compute slices: a one-slice instance starts at 0 to 6, never 7.
            starts = range(0, MEMORY_SLICES - 1 if size == 1 else MEMORY_SLICES, size)
            start = next((s for s in starts if not taken & set(range(s, s + size))), 0)
        taken |= set(range(start, start + size))
        out.append((profile_id, start, size))
    return out


def dra_devices(gpus):
    """The devices NVIDIA's DRA kubelet plugin (gpu-kubelet-plugin) publishes in its node's ResourceSlice,
    and {device name: (gpu, mig or None)}. A GPU with MIG enabled is published as its MIG devices only.
    Names, attributes and capacities as cmd/gpu-kubelet-plugin (deviceinfo.go, mig.go) builds them
    (v0.4): ``gpu-<minor>``, ``gpu-<minor>-mig-<profile>-<profile id>-<placement start>``. What a capture
    does not record is left out (an XML capture has no compute capability; no capture has the PCIe
    root, which the plugin reads from sysfs)."""
    devices, index = [], {}
    for position, gpu in enumerate(gpus):
        details = gpu.get("details") or {}
        minor = details.get("minor", position) if details.get("minor") is not None else position
        common = {"productName": {"string": gpu["name"]}}
        if details.get("brand"):
            common["brand"] = {"string": _BRANDS.get(details["brand"], details["brand"])}
        if details.get("architecture"):
            common["architecture"] = {"string": details["architecture"]}
        if details.get("addressingMode") and details["addressingMode"] != "N/A":
            # NVML's addressing mode (HMM, ATS, None), published whenever the driver reports one.
            common["addressingMode"] = {"string": details["addressingMode"]}
        for attribute, value, parts in (("cudaComputeCapability", details.get("computeCap"), 3),
                                        ("driverVersion", details.get("driverVersion"), 3),
                                        ("cudaDriverVersion", details.get("cudaVersion"), 3)):
            if _version(value, parts):
                common[attribute] = {"version": _version(value, parts)}
        if _pci(details.get("pciBusID")):
            common["resource.kubernetes.io/pciBusID"] = {"string": _pci(details["pciBusID"])}
        if not gpu["mig"]:
            name = f"gpu-{minor}"
            device = {"name": name, "attributes": dict({"type": {"string": "gpu"}, "uuid": {"string": gpu["uuid"]}},
                                                       **common)}
            if details.get("memory"):
                device["capacity"] = {"memory": {"value": binary_si(details["memory"])}}
            devices.append(device)
            index[name] = (gpu, None)
            continue
        for mig, (profile_id, start, size) in zip(gpu["mig"], _mig_layout(gpu)):
            extra = mig.get("details") or {}
            # toRFC1123Compliant: dots go, "+" becomes "-" (1g.10gb+me -> 1g10gb-me).
            short = re.sub(r"[^a-z0-9-]", "", mig["profile"].lower().replace("+", "-"))
            name = f"gpu-{minor}-mig-{short}-{profile_id}-{start}"
            attributes = dict({"type": {"string": "mig"}, "uuid": {"string": mig["uuid"]},
                               "parentUUID": {"string": gpu["uuid"]}, "profile": {"string": mig["profile"]}},
                              **common)
            engines = ("multiprocessors", "copyEngines", "decoders", "encoders", "jpegEngines", "ofaEngines")
            capacity = {key: {"value": str(extra[key])} for key in engines if extra.get(key) is not None}
            if extra.get("memory"):
                capacity["memory"] = {"value": binary_si(extra["memory"])}
            for slot in range(start, start + size):
                if len(attributes) + len(capacity) < 32:
                    capacity[f"memorySlice{slot}"] = {"value": "1"}
            devices.append({"name": name, "attributes": attributes, "capacity": capacity})
            index[name] = (gpu, mig)
    return devices, index

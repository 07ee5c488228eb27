"""The GPUs of simulated nodes, NVIDIA's device plugin, and what a container sees.

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

CAPTURE_DIRS = [os.path.join(os.path.dirname(__file__), "..", "..", "unit", "plugins", "module_utils",
                             "fixtures", "nvidia-smi")]
_GPU_LINE = re.compile(r"^GPU (\d+): (.*) \(UUID: (GPU-[0-9a-fA-F-]+)\)\s*$")
_MIG_LINE = re.compile(r"^\s+MIG (\S+)\s+Device\s+(\d+): \(UUID: (MIG-[0-9a-fA-F-]+)\)\s*$")


def find_capture(name, base=None):
    for folder in ([base] if base else []) + CAPTURE_DIRS:
        path = os.path.join(folder, name)
        if os.path.exists(path):
            return path
    raise FileNotFoundError(f"capture {name} not found in {[base] + CAPTURE_DIRS}")


def load_capture(path):
    """[{name, uuid, mig: [{profile, uuid}]}] from a text capture's -L section or an XML capture."""
    with open(path, encoding="utf-8") as handle:
        text = handle.read()
    gpus = []
    if "# $ nvidia-smi -L" in text:
        section = text.split("# $ nvidia-smi -L", 1)[1].split("\n", 2)[2]
        return parse_list(section.split("\n####", 1)[0])
    root = ET.fromstring(re.sub(r"<!DOCTYPE[^>]*>", "", text))
    for gpu in root.findall("gpu"):
        gpus.append({"name": (gpu.findtext("product_name") or "").strip(),
                     "uuid": (gpu.findtext("uuid") or "").strip(), "mig": []})
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
        out.append({"name": source["name"], "uuid": _unique(source["uuid"], node, index),
                    "mig": [{"profile": m["profile"], "uuid": _unique(m["uuid"], node, f"{index}/{j}")}
                            for j, m in enumerate(source["mig"])]})
    return out


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

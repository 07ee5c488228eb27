"""The NVIDIA device plugin as a cluster runs it, and the nvidia-smi captures the GPU nodes replay."""

import os
import re

import yaml

from sim_helpers import CAPTURES

PLUGIN_IMAGE = "nvcr.io/nvidia/k8s-device-plugin:v0.17.0"
PLUGIN_NS = "kube-system"


def plugin_config(mig_strategy="none", time_slicing=None):
    config = {"version": "v1", "flags": {"migStrategy": mig_strategy, "failOnInitError": True}}
    if time_slicing:
        config["sharing"] = {"timeSlicing": time_slicing}
    return {"apiVersion": "v1", "kind": "ConfigMap", "metadata": {"name": "nvdp-config", "namespace": PLUGIN_NS},
            "data": {"config.yaml": yaml.safe_dump(config)}}


def plugin_daemonset(name="nvidia-device-plugin"):
    return {
        "apiVersion": "apps/v1", "kind": "DaemonSet", "metadata": {"name": name, "namespace": PLUGIN_NS},
        "spec": {
            "selector": {"matchLabels": {"app": name}},
            "updateStrategy": {"type": "RollingUpdate", "rollingUpdate": {"maxUnavailable": "100%"}},
            "template": {
                "metadata": {"labels": {"app": name}},
                "spec": {
                    "nodeSelector": {"nvidia.com/gpu.present": "true"},
                    # NVML reaches the plugin only through the NVIDIA runtime.
                    "runtimeClassName": "nvidia",
                    "priorityClassName": "system-node-critical",
                    "tolerations": [{"key": "nvidia.com/gpu", "operator": "Exists", "effect": "NoSchedule"}],
                    "containers": [{
                        "name": "nvidia-device-plugin-ctr", "image": PLUGIN_IMAGE, "command": ["nvidia-device-plugin"],
                        "env": [{"name": "CONFIG_FILE", "value": "/config/config.yaml"}],
                        "securityContext": {"allowPrivilegeEscalation": False, "capabilities": {"drop": ["ALL"]}},
                        "volumeMounts": [{"name": "device-plugin", "mountPath": "/var/lib/kubelet/device-plugins"},
                                         {"name": "config", "mountPath": "/config"}]}],
                    "volumes": [{"name": "device-plugin", "hostPath": {"path": "/var/lib/kubelet/device-plugins"}},
                                {"name": "config", "configMap": {"name": "nvdp-config"}}]}}}}


def gpu_pod(name, resources, node=None, command=None, runtime="nvidia"):
    spec = {"restartPolicy": "Never", "runtimeClassName": runtime,
            "containers": [{"name": "cuda", "image": "nvcr.io/nvidia/cuda:12.6.3-base-ubuntu24.04",
                            "command": command or ["nvidia-smi", "-L"], "resources": {"limits": resources}}]}
    if node:
        spec["nodeSelector"] = {"kubernetes.io/hostname": node}
    return {"apiVersion": "v1", "kind": "Pod", "metadata": {"name": name}, "spec": spec}


def capture_list_lines(capture):
    """The lines of the capture's `nvidia-smi -L` section."""
    with open(os.path.join(CAPTURES, capture), encoding="utf-8") as handle:
        text = handle.read()
    section = text.split("# $ nvidia-smi -L\n", 1)[1].split("\n", 1)[1]
    lines = []
    for line in section.splitlines():
        if line.startswith("####"):
            break
        if line.strip():
            lines.append(line)
    return lines


def renumber(line, index):
    """A capture line as nvidia-smi prints it inside a container that sees the device as number index."""
    if line.startswith("GPU "):
        return re.sub(r"^GPU \d+:", f"GPU {index}:", line)
    return re.sub(r"Device\s+\d+:", f"Device {index:>2}:", line)

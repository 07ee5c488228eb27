# Installed as /usr/bin/kubelet by demo/prepare.yml, with a python3 shebang.
# STAND-IN for kubelet in the demo (molecule gpu_kubelet runs the real one instead); NOT kubelet.
# Behaves as kubelet does where the role depends on it: answers --version,
# refuses unknown flags (pflag's "unknown flag"), refuses node labels in the
# kubernetes.io/k8s.io namespaces that kubelet keeps for itself, unknown
# feature gates and malformed taints, and from 1.35 a cgroup v1 host unless
# failCgroupV1 is false; otherwise it stays running.
# Its settings are kubelet's (KEP-3983): the --config file, then every *.conf
# below --config-dir in lexical walk order (each a whole KubeletConfiguration,
# applied as a JSON merge patch: maps merged, lists and scalars replaced, null
# removes; a missing folder is an error), then the flags. --config-dir is
# refused before 1.28, and in 1.28 and 1.29 without KUBELET_CONFIG_DROPIN_DIR_ALPHA.
# It writes what it runs with to /run/kubelet-standin/configz.json, as kubelet
# serves it at /configz.
# /etc/kubelet-standin/version holds the version it claims; each line of
# /etc/kubelet-standin/reject names a flag it treats as unknown (fault tests).
import json
import os
import re
import signal
import sys

import yaml

KNOWN = {
    "--config", "--kubeconfig", "--bootstrap-kubeconfig", "--container-runtime-endpoint",
    "--pod-infra-container-image", "--node-ip", "--hostname-override", "--max-pods", "--v",
    "--cgroup-driver", "--node-labels", "--register-with-taints", "--feature-gates",
    "--topology-manager-policy", "--topology-manager-scope", "--cpu-manager-policy", "--reserved-cpus",
    "--fail-cgroupv1",
}
GATES = {"CPUManagerPolicyOptions", "TopologyManagerPolicyOptions", "MemoryManager", "DynamicResourceAllocation"}
ALLOWED = {"kubernetes.io/hostname", "kubernetes.io/arch", "kubernetes.io/os", "beta.kubernetes.io/arch",
           "beta.kubernetes.io/os", "beta.kubernetes.io/instance-type", "node.kubernetes.io/instance-type",
           "topology.kubernetes.io/region", "topology.kubernetes.io/zone",
           "failure-domain.beta.kubernetes.io/region", "failure-domain.beta.kubernetes.io/zone"}
EFFECTS = ("NoSchedule", "PreferNoSchedule", "NoExecute")
CHOICES = {"cpuManagerPolicy": ("none", "static"),
           "topologyManagerPolicy": ("none", "best-effort", "restricted", "single-numa-node"),
           "topologyManagerScope": ("container", "pod")}
# The flags that have a KubeletConfiguration field: flags win over the files.
FIELDS = {"--cpu-manager-policy": "cpuManagerPolicy", "--reserved-cpus": "reservedSystemCPUs",
          "--topology-manager-policy": "topologyManagerPolicy", "--topology-manager-scope": "topologyManagerScope",
          "--cgroup-driver": "cgroupDriver", "--max-pods": "maxPods"}


def read(path, default):
    try:
        with open(path) as handle:
            return handle.read().strip()
    except OSError:
        return default


def fail(message):
    sys.stderr.write("E1121 00:00:00.000000 run.go:72] \"command failed\" err=\"%s\"\n" % message)
    sys.exit(1)


def merge(base, other):
    """A JSON merge patch (RFC 7386), as kubelet applies each drop-in from 1.32: null removes a key."""
    out = dict(base)
    for key, value in other.items():
        if value is None:
            out.pop(key, None)
        elif isinstance(value, dict):
            out[key] = merge(out[key] if isinstance(out.get(key), dict) else {}, value)
        else:
            out[key] = value
    return out


def load(path, drop_in):
    try:
        with open(path) as handle:
            data = yaml.safe_load(handle) or {}
    except (OSError, yaml.YAMLError) as err:
        fail("failed to load kubelet config file, path: %s, error: %s" % (path, err))
    if not isinstance(data, dict) or data.get("kind") != "KubeletConfiguration" \
            or data.get("apiVersion") != "kubelet.config.k8s.io/v1beta1":
        what = "drop-in" if drop_in else "file"
        fail("failed to load kubelet config %s, path: %s, error: no kind \"KubeletConfiguration\" of version "
             "\"kubelet.config.k8s.io/v1beta1\" in it" % (what, path))
    return data


def walk(folder):
    """Every *.conf below ``folder``, as filepath.WalkDir visits them (lexical order, depth first)."""
    found = []
    for root, dirs, files in os.walk(folder):
        dirs.sort()
        found += [os.path.join(root, name) for name in sorted(files) if name.endswith(".conf")]
    return sorted(found, key=lambda path: path.split("/"))


def check(config):
    for gate in config.get("featureGates") or {}:
        if gate not in GATES:
            fail("failed to set feature gates from initial flags-based config: unrecognized feature gate: %s" % gate)
    for taint in config.get("registerWithTaints") or []:
        if not isinstance(taint, dict) or not taint.get("key") or taint.get("effect") not in EFFECTS:
            fail("invalid taint in registerWithTaints: %r" % (taint,))
    for field, choices in CHOICES.items():
        if field in config and config[field] not in choices:
            fail("invalid configuration: %s (--%s) %r is not one of %s" % (field, field, config[field], ", ".join(choices)))


def fail_cgroup_v1(version, config):
    """kubelet 1.35+ exits on cgroup v1 unless failCgroupV1 is false (KEP-5573); from 1.31 the option exists."""
    if version < (1, 31) or read("/sys/fs/cgroup/cgroup.controllers", None) is not None:
        return
    refuse = config.get("failCgroupV1")
    if refuse is None:
        refuse = version >= (1, 35)
    if refuse:
        fail("failed to validate kubelet configuration, error: kubelet is configured to not run on a host using "
             "cgroup v1. cgroup v1 support is unsupported and will be removed in a future release")


def stop(signum, frame):
    sys.exit(0)


def main(argv):
    claimed = read("/etc/kubelet-standin/version", "1.31.0")
    version = tuple(int(part) for part in claimed.split(".")[:2])
    if "--version" in argv:
        print("Kubernetes v%s" % claimed)
        return 0
    known = set(KNOWN)
    if version >= (1, 28):
        known.add("--config-dir")
    known -= set(read("/etc/kubelet-standin/reject", "").split())
    flags = []
    for arg in argv:
        if not arg.startswith("--"):
            continue
        name, dummy, value = arg.partition("=")
        if name not in known:
            sys.stderr.write("Error: unknown flag: %s\n" % name)
            return 1
        flags.append((name, value))
        if name == "--node-labels":
            for pair in filter(None, value.split(",")):
                key = pair.split("=", 1)[0]
                prefix = key.split("/", 1)[0] if "/" in key else ""
                restricted = re.search(r"(^|\.)(kubernetes\.io|k8s\.io)$", prefix)
                own = re.search(r"(^|\.)(kubelet|node)\.kubernetes\.io$", prefix)
                if restricted and not own and key not in ALLOWED:
                    fail("unknown 'kubernetes.io' or 'k8s.io' labels specified with --node-labels: [%s]" % key)
        if name == "--register-with-taints":
            for taint in filter(None, value.split(",")):
                if not re.match(r"^[^=:]+(=[^=:]*)?:(NoSchedule|PreferNoSchedule|NoExecute)$", taint):
                    fail("invalid taint spec: %s" % taint)
        if name == "--config-dir" and version < (1, 30) and "KUBELET_CONFIG_DROPIN_DIR_ALPHA" not in os.environ:
            fail("the config drop-in directory --config-dir is only supported with the environment variable "
                 "KUBELET_CONFIG_DROPIN_DIR_ALPHA set")
    settings = dict(flags)
    config = {}
    if settings.get("--config"):
        config = load(settings["--config"], False)
    if settings.get("--config-dir"):
        if not os.path.isdir(settings["--config-dir"]):
            fail("failed to merge kubelet configs: failed to walk through kubelet dropin directory \"%s\": lstat %s: "
                 "no such file or directory" % (settings["--config-dir"], settings["--config-dir"]))
        for path in walk(settings["--config-dir"]):
            config = merge(config, load(path, True))
    check(config)
    for name, value in flags:
        if name == "--feature-gates":
            gates = dict(config.get("featureGates") or {})
            gates.update((pair.split("=", 1)[0], pair.split("=", 1)[1].lower() == "true")
                         for pair in filter(None, value.split(",")))
            config["featureGates"] = gates
        elif name == "--register-with-taints":
            config["registerWithTaints"] = []
            for spec in filter(None, value.split(",")):
                key_value, dummy, effect = spec.rpartition(":")
                key, equals, taint_value = key_value.partition("=")
                config["registerWithTaints"].append(dict({"key": key, "effect": effect},
                                                         **({"value": taint_value} if equals else {})))
        elif name == "--fail-cgroupv1":
            config["failCgroupV1"] = value.lower() not in ("false", "f", "0")
        elif name in FIELDS:
            config[FIELDS[name]] = value
    check(config)
    fail_cgroup_v1(version, config)
    os.makedirs("/run/kubelet-standin", exist_ok=True)
    with open("/run/kubelet-standin/configz.json", "w") as handle:
        json.dump({"kubeletconfig": config}, handle)
    sys.stdout.write("kubelet stand-in %s running with: %s\n" % (claimed, " ".join(argv)))
    sys.stdout.flush()
    signal.signal(signal.SIGTERM, stop)
    while True:
        signal.pause()


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))

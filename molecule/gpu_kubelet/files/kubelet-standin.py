# Installed as /usr/bin/kubelet by prepare.yml, with a python3 shebang.
# STAND-IN for kubelet in the gpu_kubelet molecule tests; NOT kubelet.
# Behaves as kubelet does where the role depends on it: answers --version,
# refuses unknown flags (pflag's "unknown flag"), refuses node labels in the
# kubernetes.io/k8s.io namespaces that kubelet keeps for itself, unknown
# feature gates and malformed taints, from 1.35 a cgroup v1 host unless
# failCgroupV1 is false (its --config file or --fail-cgroupv1), and otherwise
# stays running.
# /etc/kubelet-standin/version holds the version it claims; each line of
# /etc/kubelet-standin/reject names a flag it treats as unknown (fault tests).
import re
import signal
import sys

KNOWN = {
    "--config", "--kubeconfig", "--bootstrap-kubeconfig", "--container-runtime-endpoint",
    "--pod-infra-container-image", "--node-ip", "--hostname-override", "--max-pods", "--v",
    "--cgroup-driver", "--node-labels", "--register-with-taints", "--feature-gates",
    "--topology-manager-policy", "--topology-manager-scope", "--cpu-manager-policy", "--reserved-cpus",
    "--config-dir", "--fail-cgroupv1",
}
GATES = {"CPUManagerPolicyOptions", "TopologyManagerPolicyOptions", "MemoryManager", "DynamicResourceAllocation"}
ALLOWED = {"kubernetes.io/hostname", "kubernetes.io/arch", "kubernetes.io/os", "beta.kubernetes.io/arch",
           "beta.kubernetes.io/os", "beta.kubernetes.io/instance-type", "node.kubernetes.io/instance-type",
           "topology.kubernetes.io/region", "topology.kubernetes.io/zone",
           "failure-domain.beta.kubernetes.io/region", "failure-domain.beta.kubernetes.io/zone"}


def read(path, default):
    try:
        with open(path) as handle:
            return handle.read().strip()
    except OSError:
        return default


def fail(message):
    sys.stderr.write("E1121 00:00:00.000000 run.go:72] \"command failed\" err=\"%s\"\n" % message)
    sys.exit(1)


def fail_cgroup_v1(version, argv):
    """kubelet 1.35+ exits on cgroup v1 unless failCgroupV1 is false (KEP-5573); from 1.31 the option exists."""
    minor = tuple(int(part) for part in version.split(".")[:2])
    if minor < (1, 31) or read("/sys/fs/cgroup/cgroup.controllers", None) is not None:
        return
    refuse = minor >= (1, 35)
    for arg in argv:
        if arg.startswith("--config="):
            match = re.search(r"(?m)^failCgroupV1:\s*(\S+)", read(arg.split("=", 1)[1], ""))
            if match:
                refuse = match.group(1).lower() == "true"
    for arg in argv:
        if arg == "--fail-cgroupv1" or arg.startswith("--fail-cgroupv1="):
            refuse = arg.partition("=")[2].lower() not in ("false", "f", "0")
    if refuse:
        fail("failed to validate kubelet configuration, error: kubelet is configured to not run on a host using "
             "cgroup v1. cgroup v1 support is unsupported and will be removed in a future release")


def stop(signum, frame):
    sys.exit(0)


def main(argv):
    version = read("/etc/kubelet-standin/version", "1.31.0")
    if "--version" in argv:
        print("Kubernetes v%s" % version)
        return 0
    known = KNOWN - set(read("/etc/kubelet-standin/reject", "").split())
    for arg in argv:
        if not arg.startswith("--"):
            continue
        name, dummy, value = arg.partition("=")
        if name not in known:
            sys.stderr.write("Error: unknown flag: %s\n" % name)
            return 1
        if name == "--node-labels":
            for pair in filter(None, value.split(",")):
                key = pair.split("=", 1)[0]
                prefix = key.split("/", 1)[0] if "/" in key else ""
                restricted = re.search(r"(^|\.)(kubernetes\.io|k8s\.io)$", prefix)
                own = re.search(r"(^|\.)(kubelet|node)\.kubernetes\.io$", prefix)
                if restricted and not own and key not in ALLOWED:
                    fail("unknown 'kubernetes.io' or 'k8s.io' labels specified with --node-labels: [%s]" % key)
        if name == "--feature-gates":
            for pair in filter(None, value.split(",")):
                gate = pair.split("=", 1)[0]
                if gate not in GATES:
                    fail("failed to set feature gates from initial flags-based config: unrecognized feature gate: %s" % gate)
        if name == "--register-with-taints":
            for taint in filter(None, value.split(",")):
                if not re.match(r"^[^=:]+(=[^=:]*)?:(NoSchedule|PreferNoSchedule|NoExecute)$", taint):
                    fail("invalid taint spec: %s" % taint)
    fail_cgroup_v1(version, argv)
    sys.stdout.write("kubelet stand-in %s running with: %s\n" % (version, " ".join(argv)))
    sys.stdout.flush()
    signal.signal(signal.SIGTERM, stop)
    while True:
        signal.pause()


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))

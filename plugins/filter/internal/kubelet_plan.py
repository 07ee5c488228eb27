# -*- coding: utf-8 -*-
# Copyright: (c) 2026, gpufleet.nvidia contributors
# GNU General Public License v3.0+ (see COPYING or https://www.gnu.org/licenses/gpl-3.0.txt)
"""Filters behind the GPU kubelet settings: version, flags, their errors, ExecStart.

Pure functions over the kubelet's version, the host's GPU count and the role's
variables, so which flags a kubelet of a given version accepts is unit-tested
on data alone. Every version fact below names the Kubernetes change it comes
from.
"""

from __future__ import annotations

import base64
import binascii
import json
import re
import shlex

import yaml

from ansible.errors import AnsibleFilterError

# --------------------------------------------------------------------------
# Versions of the flags and feature gates used here
# --------------------------------------------------------------------------

# --experimental-nvidia-gpus (0 or 1: "only one device per node") came with
# kubernetes/kubernetes#24836 (1.3) and was replaced by the Accelerators gate
# in kubernetes/kubernetes#42116 (1.6).
NVIDIA_GPUS_FLAG = ((1, 3), (1, 6))

# Feature gates this filter sets or checks: the first version that knows the
# gate (kubernetes/website content/en/docs/reference/command-line-tools-reference/
# feature-gates/<Gate>.md, its first stage) ...
INTRODUCED_GATES = {
    "Accelerators": (1, 6),                         # kubernetes/kubernetes#42116
    "CPUManager": (1, 8),                           # alpha 1.8
    "DevicePlugins": (1, 8),                        # alpha 1.8
    "KubeletPodResources": (1, 13),                 # alpha 1.13
    "TopologyManager": (1, 16),                     # alpha 1.16
    "KubeletPodResourcesGetAllocatable": (1, 21),   # alpha 1.21
}
# ... and the first version without it: the kubelet then refuses to start
# ("unrecognized feature gate" / "unrecognized key").
REMOVED_GATES = {
    # kubernetes/kubernetes#61498 and #62187; 1.11.0-alpha.1 fails with
    # "unrecognized key: Accelerators" (Azure/acs-engine#2790).
    "Accelerators": (1, 11),
    # GA 1.26, removed by kubernetes/kubernetes#117656 ("remove in 1.28").
    "DevicePlugins": (1, 28),
    # GA 1.27, removed by kubernetes/kubernetes#121252 (last in 1.28).
    "TopologyManager": (1, 29),
    # GA 1.28, removed by kubernetes/kubernetes#122139 and #122138 (milestone 1.30).
    "KubeletPodResources": (1, 30),
    "KubeletPodResourcesGetAllocatable": (1, 30),
    # GA 1.26, removed by kubernetes/kubernetes#129296 (1.33).
    "CPUManager": (1, 33),
}
# Gates this filter turns on, and for which versions.
GPU_GATES = (
    ("Accelerators", (1, 6), (1, 11)),   # in-tree NVIDIA GPUs (alpha, off by default)
    ("DevicePlugins", (1, 8), (1, 10)),  # device plugins, alpha until 1.9, beta (on) in 1.10
)

# --cpu-manager-policy: 1.8, behind the alpha CPUManager gate until 1.9 (beta, on, in 1.10).
CPU_MANAGER_FLAG = (1, 8)
CPU_MANAGER_GATE_DEFAULT_ON = (1, 10)
# --reserved-cpus: kubernetes/kubernetes#83592 (1.17).
RESERVED_CPUS_FLAG = (1, 17)
# --topology-manager-policy: 1.16, behind the alpha TopologyManager gate until 1.17 (beta, on, in 1.18).
TOPOLOGY_MANAGER_FLAG = (1, 16)
TOPOLOGY_MANAGER_GATE_DEFAULT_ON = (1, 18)
# --topology-manager-scope: kubernetes/kubernetes#92967 (1.20).
TOPOLOGY_MANAGER_SCOPE_FLAG = (1, 20)

TOPOLOGY_MANAGER_POLICIES = ("none", "best-effort", "restricted", "single-numa-node")
TOPOLOGY_MANAGER_SCOPES = ("container", "pod")
CPU_MANAGER_POLICIES = ("none", "static")
TAINT_EFFECTS = ("NoSchedule", "PreferNoSchedule", "NoExecute")

# --------------------------------------------------------------------------
# Node labels the kubelet accepts in the kubernetes.io and k8s.io namespaces
# --------------------------------------------------------------------------

# Warned about from 1.13 (kubernetes/kubernetes#68267), refused from 1.16: kubelet's
# ValidateKubeletFlags (cmd/kubelet/app/options/options.go) exits with "unknown
# 'kubernetes.io' or 'k8s.io' labels specified with --node-labels" unless the
# key is one of KubeletLabels() or its namespace is (a subdomain of) one of
# KubeletLabelNamespaces() (pkg/kubelet/apis/well_known_labels.go, now
# staging/src/k8s.io/kubelet/pkg/apis/well_known_labels.go).
KUBELET_LABEL_RESTRICTION = (1, 16)
KUBELET_LABEL_NAMESPACES = ("kubelet.kubernetes.io", "node.kubernetes.io")
# 1.16: the never-released "GA" zone/region/instance-type names.
KUBELET_LABELS_1_16 = frozenset((
    "kubernetes.io/hostname",
    "failure-domain.beta.kubernetes.io/zone",
    "failure-domain.beta.kubernetes.io/region",
    "beta.kubernetes.io/instance-type",
    "beta.kubernetes.io/os",
    "beta.kubernetes.io/arch",
    "failure-domain.kubernetes.io/zone",
    "failure-domain.kubernetes.io/region",
    "kubernetes.io/instance-type",
    "kubernetes.io/os",
    "kubernetes.io/arch",
))
# 1.17 on: the topology.kubernetes.io and node.kubernetes.io/instance-type
# names replaced those (kubernetes/kubernetes#81431, #82049).
KUBELET_LABELS_1_17 = (1, 17)
KUBELET_LABELS = frozenset((
    "kubernetes.io/hostname",
    "topology.kubernetes.io/zone",
    "topology.kubernetes.io/region",
    "failure-domain.beta.kubernetes.io/zone",
    "failure-domain.beta.kubernetes.io/region",
    "beta.kubernetes.io/instance-type",
    "node.kubernetes.io/instance-type",
    "kubernetes.io/os",
    "kubernetes.io/arch",
    "beta.kubernetes.io/os",
    "beta.kubernetes.io/arch",
))

# Label keys and values (k8s.io/apimachinery/pkg/util/validation IsQualifiedName, IsValidLabelValue).
_LABEL_NAME_RE = re.compile(r"^[A-Za-z0-9]([-A-Za-z0-9_.]*[A-Za-z0-9])?$")
_DNS_SUBDOMAIN_RE = re.compile(r"^[a-z0-9]([-a-z0-9]*[a-z0-9])?(\.[a-z0-9]([-a-z0-9]*[a-z0-9])?)*$")
_GATE_NAME_RE = re.compile(r"^[A-Za-z][A-Za-z0-9]*$")
_CPUSET_RE = re.compile(r"^[0-9]+(-[0-9]+)?(,[0-9]+(-[0-9]+)?)*$")
_VERSION_RE = re.compile(r"^v?([0-9]+)\.([0-9]+)(?:\.([0-9]+))?$")
_KUBELET_VERSION_RE = re.compile(r"\bKubernetes\s+v([0-9]+)\.([0-9]+)\.([0-9]+)")
_BARE_VERSION_RE = re.compile(r"^v?([0-9]+)\.([0-9]+)\.([0-9]+)(?:[-+][0-9A-Za-z.+-]*)?$")

LABELS_VAR = "gpu_kubelet_node_labels"
TAINTS_VAR = "gpu_kubelet_taints"
TOPOLOGY_POLICY_VAR = "gpu_kubelet_topology_manager_policy"
TOPOLOGY_SCOPE_VAR = "gpu_kubelet_topology_manager_scope"
CPU_POLICY_VAR = "gpu_kubelet_cpu_manager_policy"
RESERVED_CPUS_VAR = "gpu_kubelet_reserved_cpus"
GATES_VAR = "gpu_kubelet_feature_gates"


def _dotted(version):
    return ".".join(str(part) for part in version)


def kubelet_version(text):
    """'Kubernetes v1.29.15-eks-abcdef' (``kubelet --version``) -> '1.29.15'."""
    if not isinstance(text, str):
        raise AnsibleFilterError("kubelet_version expects the output of 'kubelet --version' as text, got %s: %r"
                                 % (type(text).__name__, text))
    match = _KUBELET_VERSION_RE.search(text) or _BARE_VERSION_RE.match(text.strip())
    if not match:
        raise AnsibleFilterError("cannot read a kubelet version from %r; 'kubelet --version' prints "
                                 "'Kubernetes vMAJOR.MINOR.PATCH'" % (text,))
    return "%d.%d.%d" % tuple(int(part) for part in match.groups())


def _parse_version(version):
    """(major, minor) of a kubelet version string, or None."""
    match = _VERSION_RE.match(str(version).strip()) if isinstance(version, str) else None
    if not match:
        return None
    return int(match.group(1)), int(match.group(2))


def _name_problem(name, what):
    if not name:
        return "its %s is empty" % what
    if len(name) > 63:
        return "its %s is longer than 63 characters" % what
    if not _LABEL_NAME_RE.match(name):
        return ("its %s must be letters, digits, '-', '_' or '.', starting and ending with a letter or digit"
                % what)
    return None


def _key_problem(key):
    """Why ``key`` is not a valid label or taint key, or None."""
    if not isinstance(key, str):
        return "the key is not a string"
    parts = key.split("/")
    if len(parts) > 2:
        return "a key has at most one '/' (prefix/name)"
    if len(parts) == 2:
        prefix = parts[0]
        if not prefix:
            return "its prefix (before '/') is empty"
        if len(prefix) > 253 or not _DNS_SUBDOMAIN_RE.match(prefix):
            return "its prefix must be a lowercase DNS subdomain of at most 253 characters, such as example.com"
    return _name_problem(parts[-1], "name")


def _value_problem(value):
    if value == "":
        return None
    return _name_problem(value, "value")


def _namespace(key):
    parts = key.split("/", 1)
    return parts[0] if len(parts) == 2 else ""


def _in_namespace(namespace, domain):
    return namespace == domain or namespace.endswith("." + domain)


def kubelet_refuses_label(key, version):
    """True when a kubelet of ``version`` ((major, minor)) refuses ``key`` in --node-labels."""
    if version < KUBELET_LABEL_RESTRICTION:
        return False
    namespace = _namespace(key)
    if not (_in_namespace(namespace, "kubernetes.io") or _in_namespace(namespace, "k8s.io")):
        return False
    allowed = KUBELET_LABELS if version >= KUBELET_LABELS_1_17 else KUBELET_LABELS_1_16
    if key in allowed:
        return False
    return not any(_in_namespace(namespace, allowed_namespace) for allowed_namespace in KUBELET_LABEL_NAMESPACES)


def _choice(settings, name, variable, errors):
    """A string setting ('' when unset), or None after reporting a wrong type."""
    value = settings.get(name)
    if value is None:
        return ""
    if not isinstance(value, str):
        errors.append("%s must be a string, got %s: %r" % (variable, type(value).__name__, value))
        return None
    return value.strip()


def _cpuset_ranges(cpuset):
    """The CPUs of a cpuset already matched by _CPUSET_RE as sorted, merged (first, last) ranges:
    '4-7,0-1,2' is [(0, 2), (4, 7)]. Ranges stay ranges: '0-4000000000' is one pair, not a set."""
    ranges = []
    for part in cpuset.split(","):
        first, dash, last = part.partition("-")
        ranges.append((int(first), int(last if dash else first)))
    merged = []
    for first, last in sorted(ranges):
        if merged and first <= merged[-1][1] + 1:
            merged[-1] = (merged[-1][0], max(merged[-1][1], last))
        else:
            merged.append((first, last))
    return merged


def _cpuset_minus(cpuset, other):
    """The CPUs of cpuset that other lacks, as ranges."""
    left = []
    holes = _cpuset_ranges(other)
    for first, last in _cpuset_ranges(cpuset):
        for hole_first, hole_last in holes:
            if hole_last < first or hole_first > last:
                continue
            if hole_first > first:
                left.append((first, hole_first - 1))
            first = hole_last + 1
            if first > last:
                break
        if first <= last:
            left.append((first, last))
    return left


def _ranges_text(ranges):
    """Ranges as a cpuset: [(0, 2), (6, 6)] is '0-2,6'."""
    return ",".join(str(a) if a == b else "%d-%d" % (a, b) for a, b in ranges)


class _Plan(object):
    """Errors and flags for one kubelet; see kubelet_gpu_args."""

    def __init__(self, settings):
        if not isinstance(settings, dict):
            raise AnsibleFilterError("kubelet_gpu_args expects a dict of settings (version, gpu_count, labels, taints, "
                                     "...), got %s: %r" % (type(settings).__name__, settings))
        self.settings = settings
        self.errors = []
        self.flags = {}
        self.gates = {}           # gates turned on here: name -> why
        self.needed_gates = {}    # gates that must not be off: name -> why
        self.raw_version = settings.get("version")
        self.version = _parse_version(self.raw_version)
        if self.version is None or self.version < (1, 0):
            self.errors.append("the kubelet version %r is not a Kubernetes version MAJOR.MINOR.PATCH of 1.0 or later; "
                               "read it with gpufleet.nvidia.internal.kubelet_version from 'kubelet --version'"
                               % (self.raw_version,))
            self.version = None
        self.kubelet = "kubelet %s" % (self.raw_version,)
        self._gpu()
        self._labels()
        self._taints()
        self._cpu_manager()
        self._topology_manager()
        self._feature_gates()

    def _too_old(self, variable, value, flag, since, fix=None):
        """Report ``variable`` set to ``value`` for a kubelet older than ``flag``; True when reported."""
        if self.version is None or self.version >= since:
            return False
        self.errors.append("%s is %r but %s has no %s (it came in Kubernetes %s): upgrade the kubelet or %s"
                           % (variable, value, self.kubelet, flag, _dotted(since), fix or "leave %s empty" % variable))
        return True

    def _gpu(self):
        count = self.settings.get("gpu_count", 0)
        if count is None:
            count = 0
        if isinstance(count, bool) or not isinstance(count, int) or count < 0:
            self.errors.append("gpu_count must be the number of GPUs on the node (an integer, 0 or more), got %r"
                               % (count,))
            count = 0
        if self.version is None:
            return
        first, last = NVIDIA_GPUS_FLAG
        if count > 0 and first <= self.version < last:
            # The flag takes 0 or 1: in-tree support mapped /dev/nvidia0 only.
            self.flags["--experimental-nvidia-gpus"] = "1"
        for gate, since, until in GPU_GATES:
            if since <= self.version < until:
                self.gates[gate] = "NVIDIA GPUs need it"
        if INTRODUCED_GATES["DevicePlugins"] <= self.version < REMOVED_GATES["DevicePlugins"]:
            self.needed_gates["DevicePlugins"] = "the NVIDIA device plugin needs it"

    def _labels(self):
        labels = self.settings.get("labels")
        if labels is None:
            return
        if not isinstance(labels, dict):
            self.errors.append("%s must be a dict of label names to string values, got %s: %r"
                               % (LABELS_VAR, type(labels).__name__, labels))
            return
        good = {}
        for key, value in labels.items():
            problem = _key_problem(key)
            if problem:
                self.errors.append("%s has the label name %r, which kubelet rejects: %s" % (LABELS_VAR, key, problem))
                continue
            if not isinstance(value, str):
                self.errors.append("%s has %s: %r (%s); label values must be strings: quote the value"
                                   % (LABELS_VAR, key, value, type(value).__name__))
                continue
            problem = _value_problem(value)
            if problem:
                self.errors.append("%s has %s=%r, which kubelet rejects: %s (at most 63 characters)"
                                   % (LABELS_VAR, key, value, problem))
                continue
            if self.version is not None and kubelet_refuses_label(key, self.version):
                allowed = KUBELET_LABELS if self.version >= KUBELET_LABELS_1_17 else KUBELET_LABELS_1_16
                self.errors.append(
                    "%s has %r: %s refuses to start with --node-labels in the kubernetes.io and k8s.io namespaces "
                    "except under %s (or their subdomains) and these: %s. Remove it from %s and set it through "
                    "the API instead (kubectl label node NODE %s=%s)"
                    % (LABELS_VAR, key, self.kubelet, " or ".join(n + "/" for n in KUBELET_LABEL_NAMESPACES),
                       ", ".join(sorted(allowed)), LABELS_VAR, key, value))
                continue
            good[key] = value
        if good:
            self.flags["--node-labels"] = ",".join("%s=%s" % (key, good[key]) for key in sorted(good))

    def _taints(self):
        taints = self.settings.get("taints")
        if taints is None:
            return
        if not isinstance(taints, list):
            self.errors.append("%s must be a list of 'key[=value]:Effect' strings, got %s: %r"
                               % (TAINTS_VAR, type(taints).__name__, taints))
            return
        good = []
        seen = {}
        for taint in taints:
            if not isinstance(taint, str):
                self.errors.append("%s has %r (%s); each taint is a string 'key[=value]:Effect'"
                                   % (TAINTS_VAR, taint, type(taint).__name__))
                continue
            spec, colon, effect = taint.strip().rpartition(":")
            if not colon:
                self.errors.append("%s has %r without an effect: write it as key[=value]:Effect with Effect one of %s, "
                                   "for example '%s:NoSchedule'" % (TAINTS_VAR, taint, ", ".join(TAINT_EFFECTS), taint))
                continue
            if effect not in TAINT_EFFECTS:
                self.errors.append("%s has %r whose effect %r is not one of %s (they are case-sensitive)"
                                   % (TAINTS_VAR, taint, effect, ", ".join(TAINT_EFFECTS)))
                continue
            key, equals, value = spec.partition("=")
            problem = _key_problem(key)
            if problem:
                self.errors.append("%s has %r whose key %r is invalid: %s" % (TAINTS_VAR, taint, key, problem))
                continue
            problem = _value_problem(value) if equals else None
            if problem:
                self.errors.append("%s has %r whose value %r is invalid: %s (at most 63 characters)"
                                   % (TAINTS_VAR, taint, value, problem))
                continue
            if (key, effect) in seen:
                self.errors.append("%s has %r and %r: a node has one taint per key and effect; keep one"
                                   % (TAINTS_VAR, seen[(key, effect)], taint))
                continue
            seen[(key, effect)] = taint
            good.append(taint.strip())
        registered = self.settings.get("registered_taints") or []
        if not isinstance(registered, list) or not all(isinstance(spec, str) for spec in registered):
            self.errors.append("registered_taints must be the list of taints kubelet registers with "
                               "(kubelet_registration_taints' taints), got %r" % (registered,))
            registered = []
        if good:
            # kubelet keeps one list, the last given: the node's own taints stay, and a taint of the same
            # key and effect as one of gpu_kubelet_taints is replaced by it.
            ours = set(taint_identity(spec) for spec in good)
            kept = []
            for spec in registered:
                if taint_identity(spec) not in ours and spec not in kept:
                    kept.append(spec)
            self.flags["--register-with-taints"] = ",".join(kept + good)

    def _cpu_manager(self):
        policy = _choice(self.settings, "cpu_manager_policy", CPU_POLICY_VAR, self.errors)
        reserved = self.settings.get("reserved_cpus")
        if reserved is None:
            reserved = ""
        if isinstance(reserved, int) and not isinstance(reserved, bool) and reserved >= 0:
            reserved = str(reserved)  # 'gpu_kubelet_reserved_cpus: 0' is YAML's integer 0
        if not isinstance(reserved, str):
            self.errors.append("%s must be a cpuset string such as '0-1,6', got %s: %r"
                               % (RESERVED_CPUS_VAR, type(reserved).__name__, reserved))
            reserved = None
        else:
            reserved = reserved.strip()
            if reserved and not (self._cpuset_ok(reserved) and self._cpus_online(reserved)):
                reserved = None
            elif reserved and not self._too_old(RESERVED_CPUS_VAR, reserved, "--reserved-cpus", RESERVED_CPUS_FLAG):
                self.flags["--reserved-cpus"] = reserved
        if not policy:
            return
        if policy not in CPU_MANAGER_POLICIES:
            self.errors.append("%s is %r; it must be one of %s (or empty to leave the kubelet's default)"
                               % (CPU_POLICY_VAR, policy, ", ".join(CPU_MANAGER_POLICIES)))
            return
        if policy == "static" and reserved == "":
            self.errors.append("%s is 'static' but %s is empty: the static CPU manager policy needs reserved CPUs; "
                               "set %s to a cpuset such as '0-1'"
                               % (CPU_POLICY_VAR, RESERVED_CPUS_VAR, RESERVED_CPUS_VAR))
        if self._too_old(CPU_POLICY_VAR, policy, "--cpu-manager-policy", CPU_MANAGER_FLAG):
            return
        self.flags["--cpu-manager-policy"] = policy
        if self.version is not None:
            why = "%s is %r, which needs it" % (CPU_POLICY_VAR, policy)
            if self.version < CPU_MANAGER_GATE_DEFAULT_ON:
                self.gates["CPUManager"] = why
            if self.version < REMOVED_GATES["CPUManager"]:
                self.needed_gates["CPUManager"] = why

    def _cpuset_ok(self, cpuset):
        problem = None
        if not _CPUSET_RE.match(cpuset):
            problem = "it must be CPU numbers and ranges separated by commas, such as '0-1,6'"
        else:
            for part in cpuset.split(","):
                first, dash, last = part.partition("-")
                if dash and int(first) > int(last):
                    problem = "the range %r runs backwards" % part
                    break
        if problem:
            self.errors.append("%s is %r, which is not a cpuset: %s" % (RESERVED_CPUS_VAR, cpuset, problem))
            return False
        return True

    def _cpus_online(self, cpuset):
        """kubelet refuses to start when a reserved CPU is not online (cmd/kubelet/app/server.go, getReservedCPUs)."""
        online = self.settings.get("online_cpus")
        if not isinstance(online, str) or not _CPUSET_RE.match(online.strip()):
            return True  # the node's online CPUs were not read: kubelet judges
        offline = _cpuset_minus(cpuset, online.strip())
        if offline:
            several = len(offline) > 1 or offline[0][0] != offline[0][1]
            self.errors.append("%s is %r, but CPU%s %s %s not online on this node (its online CPUs are %s, from "
                               "/sys/devices/system/cpu/online): kubelet refuses to start with reserved CPUs that are "
                               "not online"
                               % (RESERVED_CPUS_VAR, cpuset, "s" if several else "", _ranges_text(offline),
                                  "are" if several else "is", online.strip()))
            return False
        return True

    def _topology_manager(self):
        policy = _choice(self.settings, "topology_manager_policy", TOPOLOGY_POLICY_VAR, self.errors)
        if policy:
            if policy not in TOPOLOGY_MANAGER_POLICIES:
                self.errors.append("%s is %r; it must be one of %s (or empty to leave the kubelet's default)"
                                   % (TOPOLOGY_POLICY_VAR, policy, ", ".join(TOPOLOGY_MANAGER_POLICIES)))
            elif not self._too_old(TOPOLOGY_POLICY_VAR, policy, "--topology-manager-policy", TOPOLOGY_MANAGER_FLAG):
                self.flags["--topology-manager-policy"] = policy
                if self.version is not None:
                    why = "%s is %r, which needs it" % (TOPOLOGY_POLICY_VAR, policy)
                    if self.version < TOPOLOGY_MANAGER_GATE_DEFAULT_ON:
                        self.gates["TopologyManager"] = why
                    if self.version < REMOVED_GATES["TopologyManager"]:
                        self.needed_gates["TopologyManager"] = why
        scope = _choice(self.settings, "topology_manager_scope", TOPOLOGY_SCOPE_VAR, self.errors)
        if scope:
            if scope not in TOPOLOGY_MANAGER_SCOPES:
                self.errors.append("%s is %r; it must be one of %s (or empty to leave the kubelet's default)"
                                   % (TOPOLOGY_SCOPE_VAR, scope, ", ".join(TOPOLOGY_MANAGER_SCOPES)))
            elif not self._too_old(TOPOLOGY_SCOPE_VAR, scope, "--topology-manager-scope", TOPOLOGY_MANAGER_SCOPE_FLAG):
                self.flags["--topology-manager-scope"] = scope

    def _feature_gates(self):
        user = self.settings.get("feature_gates")
        if user is None:
            user = {}
        if not isinstance(user, dict):
            self.errors.append("%s must be a dict of gate names to true/false, got %s: %r"
                               % (GATES_VAR, type(user).__name__, user))
            user = {}
        merged = {}
        for gate in self.gates:
            if self.version is not None and self.version < REMOVED_GATES.get(gate, (999, 0)):
                merged[gate] = True
        for gate, enabled in user.items():
            if not isinstance(gate, str) or not _GATE_NAME_RE.match(gate):
                self.errors.append("%s has the gate name %r; gate names are letters and digits, such as "
                                   "TopologyManager" % (GATES_VAR, gate))
                continue
            if not isinstance(enabled, bool):
                self.errors.append("%s has %s: %r (%s); the value must be true or false, unquoted"
                                   % (GATES_VAR, gate, enabled, type(enabled).__name__))
                continue
            if self.version is not None:
                removed = REMOVED_GATES.get(gate)
                if removed and self.version >= removed:
                    self.errors.append("%s has %s=%s, but %s no longer has the %s feature gate (removed in "
                                       "Kubernetes %s) and refuses to start with it: remove %s from %s"
                                       % (GATES_VAR, gate, str(enabled).lower(), self.kubelet, gate, _dotted(removed),
                                          gate, GATES_VAR))
                    continue
                introduced = INTRODUCED_GATES.get(gate)
                if introduced and self.version < introduced:
                    self.errors.append("%s has %s=%s, but %s does not have the %s feature gate yet (it came in "
                                       "Kubernetes %s) and refuses to start with it: remove %s from %s"
                                       % (GATES_VAR, gate, str(enabled).lower(), self.kubelet, gate,
                                          _dotted(introduced), gate, GATES_VAR))
                    continue
            why = self.gates.get(gate) or self.needed_gates.get(gate)
            if why and not enabled:
                self.errors.append("%s has %s=false, but %s on %s: remove %s from %s"
                                   % (GATES_VAR, gate, why, self.kubelet, gate, GATES_VAR))
                continue
            merged[gate] = enabled
        if merged:
            self.flags["--feature-gates"] = ",".join("%s=%s" % (gate, str(merged[gate]).lower())
                                                     for gate in sorted(merged))


# The order kubelet_gpu_args returns flags in.
FLAG_ORDER = (
    "--experimental-nvidia-gpus",
    "--feature-gates",
    "--node-labels",
    "--register-with-taints",
    "--cpu-manager-policy",
    "--reserved-cpus",
    "--topology-manager-policy",
    "--topology-manager-scope",
)


def kubelet_flag_errors(settings):
    """What is wrong with the GPU kubelet settings for this kubelet, as sentences (empty: nothing).

    ``settings``: version (from kubelet_version), gpu_count, labels, taints,
    topology_manager_policy, topology_manager_scope, cpu_manager_policy,
    reserved_cpus, feature_gates. Each sentence names the role variable, the
    value and the fix.
    """
    return list(_Plan(settings).errors)


def kubelet_gpu_args(settings):
    """The kubelet flags for ``settings`` (see kubelet_flag_errors), in FLAG_ORDER.

    Raises AnsibleFilterError with every problem when kubelet_flag_errors
    finds any.
    """
    plan = _Plan(settings)
    if plan.errors:
        raise AnsibleFilterError("the GPU kubelet settings do not fit this kubelet:\n- " + "\n- ".join(plan.errors))
    return ["%s=%s" % (flag, plan.flags[flag]) for flag in FLAG_ORDER if flag in plan.flags]


# --------------------------------------------------------------------------
# The kubelet configuration drop-in directory (--config-dir)
# --------------------------------------------------------------------------

# --config-dir: alpha in 1.28 and 1.29 (only with the KUBELET_CONFIG_DROPIN_DIR_ALPHA
# environment variable, dropped by kubernetes/kubernetes#122907 in 1.30), beta in 1.30/1.31,
# GA in 1.35 (KEP-3983, kubernetes/enhancements keps/sig-node/3983-drop-in-configuration).
# Before 1.32 kubelet merged drop-ins into its internal struct without defaulting
# (kubernetes/kubernetes#126630, #124796), rewritten as a JSON merge patch by #127421 (1.32).
# The role writes its settings there from 1.35 on unless told otherwise, and refuses to before 1.32.
CONFIG_DIR_FLAG = (1, 32)
CONFIG_DIR_GA = (1, 35)
# The flags this role sets and their KubeletConfiguration (kubelet.config.k8s.io/v1beta1)
# fields; --node-labels has no field and stays a flag.
CONFIG_FIELDS = {
    "--feature-gates": "featureGates",
    "--register-with-taints": "registerWithTaints",
    "--cpu-manager-policy": "cpuManagerPolicy",
    "--reserved-cpus": "reservedSystemCPUs",
    "--topology-manager-policy": "topologyManagerPolicy",
    "--topology-manager-scope": "topologyManagerScope",
}
KUBELET_CONFIG_API = "kubelet.config.k8s.io/v1beta1"


def _taint(spec):
    key_value, dummy, effect = spec.rpartition(":")
    key, equals, value = key_value.partition("=")
    taint = {"key": key}
    if equals:
        taint["value"] = value
    taint["effect"] = effect
    return taint


def kubelet_settings_in(version, asked="auto"):
    """Where the role puts kubelet's settings for kubelet ``version``: 'flags' or 'config_dir'.

    ``asked`` is gpu_kubelet_settings_in: auto (the drop-in directory from 1.35, where
    --config-dir is GA; flags before), flags, or config_dir (refused before 1.30).
    """
    parsed = _parse_version(version)
    if parsed is None:
        raise AnsibleFilterError("kubelet_settings_in expects a kubelet version such as '1.35.0', got %r" % (version,))
    if asked == "auto":
        return "config_dir" if parsed >= CONFIG_DIR_GA else "flags"
    if asked == "flags":
        return "flags"
    if asked == "config_dir":
        if parsed < CONFIG_DIR_FLAG:
            raise AnsibleFilterError(
                "gpu_kubelet_settings_in is 'config_dir', but kubelet %s merges --config-dir drop-ins reliably only "
                "from 1.32 (kubernetes/kubernetes#127421; 1.28 and 1.29 need KUBELET_CONFIG_DROPIN_DIR_ALPHA set); "
                "use 'flags' or 'auto'" % (version,))
        return "config_dir"
    raise AnsibleFilterError("gpu_kubelet_settings_in must be auto, flags or config_dir, got %r" % (asked,))


def kubelet_config_dropin(args, argv=()):
    """Split kubelet_gpu_args' flags for the drop-in directory: ``{"flags": [...], "config": {...}}``.

    ``config`` is a KubeletConfiguration with the fields of the flags that have one (the
    feature gates as a map of booleans, the taints as a list of {key, value, effect}); ``flags``
    keeps the rest (--node-labels), in their order. kubelet's flags win over its drop-ins, so a
    setting whose flag kubelet's command line (``argv``, the role's own drop-in left out) already
    has stays a flag: the role's comes after it, and wins as it always did (kubeadm join writes
    --register-with-taints into kubeadm-flags.env for nodeRegistration.taints).
    """
    if not isinstance(args, (list, tuple)):
        raise AnsibleFilterError("kubelet_config_dropin expects kubelet_gpu_args' list of flags, got %s: %r"
                                 % (type(args).__name__, args))
    given = {"--" + name for name, dummy in _flags(argv)}
    flags = []
    config = {"apiVersion": KUBELET_CONFIG_API, "kind": "KubeletConfiguration"}
    for arg in args:
        name, dummy, value = str(arg).partition("=")
        field = CONFIG_FIELDS.get(name)
        if field is None or name in given:
            flags.append(arg)
        elif field == "featureGates":
            gates = {}
            for pair in filter(None, value.split(",")):
                gate, dummy, on = pair.partition("=")
                gates[gate] = on.strip().lower() == "true"
            config[field] = gates
        elif field == "registerWithTaints":
            config[field] = [_taint(spec) for spec in filter(None, value.split(","))]
        else:
            config[field] = value
    return {"flags": flags, "config": config}


# --------------------------------------------------------------------------
# systemd: the effective ExecStart of a unit and its drop-ins
# --------------------------------------------------------------------------

def _unit_lines(text):
    """Logical lines of a unit file (systemd.syntax(7)): comments dropped, continuations joined.

    A line ending in a backslash continues on the next line, the backslash
    replaced by a space; comment lines inside a continuation are skipped.
    """
    pending = None
    for raw in text.splitlines():
        stripped = raw.strip()
        if stripped.startswith(("#", ";")):
            continue
        line = raw if pending is None else pending + raw
        if line.endswith("\\"):
            pending = line[:-1] + " "
            continue
        pending = None
        yield line
    if pending is not None:
        yield pending


def systemd_exec_start(texts):
    """Effective ExecStart= command lines of a service from its unit file and drop-ins.

    ``texts`` are the file contents in systemd's load order: the unit file,
    then its drop-ins in order. In [Service], an empty ``ExecStart=`` clears
    the list and every other assignment appends to it. The commands are kept
    as written ($VARIABLES and prefixes such as '-' untouched), stripped.
    """
    if isinstance(texts, str):
        texts = [texts]
    if not isinstance(texts, (list, tuple)):
        raise AnsibleFilterError("systemd_exec_start expects a list of unit file texts (the unit, then its drop-ins), "
                                 "got %s: %r" % (type(texts).__name__, texts))
    commands = []
    for number, text in enumerate(texts):
        if not isinstance(text, str):
            raise AnsibleFilterError("systemd_exec_start: item %d is %s, not the text of a unit file: %r"
                                     % (number, type(text).__name__, text))
        section = None
        for line in _unit_lines(text):
            stripped = line.strip()
            if not stripped:
                continue
            if stripped.startswith("[") and stripped.endswith("]"):
                section = stripped[1:-1].strip()
                continue
            if section != "Service":
                continue
            key, equals, value = stripped.partition("=")
            if not equals or key.strip() != "ExecStart":
                continue
            value = value.strip()
            if value:
                commands.append(value)
            else:
                commands = []
    if not commands:
        raise AnsibleFilterError("no ExecStart= is in effect in the [Service] section of these %d unit file(s)"
                                 % len(texts))
    return commands


# --------------------------------------------------------------------------
# cgroup v1: failCgroupV1
# --------------------------------------------------------------------------

# failCgroupV1 (KubeletConfiguration) and --fail-cgroupv1 came with KEP-4569, cgroup v1 in
# maintenance mode (1.31, default false); KEP-5573 made it true by default in 1.35, so from
# 1.35 kubelet exits on a cgroup v1 host with "kubelet is configured to not run on a host
# using cgroup v1" unless the option is false.
FAIL_CGROUP_V1_OPTION = (1, 31)
FAIL_CGROUP_V1_DEFAULT_TRUE = (1, 35)
# strconv.ParseBool, which pflag's bool flags use.
_PARSE_BOOL = {"1": True, "t": True, "T": True, "TRUE": True, "true": True, "True": True,
               "0": False, "f": False, "F": False, "FALSE": False, "false": False, "False": False}
_ENV_NAME_RE = re.compile(r"^[A-Za-z_][A-Za-z0-9_]*$")
_BRACED_RE = re.compile(r"\$\{([A-Za-z_][A-Za-z0-9_]*)\}")


def _words(text):
    try:
        return shlex.split(text, comments=False)
    except ValueError:
        return text.split()


def _service_assignments(text, key):
    """Values of ``key=`` in the [Service] sections of a unit file text, in order."""
    values = []
    section = None
    for line in _unit_lines(text):
        stripped = line.strip()
        if stripped.startswith("[") and stripped.endswith("]"):
            section = stripped[1:-1].strip()
            continue
        name, equals, value = stripped.partition("=")
        if section == "Service" and equals and name.strip() == key:
            values.append(value.strip())
    return values


def _environment_file_assignments(text):
    """{name: value} of an EnvironmentFile= text as systemd reads it: '#' and ';' lines are
    comments, a trailing backslash continues a line, quotes are removed, and a line whose name
    is not a variable name (``export X=1``) is ignored."""
    assignments = {}
    for line in _unit_lines(text):
        name, equals, value = line.strip().partition("=")
        name = name.strip()
        if not equals or not _ENV_NAME_RE.match(name):
            continue
        value = value.strip()
        if len(value) > 1 and value[0] == value[-1] and value[0] in "\"'":
            value = value[1:-1]
        assignments[name] = value
    return assignments


def _read_files(files):
    """[(path, text)] of slurp results (or {"path", "content"} dicts); files not read are left out."""
    read = []
    for entry in files or []:
        if not isinstance(entry, dict):
            raise AnsibleFilterError("expected files as {path, content} or slurp results, got %r" % (entry,))
        if entry.get("failed") or entry.get("content") is None:
            continue
        path = entry.get("path") or entry.get("item") or entry.get("source")
        content = entry["content"]
        if entry.get("encoding") == "base64":
            try:
                content = base64.b64decode(content).decode("utf-8", "replace")
            except (TypeError, ValueError, binascii.Error):
                raise AnsibleFilterError("the slurped file %s is not base64" % (path,))
        read.append((path, content))
    return read


def kubelet_command_line(unit_texts, environment_files=(), exec_start=None):
    """kubelet's command line as systemd builds it from the unit, its drop-ins and environment files.

    ``unit_texts``: the unit file and its drop-ins in systemd's order. ``environment_files``:
    what was read of the ``EnvironmentFile=`` files ({path, content} or slurp results; a file
    not read counts as empty). ``exec_start``: the effective command (systemd_exec_start's
    answer, one command); by default worked out from the texts.

    Returns ``{"argv": [...], "environment_files": [paths]}``: Environment= assignments in
    order (an empty one resets them, a later one replaces an earlier), overridden by the
    environment files in order; in the command, a ``$NAME`` word becomes the value split at
    whitespace and ``${NAME}`` the value as one word (systemd.exec(5), "Command lines").
    """
    if isinstance(unit_texts, str):
        unit_texts = [unit_texts]
    texts = [text for text in unit_texts or [] if isinstance(text, str)]
    if len(texts) != len(unit_texts or []):
        raise AnsibleFilterError("kubelet_command_line expects the texts of kubelet's unit files, got %r"
                                 % (unit_texts,))
    environment = {}
    file_paths = []
    for text in texts:
        for value in _service_assignments(text, "Environment"):
            if not value:
                environment = {}
                continue
            for word in _words(value):
                name, equals, setting = word.partition("=")
                if equals and _ENV_NAME_RE.match(name):
                    environment[name] = setting
        for value in _service_assignments(text, "EnvironmentFile"):
            if not value:
                file_paths = []
            else:
                file_paths.append(value.lstrip("-"))
    read = dict(_read_files(environment_files))
    for path in file_paths:
        environment.update(_environment_file_assignments(read.get(path, "")))
    if exec_start is None:
        commands = systemd_exec_start(texts)
        exec_start = commands[-1] if commands else ""
    if isinstance(exec_start, (list, tuple)):
        exec_start = exec_start[-1] if exec_start else ""
    argv = []
    for word in _words(str(exec_start)):
        whole = re.match(r"^\$([A-Za-z_][A-Za-z0-9_]*)$", word)
        if whole:
            argv.extend(environment.get(whole.group(1), "").split())
        else:
            argv.append(_BRACED_RE.sub(lambda match: environment.get(match.group(1), ""), word))
    if argv:
        argv[0] = argv[0].lstrip("-@:+!")
    return {"argv": argv, "environment_files": file_paths}


def _flags(argv):
    """[(name, value or None)] of kubelet's long flags, names normalised as kubelet's flag set
    does ('_' is '-'); a non-boolean flag may take the next word as its value."""
    flags = []
    words = list(argv or [])
    for index, word in enumerate(words):
        if not word.startswith("--") or word == "--":
            continue
        name, equals, value = word[2:].partition("=")
        name = name.replace("_", "-")
        if not equals:
            value = None
            if name in ("config", "config-dir", "register-with-taints") and index + 1 < len(words) \
                    and not words[index + 1].startswith("-"):
                value = words[index + 1]
        flags.append((name, value))
    return flags


def kubelet_config_files(argv):
    """Where kubelet reads its settings from, by its command line (kubelet_command_line's argv).

    Returns ``{"config": path or None, "config_dir": path or None}``: kubelet reads a
    configuration file only when ``--config`` names one, and drop-ins only with ``--config-dir``.
    """
    if isinstance(argv, dict):
        argv = argv.get("argv")
    found = {"config": None, "config_dir": None}
    for name, value in _flags(argv):
        if name == "config":
            found["config"] = value
        elif name == "config-dir":
            found["config_dir"] = value
    return found


def _path_key(path):
    # filepath.WalkDir: lexical order of the names within each directory, depth first.
    return [part.encode("utf-8") for part in str(path).split("/")]


def kubelet_cgroup_v1_errors(version, cgroup_v2, argv=(), files=(), config_files=None):
    """Why kubelet ``version`` would refuse to start on this host's cgroups, as sentences; [] when it starts.

    ``cgroup_v2``: whether /sys/fs/cgroup is the unified hierarchy. ``argv``: kubelet's command
    line (kubelet_command_line). ``files``: what was read of the configuration file and of the
    --config-dir drop-ins ({path, content} or slurp results, any order: the drop-ins are taken in
    kubelet's walk order). ``config_files``: kubelet_config_files' answer.

    The value is kubelet's: its default for the version, the configuration file (null there is
    the default), the drop-ins in order, then the last --fail-cgroupv1 flag. A null in a drop-in
    is the default again from 1.32, where kubelet merges each drop-in as a JSON merge patch into
    the versioned configuration and defaults it after (kubernetes/kubernetes#127421: the key is
    removed, then defaulted); before, kubelet merged into the configuration it had read and the
    earlier value stayed. A configuration file or drop-in folder that is named but missing is
    not judged: kubelet cannot start before it exists (a node before kubeadm join), and it is
    not this check's to say.
    """
    if cgroup_v2:
        return []
    parsed = _parse_version(version)
    if parsed is None:
        raise AnsibleFilterError("kubelet_cgroup_v1_errors expects a kubelet version such as '1.35.0', got %r"
                                 % (version,))
    if parsed < FAIL_CGROUP_V1_OPTION:
        return []
    if isinstance(argv, dict):
        argv = argv.get("argv")
    config_files = config_files or kubelet_config_files(argv)
    config, config_dir = config_files.get("config"), config_files.get("config_dir")
    read = _read_files(files)
    by_path = dict(read)
    if config and config not in by_path:
        return []
    dropins = sorted((path for path, dummy in read
                      if config_dir and path != config and str(path).startswith(str(config_dir).rstrip("/") + "/")
                      and str(path).endswith(".conf")), key=_path_key)
    fail = parsed >= FAIL_CGROUP_V1_DEFAULT_TRUE
    source = "its default from 1.35" if fail else "its default"
    set_in = None
    for path in ([config] if config else []) + dropins:
        try:
            data = yaml.safe_load(by_path[path] or "") or {}
        except yaml.YAMLError as err:
            return ["kubelet's configuration %s is not YAML (%s); kubelet %s would not start with it; gpu_kubelet "
                    "changed nothing." % (path, str(err).splitlines()[0], version)]
        if not isinstance(data, dict) or "failCgroupV1" not in data:
            continue
        value = data["failCgroupV1"]
        if value is None:
            if path == config:
                fail = parsed >= FAIL_CGROUP_V1_DEFAULT_TRUE
                source, set_in = "failCgroupV1 is null in %s, so its default" % path, None
            elif parsed >= CONFIG_DIR_FLAG:
                # A JSON merge patch into the versioned configuration, defaulted after: null removes
                # the key and the default comes back, whatever the file or an earlier drop-in said.
                fail = parsed >= FAIL_CGROUP_V1_DEFAULT_TRUE
                source = "failCgroupV1 is null in %s, which kubelet reads as its default" % path
                set_in = path
            continue
        if not isinstance(value, bool):
            return ["failCgroupV1 in %s is %r, which kubelet cannot read (true or false); kubelet %s would not "
                    "start with it; gpu_kubelet changed nothing." % (path, value, version)]
        fail = value
        source, set_in = "failCgroupV1: %s in %s" % (str(value).lower(), path), path
    for name, value in _flags(argv):
        if name != "fail-cgroupv1":
            continue
        if value is None:
            fail = True
        elif value in _PARSE_BOOL:
            fail = _PARSE_BOOL[value]
        else:
            return ["kubelet %s would not start: --fail-cgroupv1=%s is not true or false; gpu_kubelet changed nothing."
                    % (version, value)]
        source = set_in = "the flag --fail-cgroupv1%s" % ("" if value is None else "=" + value)
    if not fail:
        return []
    if set_in:
        way = "change it where it is set (%s) to false" % set_in
    elif config:
        way = ("set failCgroupV1: false in kubelet's configuration (%s; on a kubeadm node in the kubelet-config "
               "ConfigMap, whose copy kubeadm upgrade writes back to that file)" % config)
    else:
        way = "give kubelet --fail-cgroupv1=false (it reads no configuration file)"
    return ["kubelet %s refuses to start on this host: it runs cgroup v1 (/sys/fs/cgroup is not the unified "
            "hierarchy) and failCgroupV1 is true (%s). Boot the node with cgroup v2 "
            "(systemd.unified_cgroup_hierarchy=1 on the kernel command line), or %s to keep cgroup v1, which "
            "Kubernetes no longer supports; gpu_kubelet changed nothing." % (version, source, way)]


# --------------------------------------------------------------------------
# Registration taints: --register-with-taints and registerWithTaints
# --------------------------------------------------------------------------

def _taint_spec(taint):
    """'key[=value]:Effect' of a registerWithTaints entry ({key, value, effect}), or None if it is not one."""
    if not isinstance(taint, dict) or not isinstance(taint.get("key"), str) or not taint.get("key"):
        return None
    value, effect = taint.get("value"), taint.get("effect")
    if value is not None and not isinstance(value, str) or not isinstance(effect, str) or effect not in TAINT_EFFECTS:
        return None
    return "%s%s:%s" % (taint["key"], "=" + value if value else "", effect)


def _spec_problem(spec):
    """Why kubelet would not read ``spec`` ('key[=value]:Effect') as a taint, or None."""
    key_value, colon, effect = spec.rpartition(":")
    if not colon or effect not in TAINT_EFFECTS:
        return "its effect must be one of %s" % ", ".join(TAINT_EFFECTS)
    key, equals, value = key_value.partition("=")
    return _key_problem(key) or (_value_problem(value) if equals else None)


def taint_identity(spec):
    """(key, effect) of a taint spec: a node has one taint per key and effect."""
    key_value, dummy, effect = str(spec).rpartition(":")
    return key_value.partition("=")[0], effect


def kubelet_registration_taints(version, argv=(), files=(), config_files=None, own_dropin=None, wanted=()):
    """The taints kubelet registers its Node with, without the role: what gpu_kubelet must keep.

    kubelet keeps one list: the last ``--register-with-taints`` on its command line replaces the
    whole list (pflag's Set of RegisterWithTaintsVar), and without the flag the configuration file's
    ``registerWithTaints`` is replaced whole by each ``--config-dir`` drop-in that sets it (JSON merge
    patch: lists are replaced, null removes the key, and from 1.32 the default, no taint, comes back;
    before 1.32 null kept the earlier list). ``argv``: kubelet's command line without the role's
    drop-in (kubelet_command_line); ``files``: the configuration file and drop-ins as read ({path,
    content} or slurp results); ``own_dropin``: the role's configuration drop-in, left out.

    Returns ``{"taints": [specs], "source": where the list was set or None, "later": [{"path",
    "taints"}] for the drop-ins that kubelet reads after ``own_dropin`` and that set the list
    (they replace the role's), "replacing": the paths of those whose list lacks one of ``wanted``
    (gpu_kubelet_taints), "inert": [{"path", "taints"}] for the files that set the list while
    ``--register-with-taints`` is on the command line (the flag wins: kubelet ignores their list),
    "errors": [sentences]}``.
    """
    parsed = _parse_version(version)
    if parsed is None:
        raise AnsibleFilterError("kubelet_registration_taints expects a kubelet version such as '1.35.0', got %r"
                                 % (version,))
    if isinstance(argv, dict):
        argv = argv.get("argv")
    config_files = config_files or kubelet_config_files(argv)
    config, config_dir = config_files.get("config"), config_files.get("config_dir")
    read = [(path, text) for path, text in _read_files(files) if path != own_dropin]
    by_path = dict(read)
    dropins = sorted((path for path, dummy in read
                      if config_dir and path != config and str(path).startswith(str(config_dir).rstrip("/") + "/")
                      and str(path).endswith(".conf")), key=_path_key)
    found = {"taints": [], "source": None, "later": [], "replacing": [], "inert": [], "errors": []}
    set_in = []
    for path in ([config] if config and config in by_path else []) + dropins:
        try:
            data = yaml.safe_load(by_path[path] or "") or {}
        except yaml.YAMLError as err:
            found["errors"].append("kubelet's configuration %s is not YAML (%s); kubelet %s would not start with it"
                                   % (path, str(err).splitlines()[0], version))
            continue
        if not isinstance(data, dict) or "registerWithTaints" not in data:
            continue
        value = data["registerWithTaints"]
        if value is None and path != config and parsed < CONFIG_DIR_FLAG:
            continue
        taints = []
        if not isinstance(value, (list, type(None))):
            found["errors"].append("registerWithTaints in %s is %s, not a list of taints" % (path, json_text(value)))
            value = None
        for entry in value or []:
            spec = _taint_spec(entry)
            if spec is None:
                found["errors"].append("registerWithTaints in %s has %s, which is not a taint kubelet %s reads "
                                       "({key, value, effect} with effect one of %s)"
                                       % (path, json_text(entry), version, ", ".join(TAINT_EFFECTS)))
            else:
                taints.append(spec)
        if own_dropin and path != config and _path_key(path) > _path_key(own_dropin):
            found["later"].append({"path": path, "taints": taints})
        found["taints"], found["source"] = taints, path
        if isinstance(data["registerWithTaints"], list):
            set_in.append({"path": path, "taints": taints})
    for name, value in _flags(argv):
        if name != "register-with-taints":
            continue
        specs = [spec.strip() for spec in (value or "").split(",") if spec.strip()]
        for spec in specs:
            problem = _spec_problem(spec)
            if problem:
                found["errors"].append("kubelet's flag --register-with-taints=%s has %r, which kubelet %s refuses: %s"
                                       % (value, spec, version, problem))
        found["taints"], found["source"], found["later"] = specs, "the flag --register-with-taints", []
        # kubelet's flags win over its configuration file and drop-ins: their lists are inert.
        found["inert"] = set_in
    wanted = [str(spec).strip() for spec in wanted or []]
    found["replacing"] = [entry["path"] for entry in found["later"]
                          if any(spec not in entry["taints"] for spec in wanted)]
    return found


def json_text(value):
    try:
        return json.dumps(value, sort_keys=True)
    except (TypeError, ValueError):
        return repr(value)


class FilterModule(object):
    def filters(self):
        return {
            "kubelet_version": kubelet_version,
            "kubelet_flag_errors": kubelet_flag_errors,
            "kubelet_gpu_args": kubelet_gpu_args,
            "kubelet_settings_in": kubelet_settings_in,
            "kubelet_config_dropin": kubelet_config_dropin,
            "systemd_exec_start": systemd_exec_start,
            "kubelet_command_line": kubelet_command_line,
            "kubelet_config_files": kubelet_config_files,
            "kubelet_cgroup_v1_errors": kubelet_cgroup_v1_errors,
            "kubelet_registration_taints": kubelet_registration_taints,
        }

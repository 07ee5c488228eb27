# Copyright: (c) 2026, gpufleet.nvidia contributors
# GNU General Public License v3.0+ (see COPYING or https://www.gnu.org/licenses/gpl-3.0.txt)
"""GPU kubelet flags by kubelet version, their errors, and ExecStart from unit files."""

from __future__ import annotations

import pytest

from ansible.errors import AnsibleFilterError
from ansible_collections.gpufleet.nvidia.plugins.filter.internal import kubelet_plan as plan

# One patch release of each minor version the flags change at.
VERSIONS = ["1.5.8", "1.6.13", "1.7.16", "1.8.15", "1.9.11", "1.10.13", "1.11.10", "1.16.15", "1.17.17",
            "1.18.20", "1.19.16", "1.20.15", "1.28.15", "1.31.2", "1.34.1"]
GPU_LABEL = "--node-labels=nvidia.com/gpu.present=true"


def settings(version="1.31.2", **more):
    values = {"version": version, "gpu_count": 8, "labels": {"nvidia.com/gpu.present": "true"}, "taints": [],
              "topology_manager_policy": "", "topology_manager_scope": "", "cpu_manager_policy": "",
              "reserved_cpus": "", "feature_gates": {}}
    values.update(more)
    return values


def minor(version):
    return tuple(int(part) for part in version.split(".")[:2])


def gates_of(args):
    for arg in args:
        if arg.startswith("--feature-gates="):
            return dict(item.split("=") for item in arg[len("--feature-gates="):].split(","))
    return {}


def single_error(values):
    errors = plan.kubelet_flag_errors(values)
    assert len(errors) == 1, errors
    return errors[0]


# --------------------------------------------------------------------------
# kubelet --version
# --------------------------------------------------------------------------

@pytest.mark.parametrize("text,version", [
    ("Kubernetes v1.31.2", "1.31.2"),
    ("Kubernetes v1.31.2\n", "1.31.2"),
    ("Kubernetes v1.29.15-eks-abcdef", "1.29.15"),
    ("Kubernetes v1.5.8", "1.5.8"),
    ("Kubernetes v1.28.3+k3s1", "1.28.3"),
    ("Kubernetes v1.30.14-gke.1000000", "1.30.14"),
    ("Flag --foo has been deprecated\nKubernetes v1.27.16", "1.27.16"),
    ("v1.34.1", "1.34.1"),
    ("  1.20.15 ", "1.20.15"),
])
def test_kubelet_version(text, version):
    assert plan.kubelet_version(text) == version


@pytest.mark.parametrize("text", ["", "kubelet: command not found", "Kubernetes v1.31", "Kubernetes vX.Y.Z",
                                  "1.31.2 and more"])
def test_kubelet_version_names_what_it_read(text):
    with pytest.raises(AnsibleFilterError) as caught:
        plan.kubelet_version(text)
    assert repr(text) in str(caught.value)


@pytest.mark.parametrize("value", [None, 131, ["Kubernetes v1.31.2"]])
def test_kubelet_version_needs_text(value):
    with pytest.raises(AnsibleFilterError) as caught:
        plan.kubelet_version(value)
    assert repr(value) in str(caught.value)


# --------------------------------------------------------------------------
# GPU support by version
# --------------------------------------------------------------------------

@pytest.mark.parametrize("version,args", [
    ("1.5.8", ["--experimental-nvidia-gpus=1", GPU_LABEL]),
    ("1.6.13", ["--feature-gates=Accelerators=true", GPU_LABEL]),
    ("1.7.16", ["--feature-gates=Accelerators=true", GPU_LABEL]),
    ("1.8.15", ["--feature-gates=Accelerators=true,DevicePlugins=true", GPU_LABEL]),
    ("1.9.11", ["--feature-gates=Accelerators=true,DevicePlugins=true", GPU_LABEL]),
    ("1.10.13", ["--feature-gates=Accelerators=true", GPU_LABEL]),
    ("1.11.10", [GPU_LABEL]),
    ("1.16.15", [GPU_LABEL]),
    ("1.17.17", [GPU_LABEL]),
    ("1.18.20", [GPU_LABEL]),
    ("1.19.16", [GPU_LABEL]),
    ("1.20.15", [GPU_LABEL]),
    ("1.28.15", [GPU_LABEL]),
    ("1.31.2", [GPU_LABEL]),
    ("1.34.1", [GPU_LABEL]),
])
def test_gpu_flags_by_version(version, args):
    assert plan.kubelet_flag_errors(settings(version)) == []
    assert plan.kubelet_gpu_args(settings(version)) == args


@pytest.mark.parametrize("version,args", [
    ("1.5.8", []),                                   # the flag counts GPUs: 0 means none, so it is left out
    ("1.3.10", []),
    ("1.7.16", ["--feature-gates=Accelerators=true"]),
    ("1.31.2", []),
])
def test_node_without_gpus(version, args):
    assert plan.kubelet_gpu_args(settings(version, gpu_count=0, labels={})) == args


@pytest.mark.parametrize("version,args", [
    ("1.2.7", []),                                   # before kubernetes/kubernetes#24836: no GPU flag at all
    ("1.3.10", ["--experimental-nvidia-gpus=1"]),
    ("1.4.12", ["--experimental-nvidia-gpus=1"]),
])
def test_experimental_nvidia_gpus_takes_one_whatever_the_count(version, args):
    assert plan.kubelet_gpu_args(settings(version, gpu_count=4, labels={})) == args


# --------------------------------------------------------------------------
# Topology manager and CPU manager by version
# --------------------------------------------------------------------------

def _topology_policy(version):
    if minor(version) < (1, 16):
        return None
    if minor(version) < (1, 18):
        return ["--feature-gates=TopologyManager=true", GPU_LABEL, "--topology-manager-policy=single-numa-node"]
    return [GPU_LABEL, "--topology-manager-policy=single-numa-node"]


@pytest.mark.parametrize("version", VERSIONS)
def test_topology_manager_policy(version):
    values = settings(version, topology_manager_policy="single-numa-node")
    expected = _topology_policy(version)
    if expected is None:
        message = single_error(values)
        assert "gpu_kubelet_topology_manager_policy" in message and "'single-numa-node'" in message
        assert "1.16" in message and version in message
    else:
        assert plan.kubelet_gpu_args(values) == expected


@pytest.mark.parametrize("version", VERSIONS)
def test_topology_manager_scope(version):
    values = settings(version, topology_manager_scope="pod", gpu_count=0)
    if minor(version) < (1, 20):
        message = single_error(values)
        assert "gpu_kubelet_topology_manager_scope" in message and "'pod'" in message and "1.20" in message
    else:
        assert plan.kubelet_gpu_args(values) == [GPU_LABEL, "--topology-manager-scope=pod"]


@pytest.mark.parametrize("version", VERSIONS)
def test_cpu_manager_policy(version):
    values = settings(version, cpu_manager_policy="none", gpu_count=0)
    if minor(version) < (1, 8):
        message = single_error(values)
        assert "gpu_kubelet_cpu_manager_policy" in message and "'none'" in message and "1.8" in message
        return
    args = plan.kubelet_gpu_args(values)
    assert "--cpu-manager-policy=none" in args
    assert (gates_of(args).get("CPUManager") == "true") == (minor(version) < (1, 10))


@pytest.mark.parametrize("version", VERSIONS)
def test_reserved_cpus(version):
    values = settings(version, cpu_manager_policy="static", reserved_cpus="0-1,6", gpu_count=0)
    if minor(version) < (1, 8):
        assert len(plan.kubelet_flag_errors(values)) == 2   # neither flag exists yet
    elif minor(version) < (1, 17):
        message = single_error(values)
        assert "gpu_kubelet_reserved_cpus" in message and "'0-1,6'" in message and "1.17" in message
    else:
        args = plan.kubelet_gpu_args(values)
        assert args[-2:] == ["--cpu-manager-policy=static", "--reserved-cpus=0-1,6"]


def test_reserved_cpus_without_a_policy():
    assert plan.kubelet_gpu_args(settings(reserved_cpus="0")) == [GPU_LABEL, "--reserved-cpus=0"]


def test_reserved_cpus_as_a_yaml_integer():
    assert plan.kubelet_gpu_args(settings(cpu_manager_policy="static", reserved_cpus=0))[-1] == "--reserved-cpus=0"


def test_static_policy_needs_reserved_cpus():
    message = single_error(settings(cpu_manager_policy="static"))
    assert "gpu_kubelet_cpu_manager_policy" in message and "'static'" in message
    assert "gpu_kubelet_reserved_cpus" in message


@pytest.mark.parametrize("cpuset", ["0-", "a", "3-1", "0,,1", "0 - 1", "-1", "0-1-2", "0;1"])
def test_reserved_cpus_must_be_a_cpuset(cpuset):
    message = single_error(settings(reserved_cpus=cpuset))
    assert "gpu_kubelet_reserved_cpus" in message and repr(cpuset) in message


@pytest.mark.parametrize("cpuset", ["0", "0-1", "0-1,6", "2,4,6-11", "12-12"])
def test_cpusets(cpuset):
    assert plan.kubelet_gpu_args(settings(reserved_cpus=cpuset))[-1] == "--reserved-cpus=" + cpuset


@pytest.mark.parametrize("reserved,online,offline", [
    ("0-1", "0", "CPU 1 is"),
    ("0-1,6", "0-3", "CPU 6 is"),
    ("2,4-7,9", "0-4,8-9", "CPUs 5-7 are"),
    ("64-65", "0-63", "CPUs 64-65 are"),
    ("0-4000000000", "0-63", "CPUs 64-4000000000 are"),
    ("0-9", "0-1,3,5-6,9", "CPUs 2,4,7-8 are"),
    ("5,1-3", "2", "CPUs 1,3,5 are"),
])
def test_reserved_cpus_must_be_online(reserved, online, offline):
    message = single_error(settings(cpu_manager_policy="static", reserved_cpus=reserved, online_cpus=online + "\n"))
    assert message.startswith("gpu_kubelet_reserved_cpus is %r, but %s not online" % (reserved, offline)), message
    assert "online CPUs are %s," % online in message


@pytest.mark.parametrize("reserved,online", [("0-1", "0-1"), ("0,6", "0-7"), ("3", "0,3"), ("0-1", None),
                                             ("0-1", ""), ("0-1", "unreadable"), ("2-3,0-1", "0-3"),
                                             ("1,2", "0-1,2-3"), ("0-4000000000", "0-4000000000")])
def test_online_reserved_cpus(reserved, online):
    args = plan.kubelet_gpu_args(settings(reserved_cpus=reserved, online_cpus=online))
    assert args[-1] == "--reserved-cpus=" + reserved


@pytest.mark.parametrize("name,variable,value", [
    ("topology_manager_policy", "gpu_kubelet_topology_manager_policy", "numa"),
    ("topology_manager_policy", "gpu_kubelet_topology_manager_policy", "Best-Effort"),
    ("topology_manager_scope", "gpu_kubelet_topology_manager_scope", "node"),
    ("cpu_manager_policy", "gpu_kubelet_cpu_manager_policy", "dynamic"),
    ("topology_manager_policy", "gpu_kubelet_topology_manager_policy", 1),
    ("cpu_manager_policy", "gpu_kubelet_cpu_manager_policy", ["static"]),
    ("reserved_cpus", "gpu_kubelet_reserved_cpus", ["0-1"]),
    ("reserved_cpus", "gpu_kubelet_reserved_cpus", True),
])
def test_unknown_choices(name, variable, value):
    message = single_error(settings(**{name: value}))
    assert variable in message and repr(value) in message


@pytest.mark.parametrize("policy", plan.TOPOLOGY_MANAGER_POLICIES)
def test_every_topology_policy(policy):
    assert plan.kubelet_gpu_args(settings(topology_manager_policy=policy))[-1] == "--topology-manager-policy=" + policy


def test_unset_choices_emit_nothing():
    values = settings(topology_manager_policy=None, topology_manager_scope=None, cpu_manager_policy=None,
                      reserved_cpus=None, feature_gates=None, taints=None)
    assert plan.kubelet_gpu_args(values) == [GPU_LABEL]


# --------------------------------------------------------------------------
# Node labels
# --------------------------------------------------------------------------

def test_labels_are_one_flag_sorted_by_name():
    labels = {"nvidia.com/gpu.product": "NVIDIA-H100-80GB-HBM3", "example.com/rack": "r12", "zone": "",
              "nvidia.com/gpu.count": "8"}
    assert plan.kubelet_gpu_args(settings(labels=labels)) == [
        "--node-labels=example.com/rack=r12,nvidia.com/gpu.count=8,"
        "nvidia.com/gpu.product=NVIDIA-H100-80GB-HBM3,zone="]


def test_no_labels_no_flag():
    assert plan.kubelet_gpu_args(settings(labels={})) == []


REFUSED = ["node-role.kubernetes.io/gpu", "kubernetes.io/role", "app.kubernetes.io/name", "k8s.io/x",
           "foo.k8s.io/x", "node-restriction.kubernetes.io/gpu", "kubernetes.io/gpu"]
ALLOWED = ["kubelet.kubernetes.io/gpu", "gpu.kubelet.kubernetes.io/x", "node.kubernetes.io/gpu",
           "gpu.node.kubernetes.io/x", "node.kubernetes.io/instance-type", "kubernetes.io/hostname",
           "kubernetes.io/os", "kubernetes.io/arch", "beta.kubernetes.io/instance-type", "beta.kubernetes.io/os",
           "beta.kubernetes.io/arch", "failure-domain.beta.kubernetes.io/zone",
           "failure-domain.beta.kubernetes.io/region", "nvidia.com/gpu.present", "mykubernetes.io/x",
           "k8s.io.example.com/x", "plain"]


@pytest.mark.parametrize("version", ["1.16.15", "1.17.17", "1.28.15", "1.31.2", "1.34.1"])
@pytest.mark.parametrize("key", REFUSED)
def test_kubelet_refuses_these_labels(version, key):
    message = single_error(settings(version, labels={key: "true"}))
    assert "gpu_kubelet_node_labels" in message and repr(key) in message
    assert "refuses" in message and "through the API" in message


@pytest.mark.parametrize("version", ["1.16.15", "1.17.17", "1.31.2", "1.34.1"])
@pytest.mark.parametrize("key", ALLOWED)
def test_kubelet_accepts_these_labels(version, key):
    assert plan.kubelet_gpu_args(settings(version, labels={key: "x"})) == ["--node-labels=%s=x" % key]


@pytest.mark.parametrize("version", ["1.5.8", "1.10.13", "1.11.10"])
def test_no_label_restriction_before_1_16(version):
    args = plan.kubelet_gpu_args(settings(version, gpu_count=0, labels={"node-role.kubernetes.io/gpu": ""}))
    assert args[-1] == "--node-labels=node-role.kubernetes.io/gpu="


@pytest.mark.parametrize("key,on_1_16,on_1_17", [
    ("kubernetes.io/instance-type", True, False),        # the informal "GA" names of 1.16 ...
    ("failure-domain.kubernetes.io/zone", True, False),
    ("failure-domain.kubernetes.io/region", True, False),
    ("topology.kubernetes.io/zone", False, True),        # ... gave way to these in 1.17
    ("topology.kubernetes.io/region", False, True),
])
def test_allowed_label_list_changed_in_1_17(key, on_1_16, on_1_17):
    assert (plan.kubelet_flag_errors(settings("1.16.15", labels={key: "a"})) == []) == on_1_16
    assert (plan.kubelet_flag_errors(settings("1.17.17", labels={key: "a"})) == []) == on_1_17


@pytest.mark.parametrize("key", ["bad key", "UPPER.example.com/x", "a/b/c", "/x", "example.com/", "x" * 64,
                                 "-x", "x_", "example..com/x", "%s.com/x" % ("a" * 250), ""])
def test_invalid_label_names(key):
    message = single_error(settings(labels={key: "x"}))
    assert "gpu_kubelet_node_labels" in message and repr(key) in message


@pytest.mark.parametrize("value", ["-x", "x_", "a b", "a,b", "a=b", "x" * 64, "é"])
def test_invalid_label_values(value):
    message = single_error(settings(labels={"example.com/x": value}))
    assert "gpu_kubelet_node_labels" in message and repr(value) in message


@pytest.mark.parametrize("value", [True, 8, 1.5, None, ["a"]])
def test_label_values_must_be_strings(value):
    message = single_error(settings(labels={"nvidia.com/gpu.count": value}))
    assert "gpu_kubelet_node_labels" in message and repr(value) in message and "string" in message


def test_label_names_must_be_strings():
    message = single_error(settings(labels={8: "x"}))
    assert "gpu_kubelet_node_labels" in message and "8" in message


@pytest.mark.parametrize("labels", [["a=b"], "a=b"])
def test_labels_must_be_a_dict(labels):
    message = single_error(settings(labels=labels))
    assert "gpu_kubelet_node_labels" in message and repr(labels) in message


def test_longest_label_parts():
    prefix = ".".join(["a" * 63] * 3) + "." + "b" * 61
    assert len(prefix) == 253
    key = "%s/%s" % (prefix, "n" * 63)
    assert plan.kubelet_gpu_args(settings(labels={key: "v" * 63})) == ["--node-labels=%s=%s" % (key, "v" * 63)]


# --------------------------------------------------------------------------
# Taints
# --------------------------------------------------------------------------

def test_taints_are_one_flag_in_input_order():
    taints = ["nvidia.com/gpu=present:NoSchedule", "dedicated:NoExecute", "b=1:PreferNoSchedule",
              "nvidia.com/gpu=present:NoExecute"]
    assert plan.kubelet_gpu_args(settings(labels={}, taints=taints)) == [
        "--register-with-taints=nvidia.com/gpu=present:NoSchedule,dedicated:NoExecute,b=1:PreferNoSchedule,"
        "nvidia.com/gpu=present:NoExecute"]


def test_taint_without_an_effect():
    message = single_error(settings(taints=["nvidia.com/gpu=present"]))
    assert "gpu_kubelet_taints" in message and "'nvidia.com/gpu=present'" in message
    assert "without an effect" in message


@pytest.mark.parametrize("taint", ["a=b:Noschedule", "a=b:", "a:NoEvict", "a=b:NoSchedule:x"])
def test_taint_effects(taint):
    message = single_error(settings(taints=[taint]))
    assert "gpu_kubelet_taints" in message and repr(taint) in message


@pytest.mark.parametrize("taint", ["bad key=x:NoSchedule", "=x:NoSchedule", ":NoSchedule", "a=bad value:NoSchedule",
                                   "a=-x:NoSchedule", "a:b=c:NoSchedule", "UPPER.com/x=y:NoSchedule"])
def test_taint_keys_and_values(taint):
    message = single_error(settings(taints=[taint]))
    assert "gpu_kubelet_taints" in message and repr(taint) in message


def test_duplicate_taints_are_refused():
    message = single_error(settings(taints=["a=1:NoSchedule", "a=2:NoSchedule"]))
    assert "gpu_kubelet_taints" in message and "'a=1:NoSchedule'" in message and "'a=2:NoSchedule'" in message


def test_same_key_other_effect_is_not_a_duplicate():
    args = plan.kubelet_gpu_args(settings(labels={}, taints=["a=1:NoSchedule", "a=1:NoExecute"]))
    assert args == ["--register-with-taints=a=1:NoSchedule,a=1:NoExecute"]


@pytest.mark.parametrize("taints,bad", [(["a:NoSchedule", 5], "5"), ("a:NoSchedule", "'a:NoSchedule'"),
                                        ({"a": "NoSchedule"}, "{'a': 'NoSchedule'}")])
def test_taints_must_be_a_list_of_strings(taints, bad):
    message = single_error(settings(taints=taints))
    assert "gpu_kubelet_taints" in message and bad in message


# --------------------------------------------------------------------------
# Feature gates
# --------------------------------------------------------------------------

def test_user_gates_sorted():
    args = plan.kubelet_gpu_args(settings(labels={}, feature_gates={"Zeta": True, "Alpha": False}))
    assert args == ["--feature-gates=Alpha=false,Zeta=true"]


def test_user_gates_merge_with_computed_ones():
    args = plan.kubelet_gpu_args(settings("1.9.11", labels={}, cpu_manager_policy="none",
                                          feature_gates={"PodPriority": True, "Accelerators": True}))
    assert args == ["--feature-gates=Accelerators=true,CPUManager=true,DevicePlugins=true,PodPriority=true",
                    "--cpu-manager-policy=none"]


@pytest.mark.parametrize("gate,removed", sorted(plan.REMOVED_GATES.items()))
def test_removed_gates_are_refused(gate, removed):
    last = "1.%d.9" % (removed[1] - 1)
    first = "1.%d.0" % removed[1]
    assert plan.kubelet_flag_errors(settings(last, feature_gates={gate: True})) == []
    message = single_error(settings(first, feature_gates={gate: True}))
    assert "gpu_kubelet_feature_gates" in message and gate in message and first in message
    assert "removed in Kubernetes 1.%d" % removed[1] in message


@pytest.mark.parametrize("gate,version", [("DevicePlugins", "1.7.16"), ("TopologyManager", "1.11.10"),
                                          ("Accelerators", "1.5.8"), ("KubeletPodResources", "1.11.10"),
                                          ("KubeletPodResourcesGetAllocatable", "1.20.15")])
def test_gates_before_they_exist_are_refused(gate, version):
    message = single_error(settings(version, gpu_count=0, feature_gates={gate: True}))
    assert "gpu_kubelet_feature_gates" in message and gate in message and version in message


@pytest.mark.parametrize("gate,version,more", [
    ("Accelerators", "1.7.16", {}),
    ("DevicePlugins", "1.9.11", {}),
    ("DevicePlugins", "1.20.15", {}),
    ("TopologyManager", "1.17.17", {"topology_manager_policy": "best-effort"}),
    ("TopologyManager", "1.18.20", {"topology_manager_policy": "best-effort"}),
    ("CPUManager", "1.9.11", {"cpu_manager_policy": "none"}),
    ("CPUManager", "1.28.15", {"cpu_manager_policy": "static", "reserved_cpus": "0"}),
])
def test_turning_off_a_needed_gate(gate, version, more):
    message = single_error(settings(version, feature_gates={gate: False}, **more))
    assert "gpu_kubelet_feature_gates" in message and "%s=false" % gate in message and version in message


def test_turning_off_a_manager_gate_without_its_policy_is_the_users_call():
    args = plan.kubelet_gpu_args(settings("1.20.15", labels={}, feature_gates={"TopologyManager": False}))
    assert args == ["--feature-gates=TopologyManager=false"]


@pytest.mark.parametrize("gates,bad", [
    ({"TopologyManager": "true"}, "'true'"),
    ({"TopologyManager": 1}, "1"),
    ({"Foo=true,Bar": True}, "'Foo=true,Bar'"),
    ({"": True}, "''"),
    (["TopologyManager=true"], "['TopologyManager=true']"),
])
def test_gate_values_and_names(gates, bad):
    message = single_error(settings(feature_gates=gates))
    assert "gpu_kubelet_feature_gates" in message and bad in message


@pytest.mark.parametrize("version", VERSIONS)
def test_no_removed_gate_is_ever_emitted(version):
    values = settings(version)
    if minor(version) >= (1, 8):
        values.update(cpu_manager_policy="none")
    if minor(version) >= (1, 16):
        values.update(topology_manager_policy="best-effort")
    args = plan.kubelet_gpu_args(values)
    for gate in gates_of(args):
        assert plan.INTRODUCED_GATES.get(gate, (1, 0)) <= minor(version) < plan.REMOVED_GATES.get(gate, (99, 0))
    assert bool(gates_of(args)) == ((1, 6) <= minor(version) < (1, 11) or (1, 16) <= minor(version) < (1, 18))


# --------------------------------------------------------------------------
# Version and settings errors
# --------------------------------------------------------------------------

@pytest.mark.parametrize("version", ["", None, "abc", "0.9.0", "1.x", "1", "Kubernetes v1.31.2", 1.31])
def test_bad_versions(version):
    errors = plan.kubelet_flag_errors(settings(version))
    assert len(errors) == 1
    assert repr(version) in errors[0] and "kubelet_version" in errors[0]


@pytest.mark.parametrize("count", ["2", -1, True, 1.0])
def test_gpu_count_must_be_a_count(count):
    message = single_error(settings(gpu_count=count))
    assert "gpu_count" in message and repr(count) in message


@pytest.mark.parametrize("value", [None, "version=1.31.2", ["1.31.2"]])
def test_settings_must_be_a_dict(value):
    for function in (plan.kubelet_flag_errors, plan.kubelet_gpu_args):
        with pytest.raises(AnsibleFilterError) as caught:
            function(value)
        assert repr(value) in str(caught.value)


def test_gpu_args_raises_every_problem():
    values = settings("1.17.17", labels={"node-role.kubernetes.io/gpu": ""}, taints=["nvidia.com/gpu=present"],
                      topology_manager_scope="pod")
    errors = plan.kubelet_flag_errors(values)
    assert len(errors) == 3
    with pytest.raises(AnsibleFilterError) as caught:
        plan.kubelet_gpu_args(values)
    for error in errors:
        assert error in str(caught.value)


def test_versions_without_a_patch_are_read():
    assert plan.kubelet_gpu_args(settings("1.9")) == ["--feature-gates=Accelerators=true,DevicePlugins=true", GPU_LABEL]


# --------------------------------------------------------------------------
# Order of the flags
# --------------------------------------------------------------------------

@pytest.mark.parametrize("version,args", [
    ("1.5.8", ["--experimental-nvidia-gpus=1", "--feature-gates=Foo=true", "--node-labels=a=1,b=2",
               "--register-with-taints=t:NoSchedule"]),
    ("1.17.17", ["--feature-gates=Foo=true,TopologyManager=true", "--node-labels=a=1,b=2",
                 "--register-with-taints=t:NoSchedule", "--cpu-manager-policy=static", "--reserved-cpus=0-1",
                 "--topology-manager-policy=restricted"]),
    ("1.31.2", ["--feature-gates=Foo=true", "--node-labels=a=1,b=2", "--register-with-taints=t:NoSchedule",
                "--cpu-manager-policy=static", "--reserved-cpus=0-1", "--topology-manager-policy=restricted",
                "--topology-manager-scope=pod"]),
])
def test_flag_order(version, args):
    values = settings(version, labels={"b": "2", "a": "1"}, taints=["t:NoSchedule"], feature_gates={"Foo": True})
    if minor(version) >= (1, 8):
        values.update(cpu_manager_policy="static", reserved_cpus="0-1", topology_manager_policy="restricted")
    if minor(version) >= (1, 20):
        values.update(topology_manager_scope="pod")
    assert plan.kubelet_gpu_args(values) == args
    assert [arg.split("=")[0] for arg in args] == [flag for flag in plan.FLAG_ORDER if any(
        arg.startswith(flag + "=") for arg in args)]


def test_same_settings_same_args():
    values = settings(labels={str(n): str(n) for n in range(20)}, feature_gates={"G%d" % n: True for n in range(20)})
    assert plan.kubelet_gpu_args(values) == plan.kubelet_gpu_args(dict(reversed(list(values.items()))))


# --------------------------------------------------------------------------
# systemd ExecStart
# --------------------------------------------------------------------------

KUBELET_SERVICE = """\
[Unit]
Description=kubelet: The Kubernetes Node Agent
Documentation=https://kubernetes.io/docs/
Wants=network-online.target
After=network-online.target

[Service]
ExecStart=/usr/bin/kubelet
Restart=always
StartLimitInterval=0
RestartSec=10

[Install]
WantedBy=multi-user.target
"""

KUBEADM_DROPIN = """\
# Note: This dropin only works with kubeadm and kubelet v1.11+
[Service]
Environment="KUBELET_KUBECONFIG_ARGS=--bootstrap-kubeconfig=/etc/kubernetes/bootstrap-kubelet.conf \
--kubeconfig=/etc/kubernetes/kubelet.conf"
Environment="KUBELET_CONFIG_ARGS=--config=/var/lib/kubelet/config.yaml"
# kubeadm init and kubeadm join write KUBELET_KUBEADM_ARGS here
EnvironmentFile=-/var/lib/kubelet/kubeadm-flags.env
# KUBELET_EXTRA_ARGS, the user's last resort
EnvironmentFile=-/etc/default/kubelet
ExecStart=
ExecStart=/usr/bin/kubelet $KUBELET_KUBECONFIG_ARGS $KUBELET_CONFIG_ARGS $KUBELET_KUBEADM_ARGS $KUBELET_EXTRA_ARGS
"""

KUBEADM_COMMAND = "/usr/bin/kubelet $KUBELET_KUBECONFIG_ARGS $KUBELET_CONFIG_ARGS $KUBELET_KUBEADM_ARGS $KUBELET_EXTRA_ARGS"


def test_the_unit_alone():
    assert plan.systemd_exec_start([KUBELET_SERVICE]) == ["/usr/bin/kubelet"]


def test_kubeadm_dropin_replaces_the_command():
    assert plan.systemd_exec_start([KUBELET_SERVICE, KUBEADM_DROPIN]) == [KUBEADM_COMMAND]


def test_a_later_dropin_without_a_reset_appends():
    extra = "[Service]\nExecStart=/usr/local/bin/after\n"
    assert plan.systemd_exec_start([KUBELET_SERVICE, KUBEADM_DROPIN, extra]) == [KUBEADM_COMMAND,
                                                                                 "/usr/local/bin/after"]


def test_a_later_dropin_with_continuations_and_comments():
    dropin = ("[Service]\n"
              "ExecStart=\n"
              "ExecStart=/usr/bin/kubelet \\\n"
              "    $KUBELET_KUBECONFIG_ARGS \\\n"
              "# a comment inside the continued line is skipped\n"
              "; and so is this one\n"
              "    $KUBELET_EXTRA_ARGS\n")
    commands = plan.systemd_exec_start([KUBELET_SERVICE, KUBEADM_DROPIN, dropin])
    assert commands == ["/usr/bin/kubelet      $KUBELET_KUBECONFIG_ARGS      $KUBELET_EXTRA_ARGS"]
    assert commands[0].split() == ["/usr/bin/kubelet", "$KUBELET_KUBECONFIG_ARGS", "$KUBELET_EXTRA_ARGS"]


def test_backslash_becomes_a_space():
    assert plan.systemd_exec_start(["[Service]\nExecStart=/usr/bin/kubelet\\\n--v=2\n"]) == ["/usr/bin/kubelet --v=2"]


@pytest.mark.parametrize("text,commands", [
    ("[Unit]\nExecStart=/not/this\n[Service]\nExecStart=/this\n", ["/this"]),
    ("[Service]\nExecStart=/this\n[Install]\nExecStart=/not/this\n", ["/this"]),
    ("ExecStart=/no/section\n[Service]\nExecStart=/this\n", ["/this"]),
    ("[Service]\n#ExecStart=/commented\n;ExecStart=/commented\n  # ExecStart=/commented\nExecStart=/this\n", ["/this"]),
    ("[Service]\nExecStartPre=/bin/true\nExecStart=/this\nExecStartPost=/bin/true\n", ["/this"]),
    ("[Service]\nExecStart = /this --a=b  \n", ["/this --a=b"]),
    ("  [Service]  \n  ExecStart=-/usr/bin/kubelet $ARGS\n", ["-/usr/bin/kubelet $ARGS"]),
    ("[Service]\r\nExecStart=/this\r\n", ["/this"]),
    ("[Service]\nExecStart=/one\nExecStart=/two\n", ["/one", "/two"]),
    ("[Service]\nExecStart=/one\nExecStart=\nExecStart=/two\n", ["/two"]),
    ("[Service]\nExecStart=/last \\", ["/last"]),
])
def test_unit_syntax(text, commands):
    assert plan.systemd_exec_start([text]) == commands


def test_a_single_text_is_read_as_one_file():
    assert plan.systemd_exec_start(KUBELET_SERVICE) == ["/usr/bin/kubelet"]


def test_sections_do_not_carry_over_to_the_next_file():
    assert plan.systemd_exec_start([KUBELET_SERVICE, "ExecStart=\n"]) == ["/usr/bin/kubelet"]


@pytest.mark.parametrize("texts", [[], [""], ["[Service]\nRestart=always\n"], [KUBELET_SERVICE, "[Service]\nExecStart=\n"],
                                   ["[Unit]\nExecStart=/usr/bin/kubelet\n"]])
def test_no_exec_start_is_an_error(texts):
    with pytest.raises(AnsibleFilterError) as caught:
        plan.systemd_exec_start(texts)
    assert "ExecStart" in str(caught.value)


@pytest.mark.parametrize("texts", [None, {"a": "b"}, [KUBELET_SERVICE, None], [b"[Service]\nExecStart=/x\n"]])
def test_exec_start_needs_texts(texts):
    with pytest.raises(AnsibleFilterError):
        plan.systemd_exec_start(texts)


def test_filter_names():
    assert sorted(plan.FilterModule().filters()) == ["kubelet_cgroup_v1_errors", "kubelet_command_line",
                                                     "kubelet_config_dropin", "kubelet_config_files", "kubelet_flag_errors",
                                                     "kubelet_gpu_args", "kubelet_registration_taints",
                                                     "kubelet_settings_in", "kubelet_version", "systemd_exec_start"]


# --------------------------------------------------------------------------
# cgroup v1: failCgroupV1 (KEP-4569 in 1.31, true by default from 1.35 by KEP-5573)
# --------------------------------------------------------------------------

# kubelet.service and kubeadm's kubelet drop-in, as the packages install them (the molecule scenario's copies).
KUBELET_UNIT = "[Unit]\nDescription=kubelet\n[Service]\nExecStart=/usr/bin/kubelet\nRestart=always\n"
KUBEADM_DROPIN = """[Service]
Environment="KUBELET_KUBECONFIG_ARGS=--bootstrap-kubeconfig=/etc/kubernetes/bootstrap-kubelet.conf --kubeconfig=/etc/kubernetes/kubelet.conf"
Environment="KUBELET_CONFIG_ARGS=--config=/var/lib/kubelet/config.yaml"
EnvironmentFile=-/var/lib/kubelet/kubeadm-flags.env
EnvironmentFile=-/etc/default/kubelet
ExecStart=
ExecStart=/usr/bin/kubelet $KUBELET_KUBECONFIG_ARGS $KUBELET_CONFIG_ARGS $KUBELET_KUBEADM_ARGS $KUBELET_EXTRA_ARGS
"""
CONFIG_PATH = "/var/lib/kubelet/config.yaml"
CONFIG_TEXT = "apiVersion: kubelet.config.k8s.io/v1beta1\nkind: KubeletConfiguration\ncgroupDriver: systemd\n"
KUBEADM_FLAGS = ('KUBELET_KUBEADM_ARGS="--container-runtime-endpoint=unix:///var/run/containerd/containerd.sock '
                 '--pod-infra-container-image=registry.k8s.io/pause:3.10"\n')


def text(path, content):
    return {"path": path, "content": content}


def command_line(units=(KUBELET_UNIT, KUBEADM_DROPIN), default_kubelet="", flags=KUBEADM_FLAGS, extra_units=()):
    env = [text("/var/lib/kubelet/kubeadm-flags.env", flags), text("/etc/default/kubelet", default_kubelet)]
    return plan.kubelet_command_line(list(units) + list(extra_units), env)


def refused(version="1.35.0", config=CONFIG_TEXT, dropins=(), **kwargs):
    line = command_line(**kwargs)
    files = ([text(CONFIG_PATH, config)] if config is not None else []) + list(dropins)
    return plan.kubelet_cgroup_v1_errors(version, False, line["argv"], files, plan.kubelet_config_files(line["argv"]))


def test_the_kubeadm_command_line_as_systemd_builds_it():
    line = command_line(default_kubelet='KUBELET_EXTRA_ARGS="--max-pods=150 --node-labels=example.com/team=ml"\n')
    assert line["environment_files"] == ["/var/lib/kubelet/kubeadm-flags.env", "/etc/default/kubelet"]
    assert line["argv"] == [
        "/usr/bin/kubelet", "--bootstrap-kubeconfig=/etc/kubernetes/bootstrap-kubelet.conf",
        "--kubeconfig=/etc/kubernetes/kubelet.conf", "--config=/var/lib/kubelet/config.yaml",
        "--container-runtime-endpoint=unix:///var/run/containerd/containerd.sock",
        "--pod-infra-container-image=registry.k8s.io/pause:3.10", "--max-pods=150",
        "--node-labels=example.com/team=ml"]
    assert plan.kubelet_config_files(line["argv"]) == {"config": CONFIG_PATH, "config_dir": None}


def test_environment_files_override_environment_and_only_the_command_counts():
    # A drop-in's KUBELET_EXTRA_ARGS loses to /etc/default/kubelet's (empty, as the package ships it),
    # a variable the command does not use never reaches kubelet, and a cleared ExecStart is gone.
    dropin = ('[Service]\nEnvironment="KUBELET_EXTRA_ARGS=--fail-cgroupv1=false" "UNUSED=--fail-cgroupv1=false"\n')
    unit = "[Service]\nExecStart=/usr/bin/kubelet --fail-cgroupv1=false\n"
    errors = refused(units=(unit, KUBEADM_DROPIN), extra_units=(dropin,), default_kubelet="KUBELET_EXTRA_ARGS=\n")
    assert errors and "its default from 1.35" in errors[0]


def test_braced_variables_are_one_word_and_the_last_flag_wins():
    unit = "[Service]\nEnvironment=A=--fail-cgroupv1=true B=--fail-cgroupv1=false\nExecStart=/usr/bin/kubelet $A ${B}\n"
    assert plan.kubelet_command_line([unit])["argv"] == ["/usr/bin/kubelet", "--fail-cgroupv1=true",
                                                         "--fail-cgroupv1=false"]
    line = plan.kubelet_command_line([unit])
    assert plan.kubelet_cgroup_v1_errors("1.35.0", False, line["argv"]) == []


def test_environment_file_comments_and_export_are_not_assignments():
    for line in (";KUBELET_EXTRA_ARGS=--fail-cgroupv1=false", "# KUBELET_EXTRA_ARGS=--fail-cgroupv1=false",
                 "export KUBELET_EXTRA_ARGS=--fail-cgroupv1=false"):
        assert refused(default_kubelet=line + "\n"), line
    assert refused(default_kubelet="KUBELET_EXTRA_ARGS=--max-pods=10 \\\n --fail-cgroupv1=false\n") == []


@pytest.mark.parametrize("version,expected", [
    ("1.30.14", False),   # no failCgroupV1 yet
    ("1.34.2", False),    # the option exists, false by default
    ("1.35.0", True),     # true by default
    ("1.37.1", True),
])
def test_cgroup_v1_by_default(version, expected):
    errors = refused(version)
    assert bool(errors) is expected
    if expected:
        assert "kubelet %s refuses to start on this host" % version in errors[0]
        assert "failCgroupV1 is true (its default from 1.35)" in errors[0]
        assert "systemd.unified_cgroup_hierarchy=1" in errors[0]
        assert "set failCgroupV1: false in kubelet's configuration (/var/lib/kubelet/config.yaml;" in errors[0]
        assert "kubelet-config ConfigMap" in errors[0] and "gpu_kubelet changed nothing" in errors[0]


def test_cgroup_v2_is_never_refused():
    line = command_line()
    assert plan.kubelet_cgroup_v1_errors("1.37.1", True, line["argv"], [text(CONFIG_PATH, CONFIG_TEXT)]) == []


def test_cgroup_v1_allowed_by_the_configuration_file():
    assert refused(config=CONFIG_TEXT + "failCgroupV1: false\n") == []
    # null is unset: the default again.
    assert refused(config=CONFIG_TEXT + "failCgroupV1:\n")


def test_a_configuration_file_not_there_yet_is_not_judged():
    # Before kubeadm join the named file does not exist: kubelet cannot start until it does.
    assert refused(config=None) == []


def test_without_config_kubelet_reads_no_file():
    unit = "[Service]\nExecStart=/usr/bin/kubelet --kubeconfig=/etc/kubernetes/kubelet.conf\n"
    line = plan.kubelet_command_line([unit])
    assert plan.kubelet_config_files(line["argv"]) == {"config": None, "config_dir": None}
    errors = plan.kubelet_cgroup_v1_errors("1.35.0", False, line["argv"], [text(CONFIG_PATH, "failCgroupV1: false\n")])
    assert errors and "give kubelet --fail-cgroupv1=false (it reads no configuration file)" in errors[0]


def test_drop_ins_in_walk_order_win_over_the_file_and_the_flag_over_both():
    config_dir = "--config-dir=/etc/kubernetes/kubelet.conf.d"
    dropins = [text("/etc/kubernetes/kubelet.conf.d/b/10-allow.conf", "failCgroupV1: false\n"),
               text("/etc/kubernetes/kubelet.conf.d/b.conf", "failCgroupV1: true\n"),
               text("/etc/kubernetes/kubelet.conf.d/.hidden.conf", "failCgroupV1: null\n")]
    # Walk order: .hidden.conf, b/ (its 10-allow.conf), b.conf: true wins.
    errors = refused(config=CONFIG_TEXT + "failCgroupV1: false\n", dropins=dropins,
                     default_kubelet="KUBELET_EXTRA_ARGS=%s\n" % config_dir)
    assert errors and "failCgroupV1: true in /etc/kubernetes/kubelet.conf.d/b.conf" in errors[0]
    assert "change it where it is set (/etc/kubernetes/kubelet.conf.d/b.conf) to false" in errors[0]
    # A flag in kubeadm-flags.env (KUBELET_KUBEADM_ARGS), spelt with kubelet's '_' normalisation, wins.
    assert refused(config=CONFIG_TEXT, dropins=dropins, default_kubelet="KUBELET_EXTRA_ARGS=%s\n" % config_dir,
                   flags='KUBELET_KUBEADM_ARGS="--fail_cgroupv1=false"\n') == []
    # A bare --fail-cgroupv1 means true, even on 1.34.
    errors = refused("1.34.2", config=CONFIG_TEXT + "failCgroupV1: false\n",
                     default_kubelet="KUBELET_EXTRA_ARGS=--fail-cgroupv1\n")
    assert errors and "the flag --fail-cgroupv1)" in errors[0]


# From 1.32 (kubernetes/kubernetes#127421) kubelet merges each drop-in as a JSON merge patch into the
# versioned configuration and applies the defaults after: null removes the key, and the default comes
# back. Before, it merged into the configuration it had already read, and null kept the earlier value.
@pytest.mark.parametrize("version,config,expected", [
    ("1.35.0", "failCgroupV1: false\n", "failCgroupV1 is null in /etc/kubernetes/kubelet.conf.d/50-user.conf"),
    ("1.37.1", "failCgroupV1: false\n", "failCgroupV1 is null in /etc/kubernetes/kubelet.conf.d/50-user.conf"),
    ("1.34.2", "failCgroupV1: true\n", None),     # its default then: false
    ("1.32.0", "failCgroupV1: true\n", None),
    ("1.31.4", "failCgroupV1: true\n", "failCgroupV1: true in /var/lib/kubelet/config.yaml"),  # kept
])
def test_null_in_a_drop_in_is_the_default_from_1_32(version, config, expected):
    config_dir = "--config-dir=/etc/kubernetes/kubelet.conf.d"
    dropins = [text("/etc/kubernetes/kubelet.conf.d/50-user.conf", "failCgroupV1: null\n")]
    errors = refused(version, config=CONFIG_TEXT + config, dropins=dropins,
                     default_kubelet="KUBELET_EXTRA_ARGS=%s\n" % config_dir)
    if expected is None:
        assert errors == []
        return
    assert errors and expected in errors[0]
    if "null" in expected:
        assert "kubelet reads as its default" in errors[0]
        assert "change it where it is set (/etc/kubernetes/kubelet.conf.d/50-user.conf) to false" in errors[0]
    # A later drop-in that sets it again wins over the null.
    later = dropins + [text("/etc/kubernetes/kubelet.conf.d/60-allow.conf", "failCgroupV1: false\n")]
    assert refused(version, config=CONFIG_TEXT + config, dropins=later,
                   default_kubelet="KUBELET_EXTRA_ARGS=%s\n" % config_dir) == []


@pytest.mark.parametrize("config,flags,words", [
    (CONFIG_TEXT + 'failCgroupV1: "false"\n', KUBEADM_FLAGS, "failCgroupV1 in /var/lib/kubelet/config.yaml is 'false'"),
    ("kind: [KubeletConfiguration\n", KUBEADM_FLAGS, "/var/lib/kubelet/config.yaml is not YAML"),
    (CONFIG_TEXT, 'KUBELET_KUBEADM_ARGS="--fail-cgroupv1=FaLsE"\n', "--fail-cgroupv1=FaLsE is not true or false"),
])
def test_what_kubelet_cannot_read_is_said(config, flags, words):
    errors = refused(config=config, flags=flags)
    assert errors and words in errors[0]


def test_slurp_results_are_read_as_slurp_returns_them():
    import base64

    line = command_line()
    results = [{"item": CONFIG_PATH, "encoding": "base64",
                "content": base64.b64encode(b"kind: KubeletConfiguration\nfailCgroupV1: false\n").decode()},
               {"item": "/etc/kubernetes/missing.conf", "failed": False, "msg": "file not found"}]
    assert plan.kubelet_cgroup_v1_errors("1.36.3", False, line["argv"], results) == []


def test_cgroup_v1_errors_need_a_version():
    with pytest.raises(AnsibleFilterError) as caught:
        plan.kubelet_cgroup_v1_errors("latest", False)
    assert "'latest'" in str(caught.value)


# --------------------------------------------------------------------------
# The configuration drop-in directory (--config-dir, KEP-3983)
# --------------------------------------------------------------------------

@pytest.mark.parametrize("version,asked,mode", [
    ("1.34.2", "auto", "flags"),
    ("1.35.0", "auto", "config_dir"),       # GA in 1.35
    ("1.36.4", "auto", "config_dir"),
    ("1.37.0", "auto", "config_dir"),
    ("1.37.0", "flags", "flags"),
    ("1.32.0", "config_dir", "config_dir"),  # drop-ins merged as a JSON merge patch from 1.32
    ("1.34.2", "config_dir", "config_dir"),
])
def test_where_the_settings_go(version, asked, mode):
    assert plan.kubelet_settings_in(version, asked) == mode


@pytest.mark.parametrize("version,asked,words", [
    ("1.29.15", "config_dir", "kubelet 1.29.15 merges --config-dir drop-ins reliably only from 1.32"),
    ("1.31.2", "config_dir", "kubernetes/kubernetes#127421"),
    ("1.28.3", "config_dir", "KUBELET_CONFIG_DROPIN_DIR_ALPHA"),
    ("1.37.0", "both", "gpu_kubelet_settings_in must be auto, flags or config_dir, got 'both'"),
    ("one", "auto", "expects a kubelet version"),
])
def test_where_the_settings_go_refusals(version, asked, words):
    with pytest.raises(AnsibleFilterError) as caught:
        plan.kubelet_settings_in(version, asked)
    assert words in str(caught.value)


def test_every_setting_with_a_field_goes_to_the_drop_in():
    args = plan.kubelet_gpu_args(settings(
        "1.37.0", labels={"nvidia.com/gpu.present": "true", "example.com/pool": "training"},
        taints=["nvidia.com/gpu=present:NoSchedule", "example.com/dedicated:NoExecute", "example.com/empty=:PreferNoSchedule"],
        topology_manager_policy="single-numa-node", topology_manager_scope="pod", cpu_manager_policy="static",
        reserved_cpus="0-1", feature_gates={"MemoryManager": True, "CPUManagerPolicyOptions": False}))
    split = plan.kubelet_config_dropin(args)
    assert split["flags"] == ["--node-labels=example.com/pool=training,nvidia.com/gpu.present=true"]
    assert split["config"] == {
        "apiVersion": "kubelet.config.k8s.io/v1beta1", "kind": "KubeletConfiguration",
        "featureGates": {"CPUManagerPolicyOptions": False, "MemoryManager": True},
        "registerWithTaints": [{"key": "nvidia.com/gpu", "value": "present", "effect": "NoSchedule"},
                               {"key": "example.com/dedicated", "effect": "NoExecute"},
                               {"key": "example.com/empty", "value": "", "effect": "PreferNoSchedule"}],
        "cpuManagerPolicy": "static", "reservedSystemCPUs": "0-1",
        "topologyManagerPolicy": "single-numa-node", "topologyManagerScope": "pod"}


@pytest.mark.parametrize("argv,kept", [
    # kubeadm join: nodeRegistration.taints become --register-with-taints in kubeadm-flags.env
    (["/usr/bin/kubelet", "--register-with-taints=node-role.example/gpu=:NoSchedule"], ["--register-with-taints"]),
    (["/usr/bin/kubelet", "--cpu_manager_policy", "none", "--feature-gates=MemoryManager=false"],
     ["--feature-gates", "--cpu-manager-policy"]),
    (["/usr/bin/kubelet", "--config=/var/lib/kubelet/config.yaml"], []),
])
def test_a_setting_kubelet_already_has_as_a_flag_stays_a_flag(argv, kept):
    args = plan.kubelet_gpu_args(settings("1.37.0", taints=["nvidia.com/gpu=present:NoSchedule"],
                                          cpu_manager_policy="static", reserved_cpus="0-1",
                                          feature_gates={"MemoryManager": True}))
    split = plan.kubelet_config_dropin(args, argv)
    order = ("--feature-gates", "--node-labels", "--register-with-taints", "--cpu-manager-policy")
    assert [flag.split("=")[0] for flag in split["flags"]] == [name for name in order if name in kept + ["--node-labels"]]
    fields = {"--feature-gates": "featureGates", "--register-with-taints": "registerWithTaints",
              "--cpu-manager-policy": "cpuManagerPolicy"}
    for flag, field in fields.items():
        assert (field in split["config"]) == (flag not in kept)
    assert split["config"]["reservedSystemCPUs"] == "0-1"


def test_labels_only_leave_an_empty_configuration():
    split = plan.kubelet_config_dropin(plan.kubelet_gpu_args(settings("1.37.0")))
    assert split == {"flags": [GPU_LABEL],
                     "config": {"apiVersion": "kubelet.config.k8s.io/v1beta1", "kind": "KubeletConfiguration"}}


def test_the_drop_in_wants_the_flag_list():
    with pytest.raises(AnsibleFilterError) as caught:
        plan.kubelet_config_dropin("--node-labels=a=b")
    assert "kubelet_gpu_args' list of flags" in str(caught.value)


# --------------------------------------------------------------------------
# Registration taints: kubelet keeps one list; the role keeps the node's and adds its own
# --------------------------------------------------------------------------

OWN_DROPIN = "/etc/kubernetes/kubelet.conf.d/90-gpufleet-nvidia.conf"
CONFIG_DIR_ARGS = "KUBELET_EXTRA_ARGS=--config-dir=/etc/kubernetes/kubelet.conf.d\n"
GPU_TAINT = "nvidia.com/gpu=present:NoSchedule"


def registration(version="1.37.0", config=CONFIG_TEXT, dropins=(), own=OWN_DROPIN, **kwargs):
    line = command_line(**kwargs)
    files = ([text(CONFIG_PATH, config)] if config is not None else []) + list(dropins)
    return plan.kubelet_registration_taints(version, line["argv"], files, plan.kubelet_config_files(line["argv"]), own)


def taints_flag(version, registered, taints=(GPU_TAINT,)):
    args = plan.kubelet_gpu_args(settings(version, labels={}, taints=list(taints), registered_taints=registered))
    return [arg for arg in args if arg.startswith("--register-with-taints")]


def test_kubeadm_join_taints_are_kept_and_the_gpu_taint_added():
    # kubeadm join writes nodeRegistration.taints into kubeadm-flags.env as --register-with-taints.
    flags = ('KUBELET_KUBEADM_ARGS="--container-runtime-endpoint=unix:///var/run/containerd/containerd.sock '
             '--register-with-taints=node-role.kubernetes.io/infra:NoSchedule,example.com/pool=ml:NoExecute"\n')
    found = registration("1.34.2", flags=flags)
    assert found == {"taints": ["node-role.kubernetes.io/infra:NoSchedule", "example.com/pool=ml:NoExecute"],
                     "source": "the flag --register-with-taints", "later": [], "replacing": [], "inert": [],
                     "errors": []}
    assert taints_flag("1.34.2", found["taints"]) == [
        "--register-with-taints=node-role.kubernetes.io/infra:NoSchedule,example.com/pool=ml:NoExecute," + GPU_TAINT]
    # The role's flag comes last on the command line and wins, so it carries them all: a setting kubelet
    # has as a flag stays a flag in the drop-in folder's mode too.
    args = plan.kubelet_gpu_args(settings("1.37.0", labels={}, taints=[GPU_TAINT], registered_taints=found["taints"]))
    split = plan.kubelet_config_dropin(args, command_line(flags=flags)["argv"])
    assert split["flags"] == [
        "--register-with-taints=node-role.kubernetes.io/infra:NoSchedule,example.com/pool=ml:NoExecute," + GPU_TAINT]


def test_the_last_flag_wins_and_a_flag_given_as_two_words_is_read():
    flags = 'KUBELET_KUBEADM_ARGS="--register-with-taints=a:NoSchedule"\n'
    found = registration(flags=flags, default_kubelet='KUBELET_EXTRA_ARGS="--register-with-taints b=1:NoExecute"\n')
    assert (found["taints"], found["source"]) == (["b=1:NoExecute"], "the flag --register-with-taints")
    # An empty flag is kubelet's empty list.
    found = registration(flags=flags, default_kubelet="KUBELET_EXTRA_ARGS=--register-with-taints=\n")
    assert found["taints"] == []


def test_configuration_file_and_drop_ins_replace_the_list_whole():
    config = CONFIG_TEXT + "registerWithTaints:\n- {key: example.com/a, value: x, effect: NoSchedule}\n"
    found = registration(config=config)
    assert (found["taints"], found["source"]) == (["example.com/a=x:NoSchedule"], CONFIG_PATH)
    user = text("/etc/kubernetes/kubelet.conf.d/50-user.conf",
                "registerWithTaints:\n- key: example.com/b\n  effect: NoExecute\n- {key: c, value: '', effect: NoSchedule}\n")
    found = registration(config=config, dropins=[user], default_kubelet=CONFIG_DIR_ARGS)
    assert found == {"taints": ["example.com/b:NoExecute", "c:NoSchedule"],
                     "source": "/etc/kubernetes/kubelet.conf.d/50-user.conf", "later": [], "replacing": [], "inert": [],
                     "errors": []}
    # Without --config-dir kubelet reads no drop-in.
    assert registration(config=config, dropins=[user])["taints"] == ["example.com/a=x:NoSchedule"]
    # The flag wins over both.
    found = registration(config=config, dropins=[user], default_kubelet=CONFIG_DIR_ARGS,
                         flags='KUBELET_KUBEADM_ARGS="--register-with-taints=d:NoSchedule"\n')
    assert found["taints"] == ["d:NoSchedule"]


KUBEADM_TAINT_FLAG = 'KUBELET_KUBEADM_ARGS="--register-with-taints=node-role.kubernetes.io/infra:NoSchedule"\n'


def test_a_users_list_beside_the_flag_is_inert_and_named():
    # kubelet's --register-with-taints (kubeadm's) wins: the lists in its configuration file and
    # drop-ins have no effect, and the role names them.
    config = CONFIG_TEXT + "registerWithTaints:\n- {key: example.com/a, value: x, effect: NoSchedule}\n"
    user = text("/etc/kubernetes/kubelet.conf.d/50-user.conf", "registerWithTaints:\n- {key: example.com/b, effect: NoExecute}\n")
    other = text("/etc/kubernetes/kubelet.conf.d/60-other.conf", "maxPods: 150\n")
    found = registration(config=config, dropins=[user, other], default_kubelet=CONFIG_DIR_ARGS, flags=KUBEADM_TAINT_FLAG)
    assert found["taints"] == ["node-role.kubernetes.io/infra:NoSchedule"]
    assert found["inert"] == [{"path": CONFIG_PATH, "taints": ["example.com/a=x:NoSchedule"]},
                              {"path": "/etc/kubernetes/kubelet.conf.d/50-user.conf", "taints": ["example.com/b:NoExecute"]}]
    # An empty list is a list too; null, which only removes one, is no user's list.
    user = text(user["path"], "registerWithTaints: []\n")
    null = text("/etc/kubernetes/kubelet.conf.d/70-null.conf", "registerWithTaints: null\n")
    found = registration(dropins=[user, null], default_kubelet=CONFIG_DIR_ARGS, flags=KUBEADM_TAINT_FLAG)
    assert found["inert"] == [{"path": user["path"], "taints": []}]


@pytest.mark.parametrize("flags,dropins", [
    # no flag: the files' lists are what kubelet registers with
    ("", ["registerWithTaints:\n- {key: example.com/b, effect: NoExecute}\n"]),
    # the flag, and no file that sets the list
    (KUBEADM_TAINT_FLAG, ["maxPods: 150\n"]),
])
def test_nothing_is_inert_without_both_the_flag_and_a_list(flags, dropins):
    files = [text("/etc/kubernetes/kubelet.conf.d/5%d-user.conf" % index, content) for index, content in enumerate(dropins)]
    assert registration(config=CONFIG_TEXT, dropins=files, default_kubelet=CONFIG_DIR_ARGS, flags=flags)["inert"] == []


def test_the_roles_own_drop_in_is_never_inert():
    own = text(OWN_DROPIN, '{"registerWithTaints": [{"key": "old", "effect": "NoSchedule"}]}')
    assert registration(dropins=[own], default_kubelet=CONFIG_DIR_ARGS, flags=KUBEADM_TAINT_FLAG)["inert"] == []


@pytest.mark.parametrize("version,taints", [("1.32.0", []), ("1.37.0", []), ("1.31.4", ["example.com/a=x:NoSchedule"])])
def test_null_in_a_drop_in_is_no_taint_from_1_32(version, taints):
    config = CONFIG_TEXT + "registerWithTaints:\n- {key: example.com/a, value: x, effect: NoSchedule}\n"
    user = text("/etc/kubernetes/kubelet.conf.d/50-user.conf", "registerWithTaints: null\n")
    assert registration(version, config=config, dropins=[user], default_kubelet=CONFIG_DIR_ARGS)["taints"] == taints


def test_the_roles_own_drop_in_is_left_out_and_later_drop_ins_are_named():
    own = text(OWN_DROPIN, '{"registerWithTaints": [{"key": "old", "effect": "NoSchedule"}]}')
    later = text("/etc/kubernetes/kubelet.conf.d/95-site.conf", "registerWithTaints:\n- {key: site, effect: NoSchedule}\n")
    found = registration(dropins=[own], default_kubelet=CONFIG_DIR_ARGS)
    assert (found["taints"], found["source"], found["later"]) == ([], None, [])
    found = registration(dropins=[own, later], default_kubelet=CONFIG_DIR_ARGS)
    assert found["later"] == [{"path": "/etc/kubernetes/kubelet.conf.d/95-site.conf", "taints": ["site:NoSchedule"]}]
    assert found["replacing"] == []
    line = command_line(default_kubelet=CONFIG_DIR_ARGS)
    files = [text(CONFIG_PATH, CONFIG_TEXT), own, later]
    found = plan.kubelet_registration_taints("1.37.0", line["argv"], files, None, OWN_DROPIN, [" " + GPU_TAINT])
    assert found["replacing"] == ["/etc/kubernetes/kubelet.conf.d/95-site.conf"]
    # A later list that has the GPU taint keeps it.
    files[2] = text(later["path"], later["content"] + "- {key: nvidia.com/gpu, value: present, effect: NoSchedule}\n")
    assert plan.kubelet_registration_taints("1.37.0", line["argv"], files, None, OWN_DROPIN, [GPU_TAINT])["replacing"] == []


@pytest.mark.parametrize("content,words", [
    ("registerWithTaints:\n- {key: a}\n", 'registerWithTaints in /etc/kubernetes/kubelet.conf.d/50-user.conf has {"key": "a"}'),
    ("registerWithTaints: a:NoSchedule\n", "registerWithTaints in /etc/kubernetes/kubelet.conf.d/50-user.conf is \"a:NoSchedule\""),
    ("kind: [x\n", "/etc/kubernetes/kubelet.conf.d/50-user.conf is not YAML"),
])
def test_taints_kubelet_cannot_read_are_said(content, words):
    user = text("/etc/kubernetes/kubelet.conf.d/50-user.conf", content)
    errors = registration(dropins=[user], default_kubelet=CONFIG_DIR_ARGS)["errors"]
    assert errors and words in errors[0]
    errors = registration(flags='KUBELET_KUBEADM_ARGS="--register-with-taints=a=b"\n')["errors"]
    assert errors and "--register-with-taints=a=b has 'a=b', which kubelet 1.37.0 refuses" in errors[0]


def test_a_node_taint_of_the_same_key_and_effect_is_replaced_and_none_doubled():
    assert taints_flag("1.34.2", ["nvidia.com/gpu=other:NoSchedule", "nvidia.com/gpu=present:NoExecute", GPU_TAINT,
                                  "a:NoSchedule", "a:NoSchedule"]) == [
        "--register-with-taints=nvidia.com/gpu=present:NoExecute,a:NoSchedule," + GPU_TAINT]


def test_without_gpu_taints_the_nodes_are_left_to_kubelet():
    assert taints_flag("1.34.2", ["a:NoSchedule"], taints=()) == []


def test_the_drop_in_carries_the_nodes_taints_and_the_gpu_taint():
    config = CONFIG_TEXT + "registerWithTaints:\n- {key: example.com/a, value: x, effect: NoSchedule}\n"
    found = registration(config=config, default_kubelet=CONFIG_DIR_ARGS)
    args = plan.kubelet_gpu_args(settings("1.37.0", labels={}, taints=[GPU_TAINT], registered_taints=found["taints"]))
    split = plan.kubelet_config_dropin(args, command_line(default_kubelet=CONFIG_DIR_ARGS)["argv"])
    assert split["config"]["registerWithTaints"] == [
        {"key": "example.com/a", "value": "x", "effect": "NoSchedule"},
        {"key": "nvidia.com/gpu", "value": "present", "effect": "NoSchedule"}]


def test_registered_taints_must_be_a_list_of_specs():
    message = single_error(settings(taints=[GPU_TAINT], registered_taints="a:NoSchedule"))
    assert "registered_taints" in message

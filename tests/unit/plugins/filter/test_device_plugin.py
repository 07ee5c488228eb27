# Copyright: (c) 2026, gpufleet.nvidia contributors
# GNU General Public License v3.0+ (see COPYING or https://www.gnu.org/licenses/gpl-3.0.txt)
"""Device plugin filters: config, capabilities, and what each node should advertise."""

from __future__ import annotations

import copy

import pytest

from ansible.errors import AnsibleFilterError

from ansible_collections.gpufleet.nvidia.plugins.filter.internal import device_plugin as dp
from ansible_collections.gpufleet.nvidia.plugins.module_utils import nvml_inventory as inv
from ansible_collections.gpufleet.nvidia.tests.unit.plugins.module_utils import nvml_readings as readings
from ansible_collections.gpufleet.nvidia.tests.unit.plugins.module_utils.test_nvml_inventory_smi import fixture


def facts_of(reading):
    answer = inv.query_nvml(readings.RecordedNvml(reading))
    return inv.summarise(answer, [], True, answer["driver_version"])


H100 = facts_of(readings.H100)
H100_MIG = facts_of(readings.H100_MIG)
# A100 with four 1g.20gb MIG devices, from nvidia-smi -q -x: the XML does not name the profiles.
A100_MIG_XML = inv.parse_smi_xml(fixture("telegraf-a100-sxm4-80gb-mig-4x1g.20gb-driver-535.54.03-v12.xml"))
A100_MIG = {"state": "ok", "gpus": A100_MIG_XML["gpus"]}


def eight(facts):
    """Eight copies of a node's single GPU: a DGX-shaped node."""
    many = copy.deepcopy(facts)
    many["gpus"] = [dict(copy.deepcopy(facts["gpus"][0]), index=n) for n in range(8)]
    many["gpu_count"] = 8
    return many


# ---- settings -----------------------------------------------------------------

def test_every_bad_setting_is_named_with_its_value():
    errors = dp.device_plugin_settings_errors({
        "mig_strategy": "all", "device_list_strategy": ["envvar", "mounts"], "device_id_strategy": "serial",
        "time_slicing_replicas": 0, "time_slicing_rename": "sometimes", "time_slicing_resources": ["gpu"], "spare": 1,
    }, "gpu_device_plugin")
    assert errors == [
        "gpu_device_plugin: unknown setting 'spare' (known: device_id_strategy, device_list_strategy, "
        "fail_on_init_error, fail_requests_greater_than_one, mig_strategy, time_slicing_rename, "
        "time_slicing_replicas, time_slicing_resources)",
        "gpu_device_plugin.mig_strategy is 'all'; use one of none, single, mixed",
        "gpu_device_plugin.device_list_strategy has 'mounts'; use envvar, volume-mounts, cdi-annotations, cdi-cri",
        "gpu_device_plugin.device_id_strategy is 'serial'; use uuid or index",
        "gpu_device_plugin.time_slicing_replicas is 0; give a whole number, 1 (no sharing) or more",
        "gpu_device_plugin.time_slicing_rename is 'sometimes'; give true or false",
        "gpu_device_plugin.time_slicing_resources is ['gpu']; give nvidia.com/gpu and/or nvidia.com/mig-<profile> names",
    ]
    assert dp.device_plugin_settings_errors({"time_slicing_replicas": True}, "x") == [
        "x.time_slicing_replicas is True; give a whole number, 1 (no sharing) or more"]
    assert dp.device_plugin_settings_errors({}) == []


def test_node_configs_are_checked_by_their_own_names():
    errors = dp.device_plugin_configs_errors({"mig_strategy": "none"}, {
        "default": {}, "bad name!": {}, "shared": {"time_slicing_replicas": -2}, "mig": {"mig_strategy": "mixed"}})
    assert errors == [
        "gpu_device_plugin_node_configs['bad name!']: the name must be a label value (letters, digits, '-', '_', "
        "'.', at most 63) other than 'default'",
        "gpu_device_plugin_node_configs['default']: the name must be a label value (letters, digits, '-', '_', "
        "'.', at most 63) other than 'default'",
        "gpu_device_plugin_node_configs['shared'].time_slicing_replicas is -2; give a whole number, 1 (no sharing) "
        "or more",
    ]
    assert dp.device_plugin_configs_errors({}, ["mig"]) == [
        "gpu_device_plugin_node_configs must be a dict of name: settings, got ['mig']"]
    with pytest.raises(AnsibleFilterError, match="time_slicing_replicas is -2"):
        dp.device_plugin_configs({}, {"shared": {"time_slicing_replicas": -2}})


def test_node_configs_override_the_role_settings():
    configs = dp.device_plugin_configs({"mig_strategy": "none", "time_slicing_replicas": 1},
                                       {"shared": {"time_slicing_replicas": 4}, "mig": {"mig_strategy": "mixed"}})
    assert configs == {
        "default": {"mig_strategy": "none", "time_slicing_replicas": 1},
        "shared": {"mig_strategy": "none", "time_slicing_replicas": 4},
        "mig": {"mig_strategy": "mixed", "time_slicing_replicas": 1},
    }


def test_config_in_nvidia_v1_format():
    assert dp.device_plugin_config({}) == {
        "version": "v1",
        "flags": {"migStrategy": "none", "failOnInitError": True,
                  "plugin": {"deviceListStrategy": ["envvar"], "deviceIDStrategy": "uuid"}},
    }
    shared = dp.device_plugin_config({"device_list_strategy": "cdi-cri", "time_slicing_replicas": 4,
                                      "time_slicing_rename": True, "fail_requests_greater_than_one": True,
                                      "time_slicing_resources": ["nvidia.com/gpu", "nvidia.com/mig-1g.10gb"]})
    assert shared["flags"]["plugin"]["deviceListStrategy"] == ["cdi-cri"]
    assert shared["sharing"] == {"timeSlicing": {
        "renameByDefault": True, "failRequestsGreaterThanOne": True,
        "resources": [{"name": "nvidia.com/gpu", "replicas": 4}, {"name": "nvidia.com/mig-1g.10gb", "replicas": 4}]}}


@pytest.mark.parametrize("configs, needed", [
    ({"default": {}}, False),
    ({"default": {"device_list_strategy": ["envvar", "cdi-cri"]}}, False),
    ({"default": {"mig_strategy": "single"}}, True),
    ({"default": {"device_list_strategy": ["volume-mounts"]}}, True),
    ({"default": {}, "mig": {"mig_strategy": "mixed"}}, True),
])
def test_sys_admin_only_for_mig_or_volume_mounts(configs, needed):
    assert dp.device_plugin_needs_sys_admin(configs) is needed


# ---- expected allocatable ---------------------------------------------------------

@pytest.mark.parametrize("facts, settings, resources", [
    (H100, {}, {"nvidia.com/gpu": 1}),
    (eight(H100), {}, {"nvidia.com/gpu": 8}),
    (eight(H100), {"time_slicing_replicas": 10}, {"nvidia.com/gpu": 80}),
    (eight(H100), {"time_slicing_replicas": 10, "time_slicing_rename": True}, {"nvidia.com/gpu.shared": 80}),
    # MIG mode on but strategy none: the GPU is advertised whole.
    (H100_MIG, {}, {"nvidia.com/gpu": 1}),
    (H100_MIG, {"mig_strategy": "mixed"},
     {"nvidia.com/mig-3g.40gb": 1, "nvidia.com/mig-2g.20gb": 1, "nvidia.com/mig-1g.10gb": 2}),
    (H100_MIG, {"mig_strategy": "mixed", "time_slicing_replicas": 2,
                "time_slicing_resources": ["nvidia.com/mig-1g.10gb"]},
     {"nvidia.com/mig-3g.40gb": 1, "nvidia.com/mig-2g.20gb": 1, "nvidia.com/mig-1g.10gb": 4}),
    (A100_MIG, {"mig_strategy": "single"}, {"nvidia.com/gpu": 4}),
    (H100, {"mig_strategy": "single"}, {"nvidia.com/gpu": 1}),
])
def test_expected_resources(facts, settings, resources):
    expected = dp.device_plugin_expected(facts, settings)
    assert expected["problem"] is None
    assert expected["resources"] == resources


@pytest.mark.parametrize("facts, settings, problem", [
    (H100_MIG, {"mig_strategy": "single"},
     "MIG strategy single needs one MIG profile; the node has nvidia.com/mig-1g.10gb, nvidia.com/mig-2g.20gb, "
     "nvidia.com/mig-3g.40gb"),
    (A100_MIG, {"mig_strategy": "mixed"}, "the facts do not name the profile of 4 MIG device(s)"),
    ({"state": "driver_not_loaded", "message": "no module"}, {}, "NVIDIA state driver_not_loaded: no module"),
    (None, {}, "NVIDIA state not gathered: no facts"),
])
def test_expected_says_when_it_cannot_tell(facts, settings, problem):
    assert dp.device_plugin_expected(facts, settings)["problem"].startswith(problem)


def test_single_refuses_a_node_with_mig_and_whole_gpus():
    mixed_node = eight(H100)
    mixed_node["gpus"][0] = copy.deepcopy(H100_MIG["gpus"][0])
    assert dp.device_plugin_expected(mixed_node, {"mig_strategy": "single"})["problem"] == (
        "MIG strategy single needs every GPU in MIG mode; 7 of 8 are not")
    assert dp.device_plugin_expected(mixed_node, {"mig_strategy": "mixed"})["resources"]["nvidia.com/gpu"] == 7


# ---- the check against the API's Nodes ------------------------------------------------

def api_node(name, allocatable, labels=None):
    return {"metadata": {"name": name, "labels": labels or {}},
            "status": {"allocatable": dict({"cpu": "64", "memory": "1Ti"}, **allocatable)}}


def test_check_names_short_nodes_with_both_numbers():
    hosts = [{"host": "dgx-01.example", "node": "dgx-01", "facts": eight(H100)},
             {"host": "dgx-02.example", "node": "dgx-02", "facts": eight(H100)},
             {"host": "mig-01.example", "node": "mig-01", "facts": H100_MIG},
             {"host": "lost.example", "node": "lost", "facts": H100}]
    nodes = [api_node("dgx-01", {"nvidia.com/gpu": "8"}),
             api_node("dgx-02", {"nvidia.com/gpu": "6"}),
             api_node("mig-01", {"nvidia.com/mig-3g.40gb": "1", "nvidia.com/mig-2g.20gb": "1",
                                 "nvidia.com/mig-1g.10gb": "2"}, {"nvidia.com/device-plugin.config": "mig"})]
    configs = {"default": {}, "mig": {"mig_strategy": "mixed"}}
    rows = dp.device_plugin_check(nodes, hosts, configs)
    assert [(r["node"], r["ok"], r["config"]) for r in rows] == [
        ("dgx-01", True, "default"), ("dgx-02", False, "default"), ("mig-01", True, "mig"), ("lost", False, None)]
    assert rows[0]["message"] == "advertises nvidia.com/gpu=8"
    assert rows[1]["message"] == "advertises nvidia.com/gpu=6, its hardware gives 8 (8 GPUs)"
    assert rows[1]["advertised"] == {"nvidia.com/gpu": 6} and rows[1]["expected"] == {"nvidia.com/gpu": 8}
    assert rows[3]["message"] == ("not in the cluster (no Node named lost; if host lost.example joined under another "
                                  "name, set gpufleet_node_name)")
    # not waited for: the role's wait leaves out the rows marked missing
    assert [row.get("missing") for row in rows] == [None, None, None, True]


def test_check_reports_an_unknown_config_label_and_a_missing_resource():
    hosts = [{"host": "a", "node": "a", "facts": H100}, {"host": "b", "node": "b", "facts": H100}]
    nodes = [api_node("a", {"nvidia.com/gpu": "1"}, {"nvidia.com/device-plugin.config": "fast"}),
             api_node("b", {})]
    rows = dp.device_plugin_check(nodes, hosts, {"default": {"time_slicing_replicas": 2}, "slow": {}})
    assert rows[0]["message"] == ("the node's label nvidia.com/device-plugin.config=fast names no config "
                                  "(known: default, slow)")
    assert rows[1]["message"] == "advertises nvidia.com/gpu=0, its hardware gives 2 (1 GPU, time-slicing x2)"
    with pytest.raises(AnsibleFilterError, match="'1.5'"):
        dp.device_plugin_check([api_node("a", {"nvidia.com/gpu": "1.5"})], hosts[:1], {"default": {}})


def test_fleet_nodes_map_hosts_to_node_names_and_facts():
    hostvars = {"a.example": {"gpufleet_node_name": "a", "ansible_facts": {"nvidia": H100}},
                "b.example": {"ansible_facts": {}, "gpu_mig_resource": "nvidia.com/mig-1g.10gb"}}
    assert dp.fleet_nodes(["a.example", "b.example"], hostvars) == [
        {"host": "a.example", "node": "a", "facts": H100, "resource": None, "gather": False, "excluded": None},
        {"host": "b.example", "node": "b.example", "facts": None, "resource": "nvidia.com/mig-1g.10gb",
         "gather": True, "excluded": None}]


def test_fleet_nodes_leave_out_the_hosts_outside_the_limit_whatever_their_facts():
    hostvars = {"a": {"ansible_facts": {"nvidia": H100}}, "b": {"ansible_facts": {"nvidia": H100}}, "c": {}}
    rows = dp.fleet_nodes(["a", "b", "c"], hostvars, limit=["a", "kube-cp"])
    assert [(row["host"], row["facts"] is not None, row["gather"], row["excluded"]) for row in rows] == [
        ("a", True, False, None),
        ("b", False, False, "outside --limit, not contacted"),
        ("c", False, False, "outside --limit, not contacted")]


def test_fleet_nodes_take_cached_facts_for_stale_once_a_host_carries_this_runs_marker():
    # site.yml's first play registered __gpufleet_nvml_run on every host it ran on. a's read gave its
    # facts; b was unreachable and c's read failed, which register a result too, without facts; d
    # was outside that play. Their facts come from a fact cache: not believed. c and d are read again;
    # b, found unreachable in this run, is left out at once (before: every part tried it again).
    read = {"changed": False, "ansible_facts": {"nvidia": H100}}
    hostvars = {"a": {"ansible_facts": {"nvidia": H100}, "__gpufleet_nvml_run": read},
                "b": {"ansible_facts": {"nvidia": H100},
                      "__gpufleet_nvml_run": {"unreachable": True, "msg": "Failed to connect", "changed": False}},
                "c": {"ansible_facts": {"nvidia": H100}, "__gpufleet_nvml_run": {"failed": True, "msg": "boom"}},
                "d": {"ansible_facts": {"nvidia": H100}},
                # A role's own read, skipped because site.yml's play read them first.
                "e": {"ansible_facts": {"nvidia": H100}, "__gpufleet_nvml_run": read,
                      "__gpu_kubelet_nvml_run": {"skipped": True}},
                # Outside that play; a node role's comparison read them (the converged action), or did not.
                "f": {"ansible_facts": {"nvidia": H100}, "__gpu_kubelet_converged": dict(read, current=False)},
                "g": {"ansible_facts": {"nvidia": H100}, "__gpu_kubelet_converged": {"current": True}}}
    rows = dp.fleet_nodes(["a", "b", "c", "d", "e", "f", "g"], hostvars)
    assert [(row["host"], row["facts"] is not None, row["gather"]) for row in rows] == [
        ("a", True, False), ("b", False, False), ("c", False, True), ("d", False, True), ("e", True, False),
        ("f", True, False), ("g", False, True)]
    assert rows[1]["excluded"] == "unreachable in this run: Failed to connect"
    assert [row["excluded"] for row in rows if row["host"] != "b"] == [None] * 6


def test_fleet_nodes_name_the_hosts_that_could_not_be_read():
    hostvars = {"a": {"ansible_facts": {"nvidia": H100}}, "b": {}, "c": {}, "d": {}}
    gathered = [
        {"item": "a", "ansible_facts": {"nvidia": H100}, "changed": False},
        {"item": "b", "unreachable": True, "msg": "Failed to connect to the host via ssh: timed out\nmore"},
        {"item": "c", "failed": False, "msg": "MODULE FAILURE: python3 not found"},
        {"item": "d", "skipped": True}]
    rows = dp.fleet_nodes(["a", "b", "c", "d"], hostvars, gathered=gathered)
    assert [(row["host"], row["facts"] is not None, row["gather"], row["excluded"]) for row in rows] == [
        ("a", True, False, None),
        ("b", False, False, "unreachable (Failed to connect to the host via ssh: timed out)"),
        ("c", False, False, "its NVIDIA facts could not be read (MODULE FAILURE: python3 not found)"),
        ("d", False, False, "its NVIDIA facts were not read")]


def test_device_plugin_check_names_an_excluded_host_without_judging_it():
    rows = dp.device_plugin_check([], [{"host": "b", "node": "b", "facts": None, "excluded": "outside --limit, not contacted"}],
                                  {"default": {}})
    assert rows[0]["ok"] is False and rows[0]["excluded"] == "outside --limit, not contacted"
    assert rows[0]["message"] == "not checked: outside --limit, not contacted"


@pytest.mark.parametrize("limit, pattern", [
    (None, None), ("", None), ("kube_control_plane,gpu-a", "kube_control_plane,gpu-a"),
    ("gpu_nodes:!gpu-b", "gpu_nodes,!gpu-b"), ("~gpu-[ab]", "~gpu-[ab]"), ("gpu_nodes[0:1]", "gpu_nodes[0:1]")])
def test_limit_pattern_keeps_host_patterns(limit, pattern):
    assert dp.limit_pattern(limit) == pattern


def test_limit_pattern_reads_a_retry_file(tmp_path):
    retry = tmp_path / "site.retry"
    retry.write_text("gpu-a\n\ngpu-c\n")
    assert dp.limit_pattern("kube_control_plane,@%s" % retry) == "kube_control_plane,gpu-a,gpu-c"
    # Without a comma ansible-core splits on colons: --limit @site.retry:kube_control_plane.
    assert dp.limit_pattern("@%s:kube_control_plane" % retry) == "gpu-a,gpu-c,kube_control_plane"
    with pytest.raises(AnsibleFilterError, match="cannot read the --limit file .*missing.retry"):
        dp.limit_pattern("@%s" % (tmp_path / "missing.retry"))


# ---- rollout --------------------------------------------------------------------

def daemonset(generation=2, observed=2, desired=3, updated=3, available=3, unavailable=0, ready=3):
    return {"metadata": {"generation": generation},
            "status": {"observedGeneration": observed, "desiredNumberScheduled": desired,
                       "updatedNumberScheduled": updated, "numberAvailable": available,
                       "numberUnavailable": unavailable, "numberReady": ready}}


@pytest.mark.parametrize("ds, done", [
    (daemonset(), True),
    (daemonset(observed=1), False),
    (daemonset(updated=2), False),
    (daemonset(available=2, unavailable=1), False),
    (daemonset(desired=0, updated=0, available=0), True),
    ({}, False),
])
def test_rollout(ds, done):
    assert dp.daemonset_rolled_out(ds) is done


def test_status_words_and_pods_not_ready():
    assert dp.daemonset_status_words(daemonset(updated=2, available=1, ready=1)["status"]) == (
        "3 desired, 2 updated, 1 ready, 1 available")
    pods = [
        {"metadata": {"name": "ok"}, "spec": {"nodeName": "n1"},
         "status": {"phase": "Running", "conditions": [{"type": "Ready", "status": "True"}]}},
        {"metadata": {"name": "crash"}, "spec": {"nodeName": "n2"},
         "status": {"phase": "Running", "conditions": [{"type": "Ready", "status": "False"}],
                    "containerStatuses": [{"name": "nvidia-device-plugin", "state": {"waiting": {
                        "reason": "CrashLoopBackOff", "message": "back-off 5m0s"}}}]}},
        {"metadata": {"name": "pending"}, "spec": {},
         "status": {"phase": "Pending", "conditions": [{"type": "PodScheduled", "status": "False",
                                                       "message": "0/2 nodes are available"}]}},
    ]
    assert dp.pods_not_ready(pods) == [
        "crash on n2: Running, nvidia-device-plugin waiting CrashLoopBackOff: back-off 5m0s",
        "pending on no node: Pending, unschedulable: 0/2 nodes are available",
    ]


def test_pods_not_ready_say_why_a_crash_looping_plugin_crashed():
    log = ("I Starting FS watcher.\nI Loading configuration.\n"
           "E failed to initialize NVML: ERROR_LIBRARY_NOT_FOUND\n"
           "E If this is a GPU node, did you configure the NVIDIA Container Toolkit?\n")
    pods = [{"metadata": {"name": "crash"}, "spec": {"nodeName": "n2"},
             "status": {"phase": "Running", "conditions": [{"type": "Ready", "status": "False"}],
                        "containerStatuses": [{
                            "name": "nvidia-device-plugin", "restartCount": 4,
                            "state": {"waiting": {"reason": "CrashLoopBackOff", "message": "back-off 1m20s"}},
                            "lastState": {"terminated": {"exitCode": 1, "reason": "Error", "message": log}}}]}},
            {"metadata": {"name": "oom"}, "spec": {"nodeName": "n3"},
             "status": {"phase": "Running", "conditions": [{"type": "Ready", "status": "False"}],
                        "containerStatuses": [{
                            "name": "nvidia-device-plugin", "restartCount": 1, "state": {"running": {}},
                            "lastState": {"terminated": {"exitCode": 137, "reason": "OOMKilled"}}}]}}]
    assert dp.pods_not_ready(pods) == [
        "crash on n2: Running, nvidia-device-plugin waiting CrashLoopBackOff: back-off 1m20s, nvidia-device-plugin "
        "last exit code 1 (Error, 4 restarts): I Loading configuration. / E failed to initialize NVML: "
        "ERROR_LIBRARY_NOT_FOUND / E If this is a GPU node, did you configure the NVIDIA Container Toolkit?",
        "oom on n3: Running, nvidia-device-plugin last exit code 137 (OOMKilled, 1 restarts)",
    ]
    # Between two crashes the container runs and the pod is Ready; it is named all the same. A pod
    # whose container once ended cleanly (exit 0) and is Ready is not.
    between = copy.deepcopy(pods[0])
    between["status"]["conditions"] = [{"type": "Ready", "status": "True"}]
    between["status"]["containerStatuses"][0]["state"] = {"running": {"startedAt": "2026-11-27T12:00:00Z"}}
    clean = copy.deepcopy(between)
    clean["metadata"]["name"] = "clean"
    clean["status"]["containerStatuses"][0]["lastState"]["terminated"]["exitCode"] = 0
    assert dp.pods_not_ready([between, clean]) == [
        "crash on n2: CrashLoopBackOff (running again between two restarts), nvidia-device-plugin last exit code 1 "
        "(Error, 4 restarts): "
        "I Loading configuration. / E failed to initialize NVML: ERROR_LIBRARY_NOT_FOUND / E If this is a GPU node, "
        "did you configure the NVIDIA Container Toolkit?"]


def test_extra_vars_strings_count_as_what_they_spell():
    # -e gpu_device_plugin_time_slicing_replicas=4 -e gpu_device_plugin_fail_on_init_error=false
    settings = {"time_slicing_replicas": "4", "fail_on_init_error": "false", "time_slicing_rename": "yes"}
    assert dp.device_plugin_settings_errors(settings) == []
    config = dp.device_plugin_config(settings)
    assert config["flags"]["failOnInitError"] is False
    assert config["sharing"]["timeSlicing"]["resources"] == [{"name": "nvidia.com/gpu", "replicas": 4}]
    assert config["sharing"]["timeSlicing"]["renameByDefault"] is True
    assert dp.device_plugin_settings_errors({"time_slicing_replicas": "four", "fail_on_init_error": "maybe"}, "x") == [
        "x.time_slicing_replicas is 'four'; give a whole number, 1 (no sharing) or more",
        "x.fail_on_init_error is 'maybe'; give true or false"]


def test_a_config_label_is_ignored_without_per_node_configs():
    hosts = [{"host": "a", "node": "a", "facts": H100}]
    nodes = [api_node("a", {"nvidia.com/gpu": "1"}, {"nvidia.com/device-plugin.config": "left-over"})]
    (row,) = dp.device_plugin_check(nodes, hosts, {"default": {}})
    assert row["ok"] and row["config"] == "default"


def plugin_daemonset(namespace, name, image, **labels):
    return {"metadata": {"namespace": namespace, "name": name, "labels": labels},
            "spec": {"template": {"spec": {"containers": [{"name": "c", "image": image}]}}}}


def test_other_device_plugins_are_named():
    ours = plugin_daemonset("nvidia-device-plugin", "nvidia-device-plugin", "nvcr.io/nvidia/k8s-device-plugin:v0.20.1",
                            **{"app.kubernetes.io/managed-by": "gpufleet.nvidia"})
    chart = plugin_daemonset("nvidia-device-plugin", "nvidia-device-plugin", "nvcr.io/nvidia/k8s-device-plugin:v0.17.1",
                             **{"app.kubernetes.io/managed-by": "Helm",
                                "app.kubernetes.io/instance": "nvidia-device-plugin"})
    operator = plugin_daemonset("gpu-operator", "nvidia-device-plugin-daemonset",
                                "nvcr.io/nvidia/k8s-device-plugin:v0.17.0-ubi9")
    unrelated = plugin_daemonset("kube-system", "kube-proxy", "registry.k8s.io/kube-proxy:v1.31.0")
    everything = [ours, chart, operator, unrelated]
    assert dp.device_plugin_others(everything, "manifests", "nvidia-device-plugin") == [
        "nvidia-device-plugin/nvidia-device-plugin (nvcr.io/nvidia/k8s-device-plugin:v0.17.1)",
        "gpu-operator/nvidia-device-plugin-daemonset (nvcr.io/nvidia/k8s-device-plugin:v0.17.0-ubi9)"]
    assert dp.device_plugin_others(everything, "helm", "nvidia-device-plugin") == [
        "nvidia-device-plugin/nvidia-device-plugin (nvcr.io/nvidia/k8s-device-plugin:v0.20.1)",
        "gpu-operator/nvidia-device-plugin-daemonset (nvcr.io/nvidia/k8s-device-plugin:v0.17.0-ubi9)"]
    assert dp.device_plugin_others([ours, unrelated]) == []


# DaemonSets as NVIDIA's chart (templates/daemonset-*.yml of NVIDIA/k8s-device-plugin v0.17-v0.20), its static
# manifest and the GPU Operator (assets/state-device-plugin, assets/gpu-feature-discovery) lay them out. The one
# image holds nvidia-device-plugin (its ENTRYPOINT), gpu-feature-discovery, mps-control-daemon and config-manager.
CHART_LABELS = {"app.kubernetes.io/name": "nvidia-device-plugin", "app.kubernetes.io/instance": "nvidia-device-plugin",
                "app.kubernetes.io/managed-by": "Helm", "helm.sh/chart": "nvidia-device-plugin-0.17.1"}
IMAGE = "nvcr.io/nvidia/k8s-device-plugin:v0.17.1"
PLUGIN_SOCKETS = {"name": "kubelet-device-plugins-dir", "mountPath": "/var/lib/kubelet/device-plugins"}


def container(name, command=None, args=None, mounts=(), image=IMAGE):
    body = {"name": name, "image": image, "volumeMounts": list(mounts)}
    if command is not None:
        body["command"] = command
    if args is not None:
        body["args"] = args
    return body


def config_manager(name):
    return container(name, ["config-manager"], mounts=[{"name": "config", "mountPath": "/config"}])


def real_daemonset(namespace, name, containers, init=(), labels=None):
    return {"apiVersion": "apps/v1", "kind": "DaemonSet",
            "metadata": {"namespace": namespace, "name": name, "labels": labels or {}},
            "spec": {"template": {"spec": {"initContainers": list(init), "containers": containers}}}}


CHART_PLUGIN = real_daemonset("gpu", "nvidia-device-plugin", [
    config_manager("nvidia-device-plugin-sidecar"),
    container("nvidia-device-plugin-ctr", ["nvidia-device-plugin"], mounts=[PLUGIN_SOCKETS])],
    init=[config_manager("nvidia-device-plugin-init")], labels=CHART_LABELS)
CHART_GFD = real_daemonset("gpu", "nvidia-device-plugin-gpu-feature-discovery", [
    config_manager("gpu-feature-discovery-sidecar"),
    container("gpu-feature-discovery-ctr", ["gpu-feature-discovery"],
              mounts=[{"name": "output-dir", "mountPath": "/etc/kubernetes/node-feature-discovery/features.d"}])],
    init=[config_manager("gpu-feature-discovery-init")], labels=CHART_LABELS)
CHART_MPS = real_daemonset("gpu", "nvidia-device-plugin-mps-control-daemon", [
    container("mps-control-daemon-ctr", ["mps-control-daemon"], mounts=[{"name": "mps-root", "mountPath": "/mps"}])],
    init=[container("mps-control-daemon-mounts", ["mps-control-daemon", "mount-shm"])], labels=CHART_LABELS)
# gpu-feature-discovery alone, from the same chart with devicePlugin.enabled=false (its own release).
GFD_ALONE = real_daemonset("gpu-feature-discovery", "gfd-gpu-feature-discovery", [
    container("gpu-feature-discovery-ctr", ["gpu-feature-discovery"])],
    labels=dict(CHART_LABELS, **{"app.kubernetes.io/instance": "gfd"}))
# NVIDIA's static manifest: no command, so the image's ENTRYPOINT (nvidia-device-plugin) runs.
STATIC_PLUGIN = real_daemonset("kube-system", "nvidia-device-plugin-daemonset", [
    container("nvidia-device-plugin-ctr", mounts=[{"name": "device-plugin", "mountPath": "/var/lib/kubelet/device-plugins"}])])
STATIC_WITH_ARGS = real_daemonset("kube-system", "nvidia-device-plugin-compat", [
    container("nvidia-device-plugin-ctr", args=["--fail-on-init-error=false", "--pass-device-specs"])])
# The GPU Operator starts both through a script from a ConfigMap the API does not show here; the plugin's
# container is the one that mounts the kubelet's device-plugins folder, where a device plugin registers.
OPERATOR_PLUGIN = real_daemonset("gpu-operator", "nvidia-device-plugin-daemonset", [
    container("nvidia-device-plugin", ["/bin/sh", "-c"], ["/bin/entrypoint.sh"], image=IMAGE + "-ubi9",
              mounts=[{"name": "device-plugin", "mountPath": "/var/lib/kubelet/device-plugins/"}]),
    config_manager("config-manager")], init=[container("toolkit-validation", ["sh", "-c"], ["until [ -f x ]; do sleep 5; done"])])
OPERATOR_GFD = real_daemonset("gpu-operator", "gpu-feature-discovery", [
    container("gpu-feature-discovery", ["/bin/bash", "-c"], ["/bin/entrypoint.sh"], image=IMAGE + "-ubi9"),
    config_manager("config-manager")])
OPERATOR_MPS = real_daemonset("gpu-operator", "nvidia-device-plugin-mps-control-daemon", [
    container("mps-control-daemon-ctr", ["mps-control-daemon"], image=IMAGE + "-ubi9")])
# A mirror under another image name still runs the plugin; a shell that execs it too.
MIRRORED = real_daemonset("infra", "gpu-plugin", [
    container("plugin", ["/usr/bin/nvidia-device-plugin"], image="registry.example.internal/gpu/plugin:0.17.1")])
WRAPPED = real_daemonset("infra", "gpu-plugin-wrapped", [
    container("plugin", ["sh", "-c", "sleep 5; exec nvidia-device-plugin --fail-on-init-error=false"])])


@pytest.mark.parametrize("ds, plugin", [
    (CHART_PLUGIN, True), (CHART_GFD, False), (CHART_MPS, False), (GFD_ALONE, False),
    (STATIC_PLUGIN, True), (STATIC_WITH_ARGS, True), (OPERATOR_PLUGIN, True), (OPERATOR_GFD, False),
    (OPERATOR_MPS, False), (MIRRORED, True), (WRAPPED, True),
], ids=lambda value: value["metadata"]["name"] if isinstance(value, dict) else str(value))
def test_only_daemonsets_that_run_the_plugin_count_as_another_plugin(ds, plugin):
    named = dp.device_plugin_others([ds], "manifests", "nvidia-device-plugin")
    assert bool(named) is plugin, named
    if plugin:
        (image,) = [c["image"] for c in ds["spec"]["template"]["spec"]["containers"] if "config-manager" not in c.get("command", [])]
        assert named == ["%s/%s (%s)" % (ds["metadata"]["namespace"], ds["metadata"]["name"], image)]


def test_the_chart_release_gfd_and_mps_beside_our_helm_plugin_are_ours_or_harmless():
    release = [copy.deepcopy(ds) for ds in (CHART_PLUGIN, CHART_GFD, CHART_MPS, GFD_ALONE)]
    for ds in release[:3]:
        ds["metadata"]["namespace"] = "nvidia-device-plugin"
    assert dp.device_plugin_others(release, "helm", "nvidia-device-plugin") == []
    # The same release seen by the manifests method: only its plugin is in the way.
    assert dp.device_plugin_others(release, "manifests", "nvidia-device-plugin") == [
        "nvidia-device-plugin/nvidia-device-plugin (%s)" % IMAGE]


def test_drain_leftovers_are_only_pods_a_drain_should_evict():
    def p(name, phase="Running", owner=None, mirror=False):
        metadata = {"namespace": "ns", "name": name}
        if owner:
            metadata["ownerReferences"] = [{"kind": owner, "name": "x"}]
        if mirror:
            metadata["annotations"] = {"kubernetes.io/config.mirror": "abc"}
        return {"metadata": metadata, "status": {"phase": phase}}
    pods = [p("plugin", owner="DaemonSet"), p("kube-proxy", mirror=True), p("done", phase="Succeeded"),
            p("training", owner="ReplicaSet"), p("bare")]
    assert dp.drain_leftovers(pods) == ["ns/training", "ns/bare"]


# ---- the device list strategy against how the NVIDIA runtime treats NVIDIA_VISIBLE_DEVICES ---------

CDI_LEAK = ("gpu_device_plugin_device_list_strategy is ['cdi-cri'] while gpu_device_plugin_runtime_visible_devices_envvar "
            "is accept: the plugin passes devices through CDI only, and the NVIDIA runtime honours "
            "NVIDIA_VISIBLE_DEVICES from unprivileged containers, so an image that sets NVIDIA_VISIBLE_DEVICES=all sees "
            "every GPU of its node. Set gpu_container_toolkit_visible_devices_envvar: ignore on the GPU nodes and "
            "gpu_device_plugin_runtime_visible_devices_envvar: ignore here, or add envvar to the strategies")


@pytest.mark.parametrize("settings, node_configs, runtime, errors", [
    # NVIDIA's defaults: envvar, and a runtime that honours it.
    ({}, {}, "accept", []),
    # CDI alone while the runtime honours the image's own NVIDIA_VISIBLE_DEVICES=all: every GPU leaks.
    ({"device_list_strategy": ["cdi-cri"]}, {}, "accept", [CDI_LEAK]),
    ({"device_list_strategy": ["cdi-annotations"]}, {}, "accept", [CDI_LEAK.replace("['cdi-cri']", "['cdi-annotations']")]),
    # With envvar (or volume-mounts) as well the plugin sets NVIDIA_VISIBLE_DEVICES itself, over the image's.
    ({"device_list_strategy": ["cdi-cri", "envvar"]}, {}, "accept", []),
    ({"device_list_strategy": ["cdi-cri", "volume-mounts"]}, {}, "accept", []),
    # The runtime ignores the variable: CDI is safe, envvar alone gives pods no GPU.
    ({"device_list_strategy": ["cdi-cri"]}, {}, "ignore", []),
    ({"device_list_strategy": ["cdi-annotations", "envvar"]}, {}, "ignore", []),
    ({}, {}, "ignore", [
        "gpu_device_plugin_device_list_strategy is ['envvar'] while gpu_device_plugin_runtime_visible_devices_envvar "
        "is ignore: the NVIDIA runtime ignores the NVIDIA_VISIBLE_DEVICES the plugin passes to unprivileged "
        "containers, so GPU pods get no GPU. Use cdi-cri or cdi-annotations (with gpu_container_toolkit_cdi), or "
        "leave gpu_container_toolkit_visible_devices_envvar and gpu_device_plugin_runtime_visible_devices_envvar "
        "at accept"]),
    # A per-node config is named by its own variable.
    ({}, {"cdi-nodes": {"device_list_strategy": ["cdi-cri"]}}, "accept", [
        CDI_LEAK.replace("gpu_device_plugin_device_list_strategy", "gpu_device_plugin_node_configs['cdi-nodes']"
                         ".device_list_strategy")]),
    ({}, {}, "sometimes", ["gpu_device_plugin_runtime_visible_devices_envvar is 'sometimes'; use accept or ignore"]),
    # Without the runtime's setting the settings alone are checked, as before.
    ({"device_list_strategy": ["cdi-cri"]}, {}, None, []),
])
def test_the_strategy_must_agree_with_the_runtime(settings, node_configs, runtime, errors):
    assert dp.device_plugin_configs_errors(settings, node_configs, runtime_visible_devices_envvar=runtime) == errors


@pytest.mark.parametrize("configs, runtime, needed", [
    ({"default": {"device_list_strategy": ["cdi-cri"]}}, "accept", False),
    # The plugin's own container asks for every GPU with NVIDIA_VISIBLE_DEVICES=all; a runtime that ignores
    # the variable for unprivileged containers honours it for one with CAP_SYS_ADMIN.
    ({"default": {"device_list_strategy": ["cdi-cri"]}}, "ignore", True),
    ({"default": {}}, "accept", False),
])
def test_sys_admin_for_the_plugin_when_the_runtime_ignores_the_envvar(configs, runtime, needed):
    assert dp.device_plugin_needs_sys_admin(configs, runtime) is needed


def test_a_node_that_lost_a_gpu_is_expected_to_advertise_the_rest_and_named_when_short():
    # Four GPUs, the fourth lost (NVML answers GPU is lost): NVIDIA's plugin advertises the three that answer.
    lost = facts_of(readings.GPU_LOST)
    assert lost["state"] == "gpu_lost" and lost["health"]["status"] == "unhealthy"
    hosts = [{"host": "a", "node": "a", "facts": lost}, {"host": "b", "node": "b", "facts": lost},
             {"host": "c", "node": "c", "facts": eight(H100)}]
    nodes = [api_node("a", {"nvidia.com/gpu": "3"}), api_node("b", {"nvidia.com/gpu": "1"}),
             api_node("c", {"nvidia.com/gpu": "7"})]
    rows = dp.device_plugin_check(nodes, hosts, {"default": {}})
    assert [(r["node"], r["ok"], r["unhealthy"]) for r in rows] == [
        ("a", True, False), ("b", False, True), ("c", False, False)]
    assert rows[0]["expected"] == {"nvidia.com/gpu": 3}
    assert rows[1]["message"] == ("unhealthy (gpu_lost), not checked: advertises nvidia.com/gpu=1, "
                                  "its hardware gives 3 (3 GPUs)")
    # A healthy node that falls short is still a failure.
    assert rows[2]["message"] == "advertises nvidia.com/gpu=7, its hardware gives 8 (8 GPUs)"


def test_a_node_unhealthy_only_for_a_pending_row_remap_that_falls_short_still_fails():
    facts = copy.deepcopy(H100)
    facts["health"] = {"status": "unhealthy", "problems": [
        {"code": "row_remap_pending", "pci_address": "0000:00:09.0", "gpu_index": 0, "message": "pending"}]}
    (row,) = dp.device_plugin_check([api_node("a", {})], [{"host": "a", "node": "a", "facts": facts}], {"default": {}})
    assert (row["ok"], row["unhealthy"]) == (False, False)
    assert row["message"] == "advertises nvidia.com/gpu=0, its hardware gives 1 (1 GPU)"


def test_check_leaves_out_a_node_on_the_dra_path():
    hosts = [{"host": "a", "node": "a", "facts": H100}, {"host": "b", "node": "b", "facts": H100}]
    nodes = [api_node("a", {}, {"nvidia.com/dra-kubelet-plugin": "true"}),
             api_node("b", {}, {"nvidia.com/dra-kubelet-plugin": "false"})]
    rows = dp.device_plugin_check(nodes, hosts, {"default": {}}, dra_label="nvidia.com/dra-kubelet-plugin")
    assert rows[0]["excluded"] == "on the DRA path (nvidia.com/dra-kubelet-plugin=true)"
    assert rows[0]["message"] == ("not checked: on the DRA path (nvidia.com/dra-kubelet-plugin=true), its GPUs are "
                                  "the DRA driver's")
    assert "excluded" not in rows[1] and not rows[1]["ok"]


def test_a_daemonset_whose_selector_would_change_is_named():
    rendered = [{"kind": "ConfigMap", "metadata": {"name": "c", "namespace": "nvidia-device-plugin"}},
                {"kind": "DaemonSet", "metadata": {"name": "nvidia-device-plugin", "namespace": "nvidia-device-plugin"},
                 "spec": {"selector": {"matchLabels": {"app.kubernetes.io/name": "nvidia-device-plugin"}}}}]
    older = {"metadata": {"name": "nvidia-device-plugin", "namespace": "nvidia-device-plugin"},
             "spec": {"selector": {"matchLabels": {"name": "nvidia-device-plugin-ds"}}}}
    same = {"metadata": {"name": "nvidia-device-plugin", "namespace": "nvidia-device-plugin"},
            "spec": {"selector": {"matchLabels": {"app.kubernetes.io/name": "nvidia-device-plugin"}}}}
    elsewhere = dict(older, metadata={"name": "nvidia-device-plugin", "namespace": "kube-system"})
    assert dp.daemonset_selector_changes([older], rendered) == [
        'DaemonSet nvidia-device-plugin/nvidia-device-plugin has spec.selector '
        '{"matchLabels": {"name": "nvidia-device-plugin-ds"}}, the role\'s is '
        '{"matchLabels": {"app.kubernetes.io/name": "nvidia-device-plugin"}}']
    assert dp.daemonset_selector_changes([same, elsewhere], rendered) == []
    # an empty matchExpressions is no value to the API, nor here
    selector = dict(same["spec"]["selector"], matchExpressions=[])
    same_with_empty = {"metadata": same["metadata"], "spec": {"selector": selector}}
    assert dp.daemonset_selector_changes([same_with_empty], rendered) == []
    assert dp.daemonset_selector_changes([], rendered) == []


def test_check_failure_names_a_node_not_in_the_cluster_without_claiming_a_wait():
    hosts = [{"host": "dgx-01.example", "node": "dgx-01", "facts": eight(H100)},
             {"host": "dgx-02.example", "node": "dgx-02", "facts": eight(H100)}]
    # dgx-02's Node was deleted after its facts were read: the wait ends at its first look.
    rows = dp.device_plugin_check([api_node("dgx-01", {"nvidia.com/gpu": "8"})], hosts, {"default": {}})
    words = dp.device_plugin_check_failure(rows, 300)
    assert words == ("1 of 2 GPU hosts have no Node in the cluster as last read, so they were not waited for: "
                     "dgx-02.example: not in the cluster (no Node named dgx-02; if host dgx-02.example joined under "
                     "another name, set gpufleet_node_name)")
    assert "300" not in words and "advertise" not in words
    # One node short (waited for) and one gone: each said as it was.
    rows = dp.device_plugin_check([api_node("dgx-01", {"nvidia.com/gpu": "6"})], hosts, {"default": {}})
    words = dp.device_plugin_check_failure(rows, 300)
    assert words.startswith("1 of 2 GPU nodes do not advertise their GPUs after 300 s: dgx-01: advertises "
                            "nvidia.com/gpu=6, its hardware gives 8 (8 GPUs). 1 of 2 GPU hosts have no Node")
    # Nothing failing: no words.
    rows = dp.device_plugin_check([api_node("dgx-01", {"nvidia.com/gpu": "8"}), api_node("dgx-02", {"nvidia.com/gpu": "8"})],
                                  hosts, {"default": {}})
    assert dp.device_plugin_check_failure(rows, 300) == ""


# The DaemonSet controller's event when Pod Security admission refuses its pods (kube-controller-manager 1.37).
FAILED_CREATE = {
    "reason": "FailedCreate", "count": 14, "lastTimestamp": "2026-12-07T18:40:00Z",
    "message": 'Error creating: pods "nvidia-device-plugin-x2k4f" is forbidden: violates PodSecurity "restricted:latest": '
               'privileged (container "nvidia-device-plugin" must not set securityContext.privileged=true)'}


def test_daemonset_warnings_latest_first_and_once_each():
    older = dict(FAILED_CREATE, lastTimestamp="2026-12-07T18:00:00Z", count=1, reason="FailedCreate",
                 message="Error creating: quota exceeded")
    lines = dp.FilterModule().filters()["daemonset_warnings"]([older, FAILED_CREATE, dict(FAILED_CREATE)])
    assert lines == ['FailedCreate (14 times): ' + FAILED_CREATE["message"], "FailedCreate: Error creating: quota exceeded"]
    assert dp.FilterModule().filters()["daemonset_warnings"]([]) == []
    folded = dict(FAILED_CREATE, message="(combined from similar events): " + FAILED_CREATE["message"])
    assert dp.FilterModule().filters()["daemonset_warnings"]([folded]) == ['FailedCreate (14 times): ' + FAILED_CREATE["message"]]

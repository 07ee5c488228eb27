# Copyright: (c) 2026, gpufleet.nvidia contributors
# GNU General Public License v3.0+ (see COPYING or https://www.gnu.org/licenses/gpl-3.0.txt)
"""api_list: the path it asks for and what it leaves out of each object. Its requests run against the
simulated cluster in molecule gpu_cluster (the smoke test's and the device plugin's reads)."""

from __future__ import annotations

from ansible_collections.gpufleet.nvidia.plugins.module_utils import dotted
from ansible_collections.gpufleet.nvidia.plugins.modules.internal import api_list
from ansible_collections.gpufleet.nvidia.tests.unit.plugins.modules.module_runner import run_module


def test_collection_paths_of_core_and_group_resources_cluster_wide_and_namespaced():
    assert api_list.collection_path("v1", "nodes") == "/api/v1/nodes"
    assert api_list.collection_path("v1", "pods", "gpufleet-smoke-test") == "/api/v1/namespaces/gpufleet-smoke-test/pods"
    assert api_list.collection_path("apps/v1", "daemonsets", "kube-system") == "/apis/apps/v1/namespaces/kube-system/daemonsets"
    assert api_list.collection_path("resource.k8s.io/v1", "resourceslices") == "/apis/resource.k8s.io/v1/resourceslices"


def test_names_the_api_could_not_have_are_refused():
    for args in (("v1", "Pods"), ("a/b/c", "pods"), ("v1", "pods", "../nodes"), ("v1", "pods?watch=1"), ("", "pods")):
        assert api_list.collection_path(*args) is None


def test_dropped_fields_go_where_they_are_and_the_rest_stays():
    node = {"metadata": {"name": "gpu-a", "managedFields": [{"manager": "kubelet"}], "labels": {"a": "b"}},
            "status": {"images": [{"names": ["x"]}], "allocatable": {"nvidia.com/gpu": "8"}}}
    assert dotted.drop_paths(node, ["metadata.managedFields", "status.images", "spec.taints", "nowhere.at.all"]) == {
        "metadata": {"name": "gpu-a", "labels": {"a": "b"}}, "status": {"allocatable": {"nvidia.com/gpu": "8"}}}


POD = {
    "metadata": {"name": "train-0", "namespace": "ml", "labels": {"app": "train"}, "managedFields": [{"manager": "x"}]},
    "spec": {"nodeName": "gpu-a", "volumes": [{"name": "data"}],
             "containers": [{"name": "main", "image": "cuda", "resources": {"limits": {"nvidia.com/gpu": "2"}}},
                            {"name": "log", "image": "busybox"}],
             "initContainers": [{"name": "proxy", "restartPolicy": "Always", "resources": {"requests": {"cpu": "1"}}}],
             "tolerations": ["not-a-mapping"]},
    "status": {"phase": "Running", "conditions": [{"type": "Ready", "status": "True"}]},
}


def test_kept_paths_keep_only_those_fields_and_cut_each_entry_of_a_list_on_the_way():
    kept = dotted.keep_paths(POD, ["metadata.name", "metadata.labels", "spec.nodeName", "spec.containers.resources",
                                   "spec.initContainers.restartPolicy", "spec.tolerations.key", "status.phase",
                                   "status.phase.deeper", "spec.missing.path"])
    assert kept == {
        "metadata": {"name": "train-0", "labels": {"app": "train"}},
        # Every container stays, each with its resources only (one without has none to keep).
        "spec": {"nodeName": "gpu-a", "containers": [{"resources": {"limits": {"nvidia.com/gpu": "2"}}}, {}],
                 "initContainers": [{"restartPolicy": "Always"}],
                 # An entry that is no mapping stays as it is.
                 "tolerations": ["not-a-mapping"]},
        "status": {"phase": "Running"},
    }
    # The object read is not changed.
    assert POD["metadata"]["managedFields"] and POD["spec"]["volumes"]


def test_a_kept_field_keeps_all_below_it_whichever_path_comes_first():
    assert dotted.keep_paths(POD, ["status", "status.phase"]) == {"status": POD["status"]}
    assert dotted.keep_paths(POD, ["status.phase", "status"]) == {"status": POD["status"]}
    assert dotted.keep_paths(POD, None) is POD
    assert dotted.keep_paths(POD, []) == {}


def test_a_bad_resource_is_named_before_any_request(capsys):
    result = run_module(api_list, {"resource": "Nodes"}, capsys)
    assert result["failed"] and "resource Nodes" in result["msg"] and result["requests"] == 0

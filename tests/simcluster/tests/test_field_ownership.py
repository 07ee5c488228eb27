"""Field ownership after an update (reference/using-api/server-side-apply/#field-management): the
fields a write changed are found in one walk of the old and the new object, which must name
exactly the leaf fields whose values differ, as reading each field of each object does.

Objects of the shapes the simulated kubelets and clients write: a Pod with its status conditions
and container statuses (lists keyed by type and name), a Node with taints and a finalizer set
list, each changed field by field, list item by list item, and at random."""

import copy
import random
import sys

import pytest

from sim_helpers import PACKAGE_ROOT

sys.path.insert(0, PACKAGE_ROOT)
from simcluster import merge  # noqa: E402  pylint: disable=wrong-import-position

POD = {
    "apiVersion": "v1", "kind": "Pod",
    "metadata": {"name": "smoke-gpu-node-0001", "namespace": "gpu-smoke", "labels": {"app": "smoke"},
                 "finalizers": ["example.com/keep"]},
    "spec": {"nodeName": "gpu-node-0001", "restartPolicy": "Never",
             "containers": [{"name": "smi", "image": "nvcr.io/nvidia/cuda:12.4.1-base-ubuntu22.04",
                             "command": ["nvidia-smi", "-L"],
                             "resources": {"limits": {"nvidia.com/gpu": "8"}},
                             "env": [{"name": "A", "value": "1"}, {"name": "B", "value": "2"}]}],
             "tolerations": [{"key": "nvidia.com/gpu", "operator": "Exists", "effect": "NoSchedule"}]},
    "status": {"phase": "Running", "qosClass": "BestEffort", "hostIP": "10.0.0.1",
               "conditions": [{"type": t, "status": "True", "lastProbeTime": None,
                               "lastTransitionTime": "2026-11-27T10:00:00Z"}
                              for t in ("PodReadyToStartContainers", "Initialized", "Ready", "ContainersReady",
                                        "PodScheduled")],
               "containerStatuses": [{"name": "smi", "ready": True, "restartCount": 0, "started": True,
                                      "image": "nvcr.io/nvidia/cuda:12.4.1-base-ubuntu22.04",
                                      "state": {"running": {"startedAt": "2026-11-27T10:00:01Z"}}}]},
}


def by_reading_each_field(tree, old, new):
    """The definition: every leaf path of the tree whose value differs between the two objects."""
    return {path for path in merge.leaf_paths(tree) if merge.value_at(old, path) != merge.value_at(new, path)}


def trees(obj):
    return [merge.field_set(obj), {"f:status": merge.field_set(obj["status"], ("status",), False)}]


def changes():
    """(name, changed pod) pairs: one field at a time, list items added, removed, reordered and edited."""
    out = []

    def change(name, edit):
        pod = copy.deepcopy(POD)
        edit(pod)
        out.append((name, pod))

    change("nothing", lambda pod: None)
    change("phase", lambda pod: pod["status"].update(phase="Succeeded"))
    change("one condition", lambda pod: pod["status"]["conditions"][2].update(status="False"))
    change("conditions reordered", lambda pod: pod["status"]["conditions"].reverse())
    change("condition removed", lambda pod: pod["status"]["conditions"].pop(1))
    change("condition added", lambda pod: pod["status"]["conditions"].append({"type": "DisruptionTarget",
                                                                              "status": "True"}))
    change("container state", lambda pod: pod["status"]["containerStatuses"][0].update(
        state={"terminated": {"exitCode": 0, "reason": "Completed"}}))
    change("container gone", lambda pod: pod["status"].update(containerStatuses=[]))
    change("status gone", lambda pod: pod.pop("status"))
    change("label", lambda pod: pod["metadata"]["labels"].update(app="other", extra="x"))
    change("finalizer set", lambda pod: pod["metadata"].update(finalizers=["example.com/other"]))
    change("env item", lambda pod: pod["spec"]["containers"][0]["env"][1].update(value="3"))
    change("env item removed", lambda pod: pod["spec"]["containers"][0]["env"].pop(0))
    change("toleration", lambda pod: pod["spec"]["tolerations"][0].update(effect="NoExecute"))
    change("a field set to null", lambda pod: pod["status"].update(hostIP=None))
    return out


@pytest.mark.parametrize("name, pod", changes(), ids=[name for name, dummy in changes()])
def test_the_changed_fields_are_those_whose_values_differ(name, pod):
    for old, new in ((POD, pod), (pod, POD)):
        for tree in trees(new) if "status" in new else [merge.field_set(new)]:
            assert merge.changed_leaves(tree, old, new) == by_reading_each_field(tree, old, new), name
    found = set().union(*(merge.changed_leaves(tree, POD, pod) for obj in (POD, pod)
                          for tree in (trees(obj) if "status" in obj else [merge.field_set(obj)])))
    # A keyed list in another order holds the same fields with the same values.
    assert bool(found) == (name not in ("nothing", "conditions reordered")), name


def test_random_edits_of_the_whole_object():
    rng = random.Random(20261127)
    leaves = sorted(merge.leaf_paths(merge.field_set(POD)) | merge.leaf_paths(trees(POD)[1]))
    for dummy in range(300):
        pod = copy.deepcopy(POD)
        for path in rng.sample(leaves, rng.randint(1, 4)):
            if path[-1] == ".":
                path = path[:-1]
            parent = merge.value_at(pod, path[:-1]) if len(path) > 1 else pod
            if isinstance(parent, dict) and path[-1].startswith("f:"):
                parent[path[-1][2:]] = rng.choice([None, "changed", 7, {"x": 1}, []])
        for old, new in ((POD, pod), (pod, POD)):
            for tree in [merge.field_set(new)] + ([trees(new)[1]] if isinstance(new.get("status"), dict) else []):
                assert merge.changed_leaves(tree, old, new) == by_reading_each_field(tree, old, new)


def test_an_update_gives_the_writer_only_the_fields_it_changed():
    old = copy.deepcopy(POD)
    merge.track_update({}, old, "kubelet", "v1", "2026-11-27T10:00:00Z", subresource="status")
    new = copy.deepcopy(old)
    new["status"]["phase"] = "Succeeded"
    new["status"]["conditions"][2]["status"] = "False"
    merge.track_update(old, new, "other-writer", "v1", "2026-11-27T10:00:05Z", subresource="status")
    owners = {entry["manager"]: merge.leaf_paths(entry["fieldsV1"]) for entry in new["metadata"]["managedFields"]}
    # The item's own "." too: the item as a whole is not the same (kube-apiserver's managedFields name
    # it for the item a write changed).
    assert owners["other-writer"] == {("f:status", "f:phase"),
                                      ("f:status", "f:conditions", 'k:{"type":"Ready"}', "."),
                                      ("f:status", "f:conditions", 'k:{"type":"Ready"}', "f:status")}
    assert not owners["kubelet"] & owners["other-writer"]
    assert ("f:status", "f:hostIP") in owners["kubelet"]

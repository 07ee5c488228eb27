"""The simulated kubelets' pass visits only what may sync differently since the last one (the pods
and nodes written, the pods not yet steady): in every case here it must leave the cluster as a pass
over every pod and node would. Run in process, tick by tick, once each way."""

import copy
import sys
import time

import yaml

from sim_helpers import PACKAGE_ROOT

sys.path.insert(0, PACKAGE_ROOT)
from simcluster.cluster import Cluster  # noqa: E402  pylint: disable=wrong-import-position
from simcluster.controllers import NODES, PODS, Controllers  # noqa: E402  pylint: disable=wrong-import-position

BASIC = PACKAGE_ROOT + "/tests/clusters/basic.yml"


def cluster(every_pod):
    with open(BASIC, encoding="utf-8") as handle:
        sim = Cluster(yaml.safe_load(handle))
    controllers = Controllers(sim)

    def tick(times=1):
        for dummy in range(times):
            if every_pod:
                controllers.kubelet_pods_written = None
            controllers.tick()
            time.sleep(0.03)
    tick()
    return sim, tick


def pod(name, node, command):
    return {"apiVersion": "v1", "kind": "Pod", "metadata": {"name": name, "namespace": "default"},
            "spec": {"nodeName": node, "restartPolicy": "Never",
                     "containers": [{"name": "main", "image": "registry.example/tools:1.0", "command": command}]}}


def phase(sim, name):
    obj = sim.store.peek(PODS, "default", name)
    states = [list((status.get("state") or {})) for status in (obj.get("status") or {}).get("containerStatuses") or []]
    return obj["status"].get("phase"), states


def a_node_named_before_it_joins(every_pod):
    sim, tick = cluster(every_pod)
    sim.internal_create(pod("early", "node-late", ["sleep", "infinity"]))
    tick(5)
    before = phase(sim, "early")
    node = copy.deepcopy(sim.store.peek(NODES, "", "node-a"))
    node["metadata"] = {"name": "node-late", "labels": {"kubernetes.io/hostname": "node-late"}}
    node["spec"] = {}
    sim.internal_create(node)
    tick(15)
    return before, phase(sim, "early")


def a_node_that_leaves_and_comes_back(every_pod):
    sim, tick = cluster(every_pod)
    sim.internal_create(pod("stays", "node-a", ["sleep", "infinity"]))
    tick(15)
    running = phase(sim, "stays")
    node = copy.deepcopy(sim.store.peek(NODES, "", "node-a"))
    sim.store.delete(NODES, "", "node-a")
    tick(3)
    node["metadata"] = {"name": "node-a", "labels": node["metadata"].get("labels") or {}}
    sim.internal_create(node)
    tick(15)
    return running, phase(sim, "stays")


def test_a_pod_whose_node_joins_later_runs_once_it_does():
    assert a_node_named_before_it_joins(False) == a_node_named_before_it_joins(True)
    before, after = a_node_named_before_it_joins(False)
    assert before[1] == [] and after == ("Running", [["running"]])


def test_a_node_deleted_and_made_again_runs_its_pods_as_a_full_pass_does():
    assert a_node_that_leaves_and_comes_back(False) == a_node_that_leaves_and_comes_back(True)
    running, dummy = a_node_that_leaves_and_comes_back(False)
    assert running == ("Running", [["running"]])

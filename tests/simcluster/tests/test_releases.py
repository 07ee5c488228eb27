"""The releases the collection supports, each served as that release: /version, the node's
kubelet version, and the release's own schemas (kubernetes-validate's), so that a field a
release added is an unknown field to the release before it (PodSpec.schedulingGroup came in
1.36, PodSpec.evictionResponders in 1.37)."""

import json

import pytest
import yaml

RELEASES = ["1.35.2", "1.36.4", "1.37.0"]
ADDED = {"schedulingGroup": (1, 36), "evictionResponders": (1, 37)}


def cluster(version):
    return {"kubernetesVersion": version,
            "timing": {"tick": 0.02, "podStart": 0.05, "programRun": 0.05, "pluginRegister": 0.2,
                       "podShutdown": 0.05, "crashBackoff": 0.2},
            "nodes": [{"name": "node-a"}]}


@pytest.mark.parametrize("version", RELEASES)
def test_each_release_is_served_as_itself(make_simulator, version):
    sim = make_simulator(cluster(version))
    server = json.loads(sim.kubectl("version", "-o", "json").stdout)["serverVersion"]
    major, minor = version.split(".")[:2]
    assert server["gitVersion"] == f"v{version}"
    assert (server["major"], server["minor"]) == (major, minor)
    node = sim.kubectl_json("get", "node", "node-a")
    assert node["status"]["nodeInfo"]["kubeletVersion"] == f"v{version}"
    # The fields later releases added are unknown fields here, known from their release on.
    pod = {"apiVersion": "v1", "kind": "Pod", "metadata": {"name": "fields"},
           "spec": {"containers": [{"name": "c", "image": "registry.example/x:1"}],
                    "schedulingGroup": {}, "evictionResponders": []}}
    answer = sim.kubectl("create", "--dry-run=server", "--validate=warn", "-f", "-", stdin=yaml.safe_dump(pod))
    for field, since in ADDED.items():
        unknown = f'Warning: unknown field "spec.{field}"' in answer.stderr
        assert unknown == ((int(major), int(minor)) < since), (field, answer.stderr)

"""testcluster.py's own promises beyond the GPU side: the oldest supported Kubernetes in place of
the newest, users bound only to their part's ClusterRole (rbac/clusterroles.yaml), and /version
answered as by an older release (the server-version fault)."""

import json
import pathlib
import subprocess
import sys

import pytest
import yaml
from kubernetes import client, config
from kubernetes.client.rest import ApiException

from test_controlplane import VERSIONS

HERE = pathlib.Path(__file__).resolve().parent
TESTCLUSTER = HERE.parent / "testcluster.py"
CLUSTER = {"users": ["gpu_smoke_test", "nobody"], "nodes": [{"name": "gpu-y", "labels": {"nvidia.com/gpu.present": "true"}}]}


@pytest.fixture(scope="module")
def cluster(tmp_path_factory):
    state = tmp_path_factory.mktemp("testcluster-oldest")
    cluster_file = state / "cluster.yml"
    cluster_file.write_text(yaml.safe_dump(CLUSTER))
    kubeconfig = state / "kubeconfig"
    subprocess.run([sys.executable, str(TESTCLUSTER), "start", "--cluster", str(cluster_file), "--kubeconfig",
                    str(kubeconfig), "--state", str(state / "run"), "--ttl", "600", "--kubernetes", "oldest"], check=True)
    try:
        yield state / "run", kubeconfig
    finally:
        subprocess.run([sys.executable, str(TESTCLUSTER), "stop", "--state", str(state / "run")], check=True)


def api_of(path):
    return config.new_client_from_config(str(path))


def status_of(call):
    with pytest.raises(ApiException) as refused:
        call()
    return refused.value.status


def test_oldest_release_runs_in_place_of_the_newest(cluster):
    state, kubeconfig = cluster
    assert VERSIONS["KUBERNETES_OLDEST_VERSION"] != VERSIONS["KUBERNETES_VERSION"]
    assert client.VersionApi(api_of(kubeconfig)).get_code().git_version == VERSIONS["KUBERNETES_OLDEST_VERSION"]
    # the controller manager and scheduler are of the same release
    for name in ("kube-controller-manager", "kube-scheduler"):
        first_line = (state / "logs" / f"{name}.log").read_text().splitlines()[0]
        assert "/kubernetes-oldest/" in first_line, first_line


def test_a_part_user_holds_its_cluster_role_and_nothing_else(cluster):
    state, _kubeconfig = cluster
    smoke = client.CoreV1Api(api_of(state / "users" / "gpu_smoke_test.kubeconfig"))
    # rbac/clusterroles.yaml: gpu_smoke_test lists Nodes and pods in every namespace
    assert [node.metadata.name for node in smoke.list_node().items] == ["gpu-y"]
    smoke.list_pod_for_all_namespaces()
    # and may not write Nodes or read Secrets
    assert status_of(lambda: smoke.patch_node("gpu-y", {"metadata": {"labels": {"x": "y"}}})) == 403
    assert status_of(lambda: smoke.list_namespaced_secret("default")) == 403
    # a user whose name is no part of clusterroles.yaml gets no permission at all
    nobody = client.CoreV1Api(api_of(state / "users" / "nobody.kubeconfig"))
    assert status_of(nobody.list_node) == 403
    bindings = client.RbacAuthorizationV1Api(api_of(state / "direct" / "admin.kubeconfig")).list_cluster_role_binding()
    ours = {b.metadata.name: [s.name for s in b.subjects] for b in bindings.items if b.metadata.name.startswith("gpufleet-test:")}
    assert ours == {"gpufleet-test:gpu_smoke_test": ["gpu_smoke_test"]}


def test_server_version_fault_answers_as_an_older_release(cluster):
    state, kubeconfig = cluster

    def run(*args):
        return json.loads(subprocess.run([sys.executable, str(TESTCLUSTER), args[0], "--kubeconfig", str(kubeconfig),
                                          *args[1:]], check=True, capture_output=True, text=True).stdout)

    run("fault", "server-version", "git=v1.33.4")
    try:
        assert [f["type"] for f in run("faults")["faults"]] == ["server-version"]
        info = client.VersionApi(api_of(kubeconfig)).get_code()
        assert (info.git_version, info.major, info.minor) == ("v1.33.4", "1", "33")
        # the API server behind the proxy is unchanged
        assert client.VersionApi(api_of(state / "direct" / "admin.kubeconfig")).get_code().git_version \
            == VERSIONS["KUBERNETES_OLDEST_VERSION"]
    finally:
        assert run("faults", "--clear") == {"faults": []}
    assert client.VersionApi(api_of(kubeconfig)).get_code().git_version == VERSIONS["KUBERNETES_OLDEST_VERSION"]

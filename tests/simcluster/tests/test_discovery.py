"""Discovery: /version, /api, /apis, resource lists with subresources, kubectl api-resources and
the Python dynamic client's resource lookup (kubernetes.io/docs/reference/using-api/api-concepts/,
"Discovery API")."""

import json

import pytest
from kubernetes import client
from kubernetes.client.rest import ApiException

CLUSTER = "basic.yml"


def _raw(sim, path):
    return json.loads(sim.kubectl("get", "--raw", path).stdout)


def test_kubectl_version_reports_the_cluster_version(simulator):
    answer = json.loads(simulator.kubectl("version", "-o", "json").stdout)
    server = answer["serverVersion"]
    assert server["gitVersion"] == "v1.37.0"
    assert (server["major"], server["minor"]) == ("1", "37")
    assert server["platform"] == "linux/amd64"


def test_version_and_health_need_no_token(simulator):
    # system:public-info-viewer lets anyone read /version and the health checks.
    anonymous = client.Configuration()
    anonymous.host = simulator.api.configuration.host
    anonymous.ssl_ca_cert = simulator.api.configuration.ssl_ca_cert
    with client.ApiClient(anonymous) as api:
        assert client.VersionApi(api).get_code().git_version == "v1.37.0"
        with pytest.raises(ApiException) as denied:
            client.CoreV1Api(api).list_namespaced_pod("default")
        assert denied.value.status == 401
    anonymous.api_key = {"authorization": "Bearer wrong"}
    with client.ApiClient(anonymous) as api:
        with pytest.raises(ApiException) as denied:
            client.VersionApi(api).get_code()
        assert denied.value.status == 401


def test_api_and_apis_list_the_groups(simulator):
    api = _raw(simulator, "/api")
    assert api["kind"] == "APIVersions"
    assert api["versions"] == ["v1"]
    apis = _raw(simulator, "/apis")
    assert apis["kind"] == "APIGroupList"
    groups = {g["name"]: g for g in apis["groups"]}
    for name in ("apps", "policy", "scheduling.k8s.io", "node.k8s.io", "rbac.authorization.k8s.io",
                 "coordination.k8s.io"):
        assert name in groups, name
    assert groups["apps"]["preferredVersion"] == {"groupVersion": "apps/v1", "version": "v1"}
    assert _raw(simulator, "/apis/policy")["versions"][0]["groupVersion"] == "policy/v1"
    missing = simulator.kubectl("get", "--raw", "/apis/no.such.group/v1", check=False)
    assert missing.returncode != 0 and "NotFound" in missing.stderr


def test_resource_lists_carry_subresources(simulator):
    core = _raw(simulator, "/api/v1")
    assert core["kind"] == "APIResourceList" and core["groupVersion"] == "v1"
    by_name = {r["name"]: r for r in core["resources"]}
    assert by_name["pods"]["namespaced"] is True
    assert by_name["pods"]["kind"] == "Pod"
    assert "po" in by_name["pods"]["shortNames"]
    assert set(by_name["pods"]["verbs"]) >= {"create", "delete", "deletecollection", "get", "list", "patch",
                                             "update", "watch"}
    assert by_name["nodes"]["namespaced"] is False
    for sub in ("pods/status", "pods/log", "pods/eviction", "pods/binding", "nodes/status"):
        assert sub in by_name, sub
    eviction = by_name["pods/eviction"]
    assert (eviction["group"], eviction["version"], eviction["kind"]) == ("policy", "v1", "Eviction")
    assert eviction["verbs"] == ["create"]
    assert by_name["pods/log"]["kind"] == "Pod" and by_name["pods/log"]["verbs"] == ["get"]
    # Only subresources of another group or version name one (apiserver's GroupVersionKindProvider).
    assert "version" not in by_name["pods/log"] and "group" not in by_name["pods/log"]
    assert by_name["pods/binding"]["kind"] == "Binding" and "version" not in by_name["pods/binding"]
    assert set(by_name["pods/status"]["verbs"]) == {"get", "patch", "update"}
    apps = {r["name"]: r for r in _raw(simulator, "/apis/apps/v1")["resources"]}
    scale = apps["deployments/scale"]
    assert (scale["group"], scale["version"], scale["kind"]) == ("autoscaling", "v1", "Scale")
    assert "daemonsets/status" in apps


def test_kubectl_api_resources(simulator):
    out = simulator.kubectl("api-resources", "-o", "wide").stdout.splitlines()
    header = out[0].split()
    assert header[:5] == ["NAME", "SHORTNAMES", "APIVERSION", "NAMESPACED", "KIND"]
    rows = {line.split()[0]: line.split() for line in out[1:]}
    assert rows["pods"][1:5] == ["po", "v1", "true", "Pod"]
    assert rows["daemonsets"][1:5] == ["ds", "apps/v1", "true", "DaemonSet"]
    assert rows["poddisruptionbudgets"][1:5] == ["pdb", "policy/v1", "true", "PodDisruptionBudget"]
    assert rows["nodes"][3] == "false"
    # Subresources are not resources of their own in kubectl's list.
    assert not any("/" in name for name in rows)
    names = simulator.kubectl("api-resources", "--api-group=apps", "-o", "name").stdout.split()
    assert set(names) >= {"daemonsets.apps", "deployments.apps", "replicasets.apps", "controllerrevisions.apps"}
    namespaced = simulator.kubectl("api-resources", "--namespaced=false", "-o", "name").stdout.split()
    assert "nodes" in namespaced and "pods" not in namespaced


def test_dynamic_client_finds_resources_and_subresources(simulator):
    dyn = simulator.dynamic
    pods = dyn.resources.get(api_version="v1", kind="Pod")
    assert pods.name == "pods" and pods.namespaced
    assert {"status", "log", "eviction", "binding"} <= set(pods.subresources)
    eviction = pods.subresources["eviction"]
    assert eviction.kind == "Eviction"
    assert "create" in eviction.verbs
    ds = dyn.resources.get(api_version="apps/v1", kind="DaemonSet")
    assert ds.short_names == ["ds"]
    assert "status" in ds.subresources
    nodes = dyn.resources.get(api_version="v1", name="nodes")
    assert not nodes.namespaced
    listed = nodes.get()
    assert sorted(n.metadata.name for n in listed.items) == ["node-a", "node-b", "node-c"]

"""The test control plane as the collection's tests use it: the real kube-apiserver,
kube-controller-manager, kube-scheduler and etcd, kwok for the Nodes, started by
tests/controlplane/controlplane.py, and driven only through real clients (the kubernetes
Python client and kubectl). These tests check the launcher's set-up (versions, RBAC,
admission, the controllers that run, kwok's Nodes and pods), not Kubernetes itself."""

import json
import os
import pathlib
import shutil
import subprocess
import sys
import time

import pytest
from kubernetes import client, config
from kubernetes.client.rest import ApiException

HERE = pathlib.Path(__file__).resolve().parent
LAUNCHER = HERE.parent / "controlplane.py"
VERSIONS = dict(line.split("=", 1) for line in (HERE.parent / "versions.env").read_text().splitlines()
                if line and not line.startswith("#"))
KUBECTL = shutil.which("kubectl", path=os.path.dirname(sys.executable)) or "kubectl"
USER = "gpufleet-test-operator"


def wait_for(check, timeout=30.0, interval=0.1, what="condition"):
    deadline = time.monotonic() + timeout
    last = None
    while True:
        try:
            last = check()
        except ApiException as err:
            last = err
        if last and not isinstance(last, ApiException):
            return last
        if time.monotonic() > deadline:
            raise AssertionError(f"timed out after {timeout} s waiting for {what}; last value: {last!r}")
        time.sleep(interval)


@pytest.fixture(scope="module")
def plane(tmp_path_factory):
    state = tmp_path_factory.mktemp("controlplane")
    subprocess.run([sys.executable, str(LAUNCHER), "start", "--state", str(state), "--ttl", "900",
                    "--user", USER], check=True)
    try:
        yield state
    finally:
        subprocess.run([sys.executable, str(LAUNCHER), "stop", "--state", str(state)], check=True)


@pytest.fixture(scope="module")
def api(plane):
    return config.new_client_from_config(str(plane / "admin.kubeconfig"))


@pytest.fixture(scope="module")
def user_api(plane):
    return config.new_client_from_config(str(plane / "users" / f"{USER}.kubeconfig"))


def kubectl(plane, *args, kubeconfig=None, check=True):
    return subprocess.run([KUBECTL, "--kubeconfig", str(kubeconfig or plane / "admin.kubeconfig"), *args],
                          capture_output=True, text=True, check=check)


def fake_node(name, gpus=0):
    capacity = {"cpu": "32", "memory": "256Gi", "pods": "110"}
    if gpus:
        capacity["nvidia.com/gpu"] = str(gpus)
    return client.V1Node(
        metadata=client.V1ObjectMeta(name=name, annotations={"kwok.x-k8s.io/node": "fake"},
                                     labels={"kubernetes.io/hostname": name, "type": "kwok"}),
        status=client.V1NodeStatus(capacity=capacity, allocatable=capacity))


def test_version_is_the_pinned_release(api):
    info = client.VersionApi(api).get_code()
    assert info.git_version == VERSIONS["KUBERNETES_VERSION"]
    assert info.minor == VERSIONS["KUBERNETES_VERSION"].split(".")[1]


def test_every_component_reports_ready(plane):
    endpoints = json.loads((plane / "endpoints.json").read_text())
    assert set(endpoints["ready_seconds"]) == {"etcd", "kube-apiserver", "kube-controller-manager",
                                               "kube-scheduler", "kwok", "faultproxy", "default ServiceAccount"}
    out = kubectl(plane, "get", "--raw", "/readyz?verbose").stdout
    assert "readyz check passed" in out
    assert "[+]etcd ok" in out


def test_authorization_is_node_and_rbac(plane, api, user_api):
    """A user the run made, bound to nothing, is refused; a ClusterRole bound to it grants exactly
    what it lists."""
    with pytest.raises(ApiException) as refused:
        client.CoreV1Api(user_api).list_node()
    assert refused.value.status == 403
    assert f'User "{USER}" cannot list resource "nodes"' in json.loads(refused.value.body)["message"]

    rbac = client.RbacAuthorizationV1Api(api)
    rbac.create_cluster_role(client.V1ClusterRole(
        metadata=client.V1ObjectMeta(name="test-node-reader"),
        rules=[client.V1PolicyRule(api_groups=[""], resources=["nodes"], verbs=["list"])]))
    rbac.create_cluster_role_binding(client.V1ClusterRoleBinding(
        metadata=client.V1ObjectMeta(name="test-node-reader"),
        role_ref=client.V1RoleRef(api_group="rbac.authorization.k8s.io", kind="ClusterRole", name="test-node-reader"),
        subjects=[client.RbacV1Subject(api_group="rbac.authorization.k8s.io", kind="User", name=USER)]))
    wait_for(lambda: client.CoreV1Api(user_api).list_node() is not None, what="the binding to take effect")
    with pytest.raises(ApiException) as still_refused:
        client.CoreV1Api(user_api).patch_node("any", {"metadata": {"labels": {"a": "b"}}})
    assert still_refused.value.status == 403
    can = kubectl(plane, "auth", "can-i", "patch", "nodes", "--as", USER, check=False)
    assert can.stdout.strip() == "no"


def test_kwok_node_turns_ready_with_a_lease(api):
    core = client.CoreV1Api(api)
    core.create_node(fake_node("kwok-a", gpus=2))

    def ready():
        node = core.read_node("kwok-a")
        conditions = {c.type: c.status for c in node.status.conditions or []}
        return node if conditions.get("Ready") == "True" else None

    node = wait_for(ready, what="kwok-a Ready")
    assert node.status.allocatable["nvidia.com/gpu"] == "2"
    assert node.status.node_info.kubelet_version  # kwok reports a kubelet version
    lease = wait_for(lambda: client.CoordinationV1Api(api).read_namespaced_lease("kwok-a", "kube-node-lease"),
                     what="kwok-a's Lease")
    assert lease.spec.renew_time is not None
    assert lease.spec.lease_duration_seconds == 40


def test_scheduler_places_by_extended_resource(api):
    core = client.CoreV1Api(api)
    core.create_node(fake_node("kwok-cpu"))
    wait_for(lambda: any(c.type == "Ready" and c.status == "True"
                         for c in core.read_node("kwok-cpu").status.conditions or []), what="kwok-cpu Ready")
    pod = client.V1Pod(
        metadata=client.V1ObjectMeta(name="wants-gpu"),
        spec=client.V1PodSpec(containers=[client.V1Container(
            name="c", image="example.invalid/cuda:1",
            resources=client.V1ResourceRequirements(limits={"nvidia.com/gpu": "1"}))]))
    core.create_namespaced_pod("default", pod)
    placed = wait_for(lambda: (p := core.read_namespaced_pod("wants-gpu", "default")).status.phase == "Running" and p,
                      what="wants-gpu Running")
    assert placed.spec.node_name == "kwok-a"

    too_many = client.V1Pod(
        metadata=client.V1ObjectMeta(name="wants-nine"),
        spec=client.V1PodSpec(containers=[client.V1Container(
            name="c", image="example.invalid/cuda:1",
            resources=client.V1ResourceRequirements(limits={"nvidia.com/gpu": "9"}))]))
    core.create_namespaced_pod("default", too_many)

    def unschedulable():
        conditions = core.read_namespaced_pod("wants-nine", "default").status.conditions or []
        return next((c for c in conditions if c.type == "PodScheduled" and c.reason == "Unschedulable"), None)

    condition = wait_for(unschedulable, what="wants-nine Unschedulable")
    assert "Insufficient nvidia.com/gpu" in condition.message


def test_daemonset_controller_runs_a_pod_per_node(api):
    apps = client.AppsV1Api(api)
    labels = {"app": "per-node"}
    apps.create_namespaced_daemon_set("default", client.V1DaemonSet(
        metadata=client.V1ObjectMeta(name="per-node"),
        spec=client.V1DaemonSetSpec(
            selector=client.V1LabelSelector(match_labels=labels),
            template=client.V1PodTemplateSpec(
                metadata=client.V1ObjectMeta(labels=labels),
                spec=client.V1PodSpec(containers=[client.V1Container(name="c", image="example.invalid/x:1")])))))

    def all_ready():
        status = apps.read_namespaced_daemon_set("per-node", "default").status
        return status if status.desired_number_scheduled >= 2 and status.number_ready == status.desired_number_scheduled else None

    status = wait_for(all_ready, what="the DaemonSet's pods ready")
    assert status.desired_number_scheduled == 2


def test_eviction_refused_by_a_pod_disruption_budget(api):
    core = client.CoreV1Api(api)
    policy = client.PolicyV1Api(api)
    core.create_namespaced_pod("default", client.V1Pod(
        metadata=client.V1ObjectMeta(name="guarded", labels={"app": "guarded"}),
        spec=client.V1PodSpec(node_name="kwok-cpu", containers=[client.V1Container(name="c", image="example.invalid/x:1")])))
    wait_for(lambda: core.read_namespaced_pod("guarded", "default").status.phase == "Running", what="guarded Running")
    policy.create_namespaced_pod_disruption_budget("default", client.V1PodDisruptionBudget(
        metadata=client.V1ObjectMeta(name="guarded"),
        spec=client.V1PodDisruptionBudgetSpec(min_available=1,
                                              selector=client.V1LabelSelector(match_labels={"app": "guarded"}))))
    wait_for(lambda: (s := policy.read_namespaced_pod_disruption_budget("guarded", "default").status)
             and s.observed_generation and s.current_healthy == 1, what="the disruption controller's status")
    with pytest.raises(ApiException) as refused:
        core.create_namespaced_pod_eviction("guarded", "default", client.V1Eviction(
            metadata=client.V1ObjectMeta(name="guarded", namespace="default")))
    assert refused.value.status == 429
    assert "disruption budget" in json.loads(refused.value.body)["message"]


def test_namespace_with_a_finalizer_stays_terminating(api):
    core = client.CoreV1Api(api)
    core.create_namespace(client.V1Namespace(metadata=client.V1ObjectMeta(name="stuck")))
    core.create_namespaced_config_map("stuck", client.V1ConfigMap(
        metadata=client.V1ObjectMeta(name="held", finalizers=["example.com/hold"])))
    core.delete_namespace("stuck")

    def content_remaining():
        conditions = core.read_namespace("stuck").status.conditions or []
        return next((c for c in conditions if c.type == "NamespaceFinalizersRemaining" and c.status == "True"), None)

    condition = wait_for(content_remaining, what="the namespace controller's condition")
    assert "example.com/hold" in condition.message
    assert core.read_namespace("stuck").status.phase == "Terminating"
    with pytest.raises(ApiException) as refused:
        core.create_namespaced_config_map("stuck", client.V1ConfigMap(metadata=client.V1ObjectMeta(name="late")))
    assert refused.value.status == 403
    core.patch_namespaced_config_map("held", "stuck", {"metadata": {"finalizers": None}})
    wait_for(lambda: not core.list_namespace(field_selector="metadata.name=stuck").items, what="stuck gone")


def test_server_side_apply_conflict_names_the_other_manager(plane):
    def apply(manager, value):
        manifest = json.dumps({"apiVersion": "v1", "kind": "ConfigMap",
                               "metadata": {"name": "owned", "namespace": "default"}, "data": {"k": value}})
        return subprocess.run([KUBECTL, "--kubeconfig", str(plane / "admin.kubeconfig"), "apply", "--server-side",
                               f"--field-manager={manager}", "-f", "-"], input=manifest, capture_output=True,
                              text=True, check=False)

    assert apply("first", "one").returncode == 0
    assert apply("second", "one").returncode == 0  # the same value: shared, no conflict
    clash = apply("third", "two")
    assert clash.returncode != 0
    assert "conflict" in clash.stderr.lower() and '"first"' in clash.stderr and '"second"' in clash.stderr


def test_logs_through_the_api_server_reach_kwok(plane, api):
    """kubectl logs goes through the API server to the node's kubelet endpoint, which kwok serves;
    with no Logs configured for the pod kwok answers so, proving the path is wired."""
    out = kubectl(plane, "logs", "guarded", check=False)
    assert out.returncode != 0
    assert "no logs found" in (out.stderr + out.stdout)


def test_stop_leaves_no_process(tmp_path):
    state = tmp_path / "cp"
    subprocess.run([sys.executable, str(LAUNCHER), "start", "--state", str(state)], check=True)
    endpoints = json.loads((state / "endpoints.json").read_text())
    supervisor = endpoints["pid"]
    children = subprocess.run(["pgrep", "-P", str(supervisor)], capture_output=True, text=True, check=False).stdout.split()
    assert len(children) == 6
    subprocess.run([sys.executable, str(LAUNCHER), "stop", "--state", str(state)], check=True)
    for pid in [supervisor, *map(int, children)]:
        assert not pathlib.Path(f"/proc/{pid}").exists() or \
            pathlib.Path(f"/proc/{pid}/stat").read_text().split()[2] == "Z", f"process {pid} still runs"
    assert not (state / "endpoints.json").exists()


def test_a_component_that_dies_stops_the_rest(tmp_path):
    state = tmp_path / "cp"
    subprocess.run([sys.executable, str(LAUNCHER), "start", "--state", str(state)], check=True)
    endpoints = json.loads((state / "endpoints.json").read_text())
    supervisor = endpoints["pid"]
    children = subprocess.run(["pgrep", "-P", str(supervisor)], capture_output=True, text=True, check=False).stdout.split()
    scheduler = next(pid for pid in children
                     if "kube-scheduler" in pathlib.Path(f"/proc/{pid}/cmdline").read_bytes().decode(errors="replace"))
    os.kill(int(scheduler), 9)
    wait_for(lambda: not pathlib.Path(f"/proc/{supervisor}").exists()
             or pathlib.Path(f"/proc/{supervisor}/stat").read_text().split()[2] == "Z", timeout=40,
             what="the supervisor to stop")
    assert "kube-scheduler exited" in (state / "failed").read_text()
    subprocess.run([sys.executable, str(LAUNCHER), "stop", "--state", str(state)], check=True)


def test_fault_proxy_answers_the_chosen_request(plane, api):
    """A rule in faults.json makes the proxy answer matching requests with the error; the rest,
    and the same request once the rule is spent, reach the API server."""
    core = client.CoreV1Api(api)
    (plane / "faults.json").write_text(json.dumps(
        [{"code": 500, "count": 2, "verb": "GET", "path": "^/api/v1/nodes/kwok-a$"}]))
    core.list_node()  # another path: passed on
    for attempt in (1, 2):
        with pytest.raises(ApiException) as failed:
            core.read_node("kwok-a")
        assert json.loads((plane / "faults.json").read_text())[0]["hits"] == attempt
        assert failed.value.status == 500
        assert json.loads(failed.value.body)["reason"] == "InternalError"
    assert core.read_node("kwok-a").metadata.name == "kwok-a"
    assert json.loads((plane / "faults.json").read_text())[0]["hits"] == 2


def test_client_retries_a_503_with_retry_after_itself(plane, api):
    """The kubernetes Python client (urllib3) repeats a 503 or 429 that carries Retry-After
    before the caller sees it: a fault meant to reach a role needs no Retry-After, or more
    answers than the client's three retries."""
    core = client.CoreV1Api(api)
    (plane / "faults.json").write_text(json.dumps(
        [{"code": 503, "count": 1, "verb": "GET", "path": "^/api/v1/nodes/kwok-cpu$", "retryAfter": 1}]))
    started = time.monotonic()
    assert core.read_node("kwok-cpu").metadata.name == "kwok-cpu"
    assert time.monotonic() - started >= 1
    assert json.loads((plane / "faults.json").read_text())[0]["hits"] == 1


def test_watch_streams_through_the_proxy(api):
    from kubernetes import watch  # pylint: disable=import-outside-toplevel
    core = client.CoreV1Api(api)
    seen = []
    stream = watch.Watch()
    started = time.monotonic()
    for event in stream.stream(core.list_namespaced_config_map, "default", timeout_seconds=20):
        seen.append((event["type"], event["object"].metadata.name))
        if len(seen) == 1:
            core.create_namespaced_config_map("default", client.V1ConfigMap(metadata=client.V1ObjectMeta(name="watched")))
        if ("ADDED", "watched") in seen:
            stream.stop()
    assert ("ADDED", "watched") in seen
    assert time.monotonic() - started < 15


def test_proxy_counts_the_requests_it_passes(plane, api):
    core = client.CoreV1Api(api)
    url = api.configuration.host + "/gpufleet-test/v1/stats"
    api.call_api("DELETE", url).read()
    core.read_node("kwok-a")
    core.read_node("kwok-a")
    core.list_namespace()
    stats = json.loads(api.call_api("GET", url).read())
    assert stats["byPath"]["GET /api/v1/nodes/kwok-a"] == 2
    assert stats["byPath"]["GET /api/v1/namespaces"] == 1
    assert stats["requests"] == 3

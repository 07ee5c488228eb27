"""Real nodes (tests/realnode/realnode.py) on the real control plane: joined by kubeadm, their pods
run by containerd, and the failures only a kubelet and a runtime show, each beside a kwok Node
where the same pod passes (what the kwok-only tests could not see)."""

from __future__ import annotations

import json
import pathlib
import re
import secrets
import subprocess
import sys
import time

import pytest
from kubernetes import client, config, watch

HERE = pathlib.Path(__file__).resolve().parent
sys.path.insert(0, str(HERE.parent))
import realnode  # noqa: E402  pylint: disable=wrong-import-position

BUSYBOX = "localhost/gpufleet-test/busybox:1.37.0-glibc"
NEWEST, OLDEST, FAKE = "gpufleet-real-a", "gpufleet-real-b", "gpufleet-kwok-1"


@pytest.fixture(scope="module")
def cluster(tmp_path_factory):
    with realnode.control_plane(tmp_path_factory.mktemp("realnode") / "cp") as state:
        nodes = realnode.up(state, [NEWEST])
        nodes.update(realnode.up(state, [OLDEST], kubelet="oldest"))
        api = client.ApiClient(config.load_kube_config(config_file=str(state / "direct" / "admin.kubeconfig")) or None)
        core = client.CoreV1Api(api)
        core.create_node({"metadata": {"name": FAKE, "annotations": {"kwok.x-k8s.io/node": "fake"}}})
        yield {"state": state, "core": core, "api": api, "nodes": nodes}


def pod(name, node, command, **spec):
    container = {"name": "main", "image": spec.pop("image", BUSYBOX), "imagePullPolicy": spec.pop("pull", "Never"),
                 "command": ["sh", "-c", command]}
    return {"apiVersion": "v1", "kind": "Pod", "metadata": {"name": name},
            "spec": {"nodeName": node, "restartPolicy": spec.pop("restart", "Never"), "containers": [container],
                     "terminationGracePeriodSeconds": 1, **spec}}


def wait_for(read, test, timeout, what):
    deadline = time.monotonic() + timeout
    last = None
    while time.monotonic() < deadline:
        last = read()
        if test(last):
            return last
        time.sleep(0.5)
    raise AssertionError(f"{what} not seen in {timeout} s; last: {last}")


def status(core, name):
    return core.read_namespaced_pod(name, "default").status


def waiting_reason(pod_status):
    for container in pod_status.container_statuses or []:
        if container.state.waiting:
            return container.state.waiting.reason
    return None


def events(core, name):
    return [f"{e.reason}: {e.message}" for e in
            core.list_namespaced_event("default", field_selector=f"involvedObject.name={name}").items]


def node_shell(name, command):
    return realnode.node_exec(name, "sh", "-c", command).stdout


def test_nodes_joined_by_kubeadm(cluster):
    """Each node went through kubeadm's TLS bootstrap: a CSR from the bootstrap token, approved and
    signed by kube-controller-manager, and kubeadm's files on the node."""
    for name, version in ((NEWEST, "newest"), (OLDEST, "oldest")):
        info = cluster["nodes"][name]["status"]["nodeInfo"]
        expected = subprocess.run([realnode.KUBELETS[version], "--version"], capture_output=True, text=True,
                                  check=True).stdout.split()[-1]
        assert info["kubeletVersion"] == expected
        assert info["containerRuntimeVersion"].startswith("containerd://1.7.")
        # kubeadm 1.37 writes the runtime's socket into the kubelet's configuration file, where
        # older kubeadm put --container-runtime-endpoint into kubeadm-flags.env (left empty here)
        kubelet_config = node_shell(name, "cat /var/lib/kubelet/config.yaml")
        assert "cgroupDriver: cgroupfs" in kubelet_config
        assert "containerRuntimeEndpoint: unix:///run/containerd/containerd.sock" in kubelet_config
        assert node_shell(name, "cat /var/lib/kubelet/kubeadm-flags.env").startswith("KUBELET_KUBEADM_ARGS=")
        assert "/var/lib/kubelet/pki/kubelet-client-current.pem" in node_shell(name, "cat /etc/kubernetes/kubelet.conf")
    certificates = client.CertificatesV1Api(cluster["api"]).list_certificate_signing_request().items
    kubelet_csrs = [c for c in certificates if c.spec.signer_name == "kubernetes.io/kube-apiserver-client-kubelet"]
    assert len(kubelet_csrs) == 2
    for csr in kubelet_csrs:
        assert csr.spec.username.startswith("system:bootstrap:")
        assert {c.type for c in csr.status.conditions} == {"Approved"}
        assert csr.status.certificate


def test_pod_runs_in_containerd(cluster):
    """The pod's container really ran: containerd lists it and its output comes from the kubelet.
    kwok's Node takes the same pod to Succeeded without running anything."""
    core = cluster["core"]
    token = secrets.token_hex(8)
    for name, node in (("ran-real", NEWEST), ("ran-oldest", OLDEST), ("ran-kwok", FAKE)):
        core.create_namespaced_pod("default", pod(name, node, f"echo ran {token}; cat /var/run/secrets/kubernetes.io/serviceaccount/namespace"))
    for name, node in (("ran-real", NEWEST), ("ran-oldest", OLDEST)):
        done = wait_for(lambda name=name: status(core, name), lambda s: s.phase in ("Succeeded", "Failed"), 60, f"{name} done")
        assert done.phase == "Succeeded", events(core, name)
        assert core.read_namespaced_pod_log(name, "default").split() == ["ran", token, "default"]
        container_id = done.container_statuses[0].container_id
        assert container_id.startswith("containerd://")
        listed = node_shell(node, "ctr -n k8s.io containers ls -q").split()
        assert container_id.removeprefix("containerd://") in listed
    wait_for(lambda: status(core, "ran-kwok"), lambda s: s.phase in ("Running", "Succeeded"), 30, "kwok's pod")
    try:
        kwok_log = core.read_namespaced_pod_log("ran-kwok", "default")
    except client.exceptions.ApiException as err:  # kwok serves no log of a pod nobody wrote one for
        kwok_log = str(err.body)
    assert token not in kwok_log


def test_missing_runtime_handler(cluster):
    """A pod of a RuntimeClass whose handler containerd lacks (a node where gpu_container_toolkit
    never ran) never starts, with containerd's words in the kubelet's event; on kwok it runs."""
    core = cluster["core"]
    client.NodeV1Api(cluster["api"]).create_runtime_class({"metadata": {"name": "gpufleet-test-nvidia"}, "handler": "nvidia"})
    for name, node in (("handler-real", NEWEST), ("handler-kwok", FAKE)):
        core.create_namespaced_pod("default", pod(name, node, "sleep 30", runtimeClassName="gpufleet-test-nvidia"))
    seen = wait_for(lambda: events(core, "handler-real"), lambda e: any("FailedCreatePodSandBox" in x for x in e),
                    60, "the sandbox failure")
    assert any('no runtime for "nvidia" is configured' in x for x in seen), seen
    wait_for(lambda: status(core, "handler-kwok"), lambda s: s.phase == "Running", 30, "kwok's pod Running")


def test_image_not_pullable(cluster):
    """An image that no registry serves: the kubelet says ErrImagePull, then ImagePullBackOff."""
    core = cluster["core"]
    for name, node in (("pull-real", NEWEST), ("pull-kwok", FAKE)):
        core.create_namespaced_pod("default", pod(name, node, "true", image="registry.invalid/gpufleet/absent:1",
                                                  pull="IfNotPresent"))
    seen = wait_for(lambda: status(core, "pull-real"), lambda s: waiting_reason(s) in ("ErrImagePull", "ImagePullBackOff"),
                    90, "the pull failure")
    assert "registry.invalid/gpufleet/absent:1" in seen.container_statuses[0].state.waiting.message
    wait_for(lambda: status(core, "pull-kwok"), lambda s: s.phase == "Running", 30, "kwok's pod Running")


def test_crash_loop_back_off(cluster):
    """A container that exits 3, restarted by the kubelet with its own back-off: the waiting message
    names the back-off the kubelet chose; kwok neither runs nor restarts it."""
    core = cluster["core"]
    for name, node in (("crash-real", NEWEST), ("crash-kwok", FAKE)):
        core.create_namespaced_pod("default", pod(name, node, "exit 3", restart="Always"))
    # a watch sees every status the kubelet posts (the back-off's waiting state may last a second only)
    states = []
    for event in watch.Watch().stream(core.list_namespaced_pod, "default", field_selector="metadata.name=crash-real",
                                      timeout_seconds=120):
        container = (event["object"].status.container_statuses or [None])[0]
        if container is None:
            continue
        states.append((container.restart_count, container.state.waiting and container.state.waiting.reason))
        if container.state.waiting and container.state.waiting.reason == "CrashLoopBackOff":
            break
    else:
        raise AssertionError(f"no CrashLoopBackOff in 120 s: {states}")
    assert container.last_state.terminated.exit_code == 3
    assert container.restart_count >= 1
    assert re.search(r"back-off \d+s restarting failed container=main", container.state.waiting.message), \
        container.state.waiting.message
    kwok = wait_for(lambda: status(core, "crash-kwok"), lambda s: s.phase == "Running", 30, "kwok's pod Running")
    assert kwok.container_statuses[0].restart_count == 0


def test_recorded_tunables_are_put_back(tmp_path):
    """restore_tunables() puts back what record_tunables() kept for this boot, and forgets it; a record
    of another boot is dropped unused."""
    record = tmp_path / "sysctl.json"
    key = "vm.overcommit_memory"
    before = subprocess.run(["sysctl", "-n", key], capture_output=True, text=True, check=True).stdout.strip()
    try:
        record.write_text(json.dumps({"boot_id": realnode.boot_id(), "values": {key: before}}) + "\n")
        subprocess.run(["sysctl", "-q", "-w", f"{key}={'0' if before == '1' else '1'}"], check=True)
        realnode.restore_tunables(record)
        assert not record.exists()
        assert subprocess.run(["sysctl", "-n", key], capture_output=True, text=True, check=True).stdout.strip() == before
        record.write_text(json.dumps({"boot_id": "another-boot", "values": {key: "1" if before == "0" else "0"}}) + "\n")
        realnode.restore_tunables(record)
        assert not record.exists()
        assert subprocess.run(["sysctl", "-n", key], capture_output=True, text=True, check=True).stdout.strip() == before
    finally:
        subprocess.run(["sysctl", "-q", "-w", f"{key}={before}"], check=True)

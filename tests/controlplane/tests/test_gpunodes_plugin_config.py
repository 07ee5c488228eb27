"""NVIDIA's device plugin configuration on the real control plane (k8s-device-plugin README,
"Configuration Options", "Shared Access to GPUs", the MIG strategies): a DaemonSet of the plugin
whose config file comes from a ConfigMap, rolled by the real DaemonSet controller each time the
ConfigMap changes, on kwok Nodes whose GPUs are recorded nvidia-smi captures (gpunodes.py): the
mixed MIG strategy, the single strategy refusing a GPU of mixed profiles, time-slicing renamed to
nvidia.com/gpu.shared, a plugin without the NVIDIA runtime, and a node whose MIG layout changed
advertising it once its plugin starts again. Driven only through the kubernetes Python client."""

import datetime
import pathlib
import re
import subprocess
import sys
import time

import pytest
import yaml
from kubernetes import client, config

from test_controlplane import wait_for

HERE = pathlib.Path(__file__).resolve().parent
TESTCLUSTER = HERE.parent / "testcluster.py"
CAPTURES = HERE.parents[1] / "unit" / "plugins" / "module_utils" / "fixtures" / "nvidia-smi"
H100 = "nvgpuexp-capture-linux-h100-80gb-hbm3-driver-590.48.01.txt"
H100_MIG = "nvgpuexp-capture-linux-h100-mig-driver-590.48.01.txt"
L40S = "nvgpuexp-capture-linux-l40s-driver-595.80.txt"
PLUGIN_IMAGE = "nvcr.io/nvidia/k8s-device-plugin:v0.20.1"
CUDA_IMAGE = "nvcr.io/nvidia/cuda:12.6.3-base-ubuntu24.04"
PLUGIN_NS = "kube-system"
A100_LINE = "GPU 0: NVIDIA A100-SXM4-80GB (UUID: GPU-513536b6-7d19-9063-b049-1e69664bb298)"
GPU_LINE = re.compile(r"^GPU (\d+): (.+) \(UUID: (GPU-[0-9a-f-]+)\)$")


def cluster_file(listing):
    """Three GPU nodes the plugin's DaemonSet runs on, and one (a100-node) whose `nvidia-smi -L` is
    what a command prints (the file ``listing``), with a plugin pod of its own."""
    gpu = {"nvidia.com/gpu.present": "true"}
    return {
        "timing": {"pluginRegister": 0.5},
        "nodes": [
            {"name": "h100-node", "labels": gpu, "gpus": {"capture": H100, "count": 8}},
            {"name": "h100-mig-node", "labels": gpu, "gpus": {"capture": H100_MIG}},
            {"name": "l40s-node", "labels": gpu, "gpus": {"capture": L40S}},
            {"name": "a100-node", "gpus": {"command": [
                sys.executable, "-c", "import sys; sys.stdout.write(open(sys.argv[1]).read())", str(listing)]}},
        ],
        "objects": [{"apiVersion": "node.k8s.io/v1", "kind": "RuntimeClass", "metadata": {"name": "nvidia"},
                     "handler": "nvidia"}],
    }


def write_layout(path, profiles):
    """An A100's `nvidia-smi -L` with these MIG devices."""
    lines = [A100_LINE] + ["  MIG %-11s Device %2d: (UUID: MIG-%08d-0000-0000-0000-%012d)" % (p, n, n, n)
                           for n, p in enumerate(profiles)]
    path.write_text("\n".join(lines) + "\n", encoding="utf-8")


@pytest.fixture(scope="module")
def cluster(tmp_path_factory):
    state = tmp_path_factory.mktemp("testcluster")
    listing = state / "nvidia-smi-L.txt"
    write_layout(listing, ["3g.40gb", "2g.20gb", "1g.10gb", "1g.10gb"])
    (state / "cluster.yml").write_text(yaml.safe_dump(cluster_file(listing)))
    kubeconfig = state / "kubeconfig"
    subprocess.run([sys.executable, str(TESTCLUSTER), "start", "--cluster", str(state / "cluster.yml"),
                    "--kubeconfig", str(kubeconfig), "--state", str(state / "run"), "--ttl", "900"], check=True)
    try:
        yield kubeconfig, listing
    finally:
        subprocess.run([sys.executable, str(TESTCLUSTER), "stop", "--state", str(state / "run")], check=True)


@pytest.fixture(scope="module")
def api(cluster):
    return config.new_client_from_config(str(cluster[0]))


@pytest.fixture(scope="module")
def core(api):
    return client.CoreV1Api(api)


@pytest.fixture(scope="module")
def apps(api):
    return client.AppsV1Api(api)


def plugin_config(name, mig_strategy="none", time_slicing=None, namespace=PLUGIN_NS):
    settings = {"version": "v1", "flags": {"migStrategy": mig_strategy, "failOnInitError": True}}
    if time_slicing:
        settings["sharing"] = {"timeSlicing": time_slicing}
    return {"apiVersion": "v1", "kind": "ConfigMap", "metadata": {"name": name, "namespace": namespace},
            "data": {"config.yaml": yaml.safe_dump(settings)}}


def plugin_spec(config_map):
    return {
        # NVML reaches the plugin only through the NVIDIA runtime.
        "runtimeClassName": "nvidia",
        "containers": [{
            "name": "nvidia-device-plugin-ctr", "image": PLUGIN_IMAGE, "command": ["nvidia-device-plugin"],
            "env": [{"name": "CONFIG_FILE", "value": "/config/config.yaml"}],
            "securityContext": {"allowPrivilegeEscalation": False, "capabilities": {"drop": ["ALL"]}},
            "volumeMounts": [{"name": "device-plugin", "mountPath": "/var/lib/kubelet/device-plugins"},
                             {"name": "config", "mountPath": "/config"}]}],
        "volumes": [{"name": "device-plugin", "hostPath": {"path": "/var/lib/kubelet/device-plugins"}},
                    {"name": "config", "configMap": {"name": config_map}}]}


def plugin_daemonset():
    spec = dict(plugin_spec("nvdp-config"), nodeSelector={"nvidia.com/gpu.present": "true"},
                priorityClassName="system-node-critical")
    return {"apiVersion": "apps/v1", "kind": "DaemonSet",
            "metadata": {"name": "nvidia-device-plugin", "namespace": PLUGIN_NS},
            "spec": {"selector": {"matchLabels": {"app": "nvidia-device-plugin"}},
                     "updateStrategy": {"type": "RollingUpdate", "rollingUpdate": {"maxUnavailable": "100%"}},
                     "template": {"metadata": {"labels": {"app": "nvidia-device-plugin"}}, "spec": spec}}}


def gpu_pod(name, resources, node, command=None):
    return {"apiVersion": "v1", "kind": "Pod", "metadata": {"name": name},
            "spec": {"restartPolicy": "Never", "runtimeClassName": "nvidia",
                     "nodeSelector": {"kubernetes.io/hostname": node},
                     "containers": [{"name": "cuda", "image": CUDA_IMAGE, "command": command or ["nvidia-smi", "-L"],
                                     "resources": {"limits": resources}}]}}


def capture_lines(capture):
    """The lines of a capture's `nvidia-smi -L` section."""
    text = (CAPTURES / capture).read_text(encoding="utf-8")
    section = text.split("# $ nvidia-smi -L\n", 1)[1].split("\n", 1)[1].split("\n####", 1)[0]
    return [line for line in section.splitlines() if line.strip()]


def renumber(line, index):
    """A capture line as nvidia-smi prints it in a container that sees the device as number index."""
    if line.startswith("GPU "):
        return re.sub(r"^GPU \d+:", f"GPU {index}:", line)
    return re.sub(r"Device\s+\d+:", f"Device {index:>2}:", line)


def allocatable(core, node):
    return core.read_node(node).status.allocatable or {}


def wait_allocatable(core, expected, timeout=30):
    """expected: {node: {resource: value, or None for absent}}"""
    def check():
        return all(allocatable(core, node).get(r) == v for node, resources in expected.items()
                   for r, v in resources.items())
    wait_for(check, timeout=timeout, what=f"allocatable {expected}")


def finished(core, name):
    pod = core.read_namespaced_pod(name, "default")
    return pod if pod.status.phase in ("Succeeded", "Failed") else None


def run_gpu_pod(core, name, resources, node):
    core.create_namespaced_pod("default", gpu_pod(name, resources, node))
    pod = wait_for(lambda: finished(core, name), what=f"{name} finished")
    assert pod.status.phase == "Succeeded", pod.status
    assert pod.spec.node_name == node
    assert pod.status.container_statuses[0].state.terminated.exit_code == 0
    # what nvidia-smi printed, read back from the log the API server serves (kwok's)
    return core.read_namespaced_pod_log(name, "default").splitlines()


def plugin_pods(core, generation=None):
    """The DaemonSet's plugin pods by node (those of the template generation given, not deleted)."""
    pods = core.list_namespaced_pod(PLUGIN_NS, label_selector="app=nvidia-device-plugin").items
    return {p.spec.node_name: p for p in pods if p.metadata.deletion_timestamp is None
            and (generation is None or p.metadata.labels.get("pod-template-generation") == str(generation))}


def restart_plugin(core, apps, settings):
    """The ConfigMap changed, and the DaemonSet restarted as `kubectl rollout restart` does (an
    annotation on its template): returns the new template generation."""
    core.replace_namespaced_config_map("nvdp-config", PLUGIN_NS, settings)
    stamp = datetime.datetime.now(datetime.timezone.utc).isoformat()
    patched = apps.patch_namespaced_daemon_set("nvidia-device-plugin", PLUGIN_NS, {"spec": {"template": {
        "metadata": {"annotations": {"kubectl.kubernetes.io/restartedAt": stamp}}}}})
    return patched.metadata.generation


def test_the_daemonset_plugin_advertises_whole_gpus(core, apps):
    core.create_namespaced_config_map(PLUGIN_NS, plugin_config("nvdp-config"))
    apps.create_namespaced_daemon_set(PLUGIN_NS, plugin_daemonset())
    # migStrategy none: a MIG-enabled GPU is one nvidia.com/gpu
    wait_allocatable(core, {"h100-node": {"nvidia.com/gpu": "8"}, "h100-mig-node": {"nvidia.com/gpu": "1"},
                            "l40s-node": {"nvidia.com/gpu": "1"}})
    assert sorted(plugin_pods(core)) == ["h100-mig-node", "h100-node", "l40s-node"]
    assert "nvidia.com/gpu" not in allocatable(core, "a100-node")


def test_mixed_mig_strategy(core, apps):
    restart_plugin(core, apps, plugin_config("nvdp-config", "mixed"))
    wait_allocatable(core, {"h100-mig-node": {"nvidia.com/mig-3g.40gb": "1", "nvidia.com/mig-2g.20gb": "1",
                                              "nvidia.com/mig-1g.10gb": "2", "nvidia.com/gpu": "0"},
                            "h100-node": {"nvidia.com/gpu": "8"}})
    # the whole GPU stays in the capacity, with nothing allocatable, once the plugin no longer offers it
    assert core.read_node("h100-mig-node").status.capacity["nvidia.com/gpu"] == "1"
    gpu_line, mig_line = run_gpu_pod(core, "mig-slice", {"nvidia.com/mig-1g.10gb": "1"}, "h100-mig-node")
    capture = capture_lines(H100_MIG)
    assert gpu_line == renumber(capture[0], 0)
    assert mig_line in [renumber(line, 0) for line in capture[1:] if "MIG 1g.10gb" in line]


def test_single_mig_strategy_refuses_mixed_profiles(core, apps):
    generation = restart_plugin(core, apps, plugin_config("nvdp-config", "single"))

    def crash_looping():
        pod = plugin_pods(core, generation).get("h100-mig-node")
        statuses = (pod.status.container_statuses or []) if pod else []
        waiting = statuses[0].state.waiting if statuses else None
        return statuses[0] if waiting and waiting.reason == "CrashLoopBackOff" else None

    status = wait_for(crash_looping, what="the plugin on the MIG node in CrashLoopBackOff")
    assert status.last_state.terminated.exit_code == 1
    assert "for mig strategy single, all MIG devices must be the same profile" in \
        status.last_state.terminated.message
    # every GPU of the other nodes is a whole GPU: single advertises them as nvidia.com/gpu
    wait_for(lambda: all(p.status.container_statuses and p.status.container_statuses[0].ready
                         for n, p in plugin_pods(core, generation).items() if n != "h100-mig-node"),
             what="the plugin of the new generation ready on the other nodes")
    wait_allocatable(core, {"h100-node": {"nvidia.com/gpu": "8"}, "l40s-node": {"nvidia.com/gpu": "1"},
                            "h100-mig-node": {"nvidia.com/mig-3g.40gb": "0", "nvidia.com/mig-2g.20gb": "0",
                                              "nvidia.com/mig-1g.10gb": "0", "nvidia.com/gpu": "0"}})


def test_time_slicing_renamed_by_default(core, apps):
    slicing = {"renameByDefault": True, "resources": [{"name": "nvidia.com/gpu", "replicas": 4}]}
    restart_plugin(core, apps, plugin_config("nvdp-config", "none", slicing))
    wait_allocatable(core, {"h100-node": {"nvidia.com/gpu.shared": "32", "nvidia.com/gpu": "0"},
                            "l40s-node": {"nvidia.com/gpu.shared": "4", "nvidia.com/gpu": "0"},
                            "h100-mig-node": {"nvidia.com/gpu.shared": "4"}})
    # the real scheduler counts the L40S's four replicas: four pods hold them, a fifth waits
    hold = ["sleep", "infinity"]
    for number in range(4):
        core.create_namespaced_pod("default", gpu_pod(f"holder-{number}", {"nvidia.com/gpu.shared": "1"},
                                                      "l40s-node", hold))
    for number in range(4):
        wait_for(lambda n=number: core.read_namespaced_pod(f"holder-{n}", "default").status.phase == "Running",
                 what=f"holder-{number} Running")
    core.create_namespaced_pod("default", gpu_pod("shared", {"nvidia.com/gpu.shared": "1"}, "l40s-node"))

    def unschedulable():
        conditions = core.read_namespaced_pod("shared", "default").status.conditions or []
        return next((c for c in conditions if c.type == "PodScheduled" and c.reason == "Unschedulable"), None)

    condition = wait_for(unschedulable, what="the fifth pod unschedulable")
    assert "1 Insufficient nvidia.com/gpu.shared" in condition.message
    # a replica free again: the pod runs on it and sees the L40S as the capture prints it
    core.delete_namespaced_pod("holder-0", "default", grace_period_seconds=0)
    pod = wait_for(lambda: finished(core, "shared"), what="shared finished")
    assert (pod.status.phase, pod.spec.node_name) == ("Succeeded", "l40s-node")
    assert core.read_namespaced_pod_log("shared", "default").splitlines() == \
        [renumber(line, 0) for line in capture_lines(L40S)]
    for number in range(1, 4):
        core.delete_namespaced_pod(f"holder-{number}", "default", grace_period_seconds=0)


def test_the_plugin_without_the_nvidia_runtime_crash_loops(core):
    """NVIDIA's image brings no NVML: only the NVIDIA runtime puts it into the container, so the
    plugin under the node's default runc finds no GPU and, failing on init errors, restarts."""
    pod = {"apiVersion": "v1", "kind": "Pod", "metadata": {"name": "runc-plugin"},
           "spec": dict(plugin_spec("nvdp-config"), nodeName="l40s-node")}
    del pod["spec"]["runtimeClassName"]
    core.create_namespaced_pod(PLUGIN_NS, pod)

    def crash_looping():
        statuses = core.read_namespaced_pod("runc-plugin", PLUGIN_NS).status.container_statuses or []
        waiting = statuses[0].state.waiting if statuses else None
        return statuses[0] if waiting and waiting.reason == "CrashLoopBackOff" else None

    status = wait_for(crash_looping, what="the plugin under runc in CrashLoopBackOff")
    assert status.last_state.terminated.exit_code == 1
    assert "did you configure the NVIDIA Container Toolkit?" in status.last_state.terminated.message
    # the node's own plugin (the DaemonSet's, under the NVIDIA runtime) keeps advertising
    assert allocatable(core, "l40s-node")["nvidia.com/gpu.shared"] == "4"
    core.delete_namespaced_pod("runc-plugin", PLUGIN_NS, grace_period_seconds=0)


def mig_allocatable(core):
    return {k: v for k, v in allocatable(core, "a100-node").items() if k.startswith("nvidia.com/") and v != "0"}


def a100_plugin(name):
    spec = dict(plugin_spec("mixed-config"), nodeName="a100-node")
    return {"apiVersion": "v1", "kind": "Pod", "metadata": {"name": name}, "spec": spec}


def test_a_restarted_plugin_advertises_the_new_mig_layout(cluster, core):
    """The plugin enumerates MIG devices when it starts: a node whose layout changed advertises the
    new devices once its plugin pod starts again, and mixed leaves out a compute instance smaller
    than its GPU instance (1c.3g.40gb)."""
    listing = cluster[1]
    core.create_namespaced_config_map("default", plugin_config("mixed-config", "mixed", namespace="default"))
    core.create_namespaced_pod("default", a100_plugin("a100-plugin"))
    wait_for(lambda: mig_allocatable(core) == {"nvidia.com/mig-3g.40gb": "1", "nvidia.com/mig-2g.20gb": "1",
                                               "nvidia.com/mig-1g.10gb": "2"}, what="the first layout")
    write_layout(listing, ["4g.40gb", "1c.3g.40gb", "2c.3g.40gb"])
    time.sleep(2)  # four times pluginRegister: the running plugin does not see the change
    assert "nvidia.com/mig-3g.40gb" in mig_allocatable(core)
    core.delete_namespaced_pod("a100-plugin", "default", grace_period_seconds=0)
    wait_for(lambda: not mig_allocatable(core), what="nothing allocatable without the plugin")
    core.create_namespaced_pod("default", a100_plugin("a100-plugin-again"))
    wait_for(lambda: mig_allocatable(core) == {"nvidia.com/mig-4g.40gb": "1"}, what="the new layout")
    gpu_line, mig_line = run_gpu_pod(core, "new-slice", {"nvidia.com/mig-4g.40gb": "1"}, "a100-node")
    assert gpu_line == A100_LINE
    assert mig_line == "  MIG 4g.40gb     Device  0: (UUID: MIG-00000000-0000-0000-0000-000000000000)"

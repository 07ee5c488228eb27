# Copyright: (c) 2026, gpufleet.nvidia contributors
# GNU General Public License v3.0+ (see COPYING or https://www.gnu.org/licenses/gpl-3.0.txt)
"""How the cluster part scales: gpu_device_plugin and gpu_smoke_test against 1, 300 and 1,000 GPU nodes, and
gpu_smoke_test through Dynamic Resource Allocation (DRA) against 1 and 300.

For each size a test cluster (tests/controlplane/testcluster.py: the real kube-apiserver,
kube-controller-manager and kube-scheduler with etcd, kwok for the Nodes, and the STAND-IN of the
nodes' GPU side, gpunodes.py) is started with that many GPU Nodes, each an 8-GPU board replaying
the H100 80GB HBM3 capture (nvgpuexp-capture-linux-h100-80gb-hbm3-driver-590.48.01.txt, count: 8),
labelled nvidia.com/gpu.present=true as gpu_kubelet labels them, plus a tainted control-plane
node. It serves the Kubernetes version tests/controlplane builds. Then two parts are timed, each
one ansible-playbook run from the same controller host:

  (a) gpu_device_plugin: preflight, apply, rollout wait, allocatable check;
  (b) gpu_smoke_test: one nvidia-smi -L pod per node, verdicts, clean-up.

Then that cluster is stopped and a fresh one of the same size started, the
DRA cluster: the same nodes, each with CDI in its runtime (`runtime: {cdi: true}`,
the GPU side's STAND-IN for a containerd or CRI-O with CDI enabled, without
which a claim's devices never reach a container).
Every GPU host is in the inventory group gpu_dra_nodes with
gpu_container_toolkit_cdi: true (declared: gpu_container_toolkit is not run,
no runtime is configured). Two more runs, against it:

  gpu_dra_driver, timed apart, no aim: preflight, its objects applied, the
      nodes' label nvidia.com/dra-kubelet-plugin=true found (each Node
      registers with it, as the example inventory's kubelets do through
      gpu_kubelet_node_labels, so nothing is patched), the kubelet
      plugin's rollout (the GPU side's STAND-IN for NVIDIA's plugin publishes
      each node's ResourceSlice from the node's capture), each node's slice
      compared with its facts. Part (c) needs it; it is not the smoke test;
  (c) gpu_smoke_test through DRA: every node is on the DRA path, so it gets a
      ResourceClaimTemplate of its own and one nvidia-smi -L pod asking for
      that claim (no nvidia.com/gpu, no RuntimeClass); verdicts, the pods and
      templates deleted. The run checks every node was planned through a
      claim and passed (gpu_smoke_test_skip_busy: false).

A fresh cluster for the DRA parts, rather than the device plugin's: there
the device plugin already advertises every node's GPUs, which
gpu_dra_driver refuses. The DRA parts run at the sizes of --dra-nodes, by
default those of --nodes up to 300 (1 and 300 with the default --nodes). A
size only one kind of part runs at gets only those parts.

For each part it reports the wall time, the ratio of the largest size to the
smallest, the API requests the roles made (counted by the test cluster's fault proxy, which
every client request passes, reset before each part) per node, the CPU seconds of the controller
(ansible and its module processes), of the control plane (etcd, kube-apiserver,
kube-controller-manager, kube-scheduler) and of the fake nodes (kwok and the GPU side's
stand-in), and the slowest tasks. Aims
(the project's issue): the largest size within 3x the time of one node, and
a constant number of requests per node (no request path whose count per
node grows with the number of nodes). A trivial play that reads every GPU
host's facts is timed too: the cost of ansible-playbook itself at that size.

Set-up, not timed: the inventory holds one host per Node
(ansible_connection=local) whose facts are in a jsonfile fact cache, which
the timed runs read. The first host's are gathered by
gpufleet.nvidia.nvml_facts (source=nvidia_smi); every other host's cache
entry is that one with the first host's GPU UUIDs replaced by its own (a
thousand module runs would take the set-up minutes and measure nothing the
benchmark is about). nvidia-smi is a STAND-IN script written here that
prints an `nvidia-smi -q -x` XML GENERATED FOR THIS BENCHMARK: the GPU
element of the real RTX A5000 capture
(telegraf-2x-rtx-a5000-driver-590.44.01-v13.xml) repeated 8 times, with the
H100 capture's product name, architecture, MIG mode, memory size, driver and
CUDA versions, distinct minor numbers and PCI addresses, and the UUIDs the
GPU side gives that node's GPUs (node_gpus of tests/controlplane/gpus.py);
the other readings (clocks, power, processes) stay the A5000's. The set-up checks that
every host's facts list exactly the UUIDs of its Node's GPUs, since
gpu_device_plugin compares allocatable with the facts, gpu_dra_driver each
node's ResourceSlice, and gpu_smoke_test cross-checks the UUIDs a pod prints
with them.

The kwok Nodes renew their Leases as kubelets do (40 s leases): at 1,000 nodes that is about
100 writes a second the control plane takes, as a real one does. The device plugin role and
gpu_dra_driver poll with `delay: 5` and the smoke test's wait every 2 s, which puts a floor under
each wait, also for one node.
The speed of this machine moves by a quarter from one minute to the next (the same
run took 27 s and 38 s within half an hour), and the sizes are measured one
after the other: a ratio of one size measured in a slow minute to another
measured in a fast one says more about the machine than about the roles. So
every size is measured --rounds times (default 2), the sizes in turn within a
round, and each figure is the median of its rounds (with two, their mean); each
round's wall times are printed beside it.
Part (c) is also compared with (b) at each size both ran at: wall time and
requests per node.
Run with `make bench-cluster` (BENCH_CLUSTER_ARGS="--nodes 1,300,1000 --dra-nodes 1,300 --rounds 2 --forks 8
--out PATH").
"""

from __future__ import annotations

import argparse
import json
import os
import re
import resource
import subprocess
import statistics
import sys
import tempfile
import time
import yaml
from kubernetes import config as kube_config

REPO = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
CONTROLPLANE = os.path.join(REPO, "tests", "controlplane")
sys.path.insert(0, CONTROLPLANE)

import gpus as gpu_model  # noqa: E402  pylint: disable=wrong-import-position

TESTCLUSTER = os.path.join(CONTROLPLANE, "testcluster.py")

FIXTURES = os.path.join(REPO, "tests", "unit", "plugins", "module_utils", "fixtures", "nvidia-smi")
CAPTURE = "nvgpuexp-capture-linux-h100-80gb-hbm3-driver-590.48.01.txt"
TEMPLATE = "telegraf-2x-rtx-a5000-driver-590.44.01-v13.xml"
GPUS_PER_NODE = 8
# What the H100 capture's `nvidia-smi -q` section says, put into the generated XML.
H100 = {"driver_version": "590.48.01", "cuda_version": "13.1", "product_brand": "NVIDIA",
        "product_architecture": "Hopper", "pci_device_id": "233010DE", "fb_total": "81559 MiB"}
# PCI buses of the eight GPUs of an HGX H100 board.
BUSES = ["18", "2A", "3A", "5D", "9A", "AB", "BA", "DB"]
TARGET_RATIO = 3.0
CONTROLLER = "bench-controller"
# What the control plane serves (resource.k8s.io/v1 is served from 1.34, and NVIDIA's DRA driver needs 1.34.2).
with open(os.path.join(REPO, "tests", "controlplane", "versions.env"), encoding="utf-8") as _versions:
    KUBERNETES_VERSION = re.search(r"^KUBERNETES_VERSION=(\S+)", _versions.read(), re.M).group(1)
DRA_LABEL = "nvidia.com/dra-kubelet-plugin"
# The parts on the device plugin's cluster, then on the DRA cluster; gpu_dra_driver is timed apart, no aim.
DP_PARTS = ("device_plugin", "smoke_test")
DRA_PARTS = ("dra_driver", "dra_smoke_test")
PARTS = DP_PARTS + DRA_PARTS
AIMED = ("device_plugin", "smoke_test", "dra_smoke_test")
# The largest size of --nodes the DRA parts run at unless --dra-nodes says otherwise.
DRA_DEFAULT_MAX = 300
TITLES = {"device_plugin": "(a) gpu_device_plugin", "smoke_test": "(b) gpu_smoke_test",
          "dra_driver": "gpu_dra_driver (before c)", "dra_smoke_test": "(c) gpu_smoke_test through DRA"}
TASK_LINE = re.compile(r"^(?P<name>.+?) -*-? ?(?P<seconds>\d+\.\d\d)s$")

SETUP = """- name: Set-up, not timed - NVIDIA facts of every GPU host, through the stand-in nvidia-smi
  hosts: gpu_nodes
  gather_facts: false
  environment:
    PATH: "{{ bench_bin }}:{{ lookup('ansible.builtin.env', 'PATH') }}"
    GPUFLEET_BENCH_BOARD: "{{ bench_board }}"
    GPUFLEET_BENCH_UUIDS: "{{ bench_uuids | join(' ') }}"
  tasks:
    - name: Gather the NVIDIA inventory
      gpufleet.nvidia.nvml_facts:
        source: nvidia_smi

    - name: Check the facts list the GPUs of the host's Node
      ansible.builtin.assert:
        that:
          - ansible_facts['nvidia']['state'] == 'ok'
          - ansible_facts['nvidia']['gpus'] | map(attribute='uuid') | list == bench_uuids
        fail_msg: "{{ inventory_hostname }}: {{ ansible_facts['nvidia'] | to_json }}"
        quiet: true
"""
FLOOR = """- name: Timed - ansible-playbook alone, reading every GPU host's facts
  hosts: %s
  gather_facts: false
  tasks:
    - name: Count the GPU hosts with facts
      ansible.builtin.assert:
        that: groups['gpu_nodes'] | gpufleet.nvidia.fleet_nodes(hostvars) | rejectattr('facts', 'none') | list | length
              == groups['gpu_nodes'] | length
        quiet: true
""" % CONTROLLER
DEVICE_PLUGIN = """- name: Timed - gpu_device_plugin
  hosts: %s
  gather_facts: false
  roles:
    - role: gpufleet.nvidia.gpu_device_plugin
      vars:
        gpu_device_plugin_hosts: "{{ groups['gpu_nodes'] }}"
        gpu_device_plugin_kubeconfig: "{{ bench_kubeconfig }}"
  tasks:
    - name: Check every GPU node advertises its GPUs
      ansible.builtin.assert:
        that:
          - gpu_device_plugin_report | length == groups['gpu_nodes'] | length
          - gpu_device_plugin_report | rejectattr('ok') | list | length == 0
        quiet: true
""" % CONTROLLER
SMOKE_TEST = """- name: Timed - gpu_smoke_test
  hosts: %s
  gather_facts: false
  roles:
    - role: gpufleet.nvidia.gpu_smoke_test
      vars:
        gpu_smoke_test_hosts: "{{ groups['gpu_nodes'] }}"
        gpu_smoke_test_kubeconfig: "{{ bench_kubeconfig }}"
  tasks:
    - name: Check every GPU node was tested and passed
      ansible.builtin.assert:
        that:
          - gpu_smoke_test_report | length == groups['gpu_nodes'] | length
          - gpu_smoke_test_report | selectattr('tested') | selectattr('ok') | list | length == groups['gpu_nodes'] | length
        quiet: true
""" % CONTROLLER
DRA_DRIVER = """- name: Timed apart, no aim - gpu_dra_driver, which (c) needs
  hosts: %s
  gather_facts: false
  roles:
    - role: gpufleet.nvidia.gpu_dra_driver
      vars:
        gpu_dra_driver_hosts: "{{ groups['gpu_dra_nodes'] }}"
        gpu_dra_driver_kubeconfig: "{{ bench_kubeconfig }}"
  tasks:
    - name: Check every DRA node publishes its GPUs
      ansible.builtin.assert:
        that:
          - gpu_dra_driver_report | length == groups['gpu_dra_nodes'] | length
          - gpu_dra_driver_report | rejectattr('ok') | list | length == 0
        quiet: true
""" % CONTROLLER
DRA_SMOKE_TEST = """- name: Timed - gpu_smoke_test through DRA
  hosts: %s
  gather_facts: false
  roles:
    - role: gpufleet.nvidia.gpu_smoke_test
      vars:
        gpu_smoke_test_hosts: "{{ groups['gpu_nodes'] }}"
        gpu_smoke_test_kubeconfig: "{{ bench_kubeconfig }}"
        gpu_smoke_test_skip_busy: false
  tasks:
    - name: Check every GPU node was tested through a claim of its own and passed
      ansible.builtin.assert:
        that:
          - __gpu_smoke_test_plan | selectattr('dra', 'defined') | list | length == groups['gpu_nodes'] | length
          - gpu_smoke_test_report | length == groups['gpu_nodes'] | length
          - gpu_smoke_test_report | selectattr('tested') | selectattr('ok') | list | length == groups['gpu_nodes'] | length
        quiet: true
""" % CONTROLLER
STANDIN = """#!%s
# STAND-IN for nvidia-smi, written by benchmarks/cluster_scale.py; NOT nvidia-smi.
# `nvidia-smi -q -x` prints the XML generated for the benchmark ($GPUFLEET_BENCH_BOARD)
# with this host's GPU UUIDs ($GPUFLEET_BENCH_UUIDS, as the test cluster's GPU side derives them).
import os
import sys

if sys.argv[1:] != ["-q", "-x"]:
    sys.stderr.write("stand-in: unsupported arguments: %%s\\n" %% " ".join(sys.argv[1:]))
    sys.exit(2)
with open(os.environ["GPUFLEET_BENCH_BOARD"], encoding="utf-8") as handle:
    text = handle.read()
for index, uuid in enumerate(os.environ["GPUFLEET_BENCH_UUIDS"].split()):
    text = text.replace("@UUID%%d@" %% index, uuid)
sys.stdout.write(text)
""" % sys.executable


def _set(text, tag, value):
    """``text`` with the first <tag>...</tag> holding ``value``."""
    return re.sub(r"<%s>[^<]*</%s>" % (tag, tag), "<%s>%s</%s>" % (tag, value, tag), text, count=1)


def board_xml(name):
    """An `nvidia-smi -q -x` log of an 8-GPU board named ``name``, UUIDs left as @UUID<index>@."""
    with open(os.path.join(FIXTURES, TEMPLATE), encoding="utf-8") as handle:
        text = handle.read()
    head = text[:text.index("\t<gpu ")]
    gpu = text[text.index("\t<gpu "):text.index("</gpu>") + len("</gpu>")]
    head = _set(_set(_set(head, "driver_version", H100["driver_version"]), "cuda_version", H100["cuda_version"]),
                "attached_gpus", str(GPUS_PER_NODE))
    boards = []
    for index, bus in enumerate(BUSES[:GPUS_PER_NODE]):
        address = "00000000:%s:00.0" % bus
        one = re.sub(r'<gpu id="[^"]*">', '<gpu id="%s">' % address, gpu, count=1)
        for tag, value in (("product_name", name), ("product_brand", H100["product_brand"]),
                           ("product_architecture", H100["product_architecture"]),
                           ("current_mig", "Disabled"), ("pending_mig", "Disabled"),
                           ("serial", "0000000000000"), ("uuid", "@UUID%d@" % index), ("minor_number", str(index)),
                           ("pci_bus", bus), ("pci_device_id", H100["pci_device_id"]), ("pci_bus_id", address),
                           ("gsp_firmware_version", H100["driver_version"])):
            one = _set(one, tag, value)
        one = re.sub(r"(<fb_memory_usage>\s*<total>)[^<]*", r"\g<1>" + H100["fb_total"], one, count=1)
        boards.append(one)
    return head + "\n".join(boards) + "\n</nvidia_smi_log>\n"


def node_names(count):
    return ["gpu-node-%04d" % number for number in range(1, count + 1)]


def write_cluster(path, names, dra=False):
    """The cluster file of one size; with ``dra``, every GPU node's runtime has CDI (the DRA cluster)."""
    labels = {"nvidia.com/gpu.present": "true", "nvidia.com/gpu.product": "NVIDIA-H100-80GB-HBM3",
              "nvidia.com/gpu.count": str(GPUS_PER_NODE)}
    nodes = []
    for name in names:
        node = {"name": name, "labels": labels, "gpus": {"capture": CAPTURE, "count": GPUS_PER_NODE}}
        if dra:
            # Registered with the DRA label, as the example inventory's kubelets register (gpu_kubelet_node_labels).
            node["labels"] = dict(labels, **{DRA_LABEL: "true"})
            node["runtime"] = {"cdi": True}
        nodes.append(node)
    nodes.append({"name": "control-plane-1", "labels": {"node-role.kubernetes.io/control-plane": ""},
                  "taints": [{"key": "node-role.kubernetes.io/control-plane", "effect": "NoSchedule"}]})
    with open(path, "w", encoding="utf-8") as handle:
        handle.write("# GENERATED by benchmarks/cluster_scale.py: %d GPU nodes%s.\n"
                     % (len(names), " with CDI in their runtime (the DRA cluster)" if dra else ""))
        yaml.safe_dump({"nodes": nodes}, handle, sort_keys=False)


def write_inventory(path, names, workdir, dra=False):
    """The controller and one host per GPU Node, all local; each GPU host knows its Node's GPU UUIDs. With ``dra``
    every GPU host is in gpu_dra_nodes too, with gpu_container_toolkit_cdi true, and the kubeconfig is the DRA
    cluster's."""
    spec = {"capture": CAPTURE, "count": GPUS_PER_NODE}
    hosts = dict((name, {"bench_uuids": [gpu["uuid"] for gpu in gpu_model.node_gpus(spec, name)]}) for name in names)
    children = {"gpu_nodes": {"hosts": hosts}}
    if dra:
        children["gpu_dra_nodes"] = {"hosts": dict((name, {}) for name in names),
                                     "vars": {"gpu_container_toolkit_cdi": True}}
    inventory = {"all": {
        "hosts": {CONTROLLER: {}},
        "children": children,
        "vars": {"ansible_connection": "local", "ansible_python_interpreter": sys.executable,
                 "bench_kubeconfig": os.path.join(workdir, "kubeconfig-dra" if dra else "kubeconfig"),
                 "bench_board": os.path.join(workdir, "board.xml"), "bench_bin": os.path.join(workdir, "bin")}}}
    with open(path, "w", encoding="utf-8") as handle:
        yaml.safe_dump(inventory, handle, sort_keys=False)


def prepare(workdir, names):
    os.makedirs(os.path.join(workdir, "bin"))
    name = gpu_model.node_gpus({"capture": CAPTURE, "count": GPUS_PER_NODE}, names[0])[0]["name"]
    with open(os.path.join(workdir, "board.xml"), "w", encoding="utf-8") as handle:
        handle.write(board_xml(name))
    standin = os.path.join(workdir, "bin", "nvidia-smi")
    with open(standin, "w", encoding="utf-8") as handle:
        handle.write(STANDIN)
    os.chmod(standin, 0o755)
    for filename, text in (("setup.yml", SETUP), ("floor.yml", FLOOR), ("device_plugin.yml", DEVICE_PLUGIN),
                           ("smoke_test.yml", SMOKE_TEST), ("dra_driver.yml", DRA_DRIVER),
                           ("dra_smoke_test.yml", DRA_SMOKE_TEST)):
        with open(os.path.join(workdir, filename), "w", encoding="utf-8") as handle:
            handle.write(text)
    write_cluster(os.path.join(workdir, "cluster.yml"), names)
    write_cluster(os.path.join(workdir, "cluster-dra.yml"), names, dra=True)
    write_inventory(os.path.join(workdir, "inventory.yml"), names, workdir)
    write_inventory(os.path.join(workdir, "inventory-dra.yml"), names, workdir, dra=True)


def environment(workdir, forks):
    return dict(os.environ, ANSIBLE_COLLECTIONS_PATH=os.path.join(REPO, ".collections"),
                ANSIBLE_INJECT_FACT_VARS="false", ANSIBLE_FORCE_COLOR="0", ANSIBLE_PIPELINING="true",
                ANSIBLE_FORKS=str(forks), ANSIBLE_GATHERING="explicit", ANSIBLE_CACHE_PLUGIN="jsonfile",
                ANSIBLE_CACHE_PLUGIN_CONNECTION=os.path.join(workdir, "facts"), ANSIBLE_CACHE_PLUGIN_TIMEOUT="0",
                ANSIBLE_CALLBACKS_ENABLED="ansible.posix.profile_tasks", PROFILE_TASKS_TASK_OUTPUT_LIMIT="all",
                ANSIBLE_LOCAL_TEMP=os.path.join(workdir, "tmp"), ANSIBLE_DISPLAY_SKIPPED_HOSTS="false",
                PATH=os.path.dirname(sys.executable) + os.pathsep + os.environ.get("PATH", ""))


def cpu_of(pid):
    """User + system CPU seconds of a running process."""
    with open("/proc/%d/stat" % pid, encoding="utf-8") as handle:
        fields = handle.read().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


def slowest_tasks(stdout, limit):
    recap = stdout.split("TASKS RECAP", 1)[-1]
    tasks = []
    for line in recap.splitlines():
        match = TASK_LINE.match(line.strip())
        if match and not line.startswith(("=", "*")):
            tasks.append((match.group("name").strip(), float(match.group("seconds"))))
    return sorted(tasks, key=lambda item: -item[1])[:limit]


class TestCluster:
    """A test cluster (tests/controlplane/testcluster.py) started in the background for one size (``suffix`` -dra:
    the DRA cluster)."""

    def __init__(self, workdir, suffix=""):
        self.state = os.path.join(workdir, "testcluster" + suffix)
        self.kubeconfig = os.path.join(workdir, "kubeconfig" + suffix)
        self.cluster = os.path.join(workdir, "cluster%s.yml" % suffix)
        self.api = None
        self.pids = {}

    def start(self):
        subprocess.run([sys.executable, TESTCLUSTER, "start", "--cluster", self.cluster, "--kubeconfig",
                        self.kubeconfig, "--state", self.state, "--ttl", "5400"],
                       check=True, capture_output=True, text=True)
        self.api = kube_config.new_client_from_config(self.kubeconfig)
        with open(os.path.join(self.state, "endpoints.json"), encoding="utf-8") as handle:
            supervisor = json.load(handle)["pid"]
        children = subprocess.run(["pgrep", "-P", str(supervisor)], capture_output=True, text=True,
                                  check=False).stdout.split()
        for pid in children:
            with open("/proc/%s/cmdline" % pid, "rb") as handle:
                argv = [os.path.basename(arg.decode()).replace(".py", "") for arg in handle.read().split(b"\0")[:2]]
            name = next((arg for arg in argv if arg in COMPONENTS), None)
            if name:
                self.pids[name] = int(pid)

    def stop(self):
        subprocess.run([sys.executable, TESTCLUSTER, "stop", "--state", self.state], check=False, capture_output=True)

    def stats(self, reset=False):
        """The requests the fault proxy passed, by verb and path (every request of the roles goes through it)."""
        answer = self.api.call_api("DELETE" if reset else "GET",
                                   self.api.configuration.host + "/gpufleet-test/v1/stats")
        return json.loads(answer.read())

    def cpu(self, group):
        return sum(cpu_of(self.pids[name]) for name in group if name in self.pids)


# The processes of a test cluster: the control plane, and what fakes the nodes.
CONTROL_PLANE = ("etcd", "kube-apiserver", "kube-controller-manager", "kube-scheduler")
FAKE_NODES = ("kwok", "gpunodes")
COMPONENTS = CONTROL_PLANE + FAKE_NODES + ("faultproxy",)


def run_part(workdir, forks, playbook, cluster=None, extra=(), inventory="inventory.yml"):
    """Time one ansible-playbook run; with a test cluster, also its requests and CPU."""
    log = os.path.join(workdir, playbook.replace(".yml", ".log"))
    if cluster:
        cluster.stats(reset=True)
        server_cpu, nodes_cpu = cluster.cpu(CONTROL_PLANE), cluster.cpu(FAKE_NODES)
    before = resource.getrusage(resource.RUSAGE_CHILDREN)
    started = time.monotonic()
    result = subprocess.run(["ansible-playbook", "-i", os.path.join(workdir, inventory),
                             os.path.join(workdir, playbook)] + list(extra), env=environment(workdir, forks), text=True,
                            capture_output=True, check=False, cwd=workdir)
    wall = time.monotonic() - started
    after = resource.getrusage(resource.RUSAGE_CHILDREN)
    with open(log, "w", encoding="utf-8") as handle:
        handle.write(result.stdout + result.stderr)
    if result.returncode != 0:
        sys.stderr.write(result.stdout[-8000:] + result.stderr[-2000:])
        raise SystemExit("%s failed (rc=%d); log %s" % (playbook, result.returncode, log))
    out = {"wall_s": round(wall, 2),
           "controller_cpu_s": round(after.ru_utime + after.ru_stime - before.ru_utime - before.ru_stime, 2),
           "slowest_tasks": slowest_tasks(result.stdout, 8)}
    if cluster:
        stats = cluster.stats()
        out["server_cpu_s"] = round(cluster.cpu(CONTROL_PLANE) - server_cpu, 2)
        out["nodes_cpu_s"] = round(cluster.cpu(FAKE_NODES) - nodes_cpu, 2)
        out["requests"] = stats["requests"]
        out["by_path"] = stats["byPath"]
    return out


def by_pattern(by_path):
    """Request counts with node names (and the pod names made of them) folded into {node}."""
    out = {}
    for key, count in by_path.items():
        pattern = re.sub(r"gpu-node-\d{4}", "{node}", key)
        out[pattern] = out.get(pattern, 0) + count
    return out


def cached_facts(path):
    """The facts a jsonfile cache entry holds (ansible-core 2.19 and newer wrap them in a payload)."""
    with open(path, encoding="utf-8") as handle:
        entry = json.load(handle)
    return json.loads(entry["__payload__"]) if "__payload__" in entry else entry


def copy_facts(cache, names):
    """Every other host's cache entry: the first host's, with the first host's GPU UUIDs replaced by its own.
    Checked: each entry's facts list exactly the UUIDs of its Node's GPUs, in order."""
    spec = {"capture": CAPTURE, "count": GPUS_PER_NODE}
    first = [entry for entry in os.listdir(cache) if entry.endswith(names[0])]
    if len(first) != 1:
        raise SystemExit("no single fact cache entry for %s in %s: %s" % (names[0], cache, os.listdir(cache)))
    prefix = first[0][:-len(names[0])]
    with open(os.path.join(cache, first[0]), encoding="utf-8") as handle:
        text = handle.read()
    uuids = [gpu["uuid"] for gpu in gpu_model.node_gpus(spec, names[0])]
    for name in names:
        own = [gpu["uuid"] for gpu in gpu_model.node_gpus(spec, name)]
        copy = text
        for old, new in zip(uuids, own):
            copy = copy.replace(old, new)
        path = os.path.join(cache, prefix + name)
        if name != names[0]:
            with open(path, "w", encoding="utf-8") as handle:
                handle.write(copy)
        facts = cached_facts(path)["nvidia"]
        if facts["state"] != "ok" or [gpu["uuid"] for gpu in facts["gpus"]] != own:
            raise SystemExit("the cached facts of %s do not list its Node's GPUs" % name)


def measure(count, forks, root, round_no=0, device_plugin=True, dra=True):
    """One size: the device plugin's cluster with parts (a) and (b) when ``device_plugin``, then a fresh DRA cluster
    with gpu_dra_driver and part (c) when ``dra``; one test cluster at a time."""
    workdir = os.path.join(root, "n%d-r%d" % (count, round_no + 1))
    os.makedirs(os.path.join(workdir, "tmp"))
    prepare(workdir, node_names(count))
    started = time.monotonic()
    names = node_names(count)
    run_part(workdir, forks, "setup.yml", extra=["--limit", names[0]])
    copy_facts(os.path.join(workdir, "facts"), names)
    setup_s = time.monotonic() - started
    result = {"nodes": count, "setup_s": round(setup_s, 1), "floor": run_part(workdir, forks, "floor.yml")}
    if device_plugin:
        cluster = TestCluster(workdir)
        cluster.start()
        try:
            result["device_plugin"] = run_part(workdir, forks, "device_plugin.yml", cluster)
            result["smoke_test"] = run_part(workdir, forks, "smoke_test.yml", cluster)
        finally:
            cluster.stop()
    if dra:
        cluster = TestCluster(workdir, "-dra")
        cluster.start()
        try:
            result["dra_driver"] = run_part(workdir, forks, "dra_driver.yml", cluster, inventory="inventory-dra.yml")
            result["dra_smoke_test"] = run_part(workdir, forks, "dra_smoke_test.yml", cluster,
                                                inventory="inventory-dra.yml")
        finally:
            cluster.stop()
    for part in PARTS:
        if part in result:
            result[part]["requests_per_node"] = round(result[part]["requests"] / float(count), 2)
            result[part]["by_pattern"] = by_pattern(result[part].pop("by_path"))
    return result


def combine(rounds):
    """One size's rounds as one result: each time and CPU figure the median of the rounds, each round's wall
    time kept (``rounds_wall_s``); requests and slowest tasks of the last round."""
    result = json.loads(json.dumps(rounds[-1]))
    result["rounds"] = len(rounds)
    for part in PARTS + ("floor",):
        if part not in result:
            continue
        for key in ("wall_s", "controller_cpu_s", "server_cpu_s", "nodes_cpu_s"):
            values = [one[part][key] for one in rounds if key in one[part]]
            if values:
                result[part][key] = round(statistics.median(values), 2)
        result[part]["rounds_wall_s"] = [one[part]["wall_s"] for one in rounds]
    return result


def growing_paths(small, large, part):
    """Request patterns whose count per node is higher with more nodes: (pattern, per node small, per node large)."""
    out = []
    few, many = small[part]["by_pattern"], large[part]["by_pattern"]
    for pattern in sorted(many):
        per_small = few.get(pattern, 0) / float(small["nodes"])
        per_large = many[pattern] / float(large["nodes"])
        # 10 % for polls that a slower rollout repeats.
        if per_large > per_small * 1.1:
            out.append((pattern, round(per_small, 2), round(per_large, 2)))
    return out


def report(results, forks, load):
    print("gpu_device_plugin and gpu_smoke_test against a test cluster (tests/controlplane: kube-apiserver, controller "
          "manager and scheduler %s, etcd, kwok Nodes), 8x H100 per node; through DRA against a fresh one with CDI in "
          "every node's runtime" % KUBERNETES_VERSION)
    print("forks=%d for the set-up; %d CPUs shared by the controller, the control plane and the fake nodes; load "
          "average before %s, after %s" % (forks, os.cpu_count(), load,
                                           "/".join("%.1f" % value for value in os.getloadavg())))
    print("")
    print("%-31s %6s %9s %9s %10s %10s %9s %9s  %s" % ("part", "nodes", "wall s", "requests", "req/node", "ctl CPU s",
                                                       "cp CPU s", "node CPU s", "wall s of each round"))
    for part in PARTS:
        for result in results:
            if part not in result:
                continue
            figures = result[part]
            print("%-31s %6d %9.1f %9d %10.2f %10.1f %9.1f %9.1f  %s" % (
                TITLES[part], result["nodes"], figures["wall_s"], figures["requests"], figures["requests_per_node"],
                figures["controller_cpu_s"], figures["server_cpu_s"], figures["nodes_cpu_s"],
                " / ".join("%.1f" % value for value in figures.get("rounds_wall_s", []))))
    for result in results:
        print("%-31s %6d %9.1f %9s %10s %10.1f %9s %9s  %s" % (
            "playbook floor", result["nodes"], result["floor"]["wall_s"], "-", "-", result["floor"]["controller_cpu_s"],
            "-", "-", " / ".join("%.1f" % value for value in result["floor"].get("rounds_wall_s", []))))
    print("(playbook floor: ansible-playbook with one task that reads every GPU host's cached facts; set-up, not "
          "timed above: nvml_facts on the first GPU host and its facts copied to the others took %s)" % ", ".join(
              "%.0f s for %d" % (result["setup_s"], result["nodes"]) for result in results))
    print("")
    verdicts = {}
    for part in PARTS:
        measured = [result for result in results if part in result]
        small, large = measured[0] if measured else None, measured[-1] if measured else None
        if not measured or large["nodes"] == small["nodes"]:
            continue
        ratio = large[part]["wall_s"] / small[part]["wall_s"]
        growing = growing_paths(small, large, part)
        extra = (large[part]["requests"] - small[part]["requests"]) / float(large["nodes"] - small["nodes"])
        aimed = part in AIMED
        verdicts[part] = {"ratio": round(ratio, 2), "aimed": aimed, "time_aim_met": ratio <= TARGET_RATIO,
                          "requests_per_added_node": round(extra, 2), "growing_paths": growing,
                          "requests_aim_met": not growing,
                          "ratios": dict((str(result["nodes"]), round(result[part]["wall_s"] / small[part]["wall_s"], 2))
                                         for result in measured[1:])}
        print("%s: %d:%d wall-time ratio %.2f (%s)%s; %.2f requests per added node; "
              "requests per node constant: %s" % (
                  TITLES[part], large["nodes"], small["nodes"], ratio,
                  ("aim <= %.1f: %s" % (TARGET_RATIO, "met" if ratio <= TARGET_RATIO else "NOT met")) if aimed
                  else "no aim: what part (c) needs, timed apart",
                  "".join("; %s:%d %.2f" % (size, small["nodes"], value)
                          for size, value in verdicts[part]["ratios"].items() if int(size) != large["nodes"]),
                  extra, "yes" if not growing else "NO, growing: %s" % growing))
        print("  slowest tasks at %d nodes: %s" % (large["nodes"], "; ".join(
            "%s %.1f s" % tuple(item) for item in large[part]["slowest_tasks"][:4])))
        busiest = sorted(large[part]["by_pattern"].items(), key=lambda item: -item[1])[:6]
        print("  requests per node at %d nodes: %s" % (large["nodes"], "; ".join(
            "%s %.2f" % (pattern, count / float(large["nodes"])) for pattern, count in busiest)))
    for result in results:
        if "smoke_test" in result and "dra_smoke_test" in result:
            dp, dra = result["smoke_test"], result["dra_smoke_test"]
            print("at %d nodes, (c) through DRA against (b) through the device plugin: %.1f s against %.1f s (%.2fx), "
                  "%.2f requests per node against %.2f" % (result["nodes"], dra["wall_s"], dp["wall_s"],
                                                           dra["wall_s"] / dp["wall_s"], dra["requests_per_node"],
                                                           dp["requests_per_node"]))
    return verdicts


def sizes_of(text):
    return sorted(set(int(size) for size in text.split(",") if size.strip()))


def main():
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--nodes", default="1,300,1000",
                        help="comma-separated cluster sizes of parts (a) and (b) (default 1,300,1000)")
    parser.add_argument("--dra-nodes", default=None,
                        help="comma-separated cluster sizes of gpu_dra_driver and part (c); default: those of --nodes up "
                        "to %d (1,300 with the default --nodes); none: no DRA part" % DRA_DEFAULT_MAX)
    parser.add_argument("--forks", type=int, default=8, help="ansible forks for the set-up fact gathering")
    parser.add_argument("--out", default=os.path.join(REPO, ".cache", "bench", "cluster_scale.json"),
                        help="where to write the JSON result")
    parser.add_argument("--rounds", type=int, default=2,
                        help="how many times every size is measured, the sizes in turn (default 2); each figure is "
                        "the median of the rounds")
    parser.add_argument("--keep", action="store_true", help="keep the work folder (inventories, logs)")
    args = parser.parse_args()
    dp_sizes = sizes_of(args.nodes)
    if args.dra_nodes is None:
        dra_sizes = [size for size in dp_sizes if size <= DRA_DEFAULT_MAX]
    elif args.dra_nodes.strip().lower() == "none":
        dra_sizes = []
    else:
        dra_sizes = sizes_of(args.dra_nodes)
    sizes = sorted(set(dp_sizes) | set(dra_sizes))
    if not sizes or sizes[0] < 1:
        parser.error("give cluster sizes of 1 node or more")
    if args.rounds < 1:
        parser.error("--rounds is %d; give 1 or more" % args.rounds)
    load = "/".join("%.1f" % value for value in os.getloadavg())
    started = time.monotonic()
    root = tempfile.mkdtemp(prefix="gpufleet-bench-cluster-")
    rounds = [[measure(size, args.forks, root, round_no, device_plugin=size in dp_sizes,
                       dra=size in dra_sizes) for size in sizes]
              for round_no in range(args.rounds)]
    results = [combine([one[index] for one in rounds]) for index in range(len(sizes))]
    verdicts = report(results, args.forks, load)
    total = time.monotonic() - started
    print("benchmark run time %.0f s%s" % (total, "; work folder %s" % root if args.keep else ""))
    if not args.keep:
        subprocess.run(["rm", "-rf", root], check=False)
    os.makedirs(os.path.dirname(os.path.abspath(args.out)), exist_ok=True)
    with open(args.out, "w", encoding="utf-8") as handle:
        json.dump({"kubernetes_version": KUBERNETES_VERSION, "forks": args.forks,
                   "rounds": args.rounds, "cpus": os.cpu_count(), "load_before": load, "results": results,
                   "verdicts": verdicts, "run_s": round(total, 1)}, handle, indent=2)
    print("result written to %s" % args.out)
    aimed = [verdict for verdict in verdicts.values() if verdict["aimed"]]
    return 0 if aimed and all(v["time_aim_met"] and v["requests_aim_met"] for v in aimed) else 1


if __name__ == "__main__":
    sys.exit(main())

"""Real Kubernetes nodes for the tests: privileged Debian 13 systemd containers running Debian's
containerd and the real kubelet, joined to the test control plane (tests/controlplane) by the real
`kubeadm join` with a bootstrap token.

    realnode.py up --state CPSTATE --node NAME [--node NAME ...] [--kubelet newest|oldest]
    realnode.py down --state CPSTATE [--node NAME ...]

CPSTATE is the folder of a control plane started with `--node-address` (the podman bridge's
gateway, `realnode.py address` prints it), so that the nodes reach its API server. `up` gives the
control plane what `kubeadm init` would have set up for joining nodes, through kubeadm's own
`init phase` commands (the kubeadm-config and kubelet-config ConfigMaps, a bootstrap token,
cluster-info in kube-public, the RBAC of node bootstrap and CSR approval), once per control plane;
then starts each node's container, imports the images of tests/realnode/build.sh into its
containerd, runs `kubeadm join` there (discovery by token and the CA's public key hash) and returns
once each Node is Ready. The kubelet's files are then kubeadm's own: /var/lib/kubelet/config.yaml,
kubeadm-flags.env, /etc/kubernetes/kubelet.conf with the certificate the CSR got.

Like kind's nodes, the kubelet of a node in a privileged container sets a few kernel tunables of
the machine (vm.overcommit_memory, kernel.panic, kernel.panic_on_oops, ...). `up` records their
values before the machine's first real node (one record per machine and boot, so that a run killed
before `down` leaves the originals) and `down` puts them back once no real node is left.
"""

from __future__ import annotations

import argparse
import contextlib
import hashlib
import json
import os
import pathlib
import secrets
import string
import subprocess
import sys
import time
import urllib.error
import urllib.request

HERE = pathlib.Path(__file__).resolve().parent
REPO = HERE.parent.parent
sys.path.insert(0, str(REPO / "tests" / "controlplane"))
import controlplane  # noqa: E402  pylint: disable=wrong-import-position

CONTROLPLANE = REPO / "tests" / "controlplane" / "controlplane.py"
BIN = REPO / ".cache" / "controlplane" / "bin"
KUBELETS = {"newest": BIN / "kubelet", "oldest": BIN.parent / "kubernetes-oldest" / "kubelet"}
KUBEADM = BIN / "kubeadm"
IMAGES = REPO / ".cache" / "realnode" / "images"
IMAGE = "localhost/gpufleet-debian:13-node"
# kubeadm's kubelet unit and drop-in, as its packages install them (shared with the demo and
# molecule gpu_kubelet)
UNIT_FILES = REPO / "molecule" / "gpu_kubelet" / "files"
# What the kubelet sets at start unless protectKernelDefaults (pkg/kubelet/cm: setupKernelTunables)
TUNABLES = ("vm.overcommit_memory", "vm.panic_on_oom", "kernel.panic", "kernel.panic_on_oops",
            "kernel.keys.root_maxkeys", "kernel.keys.root_maxbytes")
POD_SUBNET = "10.244.0.0/16"
# The GPU side (up(gpus=True)): tests/nodetools' NVML mock and nvidia-smi STAND-IN, build.sh's libcuda
NODETOOLS = REPO / ".cache" / "nodetools"
DRIVER_STAND_INS = REPO / ".cache" / "realnode" / "driver"
# The device nodes' majors: the NVIDIA kernel module's fixed one, and one for nvidia-uvm (the
# kernel gives it a dynamic major; no module here, so any free one)
NVIDIA_MAJOR, UVM_MAJOR = 195, 235
LABEL = "org.gpufleet.realnode"
# The machine's kernel tunables as they were before the first real node (record_tunables)
TUNABLES_RECORD = pathlib.Path(os.environ.get("REALNODE_TUNABLES_RECORD", "/var/tmp/gpufleet-realnode/sysctl.json"))


class RealNodeError(Exception):
    pass


def run(argv, *, check=True, timeout=300, input_text=None, env_lib=None):
    env = dict(os.environ, LD_LIBRARY_PATH=str(env_lib)) if env_lib else None
    result = subprocess.run([str(a) for a in argv], capture_output=True, text=True, check=False,
                            timeout=timeout, input=input_text, env=env)
    if check and result.returncode:
        raise RealNodeError(f"{' '.join(str(a) for a in argv)} exited with {result.returncode}:\n"
                            f"{result.stdout[-3000:]}{result.stderr[-3000:]}")
    return result


def node_exec(name, *argv, check=True, timeout=300):
    """A command in a node's container, as root."""
    return run(["podman", "exec", name, *argv], check=check, timeout=timeout)


def bridge_address():
    """The podman bridge's gateway: the machine's address as the node containers reach it."""
    out = run(["podman", "network", "inspect", "podman"]).stdout
    for subnet in json.loads(out)[0].get("subnets") or []:
        if subnet.get("gateway") and ":" not in subnet["gateway"]:
            return subnet["gateway"]
    raise RealNodeError("the podman network has no IPv4 gateway")


class Cluster:
    """The control plane of CPSTATE, as an administrator sees it."""

    def __init__(self, state):
        self.state = pathlib.Path(state).resolve()
        try:
            self.endpoints = json.loads((self.state / "endpoints.json").read_text())
        except OSError as err:
            raise RealNodeError(f"no control plane runs from {self.state}: {err}") from err
        if not self.endpoints.get("node_server"):
            raise RealNodeError(f"the control plane of {self.state} serves no node address: start it with --node-address "
                                f"{bridge_address()}")
        self.context = controlplane.client_context(self.state / "pki")
        self.folder = self.state / "realnodes"
        self.folder.mkdir(exist_ok=True)

    def request(self, method, path, body=None):
        data = json.dumps(body).encode() if body is not None else None
        request = urllib.request.Request(self.endpoints["direct"] + path, data=data, method=method,
                                         headers={"Content-Type": "application/json"})
        with urllib.request.urlopen(request, context=self.context, timeout=10) as response:
            return json.loads(response.read() or b"{}")

    def node(self, name):
        try:
            return self.request("GET", f"/api/v1/nodes/{name}")
        except urllib.error.HTTPError as err:
            if err.code == 404:
                return None
            raise

    def nodes_file(self):
        path = self.folder / "nodes.json"
        return json.loads(path.read_text()) if path.exists() else {}

    def save_nodes(self, nodes):
        (self.folder / "nodes.json").write_text(json.dumps(nodes, indent=1) + "\n")


def kubeadm_config(cluster, token):
    version = cluster.request("GET", "/version")["gitVersion"]
    own = run([KUBEADM, "version", "-o", "short"]).stdout.strip()
    if version.split(".")[:2] != own.split(".")[:2]:
        raise RealNodeError(f"kubeadm {own} joins nodes to a control plane of its own release; this one runs {version}")
    endpoint = cluster.endpoints["node_server"].removeprefix("https://")
    documents = [
        {"apiVersion": "kubeadm.k8s.io/v1beta4", "kind": "InitConfiguration",
         "bootstrapTokens": [{"token": token, "ttl": "24h", "usages": ["signing", "authentication"],
                              "groups": ["system:bootstrappers:kubeadm:default-node-token"]}]},
        {"apiVersion": "kubeadm.k8s.io/v1beta4", "kind": "ClusterConfiguration", "kubernetesVersion": version,
         "controlPlaneEndpoint": endpoint,
         "networking": {"serviceSubnet": controlplane.SERVICE_CIDR, "podSubnet": POD_SUBNET}},
        # The machines run cgroup v1 with the cgroupfs driver: from 1.35 the kubelet starts there only
        # with failCgroupV1: false. Swap may be on on a test machine.
        # The kubelet sees the machine's own disk: its image garbage collection (85 % used by default) would
        # delete the imported images nothing can pull again, and its eviction thresholds evict pods for
        # the machine's use of it. Both off, as kind does for its nodes.
        {"apiVersion": "kubelet.config.k8s.io/v1beta1", "kind": "KubeletConfiguration",
         "cgroupDriver": "cgroupfs", "failCgroupV1": False, "failSwapOn": False,
         "imageGCHighThresholdPercent": 100,
         "evictionHard": {"nodefs.available": "0%", "nodefs.inodesFree": "0%", "imagefs.available": "0%"}},
    ]
    return "---\n".join(json.dumps(doc) + "\n" for doc in documents)


def prepare_control_plane(cluster):
    """What kubeadm init sets up for joining nodes, by kubeadm's own phases; once per control plane
    (a state folder started again has a new CA: its token file names the CA it was made for)."""
    token_file = cluster.folder / "token.json"
    ca_hash = ca_cert_hash(cluster.state)
    if token_file.exists():
        known = json.loads(token_file.read_text())
        if known.get("caCertHash") == ca_hash:
            return known["token"]
    alphabet = string.ascii_lowercase + string.digits
    token = "".join(secrets.choice(alphabet) for position in range(22))
    token = token[:6] + "." + token[6:]
    config = cluster.folder / "kubeadm.yaml"
    config.write_text(kubeadm_config(cluster, token))
    kubeconfig = cluster.state / "nodes" / "admin.kubeconfig"
    for phase in (["upload-config", "kubeadm"], ["upload-config", "kubelet"], ["bootstrap-token"]):
        result = run([KUBEADM, "init", "phase", *phase, "--config", config, "--kubeconfig", kubeconfig])
        (cluster.folder / f"kubeadm-{'-'.join(phase)}.log").write_text(result.stdout + result.stderr)
    token_file.write_text(json.dumps({"token": token, "caCertHash": ca_hash}) + "\n")
    token_file.chmod(0o600)
    return token


def ca_cert_hash(state):
    """kubeadm's --discovery-token-ca-cert-hash: SHA-256 of the CA's SubjectPublicKeyInfo."""
    pem = run(["openssl", "x509", "-in", pathlib.Path(state) / "pki" / "ca.crt", "-noout", "-pubkey"]).stdout
    der = subprocess.run(["openssl", "pkey", "-pubin", "-outform", "der"], input=pem.encode(), capture_output=True,
                         check=True).stdout
    return "sha256:" + hashlib.sha256(der).hexdigest()


def labelled_containers():
    """The names of this machine's real-node containers, of any control plane."""
    out = run(["podman", "ps", "-a", "--filter", f"label={LABEL}", "--format", "{{.Names}}"], check=False).stdout
    return set(out.split())


def boot_id():
    return pathlib.Path("/proc/sys/kernel/random/boot_id").read_text().strip()


def record_tunables(path=None):
    """Keep the machine's kernel tunables before any real node of any control plane runs: one record per
    machine and boot (TUNABLES_RECORD), so that a run killed before down() leaves the original values
    for the next one to put back, never the kubelet's."""
    path = pathlib.Path(path or TUNABLES_RECORD)
    if path.exists() and json.loads(path.read_text()).get("boot_id") == boot_id():
        return
    if labelled_containers():  # a node already runs: the values now are a kubelet's, not the machine's
        return
    values = {}
    for key in TUNABLES:
        result = run(["sysctl", "-n", key], check=False)
        if not result.returncode:
            values[key] = result.stdout.strip()
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(json.dumps({"boot_id": boot_id(), "values": values}, indent=1) + "\n")


def restore_tunables(path=None):
    """Put the recorded values back and forget them (down() calls it once no real node is left)."""
    path = pathlib.Path(path or TUNABLES_RECORD)
    if path.exists():
        record = json.loads(path.read_text())
        if record.get("boot_id") == boot_id():
            for key, value in record.get("values", {}).items():
                run(["sysctl", "-q", "-w", f"{key}={value}"], check=False)
        path.unlink()


def start_node(cluster, name, index, kubelet, image, volumes):
    present = run(["podman", "inspect", "--type", "container", "--format", f'{{{{index .Config.Labels "{LABEL}"}}}}', name],
                  check=False)
    if not present.returncode and present.stdout.strip() != str(cluster.state):
        raise RealNodeError(f"a container named {name} exists that is not a real node of {cluster.state} "
                            f"({LABEL}={present.stdout.strip() or 'none'}): remove it or choose another name")
    run(["podman", "rm", "-f", "-v", "--ignore", name])
    run(["podman", "run", "-d", "--name", name, "--hostname", name, "--privileged", "--cgroupns=private",
         "--systemd=always", "--label", f"{LABEL}={cluster.state}",
         # containerd's overlay snapshots cannot sit on the container's own overlay root
         "-v", "/var/lib/containerd",
         "-v", f"{kubelet}:/usr/bin/kubelet:ro", "-v", f"{KUBEADM}:/usr/bin/kubeadm:ro",
         "-v", f"{IMAGES}:/srv/realnode/images:ro", *[arg for volume in volumes for arg in ("-v", volume)],
         image, "/sbin/init"])
    deadline = time.monotonic() + 60
    while True:
        state = node_exec(name, "systemctl", "is-system-running", check=False).stdout.strip()
        if state in ("running", "degraded"):
            break
        if time.monotonic() > deadline:
            raise RealNodeError(f"{name}: systemd did not come up ({state})")
        time.sleep(0.5)
    run(["podman", "cp", UNIT_FILES / "kubelet.service", f"{name}:/usr/lib/systemd/system/kubelet.service"])
    run(["podman", "cp", UNIT_FILES / "10-kubeadm.conf",
         f"{name}:/usr/lib/systemd/system/kubelet.service.d/10-kubeadm.conf"])
    # The pods' network: a bridge with a subnet of its own per node (no pod talks across nodes here)
    conflist = {"cniVersion": "1.0.0", "name": "gpufleet-test", "plugins": [
        {"type": "bridge", "bridge": "cni0", "isGateway": True, "ipMasq": False,
         "ipam": {"type": "host-local", "ranges": [[{"subnet": f"10.244.{index}.0/24"}]], "routes": [{"dst": "0.0.0.0/0"}]}},
        {"type": "portmap", "capabilities": {"portMappings": True}}]}
    run(["podman", "exec", "-i", name, "sh", "-c", "cat > /etc/cni/net.d/10-gpufleet-test.conflist"],
        input_text=json.dumps(conflist, indent=1) + "\n")
    node_exec(name, "systemctl", "daemon-reload")
    node_exec(name, "systemctl", "enable", "kubelet")
    for archive in sorted(IMAGES.glob("*.tar")):
        node_exec(name, "ctr", "-n", "k8s.io", "images", "import", "--no-unpack", f"/srv/realnode/images/{archive.name}")


def driver_version():
    """The driver version NVML reports (the mock's), as nvidia-smi --version prints it."""
    result = run([NODETOOLS / "bin" / "nvidia-smi", "--version"], env_lib=NODETOOLS / "lib")
    for line in result.stdout.splitlines():
        if line.startswith("DRIVER version"):
            return line.split(":", 1)[1].strip()
    raise RealNodeError(f"nvidia-smi --version named no driver version:\n{result.stdout}")


def add_gpus(name):
    """The node's GPU side, as the driver's packages and kernel module leave a node: NVML's library
    (tests/nodetools' bridge to go-nvml's mock, a DGX H100) as libnvidia-ml.so.<version>, libcuda's
    STAND-IN, nvidia-smi's STAND-IN (tests/nodetools), Debian's pynvml (python3-pynvml's module, for
    nvml_facts), and the device nodes the module would make,
    one per GPU NVML lists. Nothing of it reaches a real GPU."""
    version = driver_version()
    script = f"""set -e
lib=/usr/lib/x86_64-linux-gnu
install -m 0644 /srv/realnode/nodetools/lib/libnvidia-ml.so.1 $lib/libnvidia-ml.so.{version}
ln -sf libnvidia-ml.so.{version} $lib/libnvidia-ml.so.1
install -m 0644 /srv/realnode/driver/libcuda.so.STAND-IN $lib/libcuda.so.{version}
ln -sf libcuda.so.{version} $lib/libcuda.so.1
install -m 0755 /srv/realnode/nodetools/bin/nvidia-smi /usr/bin/nvidia-smi
install -m 0644 /srv/realnode/driver/pynvml.py /usr/lib/python3/dist-packages/pynvml.py
ldconfig
gpus=$(nvidia-smi -L | grep -c '^GPU ')
mknod -m 0666 /dev/nvidiactl c {NVIDIA_MAJOR} 255
i=0
while [ $i -lt $gpus ]; do mknod -m 0666 /dev/nvidia$i c {NVIDIA_MAJOR} $i; i=$((i + 1)); done
mknod -m 0666 /dev/nvidia-uvm c {UVM_MAJOR} 0
mknod -m 0666 /dev/nvidia-uvm-tools c {UVM_MAJOR} 1
echo $gpus
"""
    return int(node_exec(name, "sh", "-c", script).stdout.split()[-1])


def join(cluster, name, token):
    """kubeadm join with a JoinConfiguration: discovery by the bootstrap token and the CA's public
    key hash, containerd's socket, and time limits shorter than kubeadm's own 5 minutes."""
    join_config = {
        "apiVersion": "kubeadm.k8s.io/v1beta4", "kind": "JoinConfiguration",
        "discovery": {"bootstrapToken": {"token": token,
                                         "apiServerEndpoint": cluster.endpoints["node_server"].removeprefix("https://"),
                                         "caCertHashes": [ca_cert_hash(cluster.state)]}},
        "nodeRegistration": {"name": name, "criSocket": "unix:///run/containerd/containerd.sock",
                             # the container fails checks a machine passes (kernel configuration, modules)
                             "ignorePreflightErrors": ["all"]},
        "timeouts": {"discovery": "60s", "tlsBootstrap": "120s", "kubeletHealthCheck": "120s"},
    }
    run(["podman", "exec", "-i", name, "sh", "-c", "mkdir -p /etc/kubernetes && cat > /etc/kubernetes/join.yaml"],
        input_text=json.dumps(join_config, indent=1) + "\n")
    result = node_exec(name, "kubeadm", "join", "--config", "/etc/kubernetes/join.yaml", check=False, timeout=330)
    (cluster.folder / f"join-{name}.log").write_text(result.stdout + result.stderr)
    if result.returncode:
        journal = node_exec(name, "journalctl", "-u", "kubelet", "--no-pager", "-n", "30", check=False).stdout
        raise RealNodeError(f"kubeadm join of {name} exited with {result.returncode}:\n{result.stdout[-2000:]}"
                            f"{result.stderr[-2000:]}\nthe kubelet's journal:\n{journal}")


def wait_ready(cluster, name, timeout=120):
    deadline = time.monotonic() + timeout
    seen = "no Node"
    while time.monotonic() < deadline:
        node = cluster.node(name)
        if node:
            ready = [c for c in node.get("status", {}).get("conditions", []) if c["type"] == "Ready"]
            if ready and ready[0]["status"] == "True":
                return node
            seen = f"Ready {ready[0]['status']}: {ready[0].get('message')}" if ready else "no Ready condition"
        time.sleep(0.5)
    journal = node_exec(name, "journalctl", "-u", "kubelet", "--no-pager", "-n", "30", check=False).stdout
    raise RealNodeError(f"{name} not Ready after {timeout} s ({seen}); the kubelet's journal:\n{journal}")


def up(state, names, kubelet="newest", image=IMAGE, volumes=(), gpus=False):
    """Start and join the named nodes, with a GPU side when gpus is true; returns their Node objects."""
    needed = [KUBEADM, KUBELETS[kubelet], IMAGES / "pause.tar"]
    if gpus:
        needed += [NODETOOLS / "bin" / "nvidia-smi", NODETOOLS / "lib" / "libnvidia-ml.so.1",
                   DRIVER_STAND_INS / "libcuda.so.STAND-IN"]
        volumes = [*volumes, f"{NODETOOLS}:/srv/realnode/nodetools:ro", f"{DRIVER_STAND_INS}:/srv/realnode/driver:ro"]
    for path in needed:
        if not path.exists():
            raise RealNodeError(f"{path} not found: build it first (make realnode-build nodetools-build)")
    cluster = Cluster(state)
    nodes = cluster.nodes_file()
    record_tunables()
    token = prepare_control_plane(cluster)
    joined = {}
    for name in names:
        index = nodes.get(name, {}).get("index") or max([n["index"] for n in nodes.values()] + [0]) + 1
        nodes[name] = {"index": index, "kubelet": kubelet, "image": image}
        cluster.save_nodes(nodes)
        start_node(cluster, name, index, KUBELETS[kubelet], image, volumes)
        if gpus:
            nodes[name]["gpus"] = add_gpus(name)
            cluster.save_nodes(nodes)
        join(cluster, name, token)
    for name in names:
        joined[name] = wait_ready(cluster, name)
    return joined


def down(state, names=None):
    """Remove the named nodes (default: all of CPSTATE's): the Node object when the API answers,
    then the container and its containerd volume; the kernel tunables go back with the last one."""
    cluster_state = pathlib.Path(state).resolve()
    path = cluster_state / "realnodes" / "nodes.json"
    nodes = json.loads(path.read_text()) if path.exists() else {}
    try:
        cluster = Cluster(cluster_state)
    except RealNodeError:
        cluster = None
    for name in list(names or nodes):
        if cluster:
            try:
                cluster.request("DELETE", f"/api/v1/nodes/{name}")
            except (urllib.error.URLError, OSError):
                pass
        run(["podman", "rm", "-f", "-v", "-t", "5", "--ignore", name], check=False)
        nodes.pop(name, None)
    if path.parent.exists():
        path.write_text(json.dumps(nodes, indent=1) + "\n")
    if not labelled_containers():
        restore_tunables()


@contextlib.contextmanager
def control_plane(state, ttl=900):
    """For tests: a control plane the real nodes can join (tests/controlplane, --node-address), and at
    the end every real node of it removed and the control plane stopped. Yields its folder."""
    state = pathlib.Path(state)
    run([sys.executable, CONTROLPLANE, "start", "--state", state, "--ttl", ttl, "--node-address", bridge_address()],
        timeout=600)
    try:
        yield state
    finally:
        down(state)
        run([sys.executable, CONTROLPLANE, "stop", "--state", state], check=False)


def ansible_playbook(inventory, playbook, *args, timeout=600):
    """For tests: ansible-playbook of this Python's venv, with the collection from ANSIBLE_COLLECTIONS_PATH
    (make's) or the checkout's .collections."""
    env = dict(os.environ, ANSIBLE_PIPELINING="true", ANSIBLE_FORCE_COLOR="0",
               ANSIBLE_COLLECTIONS_PATH=os.environ.get("ANSIBLE_COLLECTIONS_PATH", str(REPO / ".collections")))
    return subprocess.run([str(a) for a in (pathlib.Path(sys.executable).parent / "ansible-playbook", "-i", inventory,
                                            playbook, *args)],
                          capture_output=True, text=True, env=env, check=False, timeout=timeout)


def main(argv=None):
    top = argparse.ArgumentParser(description=__doc__.split("\n\n", 1)[0])
    sub = top.add_subparsers(dest="command", required=True)
    cmd_up = sub.add_parser("up")
    cmd_up.add_argument("--state", required=True)
    cmd_up.add_argument("--node", action="append", required=True)
    cmd_up.add_argument("--kubelet", choices=sorted(KUBELETS), default="newest")
    cmd_up.add_argument("--image", default=IMAGE)
    cmd_up.add_argument("--volume", action="append", default=[], help="one more podman -v for each node")
    cmd_up.add_argument("--gpus", action="store_true", help="give each node a GPU side (NVML's mock, device nodes)")
    cmd_down = sub.add_parser("down")
    cmd_down.add_argument("--state", required=True)
    cmd_down.add_argument("--node", action="append")
    sub.add_parser("address", help="the address to start the control plane with (--node-address)")
    args = top.parse_args(argv)
    try:
        if args.command == "address":
            print(bridge_address())
        elif args.command == "up":
            for name, node in up(args.state, args.node, args.kubelet, args.image, args.volume, args.gpus).items():
                info = node["status"]["nodeInfo"]
                print(f"{name}: Ready, kubelet {info['kubeletVersion']}, {info['containerRuntimeVersion']}, {info['osImage']}")
        else:
            down(args.state, args.node)
    except RealNodeError as err:
        hint = f"\n(what was started stays: realnode.py down --state {args.state} removes it)" if args.command == "up" else ""
        sys.exit(f"realnode: {err}{hint}")


if __name__ == "__main__":
    main()

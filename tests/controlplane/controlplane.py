"""The tests' Kubernetes control plane: etcd, kube-apiserver, kube-controller-manager,
kube-scheduler and kwok, the real programs (tests/controlplane/build.sh), on loopback.

    python3 tests/controlplane/controlplane.py start --state DIR [--ttl SECONDS]
    python3 tests/controlplane/controlplane.py stop --state DIR
    python3 tests/controlplane/controlplane.py serve --state DIR      (in the foreground)

`start` returns once every component answers its readiness check, leaving in DIR:
  admin.kubeconfig      a cluster administrator (group system:masters)
  users/NAME.kubeconfig one per user of `--user NAME` (no permission until RBAC grants one)
  pki/                  the CA, the serving and client certificates, the service-account key,
                        all made for this run
  logs/                 each component's output
  endpoints.json        the API server's URL and each component's port
A supervisor process owns the components: `stop`, its --ttl running out, or a component
exiting stops every one of them (the components also die with the supervisor), so a failed
test leaves no process behind.

Modelled on kwokctl's binary runtime (pkg/kwokctl/components) and controller-runtime's envtest
(pkg/internal/testing/controlplane): flags built from the run's settings, free ports, a PKI per
run, readiness read from each component's own health endpoint, every process stopped by its PID.
The flags follow what kubeadm sets up (authorization Node,RBAC, NodeRestriction on top of the
default admission plugins, service-account tokens signed by the run's key).
"""

from __future__ import annotations

import argparse
import ctypes
import json
import os
import pathlib
import shutil
import signal
import socket
import ssl
import subprocess
import sys
import time
import urllib.error
import urllib.request

HERE = pathlib.Path(__file__).resolve().parent
REPO = HERE.parent.parent
DEFAULT_BIN = REPO / ".cache" / "controlplane" / "bin"
COMPONENTS = ("etcd", "kube-apiserver", "kube-controller-manager", "kube-scheduler", "kwok", "faultproxy")
# Built by build.sh; the fault proxy is ours (faultproxy.py), run with this Python.
BINARIES = COMPONENTS[:-1]
SERVICE_CIDR = "10.96.0.0/12"
# The annotation kwok manages Nodes by: a Node without it is left alone (a test's own Node).
KWOK_NODE_ANNOTATION = "kwok.x-k8s.io/node"


class ControlPlaneError(Exception):
    pass


# --- ports, certificates, kubeconfigs --------------------------------------------------------

def free_port():
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


def openssl(*args, cwd):
    result = subprocess.run(["openssl", *args], cwd=cwd, capture_output=True, text=True, check=False)
    if result.returncode:
        raise ControlPlaneError(f"openssl {' '.join(args)}: {result.stderr.strip()}")


def issue(pki, name, subject, *, sans=None, client=False, server=False, ca="ca"):
    """A key and a certificate signed by one of the run's CAs (pki/ca.crt by default)."""
    usages = []
    if server:
        usages.append("serverAuth")
    if client:
        usages.append("clientAuth")
    ext = ["basicConstraints=critical,CA:FALSE", "keyUsage=critical,digitalSignature,keyEncipherment",
           "extendedKeyUsage=" + ",".join(usages)]
    if sans:
        ext.append("subjectAltName=" + ",".join(sans))
    (pki / f"{name}.ext").write_text("\n".join(ext) + "\n")
    openssl("ecparam", "-name", "prime256v1", "-genkey", "-noout", "-out", f"{name}.key", cwd=pki)
    openssl("req", "-new", "-key", f"{name}.key", "-subj", subject, "-out", f"{name}.csr", cwd=pki)
    openssl("x509", "-req", "-in", f"{name}.csr", "-CA", f"{ca}.crt", "-CAkey", f"{ca}.key", "-CAcreateserial",
            "-days", "7", "-sha256", "-extfile", f"{name}.ext", "-out", f"{name}.crt", cwd=pki)
    (pki / f"{name}.csr").unlink()
    (pki / f"{name}.ext").unlink()


# Client identities: file name -> subject. The components' own identities are those kubeadm
# gives them (the bootstrap policy binds system:kube-controller-manager and system:kube-scheduler
# to their ClusterRoles); kwok stands in for every node's kubelet and acts as an administrator.
IDENTITIES = {
    "admin": "/O=system:masters/CN=gpufleet-test-admin",
    "kube-controller-manager": "/CN=system:kube-controller-manager",
    "kube-scheduler": "/CN=system:kube-scheduler",
    "kwok": "/O=system:masters/CN=kwok-controller",
    "apiserver-kubelet-client": "/O=system:masters/CN=kube-apiserver-kubelet-client",
}


def make_ca(pki, name, subject):
    openssl("ecparam", "-name", "prime256v1", "-genkey", "-noout", "-out", f"{name}.key", cwd=pki)
    openssl("req", "-x509", "-new", "-key", f"{name}.key", "-subj", subject, "-days", "7",
            "-sha256", "-addext", "basicConstraints=critical,CA:TRUE",
            "-addext", "keyUsage=critical,keyCertSign,cRLSign,digitalSignature", "-out", f"{name}.crt", cwd=pki)


def make_pki(pki, users, node_address=None):
    pki.mkdir(parents=True, exist_ok=True)
    make_ca(pki, "ca", "/CN=gpufleet-test-ca")
    # the front proxy's own CA, as kubeadm keeps one: the fault proxy tells the API server who the
    # client is (kube-apiserver --requestheader-*), as kube-apiserver tells an aggregated API server
    make_ca(pki, "front-proxy-ca", "/CN=gpufleet-test-front-proxy-ca")
    issue(pki, "front-proxy-client", "/CN=front-proxy-client", client=True, ca="front-proxy-ca")
    issue(pki, "apiserver", "/CN=kube-apiserver", server=True,
          sans=["IP:127.0.0.1", "DNS:localhost", "IP:10.96.0.1", "DNS:kubernetes",
                "DNS:kubernetes.default", "DNS:kubernetes.default.svc", "DNS:kubernetes.default.svc.cluster.local",
                *([f"IP:{node_address}"] if node_address else [])])
    # kwok serves the kubelet API (logs, exec) of every fake node on one loopback address
    issue(pki, "kwok-serving", "/CN=kwok-kubelet", server=True, sans=["IP:127.0.0.1", "DNS:localhost"])
    # kube-controller-manager's and kube-scheduler's health endpoints (else a self-signed certificate)
    issue(pki, "components-serving", "/CN=localhost", server=True, sans=["IP:127.0.0.1", "DNS:localhost"])
    for name, subject in IDENTITIES.items():
        issue(pki, name, subject, client=True)
    for user in users:
        issue(pki, f"user-{user}", f"/CN={user}", client=True)
    # the service-account token signing key (kube-apiserver signs, KCM's token controller too)
    openssl("genpkey", "-algorithm", "RSA", "-pkeyopt", "rsa_keygen_bits:2048", "-out", "sa.key", cwd=pki)
    openssl("pkey", "-in", "sa.key", "-pubout", "-out", "sa.pub", cwd=pki)
    for key in pki.glob("*.key"):
        key.chmod(0o600)


def kubeconfig(path, server, pki, cert, user):
    """A kubeconfig with the certificate files inlined, so that it can be copied anywhere."""
    import base64  # pylint: disable=import-outside-toplevel

    def b64(name):
        return base64.b64encode((pki / name).read_bytes()).decode()

    config = {
        "apiVersion": "v1", "kind": "Config", "current-context": "gpufleet-test",
        "clusters": [{"name": "gpufleet-test", "cluster": {"server": server, "certificate-authority-data": b64("ca.crt")}}],
        "users": [{"name": user, "user": {"client-certificate-data": b64(f"{cert}.crt"),
                                          "client-key-data": b64(f"{cert}.key")}}],
        "contexts": [{"name": "gpufleet-test", "context": {"cluster": "gpufleet-test", "user": user}}],
    }
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(json.dumps(config, indent=1) + "\n")
    path.chmod(0o600)


# --- the components' command lines -----------------------------------------------------------

def component_args(name, bindir, state, ports, settings):
    pki = state / "pki"
    kube = state / "kubeconfigs"
    always_allow = "--authorization-always-allow-paths=/healthz,/readyz,/livez,/metrics"
    if name == "etcd":
        return [bindir / "etcd", "--name=gpufleet-test", f"--data-dir={settings['etcd_dir']}",
                "--unsafe-no-fsync", f"--listen-client-urls=http://127.0.0.1:{ports['etcd']}",
                f"--advertise-client-urls=http://127.0.0.1:{ports['etcd']}",
                f"--listen-peer-urls=http://127.0.0.1:{ports['etcd-peer']}",
                f"--initial-advertise-peer-urls=http://127.0.0.1:{ports['etcd-peer']}",
                f"--initial-cluster=gpufleet-test=http://127.0.0.1:{ports['etcd-peer']}",
                "--listen-metrics-urls=", "--log-level=warn", "--quota-backend-bytes=4294967296"]
    kubernetes_bin = settings.get("kubernetes_bin") or bindir
    if name == "kube-apiserver":
        return [kubernetes_bin / "kube-apiserver", f"--etcd-servers=http://127.0.0.1:{ports['etcd']}",
                # real nodes (realnode.py) reach it on the podman bridge's address as well
                f"--bind-address={'0.0.0.0' if settings.get('node_address') else '127.0.0.1'}",
                "--advertise-address=127.0.0.1", f"--secure-port={ports['kube-apiserver']}",
                # the `kubernetes` Service cannot point at a loopback address (as kwokctl runs it)
                "--endpoint-reconciler-type=none",
                f"--tls-cert-file={pki / 'apiserver.crt'}", f"--tls-private-key-file={pki / 'apiserver.key'}",
                f"--client-ca-file={pki / 'ca.crt'}",
                f"--kubelet-client-certificate={pki / 'apiserver-kubelet-client.crt'}",
                f"--kubelet-client-key={pki / 'apiserver-kubelet-client.key'}",
                "--kubelet-preferred-address-types=InternalIP,Hostname",
                "--service-account-issuer=https://kubernetes.default.svc.cluster.local",
                f"--service-account-key-file={pki / 'sa.pub'}", f"--service-account-signing-key-file={pki / 'sa.key'}",
                f"--service-cluster-ip-range={SERVICE_CIDR}",
                "--authorization-mode=Node,RBAC", "--enable-admission-plugins=NodeRestriction",
                "--allow-privileged=true", "--enable-bootstrap-token-auth=true",
                f"--requestheader-client-ca-file={pki / 'front-proxy-ca.crt'}",
                "--requestheader-allowed-names=front-proxy-client", "--requestheader-username-headers=X-Remote-User",
                "--requestheader-group-headers=X-Remote-Group", "--requestheader-extra-headers-prefix=X-Remote-Extra-",
                f"--proxy-client-cert-file={pki / 'front-proxy-client.crt'}",
                f"--proxy-client-key-file={pki / 'front-proxy-client.key'}",
                *settings.get("apiserver_args", [])]
    common = ["--bind-address=127.0.0.1", "--leader-elect=false", always_allow,
              f"--tls-cert-file={pki / 'components-serving.crt'}", f"--tls-private-key-file={pki / 'components-serving.key'}"]
    if name == "kube-controller-manager":
        return [kubernetes_bin / "kube-controller-manager", *common, f"--secure-port={ports['kube-controller-manager']}",
                f"--kubeconfig={kube / 'kube-controller-manager.kubeconfig'}",
                f"--authentication-kubeconfig={kube / 'kube-controller-manager.kubeconfig'}",
                f"--authorization-kubeconfig={kube / 'kube-controller-manager.kubeconfig'}",
                "--use-service-account-credentials=true",
                f"--service-account-private-key-file={pki / 'sa.key'}", f"--root-ca-file={pki / 'ca.crt'}",
                f"--cluster-signing-cert-file={pki / 'ca.crt'}", f"--cluster-signing-key-file={pki / 'ca.key'}",
                f"--service-cluster-ip-range={SERVICE_CIDR}", "--controllers=*,bootstrapsigner,tokencleaner",
                *([f"--node-monitor-grace-period={settings['node_grace']}s"] if settings["node_grace"] else []),
                *settings.get("controller_manager_args", [])]
    if name == "kube-scheduler":
        return [kubernetes_bin / "kube-scheduler", *common, f"--secure-port={ports['kube-scheduler']}",
                f"--kubeconfig={kube / 'kube-scheduler.kubeconfig'}",
                f"--authentication-kubeconfig={kube / 'kube-scheduler.kubeconfig'}",
                f"--authorization-kubeconfig={kube / 'kube-scheduler.kubeconfig'}"]
    if name == "kwok":
        return [bindir / "kwok", f"--kubeconfig={kube / 'kwok.kubeconfig'}", f"--config={state / 'kwok.yaml'}",
                "--manage-all-nodes=false", f"--manage-nodes-with-annotation-selector={KWOK_NODE_ANNOTATION}=fake",
                "--node-ip=127.0.0.1", "--node-name=localhost", f"--node-port={ports['kwok']}",
                f"--server-address=127.0.0.1:{ports['kwok']}",
                f"--tls-cert-file={pki / 'kwok-serving.crt'}", f"--tls-private-key-file={pki / 'kwok-serving.key'}",
                f"--node-lease-duration-seconds={settings['lease_seconds']}",
                # Logs come from the API (objects the GPU nodes' stand-in writes per pod)
                "--enable-crds=Logs"]
    if name == "gpunodes":
        return [settings["gpu_nodes_python"], HERE / "gpunodes.py", f"--cluster={settings['gpu_nodes']}",
                f"--kubeconfig={state / 'direct' / 'admin.kubeconfig'}", f"--state={state}"]
    if name == "faultproxy":
        return [sys.executable, HERE / "faultproxy.py", f"--listen={ports['faultproxy']}",
                f"--upstream=https://127.0.0.1:{ports['kube-apiserver']}", f"--pki={pki}",
                f"--faults={state / 'faults.json'}"]
    raise ValueError(name)


def health_url(name, ports):
    if name == "etcd":
        return f"http://127.0.0.1:{ports['etcd']}/health"
    if name == "kwok":
        return f"https://127.0.0.1:{ports['kwok']}/healthz"
    if name == "faultproxy":  # the API server's, through the proxy
        return f"https://127.0.0.1:{ports['faultproxy']}/readyz"
    if name == "gpunodes":  # it writes this file once it watches the pods
        return "file:gpunodes.ready"
    return f"https://127.0.0.1:{ports[name]}/readyz" if name != "kube-controller-manager" \
        else f"https://127.0.0.1:{ports[name]}/healthz"


def client_context(pki):
    context = ssl.create_default_context(cafile=str(pki / "ca.crt"))
    context.load_cert_chain(str(pki / "admin.crt"), str(pki / "admin.key"))
    return context


def probe(url, context, state=None):
    """True when the endpoint answers 200 (etcd: its JSON says healthy)."""
    if url.startswith("file:"):
        return (state / url[5:]).exists()
    try:
        with urllib.request.urlopen(url, context=context if url.startswith("https") else None, timeout=2) as response:
            body = response.read()
            if url.endswith("/health"):
                return json.loads(body).get("health") == "true"
            return response.status == 200
    except (urllib.error.URLError, OSError, ValueError):
        return False


# --- the supervisor --------------------------------------------------------------------------

PR_SET_PDEATHSIG = 1


def _die_with_parent():
    """In the child: be killed when the supervisor dies, however it dies."""
    libc = ctypes.CDLL("libc.so.6", use_errno=True)
    libc.prctl(PR_SET_PDEATHSIG, signal.SIGKILL)
    os.setpgid(0, 0)


class Supervisor:
    def __init__(self, state, bindir, settings):
        self.state = state
        self.bindir = bindir
        self.settings = settings
        self.procs = {}
        self.stopping = False

    def start_component(self, name, ports):
        argv = [str(a) for a in component_args(name, self.bindir, self.state, ports, self.settings)]
        log = open(self.state / "logs" / f"{name}.log", "ab")  # pylint: disable=consider-using-with
        log.write(("$ " + " ".join(argv) + "\n").encode())
        log.flush()
        self.procs[name] = subprocess.Popen(  # pylint: disable=consider-using-with
            argv, stdout=log, stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL, preexec_fn=_die_with_parent)

    def wait_ready(self, name, ports, context, timeout):
        url = health_url(name, ports)
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            proc = self.procs[name]
            if proc.poll() is not None:
                raise ControlPlaneError(f"{name} exited with {proc.returncode} before it was ready; "
                                        f"its log: {self.state / 'logs' / (name + '.log')}\n{tail(self.state / 'logs' / (name + '.log'))}")
            if probe(url, context, self.state):
                return
            time.sleep(0.1)
        raise ControlPlaneError(f"{name} not ready at {url} after {timeout} s; its log: {self.state / 'logs' / (name + '.log')}\n"
                                f"{tail(self.state / 'logs' / (name + '.log'))}")

    def stop_all(self, grace=10):
        self.stopping = True
        for name in reversed(list(self.procs)):
            proc = self.procs.get(name)
            if proc and proc.poll() is None:
                proc.terminate()
                try:
                    proc.wait(grace)
                except subprocess.TimeoutExpired:
                    proc.kill()
                    proc.wait()


def install_crds(server, context, folder, timeout):
    """kwok's CustomResourceDefinitions (copied from its module by build.sh), created from their
    YAML as the API server reads it, and waited for until served."""
    files = sorted(folder.glob("*.yaml"))
    if not files:
        raise ControlPlaneError(f"kwok's CRDs not found in {folder}: build the control plane first (tests/controlplane/build.sh)")
    for path in files:
        request = urllib.request.Request(f"{server}/apis/apiextensions.k8s.io/v1/customresourcedefinitions",
                                         data=path.read_bytes(), method="POST",
                                         headers={"Content-Type": "application/yaml"})
        try:
            with urllib.request.urlopen(request, context=context, timeout=10):
                pass
        except urllib.error.HTTPError as err:
            if err.code != 409:
                raise ControlPlaneError(f"creating the CRD of {path.name}: {err.code} {err.read()[:300]!r}") from err
    deadline = time.monotonic() + timeout
    while not probe(f"{server}/apis/kwok.x-k8s.io/v1alpha1/logs", context):
        if time.monotonic() > deadline:
            raise ControlPlaneError("kwok's CRDs were not served in time")
        time.sleep(0.1)


def populate(settings, state):
    """The cluster file's Nodes, namespaces and objects (gpunodes.py --populate)."""
    argv = [str(a) for a in component_args("gpunodes", None, state, {}, settings)] + ["--populate"]
    result = subprocess.run(argv, capture_output=True, text=True, check=False)
    if result.returncode:
        raise ControlPlaneError(f"writing the objects of {settings['gpu_nodes']} failed:\n{result.stdout}{result.stderr}")


def wait_default_service_account(server, context, timeout):
    """Pods are refused until kube-controller-manager made the namespace's `default`
    ServiceAccount; kubeadm's cluster is ready for them when it answers, so is this one."""
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if probe(f"{server}/api/v1/namespaces/default/serviceaccounts/default", context):
            return
        time.sleep(0.1)
    raise ControlPlaneError(f"kube-controller-manager made no default ServiceAccount in {timeout} s")


def tail(path, lines=15):
    try:
        return "\n".join(path.read_text(errors="replace").splitlines()[-lines:])
    except OSError:
        return ""


def serve(args):
    """Start everything, write endpoints.json, then watch until told to stop or a component dies."""
    state = pathlib.Path(args.state).resolve()
    bindir = pathlib.Path(args.bin).resolve()
    kubernetes_bin = pathlib.Path(args.kubernetes_bin).resolve() if args.kubernetes_bin else bindir
    for name in BINARIES:
        path = (kubernetes_bin if name.startswith("kube-") else bindir) / name
        if not os.access(path, os.X_OK):
            raise ControlPlaneError(f"{path} not found: build the control plane first (tests/controlplane/build.sh)")
    (state / "logs").mkdir(parents=True, exist_ok=True)
    etcd_dir = pathlib.Path(args.etcd_dir) if args.etcd_dir else state / "etcd"
    shutil.rmtree(etcd_dir, ignore_errors=True)
    settings = {"kubernetes_bin": kubernetes_bin, "etcd_dir": etcd_dir, "node_grace": args.node_grace, "lease_seconds": args.lease_seconds,
                "gpu_nodes": args.gpu_nodes, "gpu_nodes_python": args.gpu_nodes_python,
                "apiserver_args": args.apiserver_arg, "controller_manager_args": args.controller_manager_arg,
                "node_address": args.node_address}
    pki = state / "pki"
    make_pki(pki, args.user, args.node_address)
    ports = {name: free_port() for name in ("etcd", "etcd-peer", "kube-apiserver", "kube-controller-manager",
                                            "kube-scheduler", "kwok", "faultproxy")}
    direct = f"https://127.0.0.1:{ports['kube-apiserver']}"
    # the clients of the tests go through the fault proxy; the components and direct/ do not
    server = f"https://127.0.0.1:{ports['faultproxy']}"
    for name in ("kube-controller-manager", "kube-scheduler", "kwok"):
        kubeconfig(state / "kubeconfigs" / f"{name}.kubeconfig", direct, pki, name, name)
    kubeconfig(state / "admin.kubeconfig", server, pki, "admin", "gpufleet-test-admin")
    kubeconfig(state / "direct" / "admin.kubeconfig", direct, pki, "admin", "gpufleet-test-admin")
    if args.node_address:
        # what kubeadm's phases read the cluster's address and CA from (cluster-info), for real nodes
        kubeconfig(state / "nodes" / "admin.kubeconfig", f"https://{args.node_address}:{ports['kube-apiserver']}",
                   pki, "admin", "gpufleet-test-admin")
    for user in args.user:
        kubeconfig(state / "users" / f"{user}.kubeconfig", server, pki, f"user-{user}", user)
    (state / "faults.json").write_text("[]\n")
    write_kwok_config(state / "kwok.yaml", bindir.parent / "stages", args.kwok_config)

    sup = Supervisor(state, bindir, settings)
    context = client_context(pki)

    def on_signal(_signum, _frame):
        sup.stopping = True

    signal.signal(signal.SIGTERM, on_signal)
    signal.signal(signal.SIGINT, on_signal)
    started = time.monotonic()
    timings = {}
    try:
        for name in COMPONENTS + (("gpunodes",) if args.gpu_nodes else ()):
            begin = time.monotonic()
            if name == "gpunodes":
                populate(settings, state)
            if name == "kwok":
                install_crds(direct, context, bindir.parent / "crds", args.ready_timeout)
            sup.start_component(name, ports)
            sup.wait_ready(name, ports, context, args.ready_timeout)
            timings[name] = round(time.monotonic() - begin, 2)
        begin = time.monotonic()
        wait_default_service_account(direct, context, args.ready_timeout)
        timings["default ServiceAccount"] = round(time.monotonic() - begin, 2)
        node_server = f"https://{args.node_address}:{ports['kube-apiserver']}" if args.node_address else None
        endpoints = {"server": server, "direct": direct, "ports": ports, "node_server": node_server,
                     "pid": os.getpid(), "ready_seconds": timings,
                     "kubeconfig": str(state / "admin.kubeconfig"),
                     "users": {user: str(state / "users" / f"{user}.kubeconfig") for user in args.user}}
        (state / "endpoints.json").write_text(json.dumps(endpoints, indent=1) + "\n")
        deadline = started + args.ttl if args.ttl else None
        while not sup.stopping:
            for name, proc in sup.procs.items():
                if proc.poll() is not None:
                    (state / "failed").write_text(f"{name} exited with {proc.returncode}\n{tail(state / 'logs' / (name + '.log'))}\n")
                    sup.stopping = True
            if deadline and time.monotonic() > deadline:
                (state / "failed").write_text(f"stopped after its time to live of {args.ttl} s\n")
                break
            time.sleep(0.5)
    except ControlPlaneError as err:
        (state / "failed").write_text(f"{err}\n")
        raise
    finally:
        sup.stop_all()
        (state / "endpoints.json").unlink(missing_ok=True)
        shutil.rmtree(etcd_dir, ignore_errors=True)


def write_kwok_config(path, stock, extra):
    """kwok's configuration: kwok's own Stages (node and pod life cycles, copied from its module by
    build.sh), ours (tests/controlplane/stages/), then any files given with --kwok-config."""
    docs = []
    sources = sorted(stock.glob("*.yaml")) + sorted((HERE / "stages").glob("*.yaml")) + [pathlib.Path(p) for p in extra]
    if not any(stock.glob("*.yaml")):
        raise ControlPlaneError(f"kwok's stages not found in {stock}: build the control plane first (tests/controlplane/build.sh)")
    for source in sources:
        text = source.read_text().strip()
        docs.append(text[3:].lstrip("\n") if text.startswith("---") else text)
    path.write_text("\n---\n".join(docs) + "\n")


def start(args):
    state = pathlib.Path(args.state).resolve()
    if (state / "pid").exists():
        pid = int((state / "pid").read_text())
        if pid_alive(pid):
            raise ControlPlaneError(f"a control plane already runs from {state} (pid {pid}): stop it first")
    if state.exists():
        for stale in ("failed", "endpoints.json", "pid", "gpunodes.ready", "gpu-faults.json"):
            (state / stale).unlink(missing_ok=True)
        shutil.rmtree(state / "logs", ignore_errors=True)
    state.mkdir(parents=True, exist_ok=True)
    argv = [sys.executable, str(pathlib.Path(__file__).resolve()), "serve", *args.forward]
    with open(state / "supervisor.log", "wb") as log:
        proc = subprocess.Popen(argv, stdout=log, stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL,  # pylint: disable=consider-using-with
                                start_new_session=True)
    (state / "pid").write_text(f"{proc.pid}\n")
    deadline = time.monotonic() + args.ready_timeout * len(COMPONENTS) + 60
    while time.monotonic() < deadline:
        if (state / "endpoints.json").exists():
            endpoints = json.loads((state / "endpoints.json").read_text())
            print(f"control plane ready at {endpoints['server']} in {sum(endpoints['ready_seconds'].values()):.1f} s "
                  f"({', '.join(f'{k} {v} s' for k, v in endpoints['ready_seconds'].items())}); "
                  f"kubeconfig {endpoints['kubeconfig']}")
            return
        if proc.poll() is not None:
            failed = (state / "failed").read_text() if (state / "failed").exists() else tail(state / "supervisor.log")
            raise ControlPlaneError(f"the control plane did not start: {failed.strip()}")
        time.sleep(0.2)
    proc.terminate()
    raise ControlPlaneError(f"the control plane was not ready in time; logs in {state / 'logs'}")


def pid_alive(pid):
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    return True


def stop(args):
    state = pathlib.Path(args.state).resolve()
    try:
        pid = int((state / "pid").read_text())
    except (OSError, ValueError):
        print(f"no control plane runs from {state}")
        return
    if pid_alive(pid):
        os.kill(pid, signal.SIGTERM)
        deadline = time.monotonic() + 30
        while pid_alive(pid) and time.monotonic() < deadline:
            time.sleep(0.1)
            try:
                os.waitpid(pid, os.WNOHANG)
            except ChildProcessError:
                pass
        if pid_alive(pid):
            os.killpg(pid, signal.SIGKILL)
    (state / "pid").unlink(missing_ok=True)
    print(f"control plane of {state} stopped")


def parser():
    top = argparse.ArgumentParser(description=__doc__.split("\n\n", 1)[0])
    sub = top.add_subparsers(dest="command", required=True)
    for name in ("start", "serve"):
        cmd = sub.add_parser(name)
        cmd.add_argument("--state", required=True, help="folder for certificates, kubeconfigs, logs")
        cmd.add_argument("--bin", default=str(DEFAULT_BIN), help="folder of the built binaries")
        cmd.add_argument("--kubernetes-bin", help="folder of kube-apiserver, kube-controller-manager and kube-scheduler "
                                                  "of another release (default: --bin's), e.g. .cache/controlplane/kubernetes-oldest")
        cmd.add_argument("--ttl", type=float, default=0, help="stop everything after this many seconds")
        cmd.add_argument("--user", action="append", default=[], help="a user to make a kubeconfig for (no RBAC)")
        cmd.add_argument("--etcd-dir", help="etcd's data folder (default STATE/etcd; /dev/shm/... for speed)")
        cmd.add_argument("--node-grace", type=int, default=0,
                         help="kube-controller-manager --node-monitor-grace-period, seconds (default: its own, 50)")
        cmd.add_argument("--lease-seconds", type=int, default=40, help="kwok's node lease duration")
        cmd.add_argument("--kwok-config", action="append", default=[], help="more kwok Stages or configuration")
        cmd.add_argument("--apiserver-arg", action="append", default=[], help="one more kube-apiserver flag")
        cmd.add_argument("--controller-manager-arg", action="append", default=[],
                         help="one more kube-controller-manager flag")
        cmd.add_argument("--node-address", help="also serve the API on this address of the machine (the podman "
                                                "bridge's gateway), for real nodes in containers (realnode.py)")
        cmd.add_argument("--ready-timeout", type=float, default=60, help="seconds each component has to be ready")
        cmd.add_argument("--gpu-nodes", help="a cluster file: its Nodes, namespaces and objects are written, and "
                                             "gpunodes.py plays the GPU side of its nodes' kubelets")
        cmd.add_argument("--gpu-nodes-python", default=sys.executable,
                         help="the Python of gpunodes.py (with the kubernetes client and PyYAML)")
    stop_cmd = sub.add_parser("stop")
    stop_cmd.add_argument("--state", required=True)
    return top


def main(argv=None):
    argv = sys.argv[1:] if argv is None else argv
    args = parser().parse_args(argv)
    try:
        if args.command == "start":
            args.forward = argv[1:]
            start(args)
        elif args.command == "serve":
            serve(args)
        else:
            stop(args)
    except ControlPlaneError as err:
        sys.exit(f"controlplane: {err}")


if __name__ == "__main__":
    main()

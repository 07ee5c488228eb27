"""Helpers of the simulator's conformance tests: start and stop a simulator, and drive it
only through clients written elsewhere (kubectl and the kubernetes Python client)."""

import json
import os
import shutil
import subprocess
import sys
import time

from kubernetes import client, config
from kubernetes.client.rest import ApiException
from kubernetes.dynamic import DynamicClient

HERE = os.path.dirname(os.path.abspath(__file__))
PACKAGE_ROOT = os.path.dirname(HERE)
CLUSTERS = os.path.join(HERE, "clusters")
CAPTURES = os.path.join(os.path.dirname(PACKAGE_ROOT), "unit", "plugins", "module_utils", "fixtures", "nvidia-smi")
BIN = os.path.dirname(sys.executable)
KUBECTL = shutil.which("kubectl", path=BIN) or shutil.which("kubectl")


def wait_for(check, timeout=15.0, interval=0.05, what="condition"):
    """Call check until it returns something true; fail with the last value after timeout seconds."""
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
            raise AssertionError(f"timed out after {timeout}s waiting for {what}; last value: {last!r}")
        time.sleep(interval)


def wait_until(fetch, predicate, timeout=15.0, what="condition"):
    """Fetch an object until predicate(object) holds; return that object."""
    def check():
        obj = fetch()
        return obj if predicate(obj) else None
    return wait_for(check, timeout, what=what)


def status_of(err):
    """The metav1.Status body of an ApiException."""
    return json.loads(err.body)


class Simulator:
    """One simulated cluster, started with `python -m simcluster start` and stopped with `stop`."""

    def __init__(self, cluster_file, workdir):
        self.cluster_file = cluster_file
        self.workdir = str(workdir)
        self.kubeconfig = os.path.join(self.workdir, "kubeconfig")
        self.state = os.path.join(self.workdir, "state")
        self.env = dict(os.environ, PYTHONPATH=PACKAGE_ROOT, KUBECONFIG=self.kubeconfig,
                        KUBECACHEDIR=os.path.join(self.workdir, "kube-cache"),
                        PATH=BIN + os.pathsep + os.environ.get("PATH", ""))
        self.api = None
        self._dynamic = None

    def _cli(self, *args):
        return subprocess.run([sys.executable, "-m", "simcluster", *args], env=self.env, cwd=self.workdir,
                              capture_output=True, text=True, timeout=90, check=False)

    def start(self):
        result = self._cli("start", "--cluster", self.cluster_file, "--kubeconfig", self.kubeconfig,
                           "--state", self.state)
        if result.returncode != 0:
            raise RuntimeError(f"simcluster start failed: {result.stdout}{result.stderr}")
        self.api = config.new_client_from_config(config_file=self.kubeconfig)
        return self

    def stop(self, wait=True):
        """Stop it with `simcluster stop`; with wait=False return the running stop command to wait on."""
        if self.api is not None:
            self.api.close()
            self.api = None
        process = subprocess.Popen(  # pylint: disable=consider-using-with
            [sys.executable, "-m", "simcluster", "stop", "--state", self.state], env=self.env, cwd=self.workdir,
            stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
        if wait:
            process.wait(timeout=30)
        return process

    def log(self):
        with open(os.path.join(self.state, "log"), encoding="utf-8") as handle:
            return handle.read()

    # ------------------------------------------------------------- clients
    @property
    def core(self):
        return client.CoreV1Api(self.api)

    @property
    def apps(self):
        return client.AppsV1Api(self.api)

    @property
    def policy(self):
        return client.PolicyV1Api(self.api)

    @property
    def dynamic(self):
        if self._dynamic is None:
            self._dynamic = DynamicClient(self.api)
        return self._dynamic

    def create_raw(self, body, namespace="default", **params):
        """POST a body as it is, through the dynamic client (the typed API classes check bodies first)."""
        resource = self.dynamic.resources.get(api_version=body["apiVersion"], kind=body["kind"])
        return resource.create(body=body, namespace=namespace if resource.namespaced else None, **params)

    def kubectl(self, *args, check=True, timeout=60, stdin=None):
        """Run kubectl against this cluster; returns the CompletedProcess."""
        result = subprocess.run([KUBECTL, *args], env=self.env, capture_output=True, text=True, timeout=timeout,
                                input=stdin, check=False)
        if check and result.returncode != 0:
            raise AssertionError(f"kubectl {' '.join(args)} exited {result.returncode}:\n{result.stdout}"
                                 f"{result.stderr}")
        return result

    def kubectl_json(self, *args):
        return json.loads(self.kubectl(*args, "-o", "json").stdout)

    def apply_yaml(self, text, *args):
        return self.kubectl("apply", "-f", "-", *args, stdin=text)

    # -------------------------------------------------------------- faults
    def fault(self, kind, **settings):
        """Inject a fault (the simulator's own endpoint, sent with the Python client's transport)."""
        body = dict(settings, type=kind)
        answer = self.dynamic.request("post", "/simcluster/v1/faults", body=body, serialize=False)
        return json.loads(answer.data)

    def clear_faults(self):
        return json.loads(self.dynamic.request("delete", "/simcluster/v1/faults", serialize=False).data)

    # ------------------------------------------------------------ shortcuts
    def pod(self, name, namespace="default"):
        return self.core.read_namespaced_pod(name, namespace)

    def node(self, name):
        return self.core.read_node(name)

    def wait_pod_phase(self, name, phases, namespace="default", timeout=15.0):
        phases = (phases,) if isinstance(phases, str) else tuple(phases)
        return wait_until(lambda: self.pod(name, namespace), lambda p: p.status.phase in phases, timeout,
                          what=f"pod {namespace}/{name} in phase {phases}")

    def events_for(self, name, namespace="default"):
        return self.core.list_namespaced_event(namespace, field_selector=f"involvedObject.name={name}").items


def pod_manifest(name, command=None, namespace="default", **spec):
    """A one-container Pod as a dict; spec entries are added to the pod spec, `container` to the container."""
    container = {"name": "main", "image": "registry.example/tools:1.0"}
    if command is not None:
        container["command"] = command
    container.update(spec.pop("container", {}))
    return {"apiVersion": "v1", "kind": "Pod", "metadata": {"name": name, "namespace": namespace},
            "spec": dict({"containers": [container]}, **spec)}

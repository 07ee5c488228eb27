"""A test cluster from a cluster file, on the real control plane: the command line the molecule
scenarios, the demo and the benchmarks use.

    testcluster.py start --cluster FILE --kubeconfig OUT [--state DIR] [--ttl SECONDS] [--user NAME ...]
                         [--kubernetes newest|oldest]
        start the control plane (controlplane.py), write the file's Nodes (kwok's), namespaces
        and objects, start the GPU nodes' stand-in (gpunodes.py), write OUT (an administrator's
        kubeconfig, through the fault proxy); returns once all of it is ready.
        Each user (--user, and the file's `users` list) gets DIR/users/NAME.kubeconfig; a user
        named after a part of rbac/clusterroles.yaml (gpu_device_plugin, gpu_smoke_test, health,
        site-cluster, upgrade_driver, ...) is bound to that part's ClusterRole and to nothing else.
        --kubernetes oldest (or GPUFLEET_TEST_KUBERNETES=oldest) runs the oldest supported release
        (versions.env's KUBERNETES_OLDEST_VERSION) in place of the newest
    testcluster.py stop [--state DIR]
    testcluster.py fault --kubeconfig FILE TYPE [key=value ...]
        node-not-ready node=N, gpu-lost node=N gpus=1, plugin-crashloop node=N,
        eviction-refused seconds=30 [namespace= pod=], api-errors count=3 code=500 [verb= path=],
        slow-pod-start delay=5, server-version git=v1.33.4
    testcluster.py faults --kubeconfig FILE [--clear]
        the faults in force as JSON ({"faults": [...]}), or end them all

The cluster file: nodes (labels, taints, capacity, GPUs from a capture, runtime), namespaces,
objects, faults, timing, users. `timing` may set `nodeMonitorGracePeriod` (seconds,
kube-controller-manager's; kwok's Node Leases are made short enough for it) and
`pluginRegister`; `apiServerArgs` adds kube-apiserver flags; `users` names users to make (above).
"""

from __future__ import annotations

import argparse
import json
import os
import pathlib
import subprocess
import sys

import yaml
from kubernetes import client, config

HERE = pathlib.Path(__file__).resolve().parent
sys.path.insert(0, str(HERE))
import gpunodes  # noqa: E402  pylint: disable=wrong-import-position

STATE_EXTENSION = "gpufleet.test/state"


def start(args):
    description = yaml.safe_load(pathlib.Path(args.cluster).read_text()) or {}
    timing = description.get("timing") if isinstance(description.get("timing"), dict) else {}
    # kube-controller-manager's own grace period (50 s) and the kubelet's Lease (40 s, renewed every
    # quarter of it, as kwok renews it) unless the file asks for a shorter grace
    grace = int(timing.get("nodeMonitorGracePeriod", 0))
    lease = max(4, min(40, grace)) if grace else 40
    argv = [sys.executable, str(HERE / "controlplane.py"), "start", "--state", args.state,
            "--gpu-nodes", args.cluster, "--gpu-nodes-python", sys.executable, "--lease-seconds", str(lease)]
    if grace:
        argv += ["--node-grace", str(grace)]
    if args.ttl:
        argv += ["--ttl", str(args.ttl)]
    if args.kubernetes == "oldest":
        argv += ["--kubernetes-bin", str(HERE.parent.parent / ".cache" / "controlplane" / "kubernetes-oldest")]
    # flags of kube-apiserver the file asks for (e.g. --feature-gates=...; a 1.37 server with
    # --runtime-config=resource.k8s.io/v1=false never gets ready: its own informers wait for ResourceSlices)
    for flag in description.get("apiServerArgs") or []:
        argv += [f"--apiserver-arg={flag}"]
    users = list(dict.fromkeys(args.user + [str(user) for user in description.get("users") or []]))
    for user in users:
        argv += ["--user", user]
    subprocess.run(argv, check=True)
    bind_users(pathlib.Path(args.state), users)
    admin = json.loads((pathlib.Path(args.state) / "admin.kubeconfig").read_text())
    admin["clusters"][0]["cluster"]["extensions"] = [
        {"name": STATE_EXTENSION, "extension": {"path": str(pathlib.Path(args.state).resolve())}}]
    out = pathlib.Path(args.kubeconfig)
    out.parent.mkdir(parents=True, exist_ok=True)
    partial = out.with_name(out.name + ".partial")
    partial.write_text(yaml.safe_dump(admin, sort_keys=False))
    partial.chmod(0o600)
    partial.replace(out)
    print(f"testcluster: kubeconfig {out}")


def part_roles():
    """The ClusterRoles of rbac/clusterroles.yaml by part name (gpufleet-test:PART)."""
    listing = yaml.safe_load((HERE / "rbac" / "clusterroles.yaml").read_text())
    return {item["metadata"]["name"].split(":", 1)[1]: item for item in listing["items"]}


def bind_users(state, users):
    """Bind each user named after a part to that part's ClusterRole alone (a ClusterRoleBinding,
    since every part reads cluster-scoped objects); other users keep no permission at all."""
    roles = part_roles()
    parts = [user for user in users if user in roles]
    if not parts:
        return
    rbac = client.RbacAuthorizationV1Api(admin_api(state))
    for part in parts:
        role = roles[part]
        name = role["metadata"]["name"]
        rbac.create_cluster_role(body=role)
        rbac.create_cluster_role_binding(body={
            "apiVersion": "rbac.authorization.k8s.io/v1", "kind": "ClusterRoleBinding",
            "metadata": {"name": name},
            "roleRef": {"apiGroup": "rbac.authorization.k8s.io", "kind": "ClusterRole", "name": name},
            "subjects": [{"apiGroup": "rbac.authorization.k8s.io", "kind": "User", "name": part}]})
    print(f"testcluster: users bound to their part's ClusterRole only: {', '.join(parts)}")


def state_of(kubeconfig):
    data = yaml.safe_load(pathlib.Path(kubeconfig).read_text())
    for cluster in data.get("clusters") or []:
        for extension in cluster["cluster"].get("extensions") or []:
            if extension.get("name") == STATE_EXTENSION:
                return pathlib.Path(extension["extension"]["path"])
    sys.exit(f"testcluster: {kubeconfig} was not written by testcluster.py start")


def admin_api(state):
    return config.new_client_from_config(str(state / "direct" / "admin.kubeconfig"))


def fault(args):
    state = state_of(args.kubeconfig)
    spec = {"type": args.type}
    for item in args.settings:
        key, _sep, value = item.partition("=")
        spec[key] = int(value) if value.isdigit() else value
    gpunodes.start_fault(admin_api(state), state, spec)
    print(json.dumps(spec))


def faults(args):
    state = state_of(args.kubeconfig)
    if args.clear:
        gpunodes.clear_faults(admin_api(state), state)
    print(json.dumps({"faults": gpunodes.active_faults(state)}))


def stop(args):
    subprocess.run([sys.executable, str(HERE / "controlplane.py"), "stop", "--state", args.state], check=True)


def main(argv=None):
    parser = argparse.ArgumentParser(prog="testcluster", description=__doc__.split("\n\n", 1)[0])
    commands = parser.add_subparsers(dest="command", required=True)
    default_state = os.path.join(os.getcwd(), ".cache", "testcluster")
    command = commands.add_parser("start")
    command.add_argument("--cluster", required=True)
    command.add_argument("--kubeconfig", required=True)
    command.add_argument("--state", default=default_state)
    command.add_argument("--ttl", type=int, default=0)
    command.add_argument("--user", action="append", default=[])
    command.add_argument("--kubernetes", choices=["newest", "oldest"],
                         default=os.environ.get("GPUFLEET_TEST_KUBERNETES") or "newest",
                         help="the release of kube-apiserver, controller manager and scheduler (versions.env: "
                              "KUBERNETES_VERSION or KUBERNETES_OLDEST_VERSION; default $GPUFLEET_TEST_KUBERNETES, else newest)")
    command = commands.add_parser("stop")
    command.add_argument("--state", default=default_state)
    command = commands.add_parser("fault")
    command.add_argument("--kubeconfig", required=True)
    command.add_argument("type")
    command.add_argument("settings", nargs="*")
    command = commands.add_parser("faults")
    command.add_argument("--kubeconfig", required=True)
    command.add_argument("--clear", action="store_true")
    args = parser.parse_args(argv)
    {"start": start, "stop": stop, "fault": fault, "faults": faults}[args.command](args)


if __name__ == "__main__":
    main()

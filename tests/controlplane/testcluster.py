"""A test cluster from a cluster file, on the real control plane: the command line the molecule
scenarios, the demo and the benchmarks use.

    testcluster.py start --cluster FILE --kubeconfig OUT [--state DIR] [--ttl SECONDS] [--user NAME ...]
        start the control plane (controlplane.py), write the file's Nodes (kwok's), namespaces
        and objects, start the GPU nodes' stand-in (gpunodes.py), write OUT (an administrator's
        kubeconfig, through the fault proxy); returns once all of it is ready
    testcluster.py stop [--state DIR]
    testcluster.py fault --kubeconfig FILE TYPE [key=value ...]
        node-not-ready node=N, gpu-lost node=N gpus=1, plugin-crashloop node=N,
        eviction-refused seconds=30 [namespace= pod=], api-errors count=3 code=500 [verb= path=],
        slow-pod-start delay=5
    testcluster.py faults --kubeconfig FILE [--clear]
        the faults in force as JSON ({"faults": [...]}), or end them all

The cluster file is the one tests/simcluster reads (nodes with labels, taints, capacity, GPUs
from a capture, runtime; namespaces; objects; faults; timing). `timing` may set
`nodeMonitorGracePeriod` (seconds, kube-controller-manager's; kwok's Node Leases are made short
enough for it) and `pluginRegister`; `apiServerArgs` adds kube-apiserver flags.
"""

from __future__ import annotations

import argparse
import json
import os
import pathlib
import subprocess
import sys

import yaml
from kubernetes import config

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
    # flags of kube-apiserver the file asks for (e.g. --runtime-config=resource.k8s.io/v1=false)
    for flag in description.get("apiServerArgs") or []:
        argv += [f"--apiserver-arg={flag}"]
    for user in args.user:
        argv += ["--user", user]
    subprocess.run(argv, check=True)
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

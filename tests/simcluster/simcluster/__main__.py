"""Command line of the simulated cluster.

  simcluster start --cluster FILE --kubeconfig OUT [--state DIR] [--port N]
      start it in the background, write the kubeconfig, return once it answers
  simcluster stop [--state DIR]
      stop it; nothing is left running
  simcluster serve --cluster FILE --kubeconfig OUT [--port N]
      run it in the foreground (Ctrl-C or SIGTERM stops it)
  simcluster fault --kubeconfig FILE TYPE [key=value ...]
      inject a fault: node-not-ready node=N, gpu-lost node=N gpus=1, plugin-crashloop node=N,
      eviction-refused seconds=30 [namespace= pod=], api-errors count=3 code=500 [verb= path=],
      slow-pod-start delay=5 [seconds=]
  simcluster faults --kubeconfig FILE [--clear]
"""

import argparse
import base64
import json
import os
import secrets
import signal
import ssl
import subprocess
import sys
import time
import urllib.request

import yaml

DEFAULT_STATE = os.path.join(os.getcwd(), ".cache", "simcluster")


def write_kubeconfig(path, url, token, ca_file=None):
    cluster = {"server": url}
    if ca_file:
        with open(ca_file, "rb") as handle:
            cluster["certificate-authority-data"] = base64.b64encode(handle.read()).decode()
    config = {"apiVersion": "v1", "kind": "Config", "preferences": {},
              "clusters": [{"name": "simcluster", "cluster": cluster}],
              "users": [{"name": "simcluster-admin", "user": {"token": token}}],
              "contexts": [{"name": "simcluster", "context": {"cluster": "simcluster", "user": "simcluster-admin",
                                                              "namespace": "default"}}],
              "current-context": "simcluster"}
    os.makedirs(os.path.dirname(os.path.abspath(path)), exist_ok=True)
    temporary = path + ".tmp"
    with open(temporary, "w", encoding="utf-8") as handle:
        yaml.safe_dump(config, handle, sort_keys=False)
    os.chmod(temporary, 0o600)
    os.replace(temporary, path)


def read_kubeconfig(path):
    with open(path, encoding="utf-8") as handle:
        config = yaml.safe_load(handle)
    return config["clusters"][0]["cluster"]["server"], config["users"][0]["user"]["token"]


def serve(args):
    from .api import Server
    from .cluster import load
    from .controllers import Controllers

    from .tls import make_certificates

    cluster = load(args.cluster)
    certificates = make_certificates(os.path.join(args.state, "pki"))
    server = Server(cluster, Controllers(cluster), secrets.token_hex(16), port=args.port, certificates=certificates)
    server.start()
    write_kubeconfig(args.kubeconfig, server.url, server.token, certificates["ca.crt"])
    print(f"simulated cluster (Kubernetes v{cluster.version}, {len(cluster.gpus)} nodes) at {server.url}; "
          f"kubeconfig {args.kubeconfig}", flush=True)

    def finish(*_):
        server.stop()
        sys.exit(0)

    signal.signal(signal.SIGTERM, finish)
    signal.signal(signal.SIGINT, finish)
    # --ttl: a test run that dies before its stop step leaves nothing running for long.
    time.sleep(args.ttl if args.ttl else 10 ** 9)
    print(f"simcluster: --ttl {args.ttl} s reached, stopping", flush=True)
    finish()


def _context(kubeconfig):
    with open(kubeconfig, encoding="utf-8") as handle:
        config = yaml.safe_load(handle)
    data = config["clusters"][0]["cluster"].get("certificate-authority-data")
    context = ssl.create_default_context()
    if data:
        context.load_verify_locations(cadata=base64.b64decode(data).decode())
    return context


def _healthy(kubeconfig):
    try:
        url, _token = read_kubeconfig(kubeconfig)
        with urllib.request.urlopen(url + "/healthz", timeout=1, context=_context(kubeconfig)) as answer:
            return answer.status == 200
    except (OSError, KeyError, TypeError, ValueError):
        return False


def start(args):
    os.makedirs(args.state, exist_ok=True)
    pid_file = os.path.join(args.state, "pid")
    if os.path.exists(pid_file):
        stop(args)
    if os.path.exists(args.kubeconfig):
        os.remove(args.kubeconfig)
    log = open(os.path.join(args.state, "log"), "w", encoding="utf-8")  # pylint: disable=consider-using-with
    env = dict(os.environ, PYTHONPATH=os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
    process = subprocess.Popen(  # pylint: disable=consider-using-with
        [sys.executable, "-m", "simcluster", "serve", "--cluster", args.cluster, "--kubeconfig", args.kubeconfig,
         "--port", str(args.port), "--state", args.state, "--ttl", str(args.ttl)], stdout=log, stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL,
        start_new_session=True, env=env)
    with open(pid_file, "w", encoding="utf-8") as handle:
        handle.write(str(process.pid))
    deadline = time.monotonic() + 60
    while time.monotonic() < deadline:
        if process.poll() is not None:
            with open(os.path.join(args.state, "log"), encoding="utf-8") as handle:
                sys.stderr.write(handle.read())
            os.remove(pid_file)
            sys.exit(f"simcluster: the server exited with {process.returncode}")
        if os.path.exists(args.kubeconfig) and _healthy(args.kubeconfig):
            url, _token = read_kubeconfig(args.kubeconfig)
            print(f"simcluster: running at {url} (pid {process.pid}); kubeconfig {args.kubeconfig}")
            return
        time.sleep(0.1)
    process.kill()
    sys.exit("simcluster: the server did not answer within 60 s")


def stop(args):
    pid_file = os.path.join(args.state, "pid")
    if not os.path.exists(pid_file):
        print("simcluster: not running")
        return
    with open(pid_file, encoding="utf-8") as handle:
        pid = int(handle.read().strip())
    try:
        os.kill(pid, signal.SIGTERM)
        for _attempt in range(100):
            os.kill(pid, 0)
            time.sleep(0.1)
        os.kill(pid, signal.SIGKILL)
    except ProcessLookupError:
        pass
    os.remove(pid_file)
    print(f"simcluster: stopped (pid {pid})")


def _admin(kubeconfig, method, path, body=None):
    url, _token = read_kubeconfig(kubeconfig)
    data = json.dumps(body).encode() if body is not None else None
    request = urllib.request.Request(url + path, data=data, method=method,
                                     headers={"Content-Type": "application/json"})
    with urllib.request.urlopen(request, timeout=10, context=_context(kubeconfig)) as answer:
        return json.loads(answer.read())


def fault(args):
    spec = {"type": args.type}
    for item in args.settings:
        key, _sep, value = item.partition("=")
        spec[key] = int(value) if value.isdigit() else value
    print(json.dumps(_admin(args.kubeconfig, "POST", "/simcluster/v1/faults", spec)))


def faults(args):
    if args.clear:
        print(json.dumps(_admin(args.kubeconfig, "DELETE", "/simcluster/v1/faults")))
    else:
        print(json.dumps(_admin(args.kubeconfig, "GET", "/simcluster/v1/faults"), indent=2))


def main(argv=None):
    parser = argparse.ArgumentParser(prog="simcluster", description=__doc__,
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    commands = parser.add_subparsers(dest="command", required=True)
    for name in ("serve", "start"):
        command = commands.add_parser(name)
        command.add_argument("--cluster", required=True, help="cluster description (YAML)")
        command.add_argument("--kubeconfig", required=True, help="where to write the kubeconfig")
        command.add_argument("--port", type=int, default=0)
        command.add_argument("--state", default=DEFAULT_STATE, help="pid and log folder")
        command.add_argument("--ttl", type=int, default=0, help="stop by itself after this many seconds")
    command = commands.add_parser("stop")
    command.add_argument("--state", default=DEFAULT_STATE)
    command = commands.add_parser("fault")
    command.add_argument("--kubeconfig", required=True)
    command.add_argument("type")
    command.add_argument("settings", nargs="*")
    command = commands.add_parser("faults")
    command.add_argument("--kubeconfig", required=True)
    command.add_argument("--clear", action="store_true")
    args = parser.parse_args(argv)
    {"serve": serve, "start": start, "stop": stop, "fault": fault, "faults": faults}[args.command](args)


if __name__ == "__main__":
    main()

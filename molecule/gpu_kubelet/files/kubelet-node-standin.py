# STAND-IN for a RUNNING kubelet, around the REAL kubelet binary; installed as /usr/bin/kubelet in
# the gpu_kubelet molecule tests by prepare.yml, with a python3 shebang. The judge of kubelet's
# flags and configuration is the real kubelet (v1.37.2 or v1.35.4, built from the k8s.io/kubernetes
# module by tests/controlplane/build.sh and bind-mounted at /usr/local/lib/gpufleet-test/kubelet).
# What is not real, and why: a real kubelet cannot run a node in these containers (no container
# runtime, no cluster to join, no writable cgroups), so after the real one has judged its flags
# and configuration and stopped at its first missing dependency, this program stays running in
# its place, as a kubelet that started would.
#
#   kubelet --version, --help          the real kubelet's answer (exec)
#   kubelet ARGS...                    runs the real kubelet with ARGS, unchanged (a release before
#                                      1.37 also gets --v=5, the level at which it logs the
#                                      configuration it runs with), and reads how it stopped:
#     - at a check that runs before kubelet needs anything from the host (cmd/kubelet/app/
#       server.go, the RunE steps before UnsecuredDependencies: flag parsing, feature gates, the
#       --config file, the --config-dir drop-ins, flag precedence, validation), or by a panic while
#       it loads or merges its configuration files (its defaulting panics on a feature gate it
#       cannot set, such as a locked one turned off in a drop-in): kubelet refused its
#       configuration; print kubelet's own error and exit 1;
#     - anywhere later (kubeadm's bootstrap kubeconfig, not there in these containers, is the
#       first): the configuration was accepted; write the configuration kubelet logged to
#       /run/kubelet-real/configz.json (as kubelet serves it at /configz, top-level field names as
#       in kubelet.config.k8s.io/v1beta1) and stay running until SIGTERM.
# What the real kubelet refuses only later, once it builds its managers from the host (reserved CPUs
# outside the node's online CPUs, a static CPU manager without a reservation, the memory manager's
# totals: server.go's run() after the client), is not reached here and reads as accepted; on a node,
# kubelet stops there and gpu_kubelet's restart check rolls the change back. The first two the role
# refuses itself, before any change.
# The real kubelet's whole output of the last start is in /run/kubelet-real/kubelet.log (judge.log
# for KUBELET_STANDIN_JUDGE_ONLY).
# KUBELET_STANDIN_JUDGE_ONLY=1 kubelet ARGS prints the verdict as JSON ({"refused": error} or the
# configuration and where the real kubelet stopped) and exits 1 or 0 instead of staying running:
# the tests ask the real kubelet about a configuration without restarting the service.
import json
import os
import re
import signal
import subprocess
import sys

import yaml

REAL = "/usr/local/lib/gpufleet-test/kubelet"
STATE = "/run/kubelet-real"
# The errors kubelet's RunE returns before it builds its dependencies (the same in 1.35.4 and
# 1.37.2): every one of them is a refusal of the flags or the configuration.
REFUSALS = (
    "failed to parse kubelet flag",
    "unknown command",
    "failed to set feature gates",
    "failed to validate kubelet flags",
    "failed to load kubelet config file",
    "failed to merge kubelet configs",
    "failed to precedence kubeletConfigFlag",
    "initialize logging",
    "failed to validate kubelet configuration",
)
# klog's text format: a key with a multi-line value is written key=< then the lines, each indented
# by a tab, then " >".
BLOCK = re.compile(r'"(?P<msg>[^"]*)" (?P<key>\w+)=<\n(?P<body>(?:\t.*\n)*) >')
LINE = re.compile(r'"command failed" err=(?P<value>".*")$', re.M)


def real_version():
    """The real kubelet's MAJOR.MINOR, asked once per boot (a refusal must come within the role's settle time)."""
    cache = os.path.join(STATE, "version")
    try:
        with open(cache) as handle:
            out = handle.read()
    except OSError:
        out = subprocess.run([REAL, "--version"], capture_output=True, text=True, check=True).stdout
        with open(cache, "w") as handle:
            handle.write(out)
    return tuple(int(part) for part in re.search(r"v(\d+)\.(\d+)", out).groups())


def failure(log):
    """How kubelet ended: (its error, whether that refused the flags or configuration); (None, False)
    when it did not end by an error of its own."""
    panic = re.search(r"^panic: .*$", log, re.M)
    if panic and re.search(r"cmd/kubelet/app\.(loadConfigFile|mergeKubeletConfigurations)\(", log[panic.end():]):
        return "kubelet panicked loading its configuration files: %s" % panic.group(0), True
    error = command_failed(log)
    return error, error is not None and error.startswith(REFUSALS)


def command_failed(log):
    """The error kubelet ended with ("command failed"), or None."""
    for match in BLOCK.finditer(log):
        if match.group("msg") == "command failed" and match.group("key") == "err":
            return "\n".join(line[1:] for line in match.group("body").splitlines())
    match = LINE.search(log)
    if match:
        try:
            return json.loads(match.group("value"))
        except ValueError:
            return match.group("value")[1:-1]
    return None


def lower_first(name):
    """A Go field name of kubelet's internal configuration as its v1beta1 field: CPUManagerPolicy -> cpuManagerPolicy."""
    upper = re.match(r"[A-Z]+", name)
    if not upper:
        return name
    run = upper.group(0)
    if len(run) > 1 and len(run) < len(name):
        run = run[:-1]
    return run.lower() + name[len(run):]


def configuration(log):
    """The configuration kubelet logged: 1.37's "Effective KubeletConfiguration" (v1beta1 YAML), or
    the "KubeletConfiguration" line of earlier releases at --v=5 (its internal struct as JSON)."""
    for match in BLOCK.finditer(log):
        body = "\n".join(line[1:] for line in match.group("body").splitlines())
        if match.group("msg") == "Effective KubeletConfiguration":
            return yaml.safe_load(body)
        if match.group("msg") == "KubeletConfiguration":
            return {lower_first(key): value for key, value in json.loads(body).items()}
    return None


def stop(signum, frame):
    sys.exit(0)


def main(argv):
    if any(arg in ("--version", "-h", "--help") or arg.startswith("--version=") for arg in argv):
        os.execv(REAL, [REAL] + argv)
    os.makedirs(STATE, exist_ok=True)
    judge_only = os.environ.get("KUBELET_STANDIN_JUDGE_ONLY") == "1"
    extra = ["--v=5"] if real_version() < (1, 37) else []
    with open(os.path.join(STATE, "judge.log" if judge_only else "kubelet.log"), "w+") as log_file:
        try:
            subprocess.run([REAL] + argv + extra, stdout=log_file, stderr=subprocess.STDOUT, timeout=60, check=False)
        except subprocess.TimeoutExpired:
            pass  # killed: it ran past every check of its configuration (classified below)
        log_file.seek(0)
        log = log_file.read()
    error, refused = failure(log)
    if refused:
        if judge_only:
            print(json.dumps({"refused": error}))
        sys.stderr.write("kubelet refused its flags or configuration: %s\n" % error)
        return 1
    config = configuration(log)
    if config is None:
        sys.stderr.write("kubelet stopped without logging its configuration; its output:\n%s" % log[-4000:])
        return 1
    verdict = {"kubeletconfig": config, "stopped_at": error}
    if judge_only:
        print(json.dumps(verdict))
        return 0
    with open(os.path.join(STATE, "configz.json"), "w") as handle:
        json.dump(verdict, handle)
    sys.stdout.write("kubelet accepted its flags and configuration; the real kubelet then stopped at: %s\n"
                     "(no container runtime or cluster here): this stand-in stays running in its place\n" % error)
    sys.stdout.flush()
    signal.signal(signal.SIGTERM, stop)
    while True:
        signal.pause()


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))

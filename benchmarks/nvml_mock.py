# Copyright: (c) 2026, gpufleet.nvidia contributors
# GNU General Public License v3.0+ (see COPYING or https://www.gnu.org/licenses/gpl-3.0.txt)
"""Time nvml_facts through NVML over NVIDIA's NVML mock (`make bench-nvml`).

The GPUs are go-nvml's mock servers, loaded as libnvidia-ml.so.1 (tests/nodetools, built by
`make nodetools-build`) through LD_LIBRARY_PATH, read by NVIDIA's nvidia-ml-py: an 8-GPU DGX H100
without MIG, the same with every GPU split into seven 1g.10gb devices (56 MIG devices), and a DGX
B200. Over a mock this measures the collection's code (pynvml's calls, the reader, the facts), not
a driver: a real driver answers each NVML call in microseconds to milliseconds more.

Two figures per profile, the median of --runs runs (and the fastest):
  module   the nvml_facts module as Ansible runs it on a node: a Python process with the module's
           arguments (source=nvml, kernel_log=none), from start to its JSON answer;
  gather   the module's work alone, in this process (nvml_facts' gather(), NVML init to facts).
Exits non-zero when a profile's module median is over the goal (--goal-ms, 1,000 ms) or a run
does not answer with the profile's GPUs.
"""

from __future__ import annotations

import argparse
import atexit
import importlib
import json
import os
import shutil
import statistics
import subprocess
import sys
import tempfile
import time

HERE = os.path.dirname(os.path.abspath(__file__))
REPO = os.path.dirname(HERE)
LIB = os.environ.get("NODETOOLS_LIB", os.path.join(REPO, ".cache", "nodetools", "lib"))
# The module and its module_utils import one another by the collection's name, as Ansible ships
# them: this checkout is put under that name in a scratch folder.
TREE = tempfile.mkdtemp(prefix="gpufleet-bench-nvml-")
atexit.register(shutil.rmtree, TREE)
os.makedirs(os.path.join(TREE, "ansible_collections", "gpufleet"))
os.symlink(REPO, os.path.join(TREE, "ansible_collections", "gpufleet", "nvidia"))

# name, GPUFLEET_NVML_MOCK, GPUFLEET_NVML_MOCK_MIG, GPUs, MIG devices
PROFILES = [
    ("DGX H100, 8 GPUs", "dgxh100", "", 8, 0),
    ("DGX H100, 8 GPUs x 7 MIG 1g.10gb", "dgxh100", ";".join("%d:%s" % (i, ",".join(["1g.10gb"] * 7)) for i in range(8)),
     8, 56),
    ("DGX B200, 8 GPUs", "dgxb200", "", 8, 0),
]


def mock_env(kind, mig):
    env = dict(os.environ, LD_LIBRARY_PATH=LIB, GPUFLEET_NVML_MOCK=kind, GPUFLEET_NVML_MOCK_MIG=mig,
               PYTHONPATH=TREE, LANG="C")
    return env


def check(facts, gpus, migs, where):
    got = (facts.get("state"), facts.get("gpu_count"),
           sum(len(gpu["mig"]["devices"]) for gpu in facts.get("gpus", [])))
    if got != ("ok", gpus, migs):
        sys.exit("%s: expected state ok, %d GPUs, %d MIG devices; got %r: %s"
                 % (where, gpus, migs, got, facts.get("message")))


def time_module(env, args_file, gpus, migs, runs):
    argv = [sys.executable, "-m", "ansible_collections.gpufleet.nvidia.plugins.modules.nvml_facts", args_file]
    times = []
    for _run in range(runs):
        start = time.perf_counter()
        done = subprocess.run(argv, env=env, capture_output=True, text=True, check=False)
        times.append((time.perf_counter() - start) * 1000.0)
        if done.returncode != 0:
            sys.exit("nvml_facts failed: %s %s" % (done.stdout[-2000:], done.stderr[-2000:]))
    check(json.loads(done.stdout)["ansible_facts"]["nvidia"], gpus, migs, "module")
    return times


# gather() in this process, through a child so that each profile's mock starts afresh (a library
# reads its environment at its first nvmlInit, once per process).
GATHER = r"""
import json, sys, time, platform
from ansible_collections.gpufleet.nvidia.plugins.module_utils.nvml_inventory import gather
from ansible_collections.gpufleet.nvidia.plugins.modules.nvml_facts import SystemProbe

class Module(object):
    def get_bin_path(self, name):
        return None
    def run_command(self, argv):
        raise AssertionError("no command expected: %r" % (argv,))

probe = SystemProbe(Module())
params = {"source": "nvml", "kernel_log": "none", "kernel_log_path": None, "unhealthy_xids": None}
times = []
for _ in range(int(sys.argv[1])):
    start = time.perf_counter()
    facts = gather(params, probe)
    times.append((time.perf_counter() - start) * 1000.0)
print(json.dumps({"times": times, "facts": facts}))
"""


def time_gather(env, gpus, migs, runs):
    done = subprocess.run([sys.executable, "-c", GATHER, str(runs)], env=env, capture_output=True, text=True,
                          check=False)
    if done.returncode != 0:
        sys.exit("gather failed: %s" % done.stderr[-3000:])
    answer = json.loads(done.stdout)
    check(answer["facts"], gpus, migs, "gather")
    return answer["times"]


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--runs", type=int, default=30)
    parser.add_argument("--goal-ms", type=float, default=1000.0)
    args = parser.parse_args()
    if not os.path.exists(os.path.join(LIB, "libnvidia-ml.so.1")):
        sys.exit("%s/libnvidia-ml.so.1 is missing: make nodetools-build builds it" % LIB)
    try:
        importlib.import_module("pynvml")
    except ImportError:
        sys.exit("pynvml is not importable by %s: make bench-nvml runs this in a venv with nvidia-ml-py"
                 % sys.executable)
    args_file = os.path.join(TREE, "args.json")
    with open(args_file, "w") as handle:
        json.dump({"ANSIBLE_MODULE_ARGS": {"source": "nvml", "kernel_log": "none"}}, handle)
    print("nvml_facts over go-nvml's NVML mock: %d runs each, milliseconds (median / fastest)" % args.runs)
    print("%-36s %18s %18s" % ("profile", "module", "gather"))
    over = []
    for name, kind, mig, gpus, migs in PROFILES:
        env = mock_env(kind, mig)
        module = time_module(env, args_file, gpus, migs, args.runs)
        inside = time_gather(env, gpus, migs, args.runs)
        print("%-36s %9.1f / %6.1f %9.1f / %6.1f"
              % (name, statistics.median(module), min(module), statistics.median(inside), min(inside)))
        if statistics.median(module) > args.goal_ms:
            over.append(name)
    if over:
        sys.exit("over the goal of %.0f ms: %s" % (args.goal_ms, ", ".join(over)))


if __name__ == "__main__":
    main()

# Copyright: (c) 2026, gpufleet.nvidia contributors
# GNU General Public License v3.0+ (see COPYING or https://www.gnu.org/licenses/gpl-3.0.txt)
"""What a re-run of site.yml costs on a converged fleet.

Starts fresh systemd containers (the demo's two nodes: Debian 12 and
Debian 13, under the demo's host names so that each gets its STAND-IN
nvidia-smi replaying a real capture), reached over SSH as real nodes are,
with pipelining on. They are prepared like kubeadm-joined nodes and
converged by site.yml (untimed). Then, several times each, in turn:

- the facts-only play: host facts (setup) and the NVIDIA inventory
  (nvml_facts), all a run needs to know about a node;
- the re-run: `ansible-playbook gpufleet.nvidia.site` again, which must
  report changed=0 on every host;
- for comparison only, the facts-only play with the minimal subset of host
  facts (`gather_subset: [min]`), which is what site.yml gathers since the
  roles read nothing else: the ratio to it is printed beside the goal's.

For each it takes the median wall time and the controller's CPU time (user
and system of ansible-playbook and everything it started: its forks and ssh),
and prints the re-run's cost as a multiple of the facts-only play (goal:
at most 2x) and in controller CPU seconds per host (goal: at most 3), with
the extrapolation to 1,000 nodes on a 16-core control node. The cluster part
of site.yml has no host here (no control plane in the inventory), so these
figures are the node part's, where the per-host cost is.

The controller and the nodes share this machine's CPUs, which a fleet does
not: the wall times include the nodes' own work, the CPU times do not.
Run with `make bench-rerun`; `--hosts N` starts N nodes instead of two
(Debian 12 and 13 in turn), `--runs N` repeats each measurement N times.
"""

from __future__ import annotations

import argparse
import os
import resource
import statistics
import subprocess
import sys
import tempfile
import time

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import site_scale  # noqa: E402  pylint: disable=wrong-import-position

REPO = site_scale.REPO
PREFIX = os.environ.get("MOLECULE_IMAGE_PREFIX", "localhost/gpufleet-debian")
GOAL_RATIO = 2.0
GOAL_CPU_PER_HOST = 3.0
FLEET = 1000
CONTROL_NODE_CORES = 16
FACTS_ONLY = """- name: Host and NVIDIA facts only
  hosts: gpu_nodes
  gather_facts: false
  tasks:
    - name: Gather the host facts
      ansible.builtin.setup:

    - name: Gather the NVIDIA inventory
      gpufleet.nvidia.nvml_facts:
"""
FACTS_ONLY_MIN = FACTS_ONLY.replace("ansible.builtin.setup:\n", "ansible.builtin.setup:\n        gather_subset: [min]\n")


def start(hosts, key):
    """Start one container per host name, Debian 12 and 13 in turn; return the SSH addresses."""
    addresses = {}
    for number, host in enumerate(hosts):
        site_scale.IMAGE = "%s:%d" % (PREFIX, 12 + number % 2)
        addresses.update(site_scale.start([host], key))
    return addresses


def timed(inventory_path, playbook_ref, forks):
    """Wall seconds, controller CPU seconds and the recap of one ansible-playbook run."""
    before = resource.getrusage(resource.RUSAGE_CHILDREN)
    env = dict(site_scale.ENV, ANSIBLE_FORKS=str(forks))
    started = time.monotonic()
    result = subprocess.run(["ansible-playbook", "-i", inventory_path, playbook_ref], env=env, text=True,
                            capture_output=True, check=False, cwd=REPO)
    elapsed = time.monotonic() - started
    after = resource.getrusage(resource.RUSAGE_CHILDREN)
    if result.returncode != 0:
        sys.stderr.write(result.stdout[-6000:] + result.stderr[-2000:])
        raise SystemExit("%s failed (rc=%d)" % (playbook_ref, result.returncode))
    cpu = (after.ru_utime - before.ru_utime) + (after.ru_stime - before.ru_stime)
    recap = {host: {"ok": int(ok), "changed": int(changed)}
             for host, ok, changed, dummy, dummy2 in site_scale.RECAP.findall(result.stdout)}
    return elapsed, cpu, recap


def main(argv=None):
    parser = argparse.ArgumentParser(description=__doc__.split("\n", 1)[0])
    parser.add_argument("--hosts", type=int, default=2)
    parser.add_argument("--runs", type=int, default=3)
    args = parser.parse_args(argv)
    hosts = ["gpufleet-demo-%d" % number for number in range(1, args.hosts + 1)]
    with tempfile.TemporaryDirectory(prefix="gpufleet-rerun-") as workdir:
        key = os.path.join(workdir, "id_ed25519")
        site_scale.sh("ssh-keygen", "-q", "-t", "ed25519", "-N", "", "-f", key)
        facts_only = os.path.join(workdir, "facts-only.yml")
        with open(facts_only, "w") as handle:
            handle.write(FACTS_ONLY)
        facts_only_min = os.path.join(workdir, "facts-only-min.yml")
        with open(facts_only_min, "w") as handle:
            handle.write(FACTS_ONLY_MIN)
        names = ["gpufleet-rerun-%d" % number for number in range(1, args.hosts + 1)]
        try:
            addresses = start(names, key)
            path = site_scale.inventory(workdir, dict(zip(hosts, (addresses[name] for name in names))), key)
            site_scale.playbook(path, "demo/prepare.yml")
            converge = site_scale.playbook(path, "gpufleet.nvidia.site")[0]
            facts, facts_min, rerun, recaps = [], [], [], []
            for dummy in range(args.runs):
                facts.append(timed(path, facts_only, len(hosts))[:2])
                facts_min.append(timed(path, facts_only_min, len(hosts))[:2])
                elapsed, cpu, recap = timed(path, "gpufleet.nvidia.site", len(hosts))
                rerun.append((elapsed, cpu))
                recaps.append(recap)
        finally:
            site_scale.remove(names)
    facts_wall = statistics.median(run[0] for run in facts)
    facts_cpu = statistics.median(run[1] for run in facts)
    facts_min_wall = statistics.median(run[0] for run in facts_min)
    facts_min_cpu = statistics.median(run[1] for run in facts_min)
    rerun_wall = statistics.median(run[0] for run in rerun)
    rerun_cpu = statistics.median(run[1] for run in rerun)
    changed = max(sum(counts["changed"] for counts in recap.values()) for recap in recaps)
    tasks = max(counts["ok"] for recap in recaps for counts in recap.values())
    ratio = rerun_wall / facts_wall
    per_host = rerun_cpu / len(hosts)
    print("%d nodes (Debian 12 and 13) over SSH, pipelining on, forks=%d, %d CPUs shared by the controller "
          "and the nodes; medians of %d runs; first converge %.1f s" % (
              len(hosts), len(hosts), os.cpu_count(), args.runs, converge))
    print("facts-only play      %6.2f s wall  %6.2f s controller CPU" % (facts_wall, facts_cpu))
    print("  with min host facts%6.2f s wall  %6.2f s controller CPU" % (facts_min_wall, facts_min_cpu))
    print("site.yml re-run      %6.2f s wall  %6.2f s controller CPU  %d tasks ok per host, %d changed (most of %d runs)"
          % (rerun_wall, rerun_cpu, tasks, changed, args.runs))
    print("each re-run          %s" % ", ".join("%.2f s wall %.2f s CPU %s tasks ok" % (
        run[0], run[1], "/".join(str(counts["ok"]) for counts in recap.values())) for run, recap in zip(rerun, recaps)))
    print("re-run / facts-only  %6.2f x        (goal <= %.0f x; %.2f x the play with min host facts)"
          % (ratio, GOAL_RATIO, rerun_wall / facts_min_wall))
    print("controller CPU       %6.2f s per host (goal <= %.0f s)" % (per_host, GOAL_CPU_PER_HOST))
    hours = per_host * FLEET / 3600.0
    print("%d nodes            %6.2f controller CPU-hours, at best %.0f min on a %d-core control node" % (
        FLEET, hours, hours * 60 / CONTROL_NODE_CORES, CONTROL_NODE_CORES))
    return 0 if ratio <= GOAL_RATIO and per_host <= GOAL_CPU_PER_HOST and changed == 0 else 1


if __name__ == "__main__":
    sys.exit(main())

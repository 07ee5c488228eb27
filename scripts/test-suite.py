"""make test: every check, scheduled side by side, and a table of where the time went.

Each check is a job: a `make` target of the Makefile run with its own log
(tests/output/make-test/<job>.log). Jobs start once the jobs they need have
passed, at most --jobs at a time, the longest path first (by the times of the
last run on this machine, .cache/make-test-times.json, or the estimates
below). Two jobs that share a lock never run at once: a molecule scenario on
its two controllers (same container names, same ephemeral folder), and the
ansible-test sanity runs (they create the same cached virtualenvs in
~/.ansible/test/venv).

When a job fails, no new job starts; the running ones finish, and every failed
job's log is printed whole. The run ends with the table of each job's time.

    python3 scripts/test-suite.py [--jobs N] [--only GLOB ...] [--list]
"""

from __future__ import annotations

import argparse
import fnmatch
import json
import os
import pathlib
import re
import shlex
import subprocess
import sys
import time

REPO = pathlib.Path(__file__).resolve().parent.parent
LOGS = REPO / "tests" / "output" / "make-test"
TIMES = REPO / ".cache" / "make-test-times.json"


# Seconds each scenario took alone (one at a time) in the last sequential CI run: the order of a
# first run, before .cache/make-test-times.json has this machine's own times. A new scenario counts
# as 300 s until it has run once.
SCENARIO_ESTIMATES = {
    "gpu_cluster": 376, "gpu_container_toolkit": 346, "gpu_driver_fabric": 299, "gpu_mig": 252,
    "gpu_driver_cuda_repo": 245, "gpu_driver": 221, "gpu_kubelet": 166, "fleet_report": 77, "nvml_facts": 67,
}


class Job:  # pylint: disable=too-many-instance-attributes
    def __init__(self, name, stage, argv, needs=(), locks=(), estimate=60):
        self.name = name
        self.stage = stage
        self.argv = argv
        self.needs = list(needs)
        self.lock_sources = list(locks)
        self.estimate = estimate
        self.state = "waiting"  # waiting, running, passed, failed, skipped
        self.proc = None
        self.start = None
        self.seconds = None
        self.cpu = None
        self.locks = set()
        self.log = LOGS / f"{name.replace(' ', '_').replace('/', '_')}.log"


class SanityVenvLock:
    """ansible-test sanity keeps a virtualenv per test in ~/.ansible/test/venv, named by a hash of
    the pip commands that fill it: releases whose ansible-test bootstraps the same pip and pins the
    same requirements share one, and two of them must not create it at once. Their sanity runs take
    this lock (the pip version, read from the release's ansible-test once its venv exists);
    releases with another pip go side by side."""

    def __init__(self, core):
        self.core = core

    def __str__(self):
        venv = REPO / ".venvs" / f"ansible-core-{self.core}"
        for source in venv.glob("lib/python3*/site-packages/ansible_test/_internal/python_requirements.py"):
            found = re.search(r"pip='([^']+)'", source.read_text())
            if found:
                return f"ansible-test sanity venvs, pip {found.group(1)}"
        return "ansible-test sanity venvs"


def make(target, **variables):
    return ["make", "--no-print-directory", target] + [f"{k}={v}" for k, v in variables.items()]


def read_makefile_list(variable):
    """A variable of the Makefile, as make evaluates it (command-line overrides included)."""
    out = subprocess.run(
        ["make", "--no-print-directory", "-s", "print-" + variable],
        cwd=REPO, check=True, capture_output=True, text=True,
    ).stdout
    return out.split()


def build_jobs():
    cores = read_makefile_list("ANSIBLE_CORES")
    oldest = read_makefile_list("ANSIBLE_CORE_OLDEST")[0]
    newest = cores[-1]
    scenarios = read_makefile_list("SCENARIOS")
    scenarios_oldest = read_makefile_list("SCENARIOS_OLDEST")

    jobs = [
        Job("system", "set-up", make("system"), estimate=40),
        Job("podman", "set-up", make("podman"), needs=["system"], estimate=1),
        Job("uv", "set-up", make("uv"), needs=["system"], estimate=5),
        Job("pythons", "set-up", make("pythons"), needs=["uv", "image 13"], estimate=10),
        Job("venv", "set-up", make("venv"), needs=["uv", "pythons"], estimate=15),
        Job("collections", "set-up", make("collections"), needs=["venv"], estimate=5),
        Job("image 12", "set-up", make("image-12"), needs=["podman"], estimate=80),
        Job("image 13", "set-up", make("image-13"), needs=["podman"], estimate=80),
        Job("image forky", "set-up", make("image-forky"), needs=["podman"], estimate=60),
        Job("node tools build", "set-up", make("nodetools-build"), needs=["system"], estimate=30),
        Job("mirrors", "set-up", make("mirrors"), needs=["system", "node tools build"], estimate=10),
        Job("ssh key", "set-up", make("ssh-key"), needs=["system"], estimate=1),
        Job("venv oldest", "set-up", make("venv-oldest"), needs=["uv"], estimate=15),
        Job("lint", "lint", make("lint"), needs=["venv", "collections"], estimate=150),
        Job("docs venv", "set-up", make("docs-venv"), needs=["uv", "pythons"], estimate=10),
        Job("docs", "docs", make("docs-test"), needs=["docs venv", "collections"], estimate=150),
        Job("control plane build", "set-up", make("controlplane-build"), needs=["system"], estimate=750),
        Job("control plane", "cluster", make("controlplane"), needs=["venv", "control plane build"], estimate=180),
        Job("real node build", "set-up", make("realnode-build"), needs=["image 13", "control plane build"], estimate=30),
        Job("real node", "cluster", make("realnode"), needs=["venv", "collections", "real node build", "mirrors"],
            estimate=320),
        Job("package", "package", make("package"), needs=["venv", "collections", "image 12"], estimate=40),
    ]
    for core in cores:
        jobs.append(Job(f"venv ansible-core {core}", "set-up", make(f"venv-core-{core}"),
                        needs=["uv"], estimate=5))
        jobs.append(Job(f"sanity {core}", "sanity", make("sanity", ANSIBLE_CORES=core),
                        needs=[f"venv ansible-core {core}", "pythons"], locks=[SanityVenvLock(core)], estimate=300))
        jobs.append(Job(f"units {core}", "units", make("units", ANSIBLE_CORES=core),
                        needs=[f"venv ansible-core {core}", "pythons"], estimate=120))
    molecule_needs = ["collections", "image 12", "image 13", "mirrors", "ssh key"]
    for scenario in scenarios:
        jobs.append(Job(f"molecule {scenario} {newest}", "molecule", make("molecule", SCENARIOS=scenario),
                        needs=["venv"] + molecule_needs + scenario_images(scenario), locks=[f"scenario {scenario}"],
                        estimate=SCENARIO_ESTIMATES.get(scenario, 300)))
    for scenario in scenarios_oldest:
        jobs.append(Job(f"molecule {scenario} {oldest}", "molecule", make("molecule-oldest", SCENARIOS_OLDEST=scenario),
                        needs=["venv oldest"] + molecule_needs + scenario_images(scenario), locks=[f"scenario {scenario}"],
                        estimate=SCENARIO_ESTIMATES.get(scenario, 300)))
    return jobs


def scenario_images(scenario):
    """The set-up jobs of the images a scenario's platforms name beyond Debian 12 and 13, and the
    control plane's build for a scenario that starts a test cluster (tests/controlplane) or mounts
    one of its binaries (gpu_kubelet's kubelet, from .cache/controlplane)."""
    text = (REPO / "molecule" / scenario / "molecule.yml").read_text()
    needs = [f"image {tag}" for tag in ("forky",) if re.search(rf"}}:{tag}\b", text)]
    if "tests/controlplane/testcluster.py" in text or "/.cache/controlplane/" in text:
        needs.append("control plane build")
    return needs


def load_times():
    try:
        return json.loads(TIMES.read_text())
    except (OSError, ValueError):
        return {}


def save_times(jobs):
    times = load_times()
    for job in jobs:
        if job.state == "passed":
            times[job.name] = job.seconds
    TIMES.parent.mkdir(parents=True, exist_ok=True)
    TIMES.write_text(json.dumps(times, indent=1, sort_keys=True) + "\n")


def priorities(jobs):
    """The longest path (estimated seconds) from each job to the end of the run."""
    by_name = {job.name: job for job in jobs}
    users = {job.name: [] for job in jobs}
    for job in jobs:
        for need in job.needs:
            users[need].append(job.name)
    memo = {}

    def path(name):
        if name not in memo:
            memo[name] = by_name[name].estimate + max((path(u) for u in users[name]), default=0)
        return memo[name]

    return {job.name: path(job.name) for job in jobs}


def machine_cpu():
    """Busy and total CPU seconds of the whole machine so far (/proc/stat), containers included."""
    with open("/proc/stat", encoding="ascii") as stat:
        fields = [int(v) for v in stat.readline().split()[1:9]]
    ticks = os.sysconf("SC_CLK_TCK")
    idle = fields[3] + fields[4]
    return (sum(fields) - idle) / ticks, sum(fields) / ticks


# A fixed piece of pure-Python work (JSON, a regular expression, lists and dicts) run in a fresh
# interpreter: the CPU milliseconds it took, the better of two tries. CPU time, not wall time, so
# that a sample taken while the jobs keep both cores busy measures how fast a core is, not how
# long the sample waited for one.
CALIBRATION = """
import json, re, time
best = None
for _ in range(2):
    started = time.process_time()
    data = [{"name": "node-%d" % i, "gpus": list(range(i % 9)), "labels": {"k": str(i)}} for i in range(10000)]
    text = json.dumps(data, sort_keys=True)
    found = len(re.findall(r'"node-(\\d+)7"', text))
    total = sum(len(item["gpus"]) for item in json.loads(text)) + found
    elapsed = (time.process_time() - started) * 1000
    best = elapsed if best is None else min(best, elapsed)
print(round(best) if total else -1)
"""
CALIBRATION_EVERY = 60


def calibration_ms():
    """CALIBRATION's milliseconds on this machine now. The same machine runs the suite 20 to 30 %
    slower at some hours than at others, which the wall and CPU columns cannot tell from a change
    in the suite: the run samples it every CALIBRATION_EVERY seconds (0.1 CPU-second each), and
    two runs' times compare only at a similar median."""
    result = subprocess.run([sys.executable, "-I", "-S", "-c", CALIBRATION], stdout=subprocess.PIPE,
                            universal_newlines=True, check=True)
    return int(result.stdout)


def lock_chain(job, jobs):
    """The estimated seconds of the other waiting jobs that share a lock with this one: they can
    only run after it, one by one, so a job at the head of a long chain goes first."""
    names = {str(lock) for lock in job.lock_sources}
    return sum(other.estimate for other in jobs
               if other is not job and other.state == "waiting"
               and names & {str(lock) for lock in other.lock_sources})


def stamp(t0):
    elapsed = int(time.monotonic() - t0)
    return f"[{elapsed // 60:3d}:{elapsed % 60:02d}]"


def print_table(jobs, wall, busy, available, width, calibration):
    rows = [job for job in jobs if job.seconds is not None]
    print(f"\n=== make test: each job's time (wall seconds, {width} at a time on {os.cpu_count()} CPUs;"
          " CPU: the seconds of its own processes, not of its containers)")
    print(f"{'stage':<10} {'job':<44} {'wall s':>7} {'CPU s':>7}  result")
    for stage in ("set-up", "lint", "docs", "sanity", "units", "cluster", "package", "molecule"):
        for job in [j for j in rows if j.stage == stage]:
            cpu = "" if job.cpu is None else f"{job.cpu:.0f}"
            print(f"{stage:<10} {job.name:<44} {job.seconds:>7.0f} {cpu:>7}  {job.state}")
        stage_jobs = [j for j in rows if j.stage == stage]
        if len(stage_jobs) > 1:
            first = min(j.start for j in stage_jobs)
            last = max(j.start + j.seconds for j in stage_jobs)
            print(f"{stage:<10} {'(stage, first start to last end)':<44} {last - first:>7.0f}")
    print(f"{'total':<10} {'wall clock':<44} {wall:>7.0f}")
    print(f"{'total':<10} {'sum of the jobs wall times':<44} {sum(j.seconds for j in rows):>7.0f}")
    print(f"{'total':<10} {'machine CPU busy (of ' + format(available, '.0f') + ' s)':<44} {busy:>7.0f}"
          f"  {100 * busy / max(available, 1):.0f}%")
    samples = sorted(calibration)
    print(f"{'total':<10} {'calibration ms, median of ' + str(len(samples)) + ' (lowest, highest)':<44} "
          f"{samples[len(samples) // 2]:>7.0f}  ({samples[0]}, {samples[-1]})")
    not_run = [job.name for job in jobs if job.state in ("waiting", "skipped")]
    if not_run:
        print(f"not run: {', '.join(not_run)}")


def main():
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--jobs", "-j", type=int, default=int(os.environ.get("MAKE_TEST_JOBS", "2")),
                        help="jobs at once (MAKE_TEST_JOBS, default 2)")
    parser.add_argument("--only", action="append", default=[],
                        help="run the jobs whose names match this glob, and the jobs they need")
    parser.add_argument("--list", action="store_true", help="list the jobs and exit")
    args = parser.parse_args()

    jobs = build_jobs()
    by_name = {job.name: job for job in jobs}
    if args.only:
        wanted = set()
        todo = [job.name for job in jobs if any(fnmatch.fnmatch(job.name, g) for g in args.only)]
        if not todo:
            parser.error(f"--only {args.only} matches no job; --list shows them")
        while todo:
            name = todo.pop()
            if name not in wanted:
                wanted.add(name)
                todo.extend(by_name[name].needs)
        jobs = [job for job in jobs if job.name in wanted]
    known = load_times()
    for job in jobs:
        job.estimate = known.get(job.name, job.estimate)
    prio = priorities(jobs)
    if args.list:
        for job in sorted(jobs, key=lambda j: -prio[j.name]):
            print(f"{job.name:<48} {job.estimate:>6.0f} s  needs: {', '.join(job.needs) or '-'}")
        return 0

    LOGS.mkdir(parents=True, exist_ok=True)
    t0 = time.monotonic()
    calibration = [calibration_ms()]
    calibrated = time.monotonic()
    cpu0 = machine_cpu()
    stopping = False
    print(f"make test: {len(jobs)} jobs, {args.jobs} at once; logs in {LOGS.relative_to(REPO)}/", flush=True)
    while True:
        running = [job for job in jobs if job.state == "running"]
        for job in running:
            pid, status, usage = os.wait4(job.proc.pid, os.WNOHANG)
            if pid == 0:
                continue
            rc = os.waitstatus_to_exitcode(status)
            job.proc.returncode = rc
            job.cpu = usage.ru_utime + usage.ru_stime
            job.seconds = time.monotonic() - job.start
            job.state = "passed" if rc == 0 else "failed"
            job.out.close()
            if rc == 0:
                print(f"{stamp(t0)} passed  {job.name} ({job.seconds:.0f} s)", flush=True)
            else:
                stopping = True
                print(f"{stamp(t0)} FAILED  {job.name} ({job.seconds:.0f} s, exit {rc}); its log follows whole:",
                      flush=True)
                sys.stdout.write(job.log.read_text(errors="replace"))
                print(f"{stamp(t0)} end of the log of {job.name} ({job.log.relative_to(REPO)})", flush=True)
        running = [job for job in jobs if job.state == "running"]
        if not stopping:
            held = set().union(*(job.locks for job in running)) if running else set()
            ready = [job for job in jobs if job.state == "waiting"
                     and all(by_name[n].state == "passed" for n in job.needs)]
            for job in ready:
                job.locks = {str(lock) for lock in job.lock_sources}
            ready = [job for job in ready if not job.locks & held]
            ready.sort(key=lambda j: -(prio[j.name] + lock_chain(j, jobs)))
            for job in ready:
                if len(running) >= args.jobs:
                    break
                if job.locks & held:
                    continue
                job.state = "running"
                job.start = time.monotonic()
                out = open(job.log, "w", encoding="utf-8")
                out.write(f"$ {shlex.join(job.argv)}\n")
                out.flush()
                job.proc = subprocess.Popen(job.argv, cwd=REPO, stdout=out, stderr=subprocess.STDOUT,
                                            stdin=subprocess.DEVNULL)
                job.out = out
                running.append(job)
                held |= job.locks
                print(f"{stamp(t0)} start   {job.name}", flush=True)
        if not running:
            break
        if time.monotonic() - calibrated >= CALIBRATION_EVERY:
            calibration.append(calibration_ms())
            calibrated = time.monotonic()
        time.sleep(0.5)

    for job in jobs:
        if job.state == "waiting":
            job.state = "skipped"
    wall = time.monotonic() - t0
    cpu1 = machine_cpu()
    calibration.append(calibration_ms())
    save_times(jobs)
    print_table(jobs, wall, cpu1[0] - cpu0[0], cpu1[1] - cpu0[1], args.jobs, calibration)
    failed = [job.name for job in jobs if job.state == "failed"]
    passed = sum(job.state == "passed" for job in jobs)
    skipped = sum(job.state == "skipped" for job in jobs)
    print(f"jobs: {passed} passed, {len(failed)} failed, {skipped} skipped")
    if failed:
        for job in jobs:
            if job.state == "failed":
                print_failure_lines(job)
        print(f"make test FAILED: {', '.join(failed)}")
        return 1
    print(f"make test passed: {len(jobs)} jobs in {wall:.0f} s")
    return 0


FAILURE_LINE = re.compile(r"^(fatal: |failed: |ERROR|CRITICAL|FAILED |E   |Traceback|make(\[\d+\])?: \*\*\*)")


def print_failure_lines(job: Job, most: int = 12, width: int = 600) -> None:
    """Repeat the lines that say why a job failed, last, where a shortened CI log still shows them."""
    lines = job.log.read_text(errors="replace").splitlines()
    hits = [line for line in lines if FAILURE_LINE.match(line)]
    print(f"why {job.name} failed ({len(hits)} such lines in {job.log.relative_to(REPO)}, the last {most}):")
    for line in hits[-most:]:
        print("  " + (line if len(line) <= width else line[:width] + " [...]"))


if __name__ == "__main__":
    sys.exit(main())

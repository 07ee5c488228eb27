# Copyright: (c) 2026, gpufleet.nvidia contributors
# GNU General Public License v3.0+ (see COPYING or https://www.gnu.org/licenses/gpl-3.0.txt)
"""How the node part of site.yml scales: 1 node, then 4 nodes with forks=4.

Each run starts fresh Debian 12 systemd containers, reached over SSH as real
nodes are (sshd is installed untimed), prepares them like kubeadm-joined
nodes (demo/prepare.yml, not timed) and times
`ansible-playbook gpufleet.nvidia.site` on them with the demo's settings
(Debian's real driver packages, real containerd, the STAND-IN toolkit mirror
and kubelet). Then the 4 nodes are converged again, which must change
nothing. Prints the wall times, the 4:1 ratio (target <= 1.6) and the re-run
time per host.

Here the controller and all the nodes share this machine's CPUs, which a
fleet does not. So the same 1:4 comparison is also made for a playbook of
trivial tasks (Ansible's own cost per task and host, nothing of this
collection): the ratio this machine can reach at best.

The .deb files are downloaded once, by an untimed seed run, and copied into
every container's apt cache before its timed run, so that the figures measure
the collection's work and the nodes' own (apt, dpkg, systemd), not the
bandwidth to deb.debian.org; a fleet installs from a nearby mirror.
Run with `make bench-scale`.
"""

from __future__ import annotations

import os
import re
import subprocess
import sys
import tempfile
import time

REPO = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
IMAGE = os.environ.get("MOLECULE_IMAGE_PREFIX", "localhost/gpufleet-debian") + ":12"
MIRRORS = os.environ.get("GPUFLEET_MIRRORS", os.path.join(REPO, ".cache", "mirrors"))
FORKS = 4
TARGET_RATIO = 1.6
RECAP = re.compile(r"^(\S+)\s+:\s+ok=(\d+)\s+changed=(\d+)\s+unreachable=(\d+)\s+failed=(\d+)", re.M)
ENV = dict(os.environ, ANSIBLE_PIPELINING="true", ANSIBLE_INJECT_FACT_VARS="false", ANSIBLE_FORCE_COLOR="0",
           ANSIBLE_PYTHON_INTERPRETER="auto_silent", ANSIBLE_FORKS=str(FORKS), GPUFLEET_MIRRORS=MIRRORS)


def sh(*argv):
    return subprocess.run(argv, check=True, text=True, capture_output=True)


SSHD = ("set -e; apt-get update -qq; DEBIAN_FRONTEND=noninteractive apt-get install -y -qq --no-install-recommends "
        "openssh-server >/dev/null; install -d -m 700 /root/.ssh; systemctl start ssh")
TRIVIAL = """- name: Trivial tasks
  hosts: gpu_nodes
  gather_facts: false
  tasks:
    - name: Run true
      ansible.builtin.command: "true"
      changed_when: false
      loop: "{{ range(20) | list }}"
"""


def start(names, key):
    for name in names:
        subprocess.run(["podman", "rm", "-f", name], capture_output=True, check=False)
        sh("podman", "run", "-d", "--name", name, "--hostname", name, "--systemd=always",
           "-v", "%s:/srv/mirrors:ro" % MIRRORS, IMAGE, "/sbin/init")
    for name in names:
        for dummy in range(60):
            state = subprocess.run(["podman", "exec", name, "systemctl", "is-system-running"],
                                   capture_output=True, text=True, check=False).stdout.strip()
            if state in ("running", "degraded"):
                break
            time.sleep(0.5)
    installs = [subprocess.Popen(["podman", "exec", name, "sh", "-c", SSHD], stdout=subprocess.DEVNULL)
                for name in names]
    if any(install.wait() for install in installs):
        raise SystemExit("could not install sshd in the containers")
    addresses = {}
    for name in names:
        sh("podman", "cp", key + ".pub", "%s:/root/.ssh/authorized_keys" % name)
        sh("podman", "exec", name, "chown", "root:root", "/root/.ssh/authorized_keys")
        addresses[name] = sh("podman", "inspect", name, "--format", "{{.NetworkSettings.IPAddress}}").stdout.strip()
    return addresses


def remove(names):
    subprocess.run(["podman", "rm", "-f"] + list(names), capture_output=True, check=False)


def inventory(workdir, addresses, key):
    """An SSH inventory of the containers with the demo's group_vars."""
    path = os.path.join(workdir, "inventory-%d" % len(addresses))
    os.makedirs(path, exist_ok=True)
    with open(os.path.join(path, "hosts.yml"), "w") as handle:
        handle.write("all:\n  children:\n    gpu_nodes:\n      hosts:\n")
        handle.writelines("        %s: {ansible_host: %s}\n" % item for item in sorted(addresses.items()))
        handle.write("  vars:\n    ansible_user: root\n    ansible_ssh_private_key_file: %s\n"
                     "    ansible_ssh_common_args: -o StrictHostKeyChecking=no -o UserKnownHostsFile=/dev/null\n"
                     "    ansible_python_interpreter: /usr/bin/python3\n" % key)
    link = os.path.join(path, "group_vars")
    if not os.path.exists(link):
        os.symlink(os.path.join(REPO, "demo", "inventory", "group_vars"), link)
    return path


def playbook(inventory_path, playbook_ref):
    started = time.monotonic()
    result = subprocess.run(["ansible-playbook", "-i", inventory_path, playbook_ref], env=ENV, text=True,
                            capture_output=True, check=False, cwd=REPO)
    elapsed = time.monotonic() - started
    if result.returncode != 0:
        sys.stderr.write(result.stdout[-6000:] + result.stderr[-2000:])
        raise SystemExit("%s failed (rc=%d)" % (playbook_ref, result.returncode))
    recap = dict((host, {"ok": int(ok), "changed": int(changed)})
                 for host, ok, changed, dummy, dummy2 in RECAP.findall(result.stdout))
    return elapsed, recap


def seed_debs(workdir, key):
    """Converge one container, untimed, and keep the .deb files apt fetched."""
    debs = os.path.join(workdir, "debs")
    os.makedirs(debs)
    names = ["gpufleet-bench-seed"]
    try:
        path = inventory(os.path.join(workdir, "seed"), start(names, key), key)
        playbook(path, "demo/prepare.yml")
        playbook(path, "gpufleet.nvidia.site")
        sh("podman", "cp", "gpufleet-bench-seed:/var/cache/apt/archives/.", debs)
    finally:
        remove(names)
    return [os.path.join(debs, name) for name in os.listdir(debs) if name.endswith(".deb")]


def timed_converge(workdir, count, debs, key):
    names = ["gpufleet-bench-%d" % number for number in range(1, count + 1)]
    path = inventory(workdir, start(names, key), key)
    for name in names:
        for deb in debs:
            sh("podman", "cp", deb, "%s:/var/cache/apt/archives/" % name)
    playbook(path, "demo/prepare.yml")
    elapsed, recap = playbook(path, "gpufleet.nvidia.site")
    return names, path, elapsed, recap


def main():
    with tempfile.TemporaryDirectory(prefix="gpufleet-bench-") as workdir:
        key = os.path.join(workdir, "id_ed25519")
        sh("ssh-keygen", "-q", "-t", "ed25519", "-N", "", "-f", key)
        trivial = os.path.join(workdir, "trivial.yml")
        with open(trivial, "w") as handle:
            handle.write(TRIVIAL)
        debs = seed_debs(workdir, key)
        names, path_one, one, recap_one = timed_converge(workdir, 1, debs, key)
        trivial_one = playbook(path_one, trivial)[0]
        remove(names)
        names, path, four, recap_four = timed_converge(workdir, 4, debs, key)
        try:
            rerun, recap_rerun = playbook(path, "gpufleet.nvidia.site")
            trivial_four = playbook(path, trivial)[0]
        finally:
            remove(names)
    ratio = four / one
    changed_again = sum(counts["changed"] for counts in recap_rerun.values())
    print("site.yml node part on %s over SSH, forks=%d, %d CPUs shared by the controller and the nodes, "
          "%d .deb files seeded into each apt cache" % (IMAGE, FORKS, os.cpu_count(), len(debs)))
    print("1 node  fresh converge  %6.1f s  tasks changed %s" % (one, sorted(c["changed"] for c in recap_one.values())))
    print("4 nodes fresh converge  %6.1f s  tasks changed %s" % (four, sorted(c["changed"] for c in recap_four.values())))
    print("ratio 4:1               %6.2f    (target <= %.1f)" % (ratio, TARGET_RATIO))
    print("4 nodes re-run          %6.1f s  = %.1f s per host, %d tasks changed" % (
        rerun, rerun / len(names), changed_again))
    print("trivial tasks 1 / 4     %6.1f s / %.1f s = ratio %.2f, this machine's floor for the same comparison" % (
        trivial_one, trivial_four, trivial_four / trivial_one))
    return 0 if ratio <= TARGET_RATIO and changed_again == 0 else 1


if __name__ == "__main__":
    sys.exit(main())

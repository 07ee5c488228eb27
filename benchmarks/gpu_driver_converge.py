# Copyright: (c) 2026, gpufleet.nvidia contributors
# GNU General Public License v3.0+ (see COPYING or https://www.gnu.org/licenses/gpl-3.0.txt)
"""Converge gpu_driver on one fresh Debian container, then re-run it.

Prints the wall time of both runs and the tasks run/changed/skipped of each,
from ansible-playbook's recap. Uses Debian's real driver packages
(kernel module none, as in the molecule scenario). Run with
`make bench-driver` (needs the test images, see `make setup`).
"""

from __future__ import annotations

import os
import re
import subprocess
import sys
import tempfile
import time

REPO = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
IMAGE = os.environ.get("MOLECULE_IMAGE_PREFIX", "localhost/gpufleet-debian") + ":" + os.environ.get("BENCH_DEBIAN", "12")
NAME = "gpufleet-bench-driver"
PLAYBOOK = os.path.join(REPO, "molecule", "gpu_driver", "converge.yml")
RECAP = re.compile(r"ok=(\d+)\s+changed=(\d+)\s+unreachable=(\d+)\s+failed=(\d+)\s+skipped=(\d+)")


def sh(*argv, **kwargs):
    return subprocess.run(argv, check=True, text=True, capture_output=True, **kwargs)


def start_container():
    subprocess.run(["podman", "rm", "-f", NAME], capture_output=True, check=False)
    sh("podman", "run", "-d", "--name", NAME, IMAGE, "/sbin/init")
    for dummy in range(60):
        state = subprocess.run(["podman", "exec", NAME, "systemctl", "is-system-running"],
                               capture_output=True, text=True, check=False).stdout.strip()
        if state in ("running", "degraded"):
            break
        time.sleep(0.5)
    # Same preparation as the molecule scenario (mmdebstrap leaves empty lists).
    sh("podman", "exec", NAME, "apt-get", "update", "-qq")


def converge(inventory):
    env = dict(os.environ, ANSIBLE_PIPELINING="true", ANSIBLE_INJECT_FACT_VARS="false",
               ANSIBLE_FORCE_COLOR="0", ANSIBLE_PYTHON_INTERPRETER="auto_silent")
    started = time.monotonic()
    result = subprocess.run(["ansible-playbook", "-i", inventory, PLAYBOOK], env=env, text=True, capture_output=True,
                            check=False)
    elapsed = time.monotonic() - started
    if result.returncode != 0:
        sys.stderr.write(result.stdout[-4000:] + result.stderr[-2000:])
        raise SystemExit("converge failed (rc=%d)" % result.returncode)
    ok, changed, unreachable, failed, skipped = (int(n) for n in RECAP.findall(result.stdout)[-1])
    return elapsed, {"ok": ok, "changed": changed, "skipped": skipped, "failed": failed}


def main():
    start_container()
    try:
        with tempfile.NamedTemporaryFile("w", suffix=".ini", delete=False) as inventory:
            inventory.write("[gpu_nodes]\n%s ansible_connection=containers.podman.podman\n" % NAME)
        first = converge(inventory.name)
        second = converge(inventory.name)
    finally:
        subprocess.run(["podman", "rm", "-f", NAME], capture_output=True, check=False)
    print("gpu_driver on %s (Debian's real packages, kernel module none)" % IMAGE)
    for label, (elapsed, counts) in (("fresh converge", first), ("re-run", second)):
        print("%-15s %6.1f s  tasks ok=%d changed=%d skipped=%d" % (
            label, elapsed, counts["ok"], counts["changed"], counts["skipped"]))
    return 0 if second[1]["changed"] == 0 else 1


if __name__ == "__main__":
    sys.exit(main())

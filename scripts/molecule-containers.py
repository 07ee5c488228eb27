"""The molecule scenarios' containers, started and removed as molecule's podman driver does it.

    molecule-containers.py create|destroy PLATFORM_JSON...

Each PLATFORM_JSON is one entry of the scenario's molecule.yml `platforms`.
create removes what is left of an earlier run, then starts every platform's
container at once: `podman run -d --name N --hostname N --label owner=molecule
[--systemd=S] [--cap-add CAP]... [-v VOLUME]... IMAGE COMMAND`, the arguments the driver's
podman_container task passes for the keys the scenarios use. destroy removes
them (`podman rm -f -t 0`: they are thrown away, so systemd is not waited for).
A platform key this script does not pass on is refused, naming it, rather than
left out silently.

Ansible reaches the containers over SSH (.config/molecule/config.yml): create
also mounts the public half of $GPUFLEET_TEST_SSH_DIR/id_ed25519 as root's
authorized_keys, and both actions first close any ssh ControlMaster left for a
container of the same name, so that no task reaches a container through the
connection of an earlier one.
"""

import json
import os
import shlex
import subprocess
import sys

# Keys read by molecule itself (groups) or that need no podman argument here.
KNOWN = {"name", "image", "pre_build_image", "command", "systemd", "volumes", "groups", "hostname", "capabilities"}
SSH_DIR = os.environ.get("GPUFLEET_TEST_SSH_DIR", "/var/tmp/gpufleet-ssh")
# As in .config/molecule/config.yml: ssh expands it for the user, host and port it is given.
CONTROL_PATH = "/tmp/gpufleet-%i-%C"


def run_argv(platform):
    unknown = sorted(set(platform) - KNOWN)
    if unknown:
        raise SystemExit(f"platform {platform.get('name')}: {', '.join(unknown)} not supported by "
                         "scripts/molecule-containers.py (molecule/resources/playbooks/create.yml); add it there")
    if not platform.get("pre_build_image"):
        raise SystemExit(f"platform {platform['name']}: only pre_build_image: true images are supported")
    argv = ["podman", "run", "-d", "--name", platform["name"],
            "--hostname", platform.get("hostname", platform["name"]), "--label", "owner=molecule"]
    if "systemd" in platform:
        argv.append(f"--systemd={str(platform['systemd']).lower()}")
    for capability in platform.get("capabilities", []):
        argv += ["--cap-add", capability]
    for volume in platform.get("volumes", []):
        argv += ["--volume", volume]
    argv += ["--volume", f"{authorized_key()}:/root/.ssh/authorized_keys:ro"]
    argv.append(platform["image"])
    command = platform.get("command")
    if command:
        argv += shlex.split(command) if isinstance(command, str) else list(command)
    return argv


def authorized_key():
    key = os.path.join(SSH_DIR, "id_ed25519.pub")
    if not os.path.isfile(key):
        raise SystemExit(f"{key} not found: `make ssh-key` makes the key Ansible reaches the containers with "
                         f"(GPUFLEET_TEST_SSH_DIR={SSH_DIR} make ssh-key outside make)")
    return key


def close_masters(names):
    """Ends the ssh ControlMaster of each name, if one is left (ssh removes its socket)."""
    for name in names:
        # Fails, and says nothing, where there is no master; ssh itself removes a dead one's socket.
        subprocess.run(["ssh", "-o", f"ControlPath={CONTROL_PATH}", "-l", "root", "-O", "exit", name],
                       check=False, capture_output=True)


def remove(names):
    close_masters(names)
    done = subprocess.run(["podman", "rm", "-f", "-t", "0", "--ignore", *names],
                          check=True, capture_output=True, text=True)
    return done.stdout.split()


def main():
    action, platforms = sys.argv[1], [json.loads(arg) for arg in sys.argv[2:]]
    names = [platform["name"] for platform in platforms]
    if action == "destroy":
        print("\n".join(remove(names)))
        return 0
    if action != "create":
        raise SystemExit(f"unknown action {action}")
    commands = [run_argv(platform) for platform in platforms]
    remove(names)
    started = [(argv, subprocess.Popen(argv, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True))
               for argv in commands]
    failed = 0
    for argv, proc in started:
        out, err = proc.communicate()
        if proc.returncode:
            failed += 1
            print(f"{shlex.join(argv)} failed ({proc.returncode}): {err.strip()}", file=sys.stderr)
        else:
            print(f"{argv[4]}: {out.strip()[:12]}")
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())

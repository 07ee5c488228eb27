# Copyright: (c) 2026, gpufleet.nvidia contributors
# GNU General Public License v3.0+ (see COPYING or https://www.gnu.org/licenses/gpl-3.0.txt)
"""The test host as molecule's containers are reached.

molecule hands testinfra its Ansible inventory, where the containers have ansible_connection
podman. testinfra's Ansible backend maps ssh, docker, lxc and local connections to its own
backends but not podman, so it would run every command, file and package check through a new
`ansible` process (seconds of CPU each). Here commands, files and packages go through
testinfra's podman backend (`podman exec`, the same container, the same root user), and
`host.ansible(...)` still runs the Ansible module through the inventory. A host whose
inventory changes how it is reached (another address, user, become or podman executable) keeps
testinfra's Ansible backend.
"""

import pytest
import testinfra


class PodmanExecHost:
    """testinfra's podman host for checks, its Ansible host for Ansible modules."""

    def __init__(self, ansible_host):
        self._ansible_host = ansible_host
        self._podman_host = testinfra.get_host("podman://" + ansible_host.backend.get_hostname())

    def __getattr__(self, name):
        if name == "ansible":
            return self._ansible_host.ansible
        return getattr(self._podman_host, name)


def _reached_as_podman_exec(name, variables):
    """Whether Ansible reaches the host as testinfra's `podman exec <name>` does."""
    return (variables.get("ansible_connection") == "podman"
            and variables.get("ansible_host") in (None, name)
            and variables.get("ansible_podman_executable") in (None, "podman")
            and not variables.get("ansible_podman_extra_args")
            and not variables.get("ansible_user")
            and not variables.get("ansible_become"))


@pytest.fixture(scope="module")
def host(_testinfra_host):
    """Overrides testinfra's own host fixture, which returns _testinfra_host as it is."""
    name = _testinfra_host.backend.get_hostname()
    if _testinfra_host.backend.NAME != "ansible":
        return _testinfra_host
    if not _reached_as_podman_exec(name, _testinfra_host.backend.ansible_runner.get_variables(name)):
        return _testinfra_host
    return PodmanExecHost(_testinfra_host)

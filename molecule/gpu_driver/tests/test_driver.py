# Copyright: (c) 2026, gpufleet.nvidia contributors
# GNU General Public License v3.0+ (see COPYING or https://www.gnu.org/licenses/gpl-3.0.txt)
"""State of a host converged by gpu_driver with Debian's real packages (kernel module none)."""

import base64
import json

import pytest
from ansible.release import __version__ as ANSIBLE_VERSION

# Host -> (pinned version glob, installed version prefix).
EXPECTED = {
    "driver-debian12": ("535.261.03-*", "535.261.03-"),
    "driver-debian13": ("550.*", "550."),
}
PACKAGES = ("nvidia-smi", "libnvidia-ml1", "libcuda1")


@pytest.fixture
def expected(host):
    return EXPECTED[host.backend.get_hostname()]


@pytest.mark.parametrize("name", PACKAGES)
def test_packages_installed_at_the_pinned_version_and_held(host, expected, name):
    package = host.package(name)
    assert package.is_installed
    assert package.version.startswith(expected[1])
    selection = host.check_output("dpkg --get-selections %s", name).split()
    assert selection[0].split(":")[0] == name  # multiarch libraries print name:arch
    assert selection[1] == "hold"


def test_pin_file(host, expected):
    pin = host.file("/etc/apt/preferences.d/gpufleet-nvidia-driver.pref")
    assert pin.exists and pin.user == "root" and pin.mode == 0o644
    assert "Pin: version %s\n" % expected[0] in pin.content_string
    assert "Pin-Priority: 1001" in pin.content_string
    assert "src:*nvidia*:any" in pin.content_string


MIRROR_SOURCE = """# STAND-IN packages for tests, not NVIDIA software: newer versions that
# the pin and the hold must keep out.
Types: deb
URIs: file:/srv/mirrors/newer/repo
Suites: /
Signed-By: /srv/mirrors/newer/keyring.gpg
"""


@pytest.fixture
def newer_mirror(host):
    """A newer driver release appears in an archive the host uses."""
    path = "/etc/apt/sources.list.d/stand-in-newer.sources"
    host.run("printf '%%s' %s > %s", MIRROR_SOURCE, path)
    update = host.run("apt-get update")
    assert update.rc == 0, update.stderr
    return path


def test_pin_in_effect_for_apt(host, expected, newer_mirror):
    # The STAND-IN mirror offers 535.999.01-1, 550.999.01-1 and 570.999.01-1; apt's policy
    # must prefer the pinned version (or, for a branch pin, stay in the branch).
    policy = host.check_output("apt-cache policy nvidia-smi")
    assert "999.01-1" in policy, "the stand-in mirror is not visible to apt: %s" % policy
    candidate = [line.split()[1] for line in policy.splitlines() if line.strip().startswith("Candidate:")][0]
    assert candidate.startswith(expected[1])


def test_apt_get_upgrade_does_not_move_the_driver(host, expected, newer_mirror):
    before = {name: host.package(name).version for name in PACKAGES}
    upgrade = host.run("DEBIAN_FRONTEND=noninteractive apt-get -y upgrade")
    assert upgrade.rc == 0, upgrade.stderr
    after = {name: host.package(name).version for name in PACKAGES}
    assert after == before
    assert all(version.startswith(expected[1]) for version in after.values())


def test_non_free_enabled_in_a_file_of_our_own(host):
    sources = host.file("/etc/apt/sources.list.d/gpufleet-debian-non-free.sources")
    assert sources.exists
    assert "non-free" in sources.content_string
    # The image's own sources are untouched.
    assert "non-free" not in host.file("/etc/apt/sources.list").content_string


def test_non_free_source_is_what_deb822_repository_writes(host):
    # The role writes the deb822 file itself (the module needs python3-debian on the node, and
    # installs it only from ansible-core 2.17); a node whose file that module wrote sees no change.
    # The module of ansible-core 2.16 writes the same fields in another order (it sorts them from 2.17).
    if tuple(int(part) for part in ANSIBLE_VERSION.split(".")[:2]) < (2, 17):
        pytest.skip("ansible-core %s's deb822_repository does not sort the fields" % ANSIBLE_VERSION)
    # Read through slurp: a command's output over the ansible backend loses the file's final newline.
    slurped = host.ansible("ansible.builtin.slurp", "src=/etc/apt/sources.list.d/gpufleet-debian-non-free.sources",
                           check=False, become=True)
    text = base64.b64decode(slurped["content"]).decode()
    fields = dict(line.split(": ", 1) for line in text.splitlines() if line)
    args = "name=%s types=%s uris=%s suites=%s components=%s signed_by=%s" % (
        fields["X-Repolib-Name"], ",".join(fields["Types"].split()), ",".join(fields["URIs"].split()),
        ",".join(fields["Suites"].split()), ",".join(fields["Components"].split()), fields["Signed-By"])
    result = host.ansible("ansible.builtin.deb822_repository", args, check=True, become=True)
    assert not result.get("failed"), result
    assert result["repo"] == text
    assert result["changed"] is False


def test_nouveau_blacklisted(host):
    conf = host.file("/etc/modprobe.d/gpufleet-blacklist-nouveau.conf")
    assert conf.exists and conf.mode == 0o644
    lines = [line for line in conf.content_string.splitlines() if not line.startswith("#")]
    assert "blacklist nouveau" in lines
    assert "options nouveau modeset=0" in lines


def test_nvml_facts_inside_report_the_installed_driver(host):
    # The module itself, run on the host through Ansible.
    result = host.ansible("gpufleet.nvidia.nvml_facts", check=False)
    facts = result["ansible_facts"]["nvidia"]
    assert facts["driver_installed"] is True, json.dumps(facts)
    assert facts["driver_loaded"] is False
    assert facts["state"] in ("no_gpu", "driver_not_loaded")

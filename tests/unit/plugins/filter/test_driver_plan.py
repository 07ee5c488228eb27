# Copyright: (c) 2026, gpufleet.nvidia contributors
# GNU General Public License v3.0+ (see COPYING or https://www.gnu.org/licenses/gpl-3.0.txt)
"""gpu_driver's decisions on data: flavour, packages from the role's own tables, reboot."""

from __future__ import annotations

import os

import pytest
import yaml

from ansible.errors import AnsibleFilterError
from ansible_collections.gpufleet.nvidia.plugins.filter import driver_plan as plan
from ansible_collections.gpufleet.nvidia.plugins.module_utils import nvml_inventory as inv
from ansible_collections.gpufleet.nvidia.tests.unit.plugins.module_utils import nvml_readings as readings

ROLE = os.path.join(os.path.dirname(__file__), "..", "..", "..", "..", "roles", "gpu_driver")
FIXTURES = os.path.join(os.path.dirname(__file__), "..", "module_utils", "fixtures", "nvidia-smi")


def role_vars(name):
    """A distribution's data as the role sees it: the family's file, then its own."""
    with open(os.path.join(ROLE, "vars", "Debian.yml")) as handle:
        data = yaml.safe_load(handle)
    with open(os.path.join(ROLE, "vars", name)) as handle:
        data.update(yaml.safe_load(handle))
    return data


def nvml_facts(reading):
    return inv.summarise(inv.query_nvml(readings.RecordedNvml(reading)), [], True, None)


def smi_facts(name):
    with open(os.path.join(FIXTURES, name), "rb") as handle:
        parsed = inv.parse_smi_xml(handle.read())
    return inv.summarise(dict(parsed, outcome="ok", message=None), [], True, None)


def pci_only(*device_ids):
    functions = [{"address": "0000:%02x:00.0" % i, "device_id": d, "is_gpu": True, "class": "0x030200"}
                 for i, d in enumerate(device_ids, 1)]
    return {"state": "driver_not_installed", "gpus": [], "pci_devices": functions}


# --------------------------------------------------------------------------
# flavour
# --------------------------------------------------------------------------

@pytest.mark.parametrize("facts,flavor", [
    (nvml_facts(readings.H100), "open"),                                    # Hopper, compute 9.0
    (nvml_facts(readings.TWO_GPUS_SAME_UUID), "open"),                      # Turing, compute 7.5
    (nvml_facts(readings.QUADRO_P400_OLD_DRIVER), "proprietary"),           # Pascal, compute 6.1
    (smi_facts("telegraf-tesla-t4-aws-driver-515.105.01-v11.xml"), "open"),  # architecture Turing
    (smi_facts("netdata-tesla-p100-pcie-16gb-passthrough-driver-510.47.03-v11.xml"), "proprietary"),
    (pci_only("0x2330"), "open"),                                           # H100 by PCI id, no driver yet
    (pci_only("0x1db4"), "proprietary"),                                    # V100 by PCI id
    (pci_only("0x1e02", "0x15f8"), "proprietary"),                          # Turing + P100 mixed
    ({"gpus": [], "pci_devices": []}, "open"),                              # nothing known: NVIDIA's default
])
def test_auto_flavor(facts, flavor):
    assert plan.driver_flavor("auto", facts) == flavor


def test_open_on_a_pre_turing_gpu_is_refused_naming_the_variable():
    with pytest.raises(AnsibleFilterError) as caught:
        plan.driver_flavor("open", pci_only("0x1db4"))
    assert "gpu_driver_module_flavor" in str(caught.value)
    assert "0x1db4" in str(caught.value)


def test_proprietary_is_always_allowed():
    assert plan.driver_flavor("proprietary", nvml_facts(readings.H100)) == "proprietary"


def test_unknown_flavor():
    with pytest.raises(AnsibleFilterError) as caught:
        plan.driver_flavor("closed", {})
    assert "'closed'" in str(caught.value)


# --------------------------------------------------------------------------
# packages, from the role's own tables
# --------------------------------------------------------------------------

DEBIAN = role_vars("Debian.yml")["__gpu_driver_package_table"]


@pytest.mark.parametrize("source,module,flavor,packages", [
    ("distro", "dkms", "open", ["nvidia-driver", "nvidia-open-kernel-dkms", "nvidia-persistenced"]),
    ("distro", "dkms", "proprietary", ["nvidia-driver", "nvidia-kernel-dkms", "nvidia-persistenced"]),
    ("distro", "none", "open", ["nvidia-smi", "libnvidia-ml1", "libcuda1"]),
    ("cuda_repo", "dkms", "open", ["nvidia-driver", "nvidia-kernel-open-dkms", "nvidia-persistenced"]),
    ("cuda_repo", "none", "proprietary", ["nvidia-smi", "libnvidia-ml1"]),
])
def test_debian_packages(source, module, flavor, packages):
    assert plan.driver_packages(DEBIAN, source, module, flavor, "550") == packages


def test_branch_goes_into_names():
    table = {"cuda_repo": {"dkms": {"open": ["nvidia-driver-{branch}-open", "cuda-drivers-{branch}"]}}}
    assert plan.driver_packages(table, "cuda_repo", "dkms", "open", "570") == ["nvidia-driver-570-open", "cuda-drivers-570"]


@pytest.mark.parametrize("args,words", [
    (("distro", "precompiled", "open", "535"), "gpu_driver_kernel_module 'precompiled'"),
    (("rpm", "dkms", "open", "535"), "gpu_driver_source 'rpm'"),
    (("distro", "dkms", "open", "5x5"), "gpu_driver_branch"),
    (("distro", "dkms", "open", "5355"), "'5355'"),
])
def test_unavailable_combinations_name_the_variable(args, words):
    with pytest.raises(AnsibleFilterError) as caught:
        plan.driver_packages(DEBIAN, *args)
    assert words in str(caught.value)


@pytest.mark.parametrize("version,branch", [
    ("535.261.03-1", "535"), ("1:550.163.01-2", "550"), ("570.148.08", "570"), ("470.74", "470"),
    ("", None), (None, None), ("unknown", None),
])
def test_branch_of(version, branch):
    assert plan.driver_branch_of(version) == branch


# --------------------------------------------------------------------------
# reboot
# --------------------------------------------------------------------------

def test_no_reboot_for_a_settled_host():
    assert plan.driver_reboot_reasons(nvml_facts(readings.H100)) == []


def test_reboot_reasons():
    mismatch = inv.summarise(inv.query_nvml(readings.RecordedNvml(readings.MISMATCH_HOST)), [], True, "535.54.03")
    reasons = plan.driver_reboot_reasons(mismatch, nouveau_loaded=True, module_changed=True)
    assert len(reasons) == 3
    assert any("nouveau" in reason for reason in reasons)
    assert any("differ" in reason for reason in reasons)


def test_module_not_loaded_after_install_needs_a_reboot():
    not_loaded = inv.summarise(inv.query_nvml(readings.RecordedNvml(readings.DRIVER_NOT_LOADED_HOST)),
                               [{"is_gpu": True, "address": "0000:01:00.0", "numa_node": None}], True, None)
    assert plan.driver_reboot_reasons(not_loaded) == ["the driver is installed but its kernel module is not loaded"]


def test_userspace_only_never_reboots():
    mismatch = inv.summarise(inv.query_nvml(readings.RecordedNvml(readings.MISMATCH_HOST)), [], True, None)
    assert plan.driver_reboot_reasons(mismatch, nouveau_loaded=True, module_changed=True, kernel_module="none") == []


UBUNTU = role_vars("Ubuntu.yml")["__gpu_driver_package_table"]


@pytest.mark.parametrize("source,module,flavor,packages", [
    ("distro", "precompiled", "open", [
        "linux-modules-nvidia-580-server-open-generic",
        "nvidia-headless-no-dkms-580-server-open",
        "nvidia-utils-580-server",
    ]),
    ("distro", "precompiled", "proprietary", [
        "linux-modules-nvidia-580-server-generic",
        "nvidia-headless-no-dkms-580-server",
        "nvidia-utils-580-server",
    ]),
    ("distro", "dkms", "open", ["nvidia-headless-580-server-open", "nvidia-utils-580-server"]),
    ("distro", "none", "open", ["nvidia-utils-580-server", "libnvidia-compute-580-server"]),
    ("cuda_repo", "dkms", "proprietary", ["cuda-drivers-580"]),
    ("cuda_repo", "dkms", "open", ["nvidia-driver-580-open"]),
])
def test_ubuntu_packages(source, module, flavor, packages):
    assert plan.driver_packages(UBUNTU, source, module, flavor, "580", "6.8.0-45-generic") == packages


@pytest.mark.parametrize("kernel,meta", [
    ("6.8.0-45-generic", "linux-modules-nvidia-580-server-generic"),
    ("6.8.0-1015-aws", "linux-modules-nvidia-580-server-aws"),
    ("6.8.0-45-generic-64k", "linux-modules-nvidia-580-server-generic-64k"),
])
def test_precompiled_modules_follow_the_kernel_flavour(kernel, meta):
    assert plan.driver_packages(UBUNTU, "distro", "precompiled", "proprietary", "580", kernel)[0] == meta


@pytest.mark.parametrize("name", ["Debian.yml", "Ubuntu.yml"])
def test_every_branch_pattern_matches_the_packages_it_installs(name):
    import re

    data = role_vars(name)
    pattern = re.compile(data["__gpu_driver_branch_packages"])
    for source, modules in data["__gpu_driver_package_table"].items():
        for module, flavors in modules.items():
            for flavor in flavors:
                names = plan.driver_packages(data["__gpu_driver_package_table"], source, module, flavor, "550", "k")
                assert any(pattern.match(package) for package in names), (source, module, flavor, names)


@pytest.mark.parametrize("name", ["Debian.yml", "Ubuntu.yml"])
def test_cuda_repo_keys_are_full_fingerprints(name):
    import re

    for folder, key in role_vars(name)["__gpu_driver_cuda_repo_keys"].items():
        assert re.match(r"^[0-9A-F]{40}$", key["fingerprint"]), folder
        assert key["fingerprint"].endswith(key["file"].split(".")[0].upper()), folder


# --------------------------------------------------------------------------
# install requests
# --------------------------------------------------------------------------

@pytest.mark.parametrize("installed,expected", [
    # Fresh host: the branch glob (first install takes the branch's newest).
    ({}, ["nvidia-driver=550.*", "nvidia-persistenced=550.*"]),
    # Converged host: exactly what is installed, so a newer 550.x never slips in.
    ({"nvidia-driver": "550.163.01-2", "nvidia-persistenced": "550.163.01-1"},
     ["nvidia-driver=550.163.01-2", "nvidia-persistenced=550.163.01-1"]),
    # Branch change: the installed 535 does not match, the new branch is asked for.
    ({"nvidia-driver": "535.261.03-1"}, ["nvidia-driver=550.*", "nvidia-persistenced=550.*"]),
])
def test_install_specs_for_a_branch(installed, expected):
    assert plan.driver_install_specs(["nvidia-driver", "nvidia-persistenced"], installed, "550.*", "550.*") == expected


def test_install_specs_for_an_exact_version():
    specs = plan.driver_install_specs(
        ["nvidia-driver", "nvidia-kernel-dkms", "nvidia-persistenced", "linux-headers-6.1.0-28-amd64"],
        {"nvidia-driver": "535.247.01-1~deb12u1", "nvidia-persistenced": "535.171.04-1~deb12u1"},
        "535.261.03-*", "535.*", unversioned="^linux-(headers|modules)-", branch_only=["nvidia-persistenced"])
    assert specs == [
        "nvidia-driver=535.261.03-*",                     # installed 535.247 is not the asked version
        "nvidia-kernel-dkms=535.261.03-*",
        "nvidia-persistenced=535.171.04-1~deb12u1",       # its own release, within the branch
        "linux-headers-6.1.0-28-amd64",                   # follows the kernel, not the driver
    ]


def test_install_specs_ignore_the_epoch_when_matching():
    assert plan.driver_install_specs(["nvidia-smi"], {"nvidia-smi": "1:550.1-1"}, "550.*", "550.*") == [
        "nvidia-smi=1:550.1-1"]


# --------------------------------------------------------------------------
# OpenPGP fingerprints (fixtures made with GnuPG, expected values printed by it)
# --------------------------------------------------------------------------

KEYS = os.path.join(os.path.dirname(__file__), "fixtures")


def test_fingerprint_of_an_armored_rsa_key():
    with open(os.path.join(KEYS, "rsa3072.asc")) as handle:
        assert plan.openpgp_fingerprints(handle.read()) == ["92656BC1FC52B2518C4938C2A58591333A93FE7F"]


def test_fingerprint_of_a_binary_ed25519_key():
    with open(os.path.join(KEYS, "ed25519.gpg"), "rb") as handle:
        data = handle.read()
    assert plan.openpgp_fingerprints(data) == ["6636B7DB3B737B1B757802F1167C4E5EB5C1D131"]
    # As it arrives through slurp and b64decode(encoding='latin-1').
    assert plan.openpgp_fingerprints(data.decode("latin-1")) == ["6636B7DB3B737B1B757802F1167C4E5EB5C1D131"]


def test_two_keys_in_one_block():
    with open(os.path.join(KEYS, "ed25519.gpg"), "rb") as handle:
        ed25519 = handle.read()
    with open(os.path.join(KEYS, "rsa3072.asc")) as handle:
        rsa = plan._dearmor(handle.read())
    assert plan.openpgp_fingerprints(rsa + ed25519) == [
        "92656BC1FC52B2518C4938C2A58591333A93FE7F", "6636B7DB3B737B1B757802F1167C4E5EB5C1D131"]


@pytest.mark.parametrize("data", [
    "<html>404 Not Found</html>",
    "-----BEGIN PGP PUBLIC KEY BLOCK-----\n\n!!!!\n-----END PGP PUBLIC KEY BLOCK-----\n",
    b"\x99\x01",
    "",
])
def test_not_a_key(data):
    with pytest.raises(AnsibleFilterError):
        plan.openpgp_fingerprints(data)


def test_ubuntu_only_changes_keys_the_family_defines():
    with open(os.path.join(ROLE, "vars", "Debian.yml")) as handle:
        family = set(yaml.safe_load(handle))
    with open(os.path.join(ROLE, "vars", "Ubuntu.yml")) as handle:
        ubuntu = set(yaml.safe_load(handle))
    assert ubuntu < family, ubuntu - family

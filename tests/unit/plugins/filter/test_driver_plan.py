# Copyright: (c) 2026, gpufleet.nvidia contributors
# GNU General Public License v3.0+ (see COPYING or https://www.gnu.org/licenses/gpl-3.0.txt)
"""gpu_driver's decisions on data: flavour, packages from the role's own tables, reboot."""

from __future__ import annotations

import os

import pytest
import yaml

from ansible.errors import AnsibleFilterError
from ansible_collections.gpufleet.nvidia.plugins.filter.internal import driver_plan as plan
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


# A mixed install (issue 47): with a branch-only pin, libcuda1 of one release beside nvidia-smi and libnvidia-ml1
# of another passed, was requested at its own version and held as it was.
DEBIAN_NONE = ["nvidia-smi", "libnvidia-ml1", "libcuda1"]


def test_a_mixed_install_is_brought_to_the_newest_of_its_versions():
    installed = {"nvidia-smi": "535.261.03-1~deb12u1", "libnvidia-ml1": "535.261.03-1~deb12u1",
                 "libcuda1": "535.216.01-1~deb12u1"}
    assert plan.driver_version_mix(DEBIAN_NONE, installed, "535.*") == {"packages": installed, "version": "535.261.03"}
    assert plan.driver_install_specs(DEBIAN_NONE, installed, "535.*", "535.*") == [
        "nvidia-smi=535.261.03-*", "libnvidia-ml1=535.261.03-*", "libcuda1=535.261.03-*"]


def test_a_mix_with_package_facts_and_a_package_not_installed_yet():
    installed = {"nvidia-smi": [{"version": "550.163.01-2"}], "libnvidia-ml1": [{"version": "550.90.07-1"}]}
    mix = plan.driver_version_mix(DEBIAN_NONE, installed, "550.*")
    assert mix == {"packages": {"nvidia-smi": "550.163.01-2", "libnvidia-ml1": "550.90.07-1"}, "version": "550.163.01"}
    # The one not installed yet comes at the same version, not at the branch's newest.
    assert plan.driver_install_specs(DEBIAN_NONE, installed, "550.*", "550.*")[-1] == "libcuda1=550.163.01-*"


@pytest.mark.parametrize("installed", [
    {},
    {"nvidia-smi": "535.261.03-1~deb12u1"},
    # One release, Debian revisions of their own: no mix.
    {"nvidia-smi": "535.261.03-1~deb12u1", "libnvidia-ml1": "535.261.03-1~deb12u1", "libcuda1": "1:535.261.03-2"},
])
def test_one_release_is_no_mix(installed):
    assert plan.driver_version_mix(DEBIAN_NONE, installed, "535.*") == {}


def test_packages_of_their_own_release_or_the_kernel_are_no_mix():
    packages = ["nvidia-driver", "nvidia-kernel-dkms", "nvidia-persistenced", "linux-headers-6.1.0-28-amd64"]
    installed = {"nvidia-driver": "535.261.03-1", "nvidia-kernel-dkms": "535.261.03-1",
                 "nvidia-persistenced": "535.171.04-1", "linux-headers-6.1.0-28-amd64": "6.1.119-1"}
    assert plan.driver_version_mix(packages, installed, "535.*", unversioned="^linux-headers-",
                                   branch_only=["nvidia-persistenced"]) == {}
    installed["nvidia-kernel-dkms"] = "535.247.01-1"
    specs = plan.driver_install_specs(packages, installed, "535.*", "535.*", unversioned="^linux-headers-",
                                      branch_only=["nvidia-persistenced"])
    assert specs == ["nvidia-driver=535.261.03-*", "nvidia-kernel-dkms=535.261.03-*",
                     "nvidia-persistenced=535.171.04-1", "linux-headers-6.1.0-28-amd64"]


def test_a_mix_outside_the_pin_moves_nothing_past_it():
    # 550 libraries beside a 535 nvidia-smi under a 535 pin: to the newest within the pin.
    installed = {"nvidia-smi": "535.216.01-1", "libnvidia-ml1": "550.163.01-1", "libcuda1": "550.163.01-1"}
    assert plan.driver_version_mix(DEBIAN_NONE, installed, "535.*")["version"] == "535.216.01"
    # None within it: no version to bring them to, the pin's glob is asked for (and checked after the install).
    installed["nvidia-smi"] = "570.1-1"
    assert plan.driver_version_mix(DEBIAN_NONE, installed, "535.*")["version"] == ""
    assert plan.driver_install_specs(DEBIAN_NONE, installed, "535.*", "535.*") == [
        "nvidia-smi=535.*", "libnvidia-ml1=535.*", "libcuda1=535.*"]


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


# --------------------------------------------------------------------------
# which branch supports which GPUs (590 and newer: Turing or newer)
# --------------------------------------------------------------------------

def gpu(name, **fields):
    return dict({"name": name, "pci_bus_id": "0000:01:00.0", "compute_capability": None, "architecture": None},
                **fields)


@pytest.mark.parametrize("facts,branch,generations", [
    (pci_only("0x1db1"), "590", ["Maxwell, Pascal or Volta by its PCI id"]),      # V100 SXM2, no driver yet
    (pci_only("0x1db1"), "580", []),                                              # 580: the last for Volta
    (pci_only("0x1db1"), "595", ["Maxwell, Pascal or Volta by its PCI id"]),
    (pci_only("0x13bb"), "590", ["Maxwell, Pascal or Volta by its PCI id"]),      # Quadro K620 (Maxwell)
    (pci_only("0x102d"), "535", ["Kepler or older by its PCI id"]),               # Tesla K80: 470 was its last
    (pci_only("0x2330"), "595", []),                                              # H100 SXM5
    (pci_only("0x1e02", "0x15f8"), "590", ["Maxwell, Pascal or Volta by its PCI id"]),  # Turing + P100
    (nvml_facts(readings.QUADRO_P400_OLD_DRIVER), "590", ["Pascal"]),             # compute 6.1
    (nvml_facts(readings.QUADRO_P400_OLD_DRIVER), "580", []),
    (nvml_facts(readings.H100), "595", []),
    (smi_facts("netdata-tesla-p100-pcie-16gb-passthrough-driver-510.47.03-v11.xml"), "590", ["Pascal"]),
    (smi_facts("telegraf-tesla-t4-aws-driver-515.105.01-v11.xml"), "590", []),   # Turing
    (smi_facts("telegraf-rtx-pro-6000-blackwell-maxq-driver-590.44.01-v13.xml"), "595", []),
    ({"gpus": [gpu("Tesla V100-SXM2-16GB", compute_capability="7.0")]}, "590", ["Volta"]),
    ({"gpus": [gpu("TITAN RTX", compute_capability="7.5")]}, "590", []),
    ({"gpus": [gpu("RTX 4090", architecture="Ada Lovelace")]}, "590", []),
    ({"gpus": [gpu("future", architecture="Rubin")]}, "620", []),                 # unknown names are newer
    # 610, 615 and 620 drive what 590 drives: Turing and newer (no branch has dropped Turing).
    (smi_facts("telegraf-tesla-t4-aws-driver-515.105.01-v11.xml"), "620", []),   # Turing
    (pci_only("0x1e02"), "615", []),                                              # TITAN RTX by PCI id
    (nvml_facts(readings.H100), "610", []),
    (pci_only("0x1db1"), "610", ["Maxwell, Pascal or Volta by its PCI id"]),      # V100
    (pci_only("0x1db1"), "620", ["Maxwell, Pascal or Volta by its PCI id"]),
    (nvml_facts(readings.QUADRO_P400_OLD_DRIVER), "615", ["Pascal"]),
    ({"gpus": [], "pci_devices": []}, "590", []),                                 # nothing known: nothing refused
])
def test_branch_support(facts, branch, generations):
    assert [entry["generation"] for entry in plan.driver_unsupported_gpus(facts, branch)] == generations


def test_unsupported_gpus_name_the_gpu_and_the_last_branch():
    (entry,) = plan.driver_unsupported_gpus(pci_only("0x1db1"), "590")
    assert entry == {"gpu": "PCI device 0x1db1 at 0000:01:00.0", "generation": "Maxwell, Pascal or Volta by its PCI id",
                     "last_branch": "580"}


def test_branch_support_needs_a_branch():
    with pytest.raises(AnsibleFilterError) as caught:
        plan.driver_unsupported_gpus({}, "59")
    assert "gpu_driver_branch" in str(caught.value)


@pytest.mark.parametrize("facts,blackwell", [
    (pci_only("0x2901"), True),                                                  # B200
    (pci_only("0x3182"), True),                                                  # B300
    (pci_only("0x2330"), False),                                                 # H100
    (smi_facts("telegraf-rtx-pro-6000-blackwell-maxq-driver-590.44.01-v13.xml"), True),
    ({"gpus": [gpu("B200", compute_capability="10.0")]}, True),
    ({"gpus": [gpu("RTX 5090", compute_capability="12.0")]}, True),
    ({"gpus": [gpu("H200", compute_capability="9.0")]}, False),
])
def test_blackwell(facts, blackwell):
    assert bool(plan.blackwell_gpus(facts)) is blackwell


def test_blackwell_runs_only_on_open_modules():
    assert plan.driver_flavor("auto", pci_only("0x2901")) == "open"
    with pytest.raises(AnsibleFilterError) as caught:
        plan.driver_flavor("proprietary", pci_only("0x2901"))
    assert "gpu_driver_module_flavor" in str(caught.value) and "0x2901" in str(caught.value)


def test_no_flavour_serves_blackwell_and_pre_turing_together():
    with pytest.raises(AnsibleFilterError) as caught:
        plan.driver_flavor("auto", pci_only("0x2901", "0x1db1"))
    assert "0x2901" in str(caught.value) and "0x1db1" in str(caught.value)


def test_unreadable_compute_capability_falls_back_to_the_architecture():
    assert plan.older_gpus({"gpus": [gpu("P4", compute_capability="N/A", architecture="Pascal")]}) == [
        "P4 at 0000:01:00.0"]


# --------------------------------------------------------------------------
# NVSwitches
# --------------------------------------------------------------------------

def hgx_a100():
    """One A100 SXM4 GPU and the six gen-2 NVSwitches of an HGX A100 board (lspci class 0680, 10de:1af1)."""
    functions = [{"address": "0000:01:00.0", "device_id": "0x20b2", "class": "0x030200", "is_gpu": True}]
    functions += [{"address": "0000:%02x:00.0" % bus, "device_id": "0x1af1", "class": "0x068000", "is_gpu": False}
                  for bus in range(0xc4, 0xca)]
    return {"state": "driver_not_installed", "gpus": [], "pci_devices": functions}


def test_nvswitches_from_the_pci_class():
    assert plan.driver_nvswitches(hgx_a100()) == ["0000:%02x:00.0" % bus for bus in range(0xc4, 0xca)]


def test_nvswitches_as_nvml_facts_reports_them():
    facts = dict(hgx_a100(), nvswitches=["0000:c4:00.0"])
    assert plan.driver_nvswitches(facts) == ["0000:c4:00.0"]
    assert plan.driver_nvswitches({"nvswitches": [{"address": "0000:c5:00.0"}]}) == ["0000:c5:00.0"]


@pytest.mark.parametrize("facts", [pci_only("0x2330"), {}, None, {"pci_devices": [{"address": "x", "class": None}]}])
def test_no_nvswitches(facts):
    assert plan.driver_nvswitches(facts) == []


def test_nvswitch_flag_counts_too():
    assert plan.driver_nvswitches({"pci_devices": [{"address": "0000:05:00.0", "is_nvswitch": True}]}) == [
        "0000:05:00.0"]


# --------------------------------------------------------------------------
# the package schemes (590 and newer: no branch in the names, a pinning package)
# --------------------------------------------------------------------------

@pytest.mark.parametrize("branch,scheme", [
    ("535", "branched"), ("570", "branched"), ("580", "branched"), ("590", "unbranched"), ("595", "unbranched"),
    ("610", "unbranched"), ("615", "unbranched"), ("620", "unbranched"),
])
def test_scheme(branch, scheme):
    assert plan.driver_scheme(branch, role_vars("Debian.yml")["__gpu_driver_unbranched_from"]["cuda_repo"]) == scheme


def test_no_scheme_change_for_a_source_without_one():
    assert plan.driver_scheme("595", "") == "branched"


def debian_packages(branch, module, flavor, version=""):
    data = role_vars("Debian.yml")
    scheme = plan.driver_scheme(branch, data["__gpu_driver_unbranched_from"]["cuda_repo"])
    table = data["__gpu_driver_unbranched_package_table" if scheme == "unbranched" else "__gpu_driver_package_table"]
    return plan.driver_packages(table, "cuda_repo", module, flavor, branch, "6.1.0-28-amd64", version)


@pytest.mark.parametrize("branch,module,flavor,version,packages", [
    ("535", "dkms", "open", "", ["nvidia-driver", "nvidia-kernel-open-dkms", "nvidia-persistenced"]),
    ("580", "none", "open", "", ["nvidia-smi", "libnvidia-ml1"]),
    ("590", "dkms", "open", "", ["nvidia-driver-pinning-590", "nvidia-open", "nvidia-driver",
                                 "nvidia-kernel-open-dkms", "nvidia-persistenced"]),
    ("590", "dkms", "proprietary", "", ["nvidia-driver-pinning-590", "cuda-drivers", "nvidia-driver",
                                        "nvidia-kernel-dkms", "nvidia-persistenced"]),
    ("595", "none", "any", "", ["nvidia-driver-pinning-595", "nvidia-smi", "libnvidia-ml1"]),
    ("595", "none", "any", "595.71.05", ["nvidia-driver-pinning-595.71.05", "nvidia-smi", "libnvidia-ml1"]),
    # 610 to 620 as 590: nvidia-driver-pinning-610.43.02 and nvidia-open 610.43.02-1 in NVIDIA's repository.
    ("610", "dkms", "open", "610.43.02", ["nvidia-driver-pinning-610.43.02", "nvidia-open", "nvidia-driver",
                                          "nvidia-kernel-open-dkms", "nvidia-persistenced"]),
    ("615", "none", "any", "", ["nvidia-driver-pinning-615", "nvidia-smi", "libnvidia-ml1"]),
    ("620", "dkms", "proprietary", "", ["nvidia-driver-pinning-620", "cuda-drivers", "nvidia-driver",
                                        "nvidia-kernel-dkms", "nvidia-persistenced"]),
])
def test_debian_cuda_repo_packages_by_scheme(branch, module, flavor, version, packages):
    assert debian_packages(branch, module, flavor, version) == packages


@pytest.mark.parametrize("source,module,flavor,packages", [
    ("cuda_repo", "dkms", "open", ["nvidia-driver-pinning-590", "nvidia-open"]),
    ("cuda_repo", "dkms", "proprietary", ["nvidia-driver-pinning-590", "cuda-drivers"]),
    ("cuda_repo", "none", "open", ["nvidia-driver-pinning-590", "nvidia-utils", "libnvidia-compute"]),
])
def test_ubuntu_cuda_repo_packages_from_590(source, module, flavor, packages):
    data = role_vars("Ubuntu.yml")
    assert plan.driver_scheme("590", data["__gpu_driver_unbranched_from"][source]) == "unbranched"
    assert plan.driver_packages(data["__gpu_driver_unbranched_package_table"], source, module, flavor, "590") == packages


def test_canonical_archive_keeps_the_branch_in_its_names():
    data = role_vars("Ubuntu.yml")
    assert plan.driver_scheme("590", data["__gpu_driver_unbranched_from"].get("distro", "")) == "branched"
    assert plan.driver_packages(data["__gpu_driver_package_table"], "distro", "dkms", "open", "590") == [
        "nvidia-headless-590-server-open", "nvidia-utils-590-server"]


@pytest.mark.parametrize("name", ["Debian.yml", "Ubuntu.yml"])
def test_every_unbranched_row_is_known_to_the_branch_pattern_and_pins(name):
    import re

    data = role_vars(name)
    pattern = re.compile(data["__gpu_driver_branch_packages"])
    unversioned = re.compile(data["__gpu_driver_unversioned_packages"])
    for source, modules in data["__gpu_driver_unbranched_package_table"].items():
        for module, flavors in modules.items():
            for flavor in flavors:
                names = plan.driver_packages(data["__gpu_driver_unbranched_package_table"], source, module, flavor,
                                             "595", "k")
                assert any(pattern.match(package) for package in names), (source, module, flavor, names)
                assert not any(pattern.match(package) for package in names if package.startswith("nvidia-driver-pin"))
                # The pinning package carries the branch in its name, not in its version.
                assert [package for package in names if unversioned.search(package)] == ["nvidia-driver-pinning-595"]


# --------------------------------------------------------------------------
# fabric manager packages
# --------------------------------------------------------------------------

@pytest.mark.parametrize("name,source,branch,nvlink5,expected", [
    ("Debian.yml", "cuda_repo", "550", False, {"versioned": ["nvidia-fabricmanager-550", "libnvidia-nscq-550"],
                                               "own_version": []}),
    ("Debian.yml", "cuda_repo", "570", True, {"versioned": ["nvidia-fabricmanager-570", "libnvidia-nscq-570",
                                                            "libnvsdm-570"], "own_version": ["nvlsm"]}),
    ("Debian.yml", "cuda_repo", "580", False, {"versioned": ["nvidia-fabricmanager", "libnvidia-nscq"],
                                               "own_version": []}),
    ("Debian.yml", "cuda_repo", "595", True, {"versioned": ["nvidia-fabricmanager", "libnvidia-nscq", "libnvsdm"],
                                              "own_version": ["nvlsm"]}),
    ("Ubuntu.yml", "distro", "590", False, {"versioned": ["nvidia-fabricmanager-590", "libnvidia-nscq-590"],
                                            "own_version": []}),
    ("Ubuntu.yml", "cuda_repo", "575", False, {"versioned": ["nvidia-fabricmanager-575", "libnvidia-nscq-575"],
                                               "own_version": []}),
])
def test_fabric_manager_packages(name, source, branch, nvlink5, expected):
    table = role_vars(name)["__gpu_driver_fabric_manager_table"]
    assert plan.driver_fabric_manager_packages(table, source, branch, nvlink5) == expected


def test_debian_archive_has_no_fabric_manager():
    with pytest.raises(AnsibleFilterError) as caught:
        plan.driver_fabric_manager_packages(role_vars("Debian.yml")["__gpu_driver_fabric_manager_table"], "distro", "535")
    assert "gpu_driver_source" in str(caught.value) and "gpu_driver_fabric_manager" in str(caught.value)


def test_nvlink5_needs_nvlsm_which_ubuntus_archive_lacks():
    with pytest.raises(AnsibleFilterError) as caught:
        plan.driver_fabric_manager_packages(role_vars("Ubuntu.yml")["__gpu_driver_fabric_manager_table"], "distro",
                                            "580", nvlink5=True)
    assert "nvlsm" in str(caught.value) and "cuda_repo" in str(caught.value)


# --------------------------------------------------------------------------
# versions: what the repository offers, what stays, what dpkg holds
# --------------------------------------------------------------------------

MADISON = """\
nvidia-smi | 595.71.05-1 | file:/srv/cuda-mirror/debian12/x86_64  Packages
nvidia-smi | 590.48.01-1 | file:/srv/cuda-mirror/debian12/x86_64  Packages
nvidia-smi | 590.9.02-1 | file:/srv/cuda-mirror/debian12/x86_64  Packages
nvidia-smi | 590.44.01-1 | file:/srv/cuda-mirror/debian12/x86_64  Packages
nvidia-smi | 590.44.01-1 | http://mirror.example/debian12/x86_64  Packages
"""


def test_available_versions_newest_first_once_each():
    assert plan.driver_available_versions(MADISON) == ["595.71.05-1", "590.48.01-1", "590.44.01-1", "590.9.02-1"]


@pytest.mark.parametrize("glob,newest", [
    ("590.*", "590.48.01-1"), ("590.44.01-*", "590.44.01-1"), ("595.*", "595.71.05-1"), ("580.*", None),
])
def test_newest_version_in_a_glob(glob, newest):
    assert plan.driver_newest_version(MADISON, glob) == newest


@pytest.mark.parametrize("left,right,sign", [
    ("590.48.01-1", "590.9.02-1", 1), ("1:535.1-1", "590.1-1", 1), ("580.95.05-1", "580.95.05-1", 0),
    ("580.95.05-1~deb12u1", "580.95.05-1", -1), ("580.95.05-1ubuntu1", "580.95.05-1", 1),
    ("2025.10.12-1", "2025.10.14-1", -1), ("1.0a", "1.0+", -1),
])
def test_dpkg_order(left, right, sign):
    result = plan.dpkg_compare(left, right)
    assert (result > 0) - (result < 0) == sign


@pytest.mark.parametrize("version,upstream", [
    ("590.48.01-1", "590.48.01"), ("1:550.163.01-2", "550.163.01"), ("580.159.03-0ubuntu0.24.04.1", "580.159.03"),
    ("595.80", "595.80"), ("", ""), (None, ""),
])
def test_upstream(version, upstream):
    assert plan.driver_upstream(version) == upstream


BRANCH_PACKAGES = role_vars("Debian.yml")["__gpu_driver_branch_packages"]


@pytest.mark.parametrize("specs,staying", [
    (["nvidia-driver-pinning-590", "nvidia-smi=590.48.01-1", "libnvidia-ml1=590.48.01-1"], "590.48.01"),
    (["nvidia-smi=590.*", "libnvidia-ml1=590.48.01-1"], ""),                  # one of them changes
    (["nvidia-smi=590.48.01-1", "libnvidia-ml1=590.44.01-1"], ""),            # they disagree
    (["nvidia-persistenced=590.*", "nvidia-smi=590.48.01-1"], "590.48.01"),   # not a branch package
    ([], ""),
])
def test_staying_version(specs, staying):
    assert plan.driver_staying_version(specs, BRANCH_PACKAGES) == staying


def test_held_packages_from_dpkg_query():
    text = ("nvidia-fabricmanager 590.44.01-1 hold ok installed\n"
            "libnvidia-nscq:amd64 590.44.01-1 install ok installed\n"
            "nvidia-fabricmanager-570 570.172.08-1 deinstall ok config-files\n"
            "libnvidia-nscq-570 570.172.08-1 hold ok installed\n")
    assert plan.driver_held_packages(text) == {"nvidia-fabricmanager": "590.44.01-1",
                                               "libnvidia-nscq-570": "570.172.08-1"}


# --------------------------------------------------------------------------
# the upgrade playbook's choice of nodes
# --------------------------------------------------------------------------

def running(version, state="ok"):
    return {"state": state, "message": "1 GPU, driver %s" % version, "driver_version": version}


@pytest.mark.parametrize("facts,branch,version,packages,reasons", [
    (running("590.48.01"), "590", "", {}, []),
    (running("590.48.01"), "595", "", {}, ["it runs driver 590.48.01, not branch 595"]),
    (running("590.48.01"), "590", "590.48.01", {}, []),
    (running("590.44.01"), "590", "590.48.01", {}, ["it runs driver 590.44.01, not 590.48.01"]),
    (running("590.48.01"), "590", "", {"nvidia-fabricmanager": [{"version": "590.48.01-1"}]}, []),
    (running("590.48.01"), "590", "", {"nvidia-fabricmanager": [{"version": "590.44.01-1"}]},
     ["its fabric manager nvidia-fabricmanager is at 590.44.01, the driver at 590.48.01"]),
    (running("570.172.08"), "570", "", {"nvidia-fabricmanager-570": [{"version": "570.148.08-1"}],
                                        "libnvidia-nscq-570": [{"version": "570.148.08-1"}]},
     ["its fabric manager nvidia-fabricmanager-570 is at 570.148.08, the driver at 570.172.08"]),
    (running(None, state="driver_not_loaded"), "590", "", {}, ["nvml_facts says driver_not_loaded (1 GPU, driver None)"]),
])
def test_upgrade_reasons(facts, branch, version, packages, reasons):
    assert plan.driver_upgrade_reasons(facts, branch, version, packages) == reasons


# --------------------------------------------------------------------------
# playbooks/upgrade_driver.yml's own expressions, templated as Ansible does
# --------------------------------------------------------------------------

def _upgrade_play():
    from ansible_collections.gpufleet.nvidia.tests.unit.templating import DataLoader, load_yaml

    loader = DataLoader()
    path = os.path.join(ROLE, "..", "..", "playbooks", "upgrade_driver.yml")
    return loader, load_yaml(loader, path)[0]


def _tasks(tasks):
    for entry in tasks:
        yield entry
        for part in ("block", "rescue", "always"):
            yield from _tasks(entry.get(part) or [])


def _upgrade_task(name):
    loader, play = _upgrade_play()
    (found,) = [entry for entry in _tasks(play["tasks"]) if entry.get("name") == name]
    return loader, found


def upgrade_decision(facts, packages, **inventory):
    from ansible_collections.gpufleet.nvidia.tests.unit.templating import Templar

    loader, decide = _upgrade_task("Decide whether the node needs the new driver")
    variables = dict(inventory, ansible_facts={"nvidia": facts, "packages": packages})
    variables.update(decide["vars"])
    templar = Templar(loader=loader, variables=variables)
    return dict((key, templar.template(value)) for key, value in decide["ansible.builtin.set_fact"].items())


FM_AT = {"nvidia-fabricmanager": [{"version": "590.44.01-1"}], "libnvidia-nscq": [{"version": "590.48.01-1"}]}


@pytest.mark.parametrize("facts,packages,inventory,needed,fabric_manager_version", [
    # A node on the target, as the simulated cluster's are (Debian's 535): left alone, as before.
    (running("535.261.03"), {"nvidia-smi": [{"version": "535.261.03-1~deb12u1"}]}, {"gpu_driver_branch": 535},
     False, ""),
    # On the target driver, its fabric manager elsewhere: the driver stays, the fabric manager is moved to it.
    (running("590.48.01"), FM_AT, {"gpu_driver_branch": "590"}, True, "590.48.01"),
    # A branch change: the fabric manager follows the driver in the same transaction.
    (running("590.48.01"), {"nvidia-fabricmanager": [{"version": "590.48.01-1"}]}, {"gpu_driver_branch": "595"},
     True, ""),
    # What the inventory asks for wins.
    (running("590.48.01"), FM_AT, {"gpu_driver_branch": "590", "gpu_driver_fabric_manager_version": "590.48.01"},
     True, "590.48.01"),
    (running("590.48.01", state="driver_mismatch"), {}, {"gpu_driver_version": "590.48.01"}, True, ""),
])
def test_upgrade_playbook_picks_nodes_and_moves_the_fabric_manager(
        facts, packages, inventory, needed, fabric_manager_version):
    decision = upgrade_decision(facts, packages, **inventory)
    assert decision["gpufleet_upgrade_needed"] is needed
    assert decision["gpufleet_upgrade_fabric_manager_version"] == fabric_manager_version


def test_upgrade_playbook_passes_the_fabric_manager_version_to_the_role():
    dummy, install = _upgrade_task("Install the new driver, rebooting when needed")
    assert install["ansible.builtin.include_role"]["name"] == "gpufleet.nvidia.gpu_driver"
    assert install["vars"]["gpu_driver_allow_branch_change"] is True
    assert install["vars"]["gpu_driver_fabric_manager_version"] == "{{ gpufleet_upgrade_fabric_manager_version }}"


def test_upgrade_playbook_reads_the_packages_before_deciding():
    loader, play = _upgrade_play()
    names = [entry.get("name") for entry in _tasks(play["tasks"])]
    read = names.index("Read the node's packages (its fabric manager must match the driver)")
    assert read < names.index("Decide whether the node needs the new driver")


# --------------------------------------------------------------------------
# end of life (NVIDIA's data center driver lifecycle, the role's table)
# --------------------------------------------------------------------------

def lifecycle():
    with open(os.path.join(ROLE, "vars", "main.yml")) as handle:
        return yaml.safe_load(handle)["__gpu_driver_branch_lifecycle"]


def test_the_lifecycle_table_knows_every_branch_the_role_installs():
    table = lifecycle()
    assert sorted(table) == ["535", "550", "570", "575", "580", "590", "595", "610", "615", "620"]
    assert {entry["designation"] for entry in table.values()} == {
        "long-term support branch", "production branch", "new feature branch"}


@pytest.mark.parametrize("branch,today,words", [
    # 535, the long-term branch whose end came in June 2026: supported through June, not after.
    ("535", "2026-06-30", None),
    ("535", "2026-07-01", "Driver branch 535 (long-term support branch) reached its end of life in June 2026"),
    ("535", "2026-11-27", "reached its end of life in June 2026"),
    ("570", "2026-11-27", "Driver branch 570 (production branch) reached its end of life in February 2026"),
    ("550", "2026-11-27", "Driver branch 550 (production branch) is past its end of life"),
    ("590", "2026-11-27", "Driver branch 590 (new feature branch) is past its end of life"),
    ("610", "2026-08-31", None),
    ("610", "2026-09-01", "Driver branch 610 (new feature branch) reached its end of life in August 2026"),
    ("615", "2026-11-27", None),                      # the current new feature branch: no date
    ("595", "2027-03-31", None),
    ("595", "2027-04-01", "reached its end of life in March 2027"),
    ("580", "2028-06-15", None),
    ("620", "2029-09-30", None),
    ("620", "2029-10-01", "reached its end of life in September 2029"),
    ("470", "2026-11-27", "Driver branch 470 is past its end of life"),   # older than the table
    ("545", "2026-11-27", "Driver branch 545 is past its end of life"),   # between its branches:
    ("565", "2026-11-27", "Driver branch 565 is past its end of life"),   # NVIDIA lists every live one
    ("625", "2026-11-27", None),                      # newer than the table: nothing known, nothing said
    ("", "2026-11-27", None),
    (None, "2026-11-27", None),
])
def test_end_of_life(branch, today, words):
    said = plan.driver_end_of_life(branch, lifecycle(), today)
    if words is None:
        assert said == ""
    else:
        assert words in said
        assert ("no longer lists it" if branch in ("470", "545", "565") else "security fixes included") in said


def test_end_of_life_names_the_branches_still_supported():
    said = plan.driver_end_of_life("535", lifecycle(), "2026-11-27")
    assert said.endswith("Move to a branch NVIDIA still supports that drives this node's GPUs: 580 (long-term "
                         "support branch, to June 2028), 595 (production branch, to March 2027), 620 (long-term "
                         "support branch, to September 2029).")
    # In April 2027, 595 is past its end too, and no longer offered.
    said = plan.driver_end_of_life("595", lifecycle(), "2027-04-02")
    assert "595 (production" not in said.split("Move to")[1] and "620 (long-term" in said


def test_end_of_life_offers_only_branches_that_drive_the_gpus():
    # A V100 on 535: 580 is the only supported branch that drives Volta.
    said = plan.driver_end_of_life("535", lifecycle(), "2026-11-27", pci_only("0x1db1"))
    assert said.endswith("that drives this node's GPUs: 580 (long-term support branch, to June 2028).")
    # A Kepler K80 on 470: no supported branch drives it.
    said = plan.driver_end_of_life("470", lifecycle(), "2026-11-27", pci_only("0x102d"))
    assert said.endswith("No branch NVIDIA still supports drives this node's GPUs.")
    # An H100 is offered all three.
    assert "580 (long" in plan.driver_end_of_life("535", lifecycle(), "2026-11-27", nvml_facts(readings.H100))


@pytest.mark.parametrize("branch", ["53", "latest", "5350", "N/A"])
def test_end_of_life_of_what_is_not_a_branch_is_nothing(branch):
    # A reported driver the role did not install (not three digits) must not fail a finished run.
    assert plan.driver_end_of_life(branch, lifecycle(), "2026-11-27") == ""


def test_end_of_life_summary_names_the_nodes_once_per_warning():
    pairs = [("gpu-%02d" % number, "Driver branch 535 (...) reached its end of life in June 2026.")
             for number in range(12)]
    pairs += [("gpu-x", "Driver branch 570 (...)"), ("gpu-y", ""), ("gpu-z", None)]
    assert plan.driver_end_of_life_summary(pairs) == [
        "12 nodes (gpu-00, gpu-01, gpu-02, gpu-03, gpu-04, gpu-05, gpu-06, gpu-07, gpu-08, gpu-09 and 2 more): "
        "Driver branch 535 (...) reached its end of life in June 2026.",
        "1 node (gpu-x): Driver branch 570 (...)"]
    assert plan.driver_end_of_life_summary([]) == [] and plan.driver_end_of_life_summary(None) == []


@pytest.mark.parametrize("branch,table,today,words", [
    ("535", {}, "yesterday", "YYYY-MM-DD"),
    ("535", {"535": {"designation": "long-term support branch", "end_of_life": "June 2026"}}, "2026-01-01",
     "YYYY-MM"),
    ("535", {"535": {"end_of_life": "2026-06"}}, "2026-01-01", "designation"),
    ("535", {"535": {"designation": "x", "end_of_life": "2026-13"}}, "2026-01-01", "YYYY-MM"),
])
def test_end_of_life_refuses_bad_data(branch, table, today, words):
    with pytest.raises(AnsibleFilterError) as caught:
        plan.driver_end_of_life(branch, table, today)
    assert words in str(caught.value)


# driver_disruption: a run never moves a loaded driver, nor reboots, where the node serves.
DEBIAN_BRANCH_PACKAGES = "^(nvidia-driver|nvidia-smi|libnvidia-ml1)$"
INSTALLED_535 = {"nvidia-smi": [{"version": "535.261.03-1~deb12u1"}], "libnvidia-ml1": [{"version": "535.261.03-1~deb12u1"}],
                 "nvidia-persistenced": [{"version": "535.43.08-1"}]}
KEEP = ["nvidia-smi=535.261.03-1~deb12u1", "libnvidia-ml1=535.261.03-1~deb12u1", "nvidia-persistenced=535.43.08-1"]
NEW_PIN = ["nvidia-smi=535.999.01-*", "libnvidia-ml1=535.999.01-*", "nvidia-persistenced=535.43.08-1"]
LOADED = {"state": "ok", "driver_version": "535.261.03"}
NOT_LOADED = {"state": "driver_not_loaded", "driver_version": None}


@pytest.mark.parametrize("specs, facts, node_state, allow, change, reboot", [
    # A converged node: nothing moves, whatever the cluster says.
    (KEEP, LOADED, "serving", False, False, False),
    # A new exact version within the branch on a loaded driver.
    (NEW_PIN, LOADED, "serving", False, False, False),
    (NEW_PIN, LOADED, "serving", True, False, False),
    (NEW_PIN, LOADED, "drained", False, True, True),
    (NEW_PIN, LOADED, "unknown", False, False, False),
    (NEW_PIN, LOADED, "unknown", True, True, True),
    # No driver loaded: its packages may move; a reboot only where the node serves nothing (or nobody knows).
    (NEW_PIN, NOT_LOADED, "serving", False, True, False),
    (NEW_PIN, NOT_LOADED, "unknown", False, True, True),
    (NEW_PIN, {"state": "driver_mismatch", "driver_version": None}, "unknown", False, False, False),
])
def test_driver_disruption(specs, facts, node_state, allow, change, reboot):
    result = plan.FilterModule().filters()["driver_disruption"](
        specs, INSTALLED_535, DEBIAN_BRANCH_PACKAGES, facts, node_state=node_state, allow=allow)
    moves = ["nvidia-smi 535.261.03-1~deb12u1 -> 535.999.01-*", "libnvidia-ml1 535.261.03-1~deb12u1 -> 535.999.01-*"]
    assert result["moves"] == (moves if specs is NEW_PIN else [])
    assert result["change_allowed"] is change
    assert result["reboot_allowed"] is reboot


def test_driver_disruption_first_install_moves_nothing():
    result = plan.driver_disruption(["nvidia-smi=535.*", "libnvidia-ml1=535.*"], {}, DEBIAN_BRANCH_PACKAGES, {}, "serving")
    assert result == {"moves": [], "loaded": False, "change_allowed": True, "reboot_allowed": False}


def test_driver_disruption_epochs_and_version_mix():
    installed = {"nvidia-smi": "1:590.48.01-1", "libnvidia-ml1": "1:590.44.01-1"}
    result = plan.driver_disruption(["nvidia-smi=590.48.01-*", "libnvidia-ml1=590.48.01-*"], installed,
                                    DEBIAN_BRANCH_PACKAGES, LOADED, "unknown")
    assert result["moves"] == ["libnvidia-ml1 1:590.44.01-1 -> 590.48.01-*"]
    assert result["change_allowed"] is False


def test_driver_disruption_refuses_an_unknown_node_state():
    with pytest.raises(AnsibleFilterError, match="gpu_driver_node_state must be one of unknown, serving, drained, got 'busy'"):
        plan.driver_disruption([], {}, DEBIAN_BRANCH_PACKAGES, {}, "busy")


# dpkg --audit of Debian 12's dpkg 1.21 after an install cut off mid-configure (disk full under /var/lib/dpkg).
DPKG_AUDIT = """\
The following packages are only half configured, probably due to problems
configuring them the first time.  The configuration should be retried using
dpkg --configure <package> or the configure menu option in dselect:
 libnvidia-ml1        NVIDIA Management Library (NVML) runtime library
 nvidia-smi           NVIDIA System Management Interface

The following packages have been unpacked but not yet configured.
They must be configured using dpkg --configure or the configure
menu option in dselect for them to work:
 libcuda1:amd64       NVIDIA CUDA Driver Library
"""


@pytest.mark.parametrize("audit, names", [
    (DPKG_AUDIT, ["libnvidia-ml1", "nvidia-smi", "libcuda1:amd64"]),
    ("", []),
    ("dpkg: some odd answer\\n", ["dpkg: some odd answer\\n"]),
])
def test_dpkg_audit_packages(audit, names):
    assert plan.FilterModule().filters()["dpkg_audit_packages"](audit) == names


def test_driver_disruption_sees_a_branch_change_under_other_package_names():
    # Ubuntu's packages carry the branch in their names: 580's are other packages than the 570 ones installed.
    installed = {"nvidia-utils-570-server": "570.172.08-0ubuntu1", "libnvidia-compute-570-server": "570.172.08-0ubuntu1"}
    specs = ["nvidia-utils-580-server=580.*", "libnvidia-compute-580-server=580.*"]
    ubuntu = "^(nvidia-utils|libnvidia-compute|cuda-drivers|nvidia-driver|nvidia-open)(-[0-9]{3})?(-server)?(-open)?$"
    result = plan.driver_disruption(specs, installed, ubuntu, LOADED, "serving", installed_branches=["570"], branch="580")
    assert result["moves"] == ["driver branch 570 -> 580"] and result["change_allowed"] is False
    same = plan.driver_disruption(specs, installed, ubuntu, LOADED, "serving", installed_branches=["580"], branch="580")
    assert same["moves"] == []


@pytest.mark.parametrize("facts", [
    # NVML fails to start, the module is loaded all the same (nvml_facts' outcome "error").
    {"state": "error", "driver_version": None, "driver_loaded": True},
    {"state": "error", "driver_version": None, "kernel_module_version": "535.261.03"},
    {"state": "error", "driver_version": None, "kmd_version": "610.10"},
])
def test_driver_disruption_a_loaded_module_counts_whatever_nvml_says(facts):
    result = plan.driver_disruption(NEW_PIN, INSTALLED_535, DEBIAN_BRANCH_PACKAGES, facts, "serving")
    assert result["loaded"] is True and result["change_allowed"] is False
    assert plan.driver_disruption(NEW_PIN, INSTALLED_535, DEBIAN_BRANCH_PACKAGES, facts, "unknown")["reboot_allowed"] is False


def test_dpkg_unfinished_packages():
    states = "\n".join([
        "libnvidia-ml1 535.261.03-1~deb12u1 install reinstreq half-configured",
        "nvidia-smi 535.261.03-1~deb12u1 hold ok installed",
        "libcuda1:amd64 535.261.03-1~deb12u1 install ok unpacked",
        "old-pkg 1.0 deinstall ok config-files",
        "gpufleet-test-cut-off 1 install ok half-configured",
        "odd line",
    ])
    assert plan.FilterModule().filters()["dpkg_unfinished_packages"](states) == [
        "libnvidia-ml1", "libcuda1:amd64", "gpufleet-test-cut-off"]
    assert plan.dpkg_unfinished_packages("") == []

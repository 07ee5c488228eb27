# -*- coding: utf-8 -*-
# Copyright: (c) 2026, gpufleet.nvidia contributors
# GNU General Public License v3.0+ (see COPYING or https://www.gnu.org/licenses/gpl-3.0.txt)
"""The installed kernels, the one the node boots next, and whether each has the NVIDIA module.

The trees below are laid out as Debian's and Ubuntu's packages lay them out: a kernel image
/boot/vmlinuz-<release>, modules under /lib/modules/<release>, DKMS's build installed in
updates/dkms/, Ubuntu's precompiled linux-modules-nvidia in kernel/nvidia-<branch>srv/.
"""

from __future__ import annotations

import pytest

from ansible_collections.gpufleet.nvidia.plugins.module_utils import nvml_inventory as inv

from ansible_collections.gpufleet.nvidia.tests.unit.plugins.module_utils.test_nvml_inventory_nvml import Probe

OLD = "6.1.0-49-cloud-amd64"
NEW = "6.1.0-50-cloud-amd64"
BPO = "6.12.95+deb12-cloud-amd64"


def lay_out(root, kernels, modules=None, grubenv=None, grub_default=None):
    """kernels: releases with an image in /boot; modules: {release: path under /lib/modules/<release>}."""
    boot = root / "boot"
    lib = root / "lib" / "modules"
    boot.mkdir()
    lib.mkdir(parents=True)
    for release in kernels:
        (boot / ("vmlinuz-" + release)).write_bytes(b"\x7fELF")
        (boot / ("config-" + release)).write_text("CONFIG_MODULES=y\n")
        (lib / release / "kernel" / "drivers").mkdir(parents=True)
    for release, path in (modules or {}).items():
        target = lib / release / path
        target.parent.mkdir(parents=True, exist_ok=True)
        target.write_bytes(b"\x7fELF")
    if grubenv is not None:
        (boot / "grub").mkdir()
        (boot / "grub" / "grubenv").write_text("# GRUB Environment Block\n" + grubenv + "#" * 200)
    default = root / "default-grub"
    if grub_default is not None:
        default.write_text(grub_default)
    return dict(boot=str(boot), modules=str(lib), grub_default=str(default))


def test_every_kernel_with_its_module_and_the_newest_boots_next(tmp_path):
    paths = lay_out(tmp_path, [OLD, NEW, BPO], modules={
        OLD: "updates/dkms/nvidia-current.ko",     # Debian's renamed module
        NEW: "updates/dkms/nvidia.ko.xz",          # NVIDIA's packages, compressed by DKMS
    })
    got = inv.scan_kernels(running=NEW, **paths)
    assert [k["release"] for k in got["installed"]] == [BPO, NEW, OLD]
    assert got["next_boot"] == BPO and got["next_boot_source"] == "newest installed"
    assert got["without_module"] == [BPO]
    by = dict((k["release"], k) for k in got["installed"])
    assert by[NEW]["nvidia_module"].endswith(NEW + "/updates/dkms/nvidia.ko.xz")
    assert by[NEW]["running"] and not by[BPO]["running"]
    assert by[BPO]["next_boot"] and not by[NEW]["next_boot"]


@pytest.mark.parametrize("path", [
    "kernel/nvidia-535srv/nvidia.ko",              # Ubuntu's precompiled linux-modules-nvidia-535-server
    "extra/nvidia.ko.zst",
    "updates/dkms/nvidia-tesla-470.ko",
    "updates/nvidia-current.ko.gz",
    "kernel/drivers/video/nvidia.ko",              # NVIDIA's .run installer
])
def test_module_places_and_names(tmp_path, path):
    paths = lay_out(tmp_path, [NEW], modules={NEW: path})
    assert inv.scan_kernels(**paths)["installed"][0]["nvidia_module"].endswith(path)


@pytest.mark.parametrize("path", [
    "updates/dkms/nvidia-uvm.ko",                  # a companion module is not the driver
    "kernel/drivers/gpu/drm/nouveau/nouveau.ko",
    "updates/dkms/nvidia.ko.orig",
])
def test_other_modules_are_not_the_nvidia_module(tmp_path, path):
    paths = lay_out(tmp_path, [NEW], modules={NEW: path})
    assert inv.scan_kernels(**paths)["without_module"] == [NEW]


def test_modules_of_a_removed_kernel_do_not_make_it_bootable(tmp_path):
    # apt remove (not purge) leaves /lib/modules/<release> with DKMS's module, but no image.
    paths = lay_out(tmp_path, [NEW], modules={OLD: "updates/dkms/nvidia.ko", NEW: "updates/dkms/nvidia.ko"})
    assert [k["release"] for k in inv.scan_kernels(**paths)["installed"]] == [NEW]


def test_version_order_is_numeric():
    releases = ["6.1.0-9-amd64", "6.1.0-10-amd64", "5.10.0-30-amd64", "6.12.95+deb12-amd64"]
    assert sorted(releases, key=inv.version_key, reverse=True) == [
        "6.12.95+deb12-amd64", "6.1.0-10-amd64", "6.1.0-9-amd64", "5.10.0-30-amd64"]


@pytest.mark.parametrize("grubenv,default,boots,source", [
    # grub-reboot: a one-time entry wins over everything.
    ("next_entry=gnulinux-advanced-8f1c>gnulinux-%s-advanced-8f1c\n" % OLD, "GRUB_DEFAULT=0\n", OLD,
     "grub next_entry"),
    # grub-set-default with GRUB_DEFAULT=saved, by title.
    ("saved_entry=Advanced options for Debian GNU/Linux>Debian GNU/Linux, with Linux %s\n" % OLD,
     'GRUB_DEFAULT="saved"\n', OLD, "grub saved_entry"),
    # A saved entry is ignored unless GRUB_DEFAULT is saved.
    ("saved_entry=gnulinux-%s-advanced-8f1c\n" % OLD, "GRUB_DEFAULT=0\n", BPO, "newest installed"),
    # GRUB_DEFAULT naming an entry; a numeric path into a submenu cannot be told from here.
    ("", "GRUB_DEFAULT='gnulinux-advanced-8f1c>gnulinux-%s-advanced-8f1c'\n" % NEW, NEW, "GRUB_DEFAULT"),
    ("", "GRUB_DEFAULT=0\n", BPO, "newest installed"),
    # A saved entry naming a kernel no longer installed: GRUB falls back to the first entry.
    ("saved_entry=gnulinux-5.10.0-30-amd64-advanced-8f1c\n", "GRUB_DEFAULT=saved\n", BPO, "newest installed"),
    # So does a one-time entry it does not find, whatever GRUB_DEFAULT says.
    ("next_entry=gnulinux-5.10.0-30-amd64-advanced-8f1c\nsaved_entry=gnulinux-%s-advanced-8f1c\n" % OLD,
     "GRUB_DEFAULT=saved\n", BPO, "newest installed"),
    ("next_entry=gnulinux-%s-advanced-8f1c\n" % NEW, None, NEW, "grub next_entry"),
])
def test_next_boot_follows_grub(tmp_path, grubenv, default, boots, source):
    paths = lay_out(tmp_path, [OLD, NEW, BPO], grubenv=grubenv, grub_default=default)
    got = inv.scan_kernels(**paths)
    assert (got["next_boot"], got["next_boot_source"]) == (boots, source)
    assert [k["release"] for k in got["installed"] if k["next_boot"]] == [boots]


@pytest.mark.parametrize("grubenv,default,source", [
    # An entry named by its place: which kernel that is, only GRUB's menu tells.
    ("", "GRUB_DEFAULT=1>2\n", "unknown: GRUB_DEFAULT 1>2 names an entry by its place in GRUB's menu"),
    ("saved_entry=2\n", "GRUB_DEFAULT=saved\n", "unknown: grub saved_entry 2 names an entry by its place in GRUB's menu"),
    ("next_entry=1>0\n", "GRUB_DEFAULT=0\n", "unknown: grub next_entry 1>0 names an entry by its place in GRUB's menu"),
    # Ubuntu's flavour order puts a kernel flavour first, whatever the versions.
    ("", "GRUB_DEFAULT=0\nGRUB_FLAVOUR_ORDER=lowlatency\n", "unknown: GRUB_FLAVOUR_ORDER reorders GRUB's menu"),
])
def test_a_next_boot_that_cannot_be_told_is_none_and_any_kernel_without_the_module_is_a_problem(
        tmp_path, grubenv, default, source):
    paths = lay_out(tmp_path, [OLD, NEW, BPO], modules={NEW: "updates/dkms/nvidia.ko", BPO: "updates/dkms/nvidia.ko"},
                    grubenv=grubenv, grub_default=default)
    got = inv.scan_kernels(**paths)
    assert (got["next_boot"], got["next_boot_source"]) == (None, source)
    assert not any(k["next_boot"] for k in got["installed"])
    why = inv.next_boot_problem(got, None)
    assert OLD in why and "cannot be told" in why


def test_leftovers_in_boot_are_no_kernels(tmp_path):
    # GRUB skips dpkg's leftovers, backups and signatures (grub_file_is_not_garbage).
    paths = lay_out(tmp_path, [NEW], modules={NEW: "updates/dkms/nvidia.ko"})
    for name in ("vmlinuz-6.1.0-99-amd64.dpkg-bak", "vmlinuz-6.1.0-98-amd64.dpkg-new", "vmlinuz-6.1.0-97-amd64.sig",
                 "vmlinuz-6.1.0-96-amd64~", "vmlinuz.old"):
        with open(paths["boot"] + "/" + name, "wb") as handle:
            handle.write(b"\x7fELF")
    got = inv.scan_kernels(**paths)
    assert [k["release"] for k in got["installed"]] == [NEW] and got["next_boot"] == NEW


def test_a_container_sees_no_kernel(tmp_path):
    got = inv.scan_kernels(boot=str(tmp_path / "none"), modules=str(tmp_path / "none"), running="6.18.44")
    assert got == dict(inv.NO_KERNELS, running="6.18.44")


# --------------------------------------------------------------------------
# Health: the next boot loses the GPUs
# --------------------------------------------------------------------------

def _kernels(tmp_path, modules):
    return inv.scan_kernels(running=NEW, **lay_out(tmp_path, [NEW, BPO], modules=modules))


def test_a_new_kernel_without_the_module_makes_the_node_unhealthy(tmp_path):
    kernels = _kernels(tmp_path, {NEW: "updates/dkms/nvidia.ko"})
    facts = inv.summarise({"outcome": "not_loaded", "message": "x"}, [], False, None, kernels=kernels)
    assert facts["kernels"]["next_boot"] == BPO
    problems = facts["health"]["problems"]
    assert [p["code"] for p in problems] == ["next_boot_no_module"]
    assert BPO in problems[0]["message"] and "newest installed" in problems[0]["message"]
    assert facts["health"]["status"] == "unhealthy"


def test_a_loaded_module_is_enough_to_know_the_driver_needs_one(tmp_path):
    # Every kernel image without a module (the module file deleted), the driver loaded from memory.
    kernels = _kernels(tmp_path, {})
    assert inv.next_boot_problem(kernels, "590.48.01")
    assert inv.next_boot_problem(kernels, None) is None


def test_the_next_boot_with_its_module_is_no_problem_though_an_older_kernel_lacks_one(tmp_path):
    kernels = _kernels(tmp_path, {BPO: "updates/dkms/nvidia.ko"})
    assert kernels["without_module"] == [NEW]
    assert inv.next_boot_problem(kernels, "590.48.01") is None


def test_gather_reads_the_kernels_through_the_probe(tmp_path):
    kernels = _kernels(tmp_path, {NEW: "updates/dkms/nvidia.ko"})
    facts = inv.gather({"kernel_log": "none"}, Probe(kernels=kernels))
    assert facts["kernels"] is kernels
    assert [p["code"] for p in facts["health"]["problems"]] == ["next_boot_no_module"]
    assert inv.gather({"kernel_log": "none"}, Probe())["kernels"] == inv.NO_KERNELS

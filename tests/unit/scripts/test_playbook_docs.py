# Copyright: (c) 2026, gpufleet.nvidia contributors
# GNU General Public License v3.0+ (see COPYING or https://www.gnu.org/licenses/gpl-3.0.txt)
"""scripts/playbook-docs.py: every playbook's header comment on the playbook guide, --check and --write."""

from __future__ import annotations

import importlib.util
import os
import subprocess
import sys

import pytest

REPO = os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "..", "..")
SCRIPT = os.path.join(REPO, "scripts", "playbook-docs.py")
PLAYBOOKS = os.path.join(REPO, "playbooks")

_SPEC = importlib.util.spec_from_file_location("playbook_docs", SCRIPT)
playbook_docs = importlib.util.module_from_spec(_SPEC)
_SPEC.loader.exec_module(playbook_docs)

NAMES = sorted(name for name in os.listdir(PLAYBOOKS) if name.endswith(".yml"))


def run(*args):
    return subprocess.run([sys.executable, SCRIPT] + list(args), capture_output=True, text=True, check=False)


@pytest.mark.parametrize("name", NAMES)
def test_every_playbook_has_a_section_with_its_whole_header(name):
    page = playbook_docs.render()
    with open(os.path.join(PLAYBOOKS, name), encoding="utf-8") as handle:
        first_comment = [line for line in handle.read().split("\n") if line.startswith("# ")][0][2:]
    title = "gpufleet.nvidia.%s (playbooks/%s)" % (name[:-4], name)
    assert "\n%s\n%s\n" % (title, "-" * len(title)) in page
    assert "   " + first_comment.rstrip() + "\n" in page
    assert ".. _ansible_collections.gpufleet.nvidia.docsite.playbooks.%s:" % name[:-4] in page


def test_header_stops_at_the_first_line_that_is_not_a_comment(tmp_path):
    path = tmp_path / "play.yml"
    path.write_text("---\n# Does this.\n#   ansible-playbook x\n#\n- name: Play\n  hosts: all\n# not the header\n")
    assert playbook_docs.header(str(path)) == ["Does this.", "  ansible-playbook x"]


def test_a_playbook_without_a_header_is_refused(tmp_path):
    path = tmp_path / "bare.yml"
    path.write_text("---\n- name: Play\n  hosts: all\n")
    with pytest.raises(playbook_docs.PlaybookError, match="no header comment"):
        playbook_docs.header(str(path))


def test_order_puts_site_first_and_keeps_every_playbook():
    order = playbook_docs.playbooks()
    assert order[0] == "site.yml"
    assert sorted(order) == NAMES


def test_check_and_write(tmp_path):
    page = tmp_path / "playbooks.rst"
    page.write_text("stale\n")
    stale = run("--check", str(page))
    assert stale.returncode == 1
    assert "is stale" in stale.stderr
    assert "-stale" in stale.stdout
    assert run("--write", str(page)).returncode == 0
    assert page.read_text() == playbook_docs.render()
    assert run("--check", str(page)).returncode == 0


def test_the_committed_page_is_current():
    assert run("--check").returncode == 0, "docs/docsite/rst/playbooks.rst is stale: run make docs"

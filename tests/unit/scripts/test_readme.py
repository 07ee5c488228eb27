# Copyright: (c) 2026, gpufleet.nvidia contributors
# GNU General Public License v3.0+ (see COPYING or https://www.gnu.org/licenses/gpl-3.0.txt)
"""README.md stays the short introduction: its relative links lead to files, it links every guide."""

from __future__ import annotations

import os
import re

REPO = os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "..", "..")
LINK = re.compile(r"\]\(([^)#]+)(#[^)]*)?\)")


def readme():
    with open(os.path.join(REPO, "README.md"), encoding="utf-8") as handle:
        return handle.read()


def guides():
    """The guides docs/docsite/extra-docs.yml lists, read without a YAML library."""
    with open(os.path.join(REPO, "docs", "docsite", "extra-docs.yml"), encoding="utf-8") as handle:
        return re.findall(r"^\s+- (\w+)\s*$", handle.read(), re.M)


def test_readme_is_short():
    assert len(readme().splitlines()) <= 250


def test_every_relative_link_leads_to_a_file():
    targets = [target for target, _fragment in LINK.findall(readme()) if not re.match(r"[a-z]+:", target)]
    assert targets
    missing = [target for target in targets if not os.path.exists(os.path.join(REPO, target))]
    assert missing == []


def test_every_guide_is_linked():
    assert len(guides()) >= 10
    text = readme()
    assert [name for name in guides() if "(docs/docsite/rst/%s.rst)" % name not in text] == []
    for name in guides():
        assert os.path.isfile(os.path.join(REPO, "docs", "docsite", "rst", name + ".rst"))

# Copyright: (c) 2026, gpufleet.nvidia contributors
# GNU General Public License v3.0+ (see COPYING or https://www.gnu.org/licenses/gpl-3.0.txt)
"""scripts/docs-links.py: the built site's internal links and anchors, on small sites made here."""

from __future__ import annotations

import importlib.util
import os

REPO = os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "..", "..")
SCRIPT = os.path.join(REPO, "scripts", "docs-links.py")

_SPEC = importlib.util.spec_from_file_location("docs_links", SCRIPT)
docs_links = importlib.util.module_from_spec(_SPEC)
_SPEC.loader.exec_module(docs_links)


def site(tmp_path, pages):
    for name, body in pages.items():
        path = tmp_path / name
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text("<html><body>%s</body></html>" % body)
    return str(tmp_path)


def test_a_site_whose_links_all_lead_somewhere(tmp_path):
    root = site(tmp_path, {
        "index.html": '<a href="collection/role.html#options">x</a><a href="#top">t</a><p id="top"></p>'
                      '<a href="https://example.org/missing.html">out</a><a href="/">home</a>',
        "collection/role.html": '<h2 id="options"></h2><a href="../index.html">up</a>'
                                '<img src="../_static/logo.png"><a href="./">dir</a>',
        "collection/index.html": "",
        "_static/logo.png": "",
    })
    found, pages = docs_links.broken_links(root)
    assert found == []
    assert pages == 3
    assert docs_links.main([root]) == 0


def test_a_missing_page_and_a_missing_anchor_are_named(tmp_path):
    root = site(tmp_path, {
        "index.html": '<a href="guide.html">g</a><a href="other.html#nowhere">o</a><a href="#self">s</a>',
        "other.html": '<span name="somewhere"></span>',
    })
    found, _pages = docs_links.broken_links(root)
    assert sorted((os.path.basename(page), link, why) for page, link, why in found) == [
        ("index.html", "#self", "no such anchor"),
        ("index.html", "guide.html", "no such file"),
        ("index.html", "other.html#nowhere", "no such anchor"),
    ]
    assert docs_links.main([root]) == 1


def test_an_empty_folder_is_no_site(tmp_path):
    assert docs_links.main([str(tmp_path)]) == 1

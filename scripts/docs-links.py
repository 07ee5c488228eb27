# Copyright: (c) 2026, gpufleet.nvidia contributors
# GNU General Public License v3.0+ (see COPYING or https://www.gnu.org/licenses/gpl-3.0.txt)
"""Check every internal link of the built documentation site (Sphinx's linkcheck needs the internet).

For each HTML page under the site folder, every href and src that is not an absolute URL (http:,
https:, mailto:) must name a file of the site (a path from "/" is read from the site's root, where
the site is served), and its #fragment, when it has one, an id or name in that page. Prints each
broken link with the page it is on and exits 1 when there is one.

    python3 scripts/docs-links.py SITE_DIR

Needs the standard library only.
"""

from __future__ import annotations

import html.parser
import os
import sys
import urllib.parse

EXTERNAL = ("http:", "https:", "mailto:", "data:", "javascript:")


class Page(html.parser.HTMLParser):
    """The links and the anchors (id and name attributes) of one HTML page."""

    def __init__(self):
        super().__init__(convert_charrefs=True)
        self.links = []
        self.anchors = set()

    def handle_starttag(self, tag, attrs):
        values = dict(attrs)
        for name in ("id", "name"):
            if values.get(name):
                self.anchors.add(values[name])
        for name in ("href", "src"):
            if values.get(name) is not None and not (tag == "link" and values.get("rel") == "canonical"):
                self.links.append(values[name])


def read(path, cache):
    if path not in cache:
        page = Page()
        with open(path, encoding="utf-8") as handle:
            page.feed(handle.read())
        cache[path] = page
    return cache[path]


def broken_links(site):
    """(page, link, why) for every internal link of the site that leads nowhere."""
    cache = {}
    found = []
    pages = []
    for folder, _dirs, files in os.walk(site):
        pages.extend(os.path.join(folder, name) for name in files if name.endswith(".html"))
    for page in sorted(pages):
        for link in read(page, cache).links:
            if not link or link.startswith(EXTERNAL):
                continue
            parts = urllib.parse.urlsplit(link)
            if parts.scheme or parts.netloc:
                found.append((page, link, "a link to another site without http(s)"))
                continue
            path = urllib.parse.unquote(parts.path)
            if not path:
                target = page
            elif path.startswith("/"):  # the site's root (the theme's logo links to "/")
                target = os.path.normpath(os.path.join(site, path.lstrip("/")))
            else:
                target = os.path.normpath(os.path.join(os.path.dirname(page), path))
            if os.path.isdir(target):
                target = os.path.join(target, "index.html")
            if not os.path.isfile(target):
                found.append((page, link, "no such file"))
                continue
            fragment = urllib.parse.unquote(parts.fragment)
            if fragment and target.endswith(".html") and fragment not in read(target, cache).anchors:
                found.append((page, link, "no such anchor"))
    return found, len(pages)


def main(argv=None):
    argv = sys.argv[1:] if argv is None else argv
    if len(argv) != 1 or not os.path.isdir(argv[0]):
        print("usage: docs-links.py SITE_DIR", file=sys.stderr)
        return 2
    found, pages = broken_links(argv[0])
    for page, link, why in found:
        print("%s: %s (%s)" % (os.path.relpath(page, argv[0]), link, why))
    if not pages:
        print("no HTML page under %s" % argv[0], file=sys.stderr)
        return 1
    print("%d pages, %d broken internal links" % (pages, len(found)))
    return 1 if found else 0


if __name__ == "__main__":
    sys.exit(main())

# Copyright: (c) 2026, gpufleet.nvidia contributors
# GNU General Public License v3.0+ (see COPYING or https://www.gnu.org/licenses/gpl-3.0.txt)
"""The built documentation site as a user sees it, in headless Chromium (make docs-test).

For the front page and the gpu_driver role's page: Chromium (Debian's, scripts/system-deps.sh)
loads the page from the built site, dumps the DOM it built and takes a screenshot. Checked:
  - the DOM's <title> and <h1> are the page's (the collection's name; the role's name and its
    short description from meta/argument_specs.yml), the navigation lists the guides, and the
    role page shows its options table with a variable of the role;
  - the PNG is the size asked for and shows a page, not a blank (many colours, much ink:
    molecule/fleet_report/files/png-ink.py, as the fleet report's screenshot is measured);
  - tesseract reads the page's heading back from the screenshot, so the text is drawn, not
    only present in the DOM.
The screenshots stay in OUT_DIR to look at.

    python3 tests/docs/screenshot_check.py SITE_HTML_DIR OUT_DIR
"""

from __future__ import annotations

import html
import json
import os
import re
import subprocess
import sys

REPO = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
WIDTH, HEIGHT = 1400, 1000
CHROMIUM = ["timeout", "120", "chromium", "--headless", "--no-sandbox", "--disable-gpu", "--disable-dev-shm-usage",
            "--hide-scrollbars"]


PNG_INK = os.path.join(REPO, "molecule", "fleet_report", "files", "png-ink.py")


def role_short_description(role):
    """The role's short description, read from its argument spec without a YAML library."""
    with open(os.path.join(REPO, "roles", role, "meta", "argument_specs.yml"), encoding="utf-8") as handle:
        found = re.search(r"^\s+short_description:\s*(.+)$", handle.read(), re.M)
    return found.group(1).strip().strip("\"'")


def words(text):
    return re.findall(r"[a-z0-9]+", text.lower())


PAGES = [
    {
        "name": "front",
        "path": "index.html",
        "title": "gpufleet.nvidia",
        "h1": "gpufleet.nvidia",
        "dom": ["Getting started on a real cluster", "Air-gapped installs", "Troubleshooting",
                "How the tests work, and what is real in them", "gpu_driver role"],
        "ocr": ["gpufleet", "nvidia", "getting", "started", "real", "cluster"],
    },
    {
        "name": "role-gpu_driver",
        "path": "collection/gpu_driver_role.html",
        "title": "gpufleet.nvidia.gpu_driver role",
        "h1": "gpufleet.nvidia.gpu_driver role – " + role_short_description("gpu_driver"),
        "dom": ["Entry point <code", "gpu_driver_branch", "gpu_driver_source", "gpu_driver_kernel_module"],
        "ocr": words(role_short_description("gpu_driver")) + ["role"],
    },
]


def text_of(fragment):
    """The text of an HTML fragment, without the theme's permalink (an icon-font glyph)."""
    fragment = re.sub(r'<a class="headerlink".*?</a>', "", fragment, flags=re.S)
    return html.unescape(re.sub(r"<[^>]+>", "", fragment)).strip()


def check_page(site, out, page):
    problems = []
    url = "file://" + os.path.abspath(os.path.join(site, page["path"]))
    dom = subprocess.run(CHROMIUM + ["--dump-dom", url], capture_output=True, text=True, check=True).stdout
    title = re.search(r"<title>(.*?)</title>", dom, re.S)
    if not title or not text_of(title.group(1)).startswith(page["title"]):
        problems.append("%s: the title is %r, not %r..." % (
            page["path"], title and text_of(title.group(1)), page["title"]))
    heading = re.search(r"<h1>(.*?)</h1>", dom, re.S)
    if not heading or text_of(heading.group(1)) != page["h1"]:
        problems.append("%s: the heading is %r, not %r" % (
            page["path"], heading and text_of(heading.group(1)), page["h1"]))
    problems.extend("%s: %r is not in the DOM Chromium built" % (page["path"], needle)
                    for needle in page["dom"] if needle not in dom)

    shot = os.path.join(out, page["name"] + ".png")
    subprocess.run(CHROMIUM + ["--screenshot=" + shot, "--window-size=%d,%d" % (WIDTH, HEIGHT), url],
                   capture_output=True, check=True)
    if not os.path.isfile(shot):
        return problems + ["%s: Chromium wrote no screenshot" % page["path"]]
    drawn = json.loads(subprocess.run([sys.executable, PNG_INK, shot], capture_output=True, text=True,
                                      check=True).stdout)
    if (drawn["width"], drawn["height"]) != (WIDTH, HEIGHT):
        problems.append("%s: the screenshot is %dx%d" % (page["path"], drawn["width"], drawn["height"]))
    if drawn["colours"] < 50 or drawn["ink"] < 0.05:
        problems.append("%s: the screenshot shows almost nothing: %s" % (page["path"], json.dumps(drawn)))
    ocr = subprocess.run(["tesseract", shot, "stdout"], capture_output=True, text=True, check=True).stdout
    read = set(words(ocr))
    missing = [word for word in page["ocr"] if word not in read]
    if missing:
        problems.append("%s: OCR of the screenshot does not read %s; it read: %s" % (
            page["path"], missing, " ".join(ocr.split())[:400]))
    print("%s: %s, %s, OCR read %d words" % (page["path"], shot, json.dumps(drawn), len(read)))
    return problems


def main(argv=None):
    argv = sys.argv[1:] if argv is None else argv
    if len(argv) != 2:
        print("usage: screenshot_check.py SITE_HTML_DIR OUT_DIR", file=sys.stderr)
        return 2
    site, out = argv
    os.makedirs(out, exist_ok=True)
    problems = []
    for page in PAGES:
        problems.extend(check_page(site, out, page))
    for problem in problems:
        print(problem)
    return 1 if problems else 0


if __name__ == "__main__":
    sys.exit(main())

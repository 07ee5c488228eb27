# Copyright: (c) 2026, gpufleet.nvidia contributors
# GNU General Public License v3.0+ (see COPYING or https://www.gnu.org/licenses/gpl-3.0.txt)
"""The fleet report's templates (playbooks/templates/fleet-report.*.j2) over a realistic fleet.

The fleet: the nodes of test_fleet_report (real nvidia-smi captures and recorded NVML readings: an A100
with lost GPUs, a T4, H100s with and without MIG, a node whose driver is not loaded, one that cannot be
reached) and its DRA nodes, with their Nodes read from the API and the results site.yml keeps, some of
the drivers pinned in the inventory, judged against the gpu_driver role's lifecycle table and the smoke
test's CUDA versions.

The templates are rendered by Jinja2 as the template module sets it up (trim_blocks, the rest Jinja's
defaults): they use Jinja's own filters only. The page is then opened in headless Chromium (Debian's,
scripts/system-deps.sh) at 800 and 1400 px with a script that measures every cell of its tables and
writes what it found into the DOM, which --dump-dom hands back: a cell cut by an element that hides its
overflow, a cell whose content is wider than its box, or a cell a scroll container cannot reach is a
failure.
"""

from __future__ import annotations

import copy
import json
import os
import re
import shutil
import subprocess

import jinja2
import pytest
import yaml

from ansible_collections.gpufleet.nvidia.plugins.filter.internal import fleet_report as fr
from ansible_collections.gpufleet.nvidia.tests.unit.plugins.filter import test_fleet_report as t

REPO = os.path.dirname(os.path.dirname(os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))))
TEMPLATES = os.path.join(REPO, "playbooks", "templates")
TIME = "2026-12-07T18:15:49Z"
CHROMIUM = ["chromium", "--headless", "--no-sandbox", "--disable-gpu", "--disable-dev-shm-usage", "--hide-scrollbars"]

# Runs in the page once it is laid out; writes {width, cells, clipped, overflowing, unreachable} into <pre id="measured">.
MEASURE = """
<script>
(function () {
  var out = {width: window.innerWidth, page: document.documentElement.scrollWidth, cells: 0, columns: [],
             clipped: [], overflowing: [], unreachable: []};
  function name(cell) {
    return cell.closest('table').className + ' row ' + cell.parentElement.rowIndex + ' column ' + cell.cellIndex +
      ' (' + cell.textContent.replace(/\\s+/g, ' ').trim().slice(0, 40) + ')';
  }
  document.querySelectorAll('table.nodes').forEach(function (table) {
    out.columns.push(table.rows[0].cells.length);
  });
  document.querySelectorAll('table.nodes th, table.nodes td').forEach(function (cell) {
    out.cells += 1;
    var box = cell.getBoundingClientRect();
    if (cell.scrollWidth > cell.clientWidth + 1) {
      out.overflowing.push(name(cell) + ': content ' + cell.scrollWidth + ' px in ' + cell.clientWidth + ' px');
    }
    cell.querySelectorAll('*').forEach(function (inner) {
      var style = getComputedStyle(inner);
      if ((style.overflowX === 'hidden' || style.overflowX === 'clip') && inner.scrollWidth > inner.clientWidth + 1) {
        out.clipped.push(name(cell) + ': its ' + inner.className + ' hides ' + (inner.scrollWidth - inner.clientWidth) + ' px');
      }
    });
    for (var outer = cell.parentElement; outer && outer !== document.documentElement; outer = outer.parentElement) {
      var overflow = getComputedStyle(outer).overflowX;
      var frame = outer.getBoundingClientRect();
      if (overflow === 'hidden' || overflow === 'clip') {
        if (box.right > frame.right + 1 || box.left < frame.left - 1) {
          out.clipped.push(name(cell) + ': cut by ' + (outer.className || outer.tagName) + ' at ' +
                           Math.round(frame.right) + ' px, the cell ends at ' + Math.round(box.right) + ' px');
        }
        break;
      }
      if (overflow === 'auto' || overflow === 'scroll') {
        // Reachable: within what the container scrolls over (measured from its padding box).
        var end = box.right - frame.left - outer.clientLeft + outer.scrollLeft;
        if (end > outer.scrollWidth + 1) {
          out.unreachable.push(name(cell) + ': ends at ' + Math.round(end) + ' px, beyond the scroll width of ' +
                               (outer.className || outer.tagName) + ', ' + outer.scrollWidth + ' px');
        }
        break;
      }
    }
  });
  // The summary cards: nothing wider than its card.
  document.querySelectorAll('.card').forEach(function (card) {
    if (card.scrollWidth > card.clientWidth + 1) {
      out.overflowing.push('card ' + (card.querySelector('h2') || card).textContent.slice(0, 40) + ': content ' + card.scrollWidth +
                           ' px in ' + card.clientWidth + ' px');
    }
  });
  var pre = document.createElement('pre');
  pre.id = 'measured';
  pre.textContent = JSON.stringify(out);
  document.body.appendChild(pre);
})();
</script>
"""


def lifecycle():
    with open(os.path.join(REPO, "roles", "gpu_driver", "vars", "main.yml"), encoding="utf-8") as handle:
        return yaml.safe_load(handle)["__gpu_driver_branch_lifecycle"]


def realistic_report(**options):
    """The nodes of test_fleet_report and its DRA nodes, their Nodes read from the API, some drivers pinned."""
    facts = dict((name, copy.deepcopy(value)) for name, value in {
        "gpu1": t.A100_MIG, "gpu2": t.H100_MIG, "gpu3": t.T4, "gpu4": t.NOT_LOADED, "gpu10": t.H100,
        "gpu20": t.A5000_PAIR, "gpu-node-117.rack-b12.fra2.gpu.example.internal": t.H100}.items())
    facts["gpu5"] = {"unreachable": True, "msg": t.SSH_REFUSED, "changed": False}
    facts.update(t.dra_facts())
    nodes = t.k8s_info(t.api_node("gpu1", 1), t.api_node("gpu2", 0, unschedulable=True), t.api_node("gpu3", 1),
                       t.api_node("gpu10", 8), t.api_node("gpu20", 2),
                       t.api_node("gpu-node-117.rack-b12.fra2.gpu.example.internal", 8),
                       t.dra_api_node("gpu-c"), t.dra_api_node("gpu-d"), t.dra_api_node("gpu-e"),
                       t.api_node("gpu-a", 2), t.api_node("gpu-b", 1))
    pins = {"gpu1": {"version": "535.54.03"}, "gpu3": {"branch": "580"}, "gpu10": {"version": "590.48.01"},
            "gpu20": {"version": "595.84"}}
    cuda = [{"name": "nvidia-smi", "image": "nvcr.io/nvidia/cuda:12.2.2-base-ubuntu22.04", "require_cuda": "auto"},
            {"name": "vector-add", "image": "nvcr.io/nvidia/k8s/cuda-sample:vectoradd-cuda12.5.0",
             "require_cuda": "auto"}]
    kwargs = dict(pins=pins, lifecycle=lifecycle(), cuda=cuda, time=TIME)
    kwargs.update(options)
    return fr.fleet_report(facts, t.cluster(nodes, t.dra_results(), node_names=t.DRA_NAMES), **kwargs)


def render(name, report):
    """A template as the template module renders it (trim_blocks), every undefined name an error."""
    env = jinja2.Environment(loader=jinja2.FileSystemLoader(TEMPLATES), trim_blocks=True, keep_trailing_newline=True,
                             undefined=jinja2.StrictUndefined)
    return env.get_template(name).render(gpufleet_report=report, ansible_version={"full": "2.21.5"})


@pytest.fixture(scope="module")
def page():
    return render("fleet-report.html.j2", realistic_report())


def measure(page, tmp_path, width):
    path = tmp_path / ("page-%d.html" % width)
    path.write_text(page.replace("</body>", MEASURE + "</body>"), encoding="utf-8")
    dom = subprocess.run(["timeout", "60"] + CHROMIUM + ["--window-size=%d,1000" % width, "--dump-dom",
                                                         "file://%s" % path],
                         capture_output=True, text=True, check=True).stdout
    found = re.search(r'<pre id="measured">(.*?)</pre>', dom, re.S)
    assert found, "the page's measuring script wrote nothing: %s" % dom[-2000:]
    return json.loads(found.group(1).replace("&quot;", '"').replace("&lt;", "<").replace("&gt;", ">")
                      .replace("&amp;", "&"))


@pytest.mark.skipif(shutil.which("chromium") is None, reason="needs Debian's chromium (scripts/system-deps.sh)")
@pytest.mark.parametrize("width", [800, 1400])
def test_no_cell_of_the_page_is_clipped(page, tmp_path, width):
    measured = measure(page, tmp_path, width)
    assert measured["width"] == width
    # Only the tables' scroll containers scroll sideways, not the page.
    assert measured["page"] == width
    # The node table (10 columns) and the GPU table (7), every cell measured.
    assert measured["columns"] == [10, 7]
    assert measured["cells"] > 150
    assert measured["clipped"] == []
    assert measured["overflowing"] == []
    assert measured["unreachable"] == []


def test_both_files_say_when_they_were_written():
    report = realistic_report()
    assert '<time datetime="2026-12-07T18:15:49Z">2026-12-07T18:15:49Z</time> (UTC)' in render("fleet-report.html.j2", report)
    markdown = render("fleet-report.md.j2", report)
    assert "\nWritten 2026-12-07T18:15:49Z (UTC).\n" in markdown
    assert "<!-- gpufleet.nvidia.report written=2026-12-07T18:15:49Z digest=%s -->" % report["summary"]["digest"] in markdown


def test_a_run_that_finds_the_same_report_keeps_the_file_as_it_is():
    first = render("fleet-report.md.j2", realistic_report(layout="templates v1"))
    again = realistic_report(time="2026-12-08T06:00:00Z", previous=first, layout="templates v1")
    assert render("fleet-report.md.j2", again) == first
    # Another layout of the same data is another report, written at this run's time.
    moved = realistic_report(time="2026-12-08T06:00:00Z", previous=first, layout="templates v2")
    assert "Written 2026-12-08T06:00:00Z (UTC)." in render("fleet-report.md.j2", moved)


def test_the_rows_say_what_drift_is_measured_against_and_flag_end_of_life_and_cuda():
    report = realistic_report()
    markdown = render("fleet-report.md.j2", report)
    rows = dict((line.split(" | ")[0][2:], line.split(" | ")) for line in markdown.split("\n## GPUs\n")[0].splitlines()
                if line.startswith("| gpu"))
    roles = fr.TROUBLESHOOTING_URL + "#troubleshooting-what-the-roles-say"
    states = fr.TROUBLESHOOTING_URL + "#troubleshooting-the-states-nvml-facts-reports"
    # gpu10 runs the version it is pinned to, though it is not the one most nodes run; gpu3 is off its pinned branch.
    assert rows["gpu10"][4] == "590.48.01; branch 590 past its end of life ([troubleshooting](%s))" % roles
    assert rows["gpu3"][4] == ("515.105.01 (drift from pinned branch 580 (gpu_driver_branch)); branch 515 past its end "
                               "of life ([troubleshooting](%s))" % roles)
    assert rows["gpu-b.example"][4] == (
        "595.84 (drift from 590.48.01, the newest of the versions most nodes run (nothing pinned)) "
        "([troubleshooting](%s))" % roles)
    assert rows["gpu3"][5] == (
        "11.7; nvidia-smi nvcr.io/nvidia/cuda:12.2.2-base-ubuntu22.04 needs CUDA 12.2, driver 515.105.01 supports CUDA "
        "11.7; vector-add nvcr.io/nvidia/k8s/cuda-sample:vectoradd-cuda12.5.0 needs CUDA 12.5, driver 515.105.01 "
        "supports CUDA 11.7 ([troubleshooting](%s))" % roles)
    assert rows["gpu1"][1] == "gpu_lost ([troubleshooting](%s))" % states
    assert rows["gpu2"][1] == "ok"
    # gpu4 (driver not loaded) and gpu5 (unreachable) have no version to measure.
    assert ("- **Drift measured against:** the inventory's pin on 4 nodes, the version most nodes run (590.48.01) on 7 "
            "nodes with nothing pinned\n") in markdown
    assert "- **DRIVER END OF LIFE:** 1 node (gpu1): Driver branch 535 (long-term support branch) reached its end" in markdown
    assert "- **CUDA NOT SERVED:** the driver of gpu1, gpu3 supports an older CUDA than" in markdown
    page = render("fleet-report.html.j2", report)
    assert '<span class="drift-note">differs from pinned branch 580 (gpu_driver_branch)</span>' in page
    assert "Drift measured against the inventory&#39;s pin on 4 nodes" in page
    assert 'Branch 535 past its end of life on 1 node: gpu1 <a class="fix" href="%s">troubleshooting</a>' % roles in page
    # The states of gpu1 (gpu_lost), gpu4 (driver not loaded), gpu5 (unreachable); the health of gpu1, gpu4, gpu-e.
    assert page.count('<a class="fix" href="%s">' % states) == 6

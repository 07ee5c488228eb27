# Copyright: (c) 2026, gpufleet.nvidia contributors
# GNU General Public License v3.0+ (see COPYING or https://www.gnu.org/licenses/gpl-3.0.txt)
"""ansible-doc answers for every module, filter and role of the collection (make docs-test).

What the collection holds is read from its files, not from ansible-doc: each module in
plugins/modules/, each filter a FilterModule in plugins/filter/ returns, each role with a
meta/argument_specs.yml; the modules and filters only the roles and playbooks use are in the
internal/ folder of each, named internal.NAME (gpufleet.nvidia.internal.NAME). Then, with the
real ansible-doc of the ansible-core on PATH:
  - `ansible-doc --json -t TYPE gpufleet.nvidia.NAME ...` returns documentation for every one
    of them (a short description, a description, and for modules and filters an example);
  - `ansible-doc -t TYPE -l gpufleet.nvidia` lists exactly them, none UNDOCUMENTED;
  - a module or filter only the roles and playbooks use says so: it is named internal.NAME, its
    short description starts with "Internal" and its description names who uses it; the filters
    in PUBLIC_FILTERS and the modules in PUBLIC_MODULES do neither.
Needs ANSIBLE_COLLECTIONS_PATH to hold this checkout as ansible_collections/gpufleet/nvidia.

    python3 tests/docs/ansible_doc_check.py
"""

from __future__ import annotations

import glob
import json
import os
import re
import subprocess
import sys

REPO = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
COLLECTION = "gpufleet.nvidia"

# The filters a user may call in their own playbooks and templates; every other filter is internal.
PUBLIC_FILTERS = {
    "collection_version", "driver_branch_of", "driver_end_of_life", "fleet_nodes", "fleet_report",
    "from_toml", "node_labels", "nvidia_smi_list", "openpgp_fingerprints", "to_toml",
}

# The modules a user may call; every other module is internal.
PUBLIC_MODULES = {"nvml_facts"}
INTERNAL = "internal."

FILTER_ENTRY = re.compile(r"""["'](\w+)["']\s*:\s*\w+""")


def modules():
    """The modules of plugins/modules/, those of its internal/ named internal.NAME."""
    names = []
    for prefix, folder in (("", ("modules",)), (INTERNAL, ("modules", "internal"))):
        names.extend(prefix + os.path.basename(path)[:-3]
                     for path in glob.glob(os.path.join(REPO, "plugins", *folder, "*.py"))
                     if not os.path.basename(path).startswith("__"))
    return sorted(names)


def filters():
    """The names every FilterModule.filters() of plugins/filter/ (and of its internal/, named internal.NAME)
    returns, read from its source."""
    names = set()
    for prefix, folder in (("", ("filter",)), (INTERNAL, ("filter", "internal"))):
        for path in glob.glob(os.path.join(REPO, "plugins", *folder, "*.py")):
            with open(path, encoding="utf-8") as handle:
                source = handle.read()
            body = source.split("def filters(self):", 1)
            if len(body) == 2:
                names.update(prefix + name
                             for name in FILTER_ENTRY.findall(body[1].split("return", 1)[1].split("}", 1)[0]))
    return sorted(names)


def roles():
    return sorted(os.path.basename(os.path.dirname(os.path.dirname(path)))
                  for path in glob.glob(os.path.join(REPO, "roles", "*", "meta", "argument_specs.yml")))


def ansible_doc(*args):
    result = subprocess.run(["ansible-doc"] + list(args), capture_output=True, text=True, check=False)
    if result.returncode != 0:
        raise SystemExit("ansible-doc %s failed (rc %d):\n%s%s" % (
            " ".join(args), result.returncode, result.stdout, result.stderr))
    return result


def text_of(value):
    return " ".join(value) if isinstance(value, list) else str(value or "")


def check_plugins(kind, names, problems):
    fqcns = ["%s.%s" % (COLLECTION, name) for name in names]
    answer = json.loads(ansible_doc("--json", "-t", kind, *fqcns).stdout)
    for fqcn in fqcns:
        entry = answer.get(fqcn)
        doc = (entry or {}).get("doc") or {}
        if not doc:
            problems.append("ansible-doc -t %s %s: no documentation" % (kind, fqcn))
            continue
        if not doc.get("short_description") or not text_of(doc.get("description")):
            problems.append("ansible-doc -t %s %s: no short_description or description" % (kind, fqcn))
        if not (entry.get("examples") or "").strip():
            problems.append("ansible-doc -t %s %s: no EXAMPLES" % (kind, fqcn))
        check_internal(kind, fqcn[len(COLLECTION) + 1:], doc, problems)
    listed = ansible_doc("-t", kind, "-l", COLLECTION).stdout
    listing = {line.split()[0]: line for line in listed.splitlines() if line.strip()}
    if sorted(listing) != sorted(fqcns):
        problems.append("ansible-doc -t %s -l lists %s, the files hold %s" % (kind, sorted(listing), sorted(fqcns)))
    problems.extend("ansible-doc -t %s -l: %s" % (kind, line) for line in listing.values() if "UNDOCUMENTED" in line)


def check_internal(kind, name, doc, problems):
    """A public plugin by its plain name and documented as public; an internal one named internal.NAME and
    documented as internal."""
    short = doc.get("short_description") or ""
    internal = short.startswith("Internal")
    public = PUBLIC_FILTERS if kind == "filter" else PUBLIC_MODULES
    if name in public:
        if internal:
            problems.append("%s %s is public but its short_description says %r" % (kind, name, short))
        return
    if not name.startswith(INTERNAL):
        problems.append("%s %s is internal but not in the internal/ folder (gpufleet.nvidia.internal.%s)"
                        % (kind, name, name))
    if not internal:
        problems.append("%s %s is internal but its short_description does not start with Internal: %r"
                        % (kind, name, short))
    if "Internal to " not in text_of(doc.get("description")):
        problems.append("%s %s is internal but its description does not say who uses it" % (kind, name))


def check_roles(names, problems):
    fqcns = ["%s.%s" % (COLLECTION, name) for name in names]
    answer = json.loads(ansible_doc("--json", "-t", "role", *fqcns).stdout)
    for fqcn in fqcns:
        main = (((answer.get(fqcn) or {}).get("entry_points") or {}).get("main")) or {}
        if not main.get("short_description") or not main.get("options"):
            problems.append("ansible-doc -t role %s: no main entry point with a short_description and options" % fqcn)
    listed = json.loads(ansible_doc("--json", "-t", "role", "-l", COLLECTION).stdout)
    if sorted(listed) != fqcns:
        problems.append("ansible-doc -t role -l lists %s, the files hold %s" % (sorted(listed), fqcns))


def main():
    found = {"module": modules(), "filter": filters(), "role": roles()}
    if not all(found.values()):
        print("found no modules, filters or roles under %s: %s" % (REPO, found), file=sys.stderr)
        return 2
    problems = ["PUBLIC_FILTERS names %s, which is no filter" % name
                for name in sorted(PUBLIC_FILTERS - set(found["filter"]))]
    problems += ["PUBLIC_MODULES names %s, which is no module" % name
                 for name in sorted(PUBLIC_MODULES - set(found["module"]))]
    check_plugins("module", found["module"], problems)
    check_plugins("filter", found["filter"], problems)
    check_roles(found["role"], problems)
    for problem in problems:
        print(problem)
    print("ansible-doc: %d modules (%d public), %d filters (%d public), %d roles checked; %d problems" % (
        len(found["module"]), len(PUBLIC_MODULES & set(found["module"])), len(found["filter"]),
        len(PUBLIC_FILTERS & set(found["filter"])), len(found["role"]), len(problems)))
    return 1 if problems else 0


if __name__ == "__main__":
    sys.exit(main())

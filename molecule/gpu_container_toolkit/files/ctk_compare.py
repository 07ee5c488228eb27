# Copyright: (c) 2026, gpufleet.nvidia contributors
# GNU General Public License v3.0+ (see COPYING or https://www.gnu.org/licenses/gpl-3.0.txt)
"""Compare two runtime configurations setting by setting: the role's and NVIDIA's nvidia-ctk's.

    ctk_compare.py toml OURS THEIRS   two `containerd config dump` outputs (TOML)
    ctk_compare.py json OURS THEIRS   two daemon.json files

Every leaf (a value that is not a table; a list is one value) of either file is compared with the
other's at the same path. Prints JSON: {"differences": {"a / b / c": [ours, theirs], ...}}, a path
missing on one side given as null there. Runs on the node under its own python3 (3.11 or newer:
tomllib); a test's witness, not part of the role.
"""

import json
import sys
import tomllib


def leaves(data, prefix=()):
    if isinstance(data, dict) and data:
        for key, value in data.items():
            yield from leaves(value, prefix + (key,))
    else:
        yield prefix, data


def main(kind, ours_path, theirs_path):
    with open(ours_path, "rb") as ours_file, open(theirs_path, "rb") as theirs_file:
        load = tomllib.load if kind == "toml" else json.load
        ours, theirs = dict(leaves(load(ours_file))), dict(leaves(load(theirs_file)))
    differences = {}
    for path in sorted(set(ours) | set(theirs)):
        if path not in ours or path not in theirs or ours[path] != theirs[path]:
            differences[" / ".join(path)] = [ours.get(path), theirs.get(path)]
    print(json.dumps({"differences": differences}, sort_keys=True))


if __name__ == "__main__":
    main(*sys.argv[1:4])

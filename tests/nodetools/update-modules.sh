#!/usr/bin/env bash
# Write the wrapper module that builds NVIDIA's node-side tools for the tests from the Go module
# proxy, at the versions pinned in tests/nodetools/versions.env, and tidy it (go.sum).
#   tests/nodetools/update-modules.sh          write go.mod and go.sum
#   tests/nodetools/update-modules.sh --check  fail if the committed go.mod differs from what
#                                              the pins give (build.sh runs this)
set -euo pipefail
cd "$(dirname "$0")"
# shellcheck disable=SC1091 # versions.env: plain NAME=value lines
. ./versions.env
check=false
[ "${1:-}" = --check ] && check=true

export GOTOOLCHAIN=local GOFLAGS=-mod=mod

write_container_toolkit() {
    cat <<GOMOD
// A wrapper module that exists only to build nvidia-ctk $NVIDIA_CONTAINER_TOOLKIT_VERSION (NVIDIA's
// container toolkit CLI) for the tests, from the Go module proxy.
// Written by tests/nodetools/update-modules.sh: do not edit.
module gpufleet.test/nodetools/container-toolkit

go 1.26.0

tool github.com/NVIDIA/nvidia-container-toolkit/cmd/nvidia-ctk

require github.com/NVIDIA/nvidia-container-toolkit $NVIDIA_CONTAINER_TOOLKIT_VERSION
GOMOD
}

# What the pins give, against a go.mod as go mod tidy left it: the go directive, the tools and
# the pinned module's version.
summary() {
    (cd "$1" && go mod edit -json) | python3 -c '
import json, sys
d = json.load(sys.stdin)
print("go", d["Go"])
for tool in d.get("Tool") or []:
    print("tool", tool["Path"])
for req in d.get("Require") or []:
    if req["Path"] == "github.com/NVIDIA/nvidia-container-toolkit":
        print("require", req["Path"], req["Version"])
for rep in d.get("Replace") or []:
    print("replace", rep["Old"]["Path"], rep["New"]["Path"], rep["New"].get("Version"))
'
}

name=container-toolkit
want=$(write_container_toolkit)
mkdir -p "modules/$name"
if $check; then
    scratch=$(mktemp -d)
    echo "$want" > "$scratch/go.mod"
    status=0
    if ! diff -u <(summary "$scratch") <(summary "modules/$name") >&2; then
        echo "modules/$name/go.mod is not what the pins give: run tests/nodetools/update-modules.sh" >&2
        status=1
    fi
    rm -rf "$scratch"
    exit $status
fi
echo "$want" > "modules/$name/go.mod"
(cd "modules/$name" && go mod tidy)
echo "modules/$name: $(grep -c . "modules/$name/go.sum") go.sum lines"

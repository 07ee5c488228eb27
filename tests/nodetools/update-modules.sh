#!/usr/bin/env bash
# Write the modules that build NVIDIA's node-side tools for the tests from the Go module proxy,
# at the versions pinned in tests/nodetools/versions.env, and tidy them (go.sum):
#   modules/container-toolkit  nvidia-ctk, nvidia-container-runtime(-hook), nvidia-cdi-hook (go.mod only)
#   modules/nvidia-smi         nvidia-smi's STAND-IN (go.mod; main.go is ours)
#   modules/nvml-mock          libnvidia-ml.so.1 over go-nvml's NVML mock (go.mod, and
#                              unmodelled.c from the pinned go-nvml's nvml.h)
#   tests/nodetools/update-modules.sh          write go.mod, go.sum and unmodelled.c
#   tests/nodetools/update-modules.sh --check  fail if a committed go.mod or unmodelled.c differs
#                                              from what the pins give (build.sh runs this)
set -euo pipefail
cd "$(dirname "$0")"
# shellcheck disable=SC1091 # versions.env: plain NAME=value lines
. ./versions.env
check=false
[ "${1:-}" = --check ] && check=true

export GOTOOLCHAIN=local GOFLAGS=-mod=mod

write_container_toolkit() {
    cat <<GOMOD
// A wrapper module that exists only to build nvidia-ctk, nvidia-container-runtime,
// nvidia-container-runtime-hook and nvidia-cdi-hook $NVIDIA_CONTAINER_TOOLKIT_VERSION (NVIDIA's
// container toolkit) for the tests, from the Go module proxy.
// Written by tests/nodetools/update-modules.sh: do not edit.
module gpufleet.test/nodetools/container-toolkit

go 1.26.0

tool (
	github.com/NVIDIA/nvidia-container-toolkit/cmd/nvidia-cdi-hook
	github.com/NVIDIA/nvidia-container-toolkit/cmd/nvidia-container-runtime
	github.com/NVIDIA/nvidia-container-toolkit/cmd/nvidia-container-runtime-hook
	github.com/NVIDIA/nvidia-container-toolkit/cmd/nvidia-ctk
)

require github.com/NVIDIA/nvidia-container-toolkit $NVIDIA_CONTAINER_TOOLKIT_VERSION
GOMOD
}

write_nvidia_smi() {
    cat <<GOMOD
// nvidia-smi's STAND-IN for the tests (-L, --version), over NVML through
// github.com/NVIDIA/go-nvml $GO_NVML_VERSION (tests/nodetools/README.md).
// go.mod written by tests/nodetools/update-modules.sh: do not edit.
module gpufleet.test/nodetools/nvidia-smi

go 1.26.0

require github.com/NVIDIA/go-nvml $GO_NVML_VERSION
GOMOD
}

write_nvml_mock() {
    cat <<GOMOD
// The bridge that builds libnvidia-ml.so.1 for the tests: NVML's C functions answered by the
// NVML mock of github.com/NVIDIA/go-nvml $GO_NVML_VERSION (tests/nodetools/README.md).
// go.mod written by tests/nodetools/update-modules.sh: do not edit.
module gpufleet.test/nodetools/nvml-mock

go 1.26.0

require github.com/NVIDIA/go-nvml $GO_NVML_VERSION
GOMOD
}

# Every function the pinned nvml.h declares, as a weak alias of one that answers
# NVML_ERROR_NOT_SUPPORTED: go-nvml's cgo code (linked in with its mock) refers to all of them,
# and ctypes (pynvml) opens a library with RTLD_NOW, which fails on any symbol left undefined.
write_unmodelled() {  # nvml.h
    cat <<HEAD
// Every function that nvml.h of github.com/NVIDIA/go-nvml $GO_NVML_VERSION declares, as a weak
// alias of one that answers NVML_ERROR_NOT_SUPPORTED (3). The functions the bridge defines
// (*.go, errorstring.c) take their place at link time; go-nvml's own cgo code refers to all of
// them, and a library opened with RTLD_NOW (ctypes, so pynvml) must leave none undefined.
// Written by tests/nodetools/update-modules.sh: do not edit.

static int not_supported(void) { return 3; }

#define NOT_SUPPORTED(name) int name(void) __attribute__((weak, alias("not_supported")));

HEAD
    grep -o 'DECLDIR *nvml[A-Za-z0-9_]*' "$1" | awk '{print "NOT_SUPPORTED(" $2 ")"}' | sort -u
}

# The nvml.h the pinned go-nvml compiles against (pkg/nvml), in the module cache (downloaded if
# need be).
nvml_header() {
    local dir
    dir=$(cd modules/nvml-mock && go mod download -json "github.com/NVIDIA/go-nvml@$GO_NVML_VERSION" |
        python3 -c 'import json, sys; print(json.load(sys.stdin)["Dir"])')
    echo "$dir/pkg/nvml/nvml.h"
}

# What the pins give, against a go.mod as go mod tidy left it: the go directive, the tools and
# the pinned module's version.
summary() {  # module directory, pinned module
    (cd "$1" && go mod edit -json) | python3 -c '
import json, sys
d = json.load(sys.stdin)
print("go", d["Go"])
for tool in d.get("Tool") or []:
    print("tool", tool["Path"])
for req in d.get("Require") or []:
    if req["Path"] == sys.argv[1]:
        print("require", req["Path"], req["Version"])
for rep in d.get("Replace") or []:
    print("replace", rep["Old"]["Path"], rep["New"]["Path"], rep["New"].get("Version"))
' "$2"
}

status=0
module() {  # name, pinned module, go.mod
    local name=$1 pinned=$2 want=$3 scratch
    mkdir -p "modules/$name"
    if $check; then
        scratch=$(mktemp -d)
        echo "$want" > "$scratch/go.mod"
        if ! diff -u <(summary "$scratch" "$pinned") <(summary "modules/$name" "$pinned") >&2; then
            echo "modules/$name/go.mod is not what the pins give: run tests/nodetools/update-modules.sh" >&2
            status=1
        fi
        rm -rf "$scratch"
        return
    fi
    echo "$want" > "modules/$name/go.mod"
    (cd "modules/$name" && go mod tidy)
    echo "modules/$name: $(grep -c . "modules/$name/go.sum") go.sum lines"
}

module container-toolkit github.com/NVIDIA/nvidia-container-toolkit "$(write_container_toolkit)"
module nvml-mock github.com/NVIDIA/go-nvml "$(write_nvml_mock)"
module nvidia-smi github.com/NVIDIA/go-nvml "$(write_nvidia_smi)"

unmodelled=$(write_unmodelled "$(nvml_header)")
if $check; then
    if ! diff -u <(echo "$unmodelled") modules/nvml-mock/unmodelled.c >&2; then
        echo "modules/nvml-mock/unmodelled.c is not what the pinned nvml.h gives: run tests/nodetools/update-modules.sh" >&2
        status=1
    fi
else
    echo "$unmodelled" > modules/nvml-mock/unmodelled.c
    echo "modules/nvml-mock: $(grep -c '^NOT_SUPPORTED(' modules/nvml-mock/unmodelled.c) NVML functions in unmodelled.c"
fi
exit $status

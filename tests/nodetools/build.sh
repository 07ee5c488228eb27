#!/usr/bin/env bash
# Build NVIDIA's node-side tools for the tests at the pinned versions (tests/nodetools/versions.env)
# from the Go module proxy, through the modules of tests/nodetools/modules/, into
#   .cache/nodetools/bin/   nvidia-ctk, nvidia-container-runtime, nvidia-container-runtime-hook,
#                           nvidia-cdi-hook
#                           (NVIDIA_CONTAINER_TOOLKIT_VERSION, modules/container-toolkit)
#                           as NVIDIA's own Makefile builds it: with cgo (go-nvml loads
#                           libnvidia-ml.so.1 at run time) and its linker flags, the version
#                           stamped into internal/info
#                           nvidia-smi, a STAND-IN of ours (modules/nvidia-smi): -L and --version over NVML
#   .cache/nodetools/lib/   libnvidia-ml.so.1 (GO_NVML_VERSION, modules/nvml-mock): NVML's C
#                           functions answered by go-nvml's NVML mock, for LD_LIBRARY_PATH
# Go's own caches (GOMODCACHE, GOCACHE) keep the downloaded modules and compiled packages, so a
# second build on the same machine (any clone) only links; a file whose stamp (versions, its
# module's files, this script) matches is kept. NODETOOLS_BIN and NODETOOLS_LIB move the two.
set -euo pipefail
cd "$(dirname "$0")"
top=$(cd ../.. && pwd)
# shellcheck disable=SC1091 # versions.env: plain NAME=value lines
. ./versions.env
out=${NODETOOLS_BIN:-$top/.cache/nodetools/bin}
lib=${NODETOOLS_LIB:-$top/.cache/nodetools/lib}
mkdir -p "$out" "$lib"
export GOTOOLCHAIN=local GOFLAGS="-mod=readonly -trimpath" CGO_ENABLED=1

command -v go >/dev/null || { echo "go not found on PATH: the tests' node tools are built with Go 1.26 (scripts/system-deps.sh)" >&2; exit 1; }
command -v gcc >/dev/null || { echo "gcc not found on PATH: nvidia-ctk and libnvidia-ml.so.1 are built with cgo (scripts/system-deps.sh installs gcc)" >&2; exit 1; }

# The toolkit built is the one the role installs: a pin moved in one place only is an error.
role_version=$(sed -n 's/^gpu_container_toolkit_version: *"\([^"]*\)".*/\1/p' "$top/roles/gpu_container_toolkit/defaults/main.yml")
if [ "v$role_version" != "$NVIDIA_CONTAINER_TOOLKIT_VERSION" ]; then
    echo "tests/nodetools/versions.env pins nvidia-container-toolkit $NVIDIA_CONTAINER_TOOLKIT_VERSION, but" \
        "gpu_container_toolkit_version is \"$role_version\" (roles/gpu_container_toolkit/defaults/main.yml):" \
        "set NVIDIA_CONTAINER_TOOLKIT_VERSION to v$role_version and run tests/nodetools/update-modules.sh" >&2
    exit 1
fi
./update-modules.sh --check

stamp() { cat versions.env build.sh "modules/$1"/* | sha256sum | cut -c1-16; }
fresh() {  # module, file built
    [ -f "$2" ] && [ "$(cat "$(dirname "$2")/.$(basename "$2").stamp" 2>/dev/null)" = "$(stamp "$1")" ]
}

toolkit=(nvidia-ctk nvidia-container-runtime nvidia-container-runtime-hook nvidia-cdi-hook)
fresh_toolkit=true
for program in "${toolkit[@]}"; do fresh container-toolkit "$out/$program" || fresh_toolkit=false; done
if ! $fresh_toolkit; then
    info=github.com/NVIDIA/nvidia-container-toolkit/internal/info
    extldflags="-Wl,--export-dynamic -Wl,--unresolved-symbols=ignore-in-object-files -Wl,-z,lazy"
    (cd modules/container-toolkit && /usr/bin/time -f "build ${toolkit[*]}: %e s wall, %U s user, %S s system, %M KiB peak" \
        go build -ldflags "-s -w '-extldflags=$extldflags' -X $info.version=${NVIDIA_CONTAINER_TOOLKIT_VERSION#v}" \
        -o "$out/" "${toolkit[@]/#/github.com/NVIDIA/nvidia-container-toolkit/cmd/}")
    for program in "${toolkit[@]}"; do stamp container-toolkit > "$out/.$program.stamp"; done
fi
"$out/nvidia-ctk" --version
"$out/nvidia-container-runtime" --version | sed -n 1p
"$out/nvidia-container-runtime-hook" --version | sed -n 1p
"$out/nvidia-cdi-hook" --version | sed -n 1p

# nvidia-smi's STAND-IN (modules/nvidia-smi/main.go): -L and --version over NVML through go-nvml,
# for the real nodes' GPU side (tests/realnode), where NVIDIA's container runtime mounts it into
# containers as it mounts the driver's nvidia-smi. NVIDIA's own nvidia-smi is a closed program that
# talks to the kernel driver, which no machine here has. go-nvml's NVML symbols are resolved when
# first called (-z lazy), as in nvidia-ctk.
if ! fresh nvidia-smi "$out/nvidia-smi"; then
    (cd modules/nvidia-smi && CGO_CFLAGS="-O2 -g -Wno-deprecated-declarations" \
        /usr/bin/time -f "build nvidia-smi (STAND-IN): %e s wall, %U s user, %S s system, %M KiB peak" \
        go build -ldflags "-s -w '-extldflags=-Wl,-z,lazy'" -o "$out/nvidia-smi" .)
    stamp nvidia-smi > "$out/.nvidia-smi.stamp"
fi

# libnvidia-ml.so.1: the bridge's C functions are checked against go-nvml's own nvml.h (from the
# module cache, never copied here); only NVML's names are exported (exports.map), and none may be
# left undefined, or ctypes (RTLD_NOW) could not open it.
if ! fresh nvml-mock "$lib/libnvidia-ml.so.1"; then
    nvml_dir=$(cd modules/nvml-mock && go mod download github.com/NVIDIA/go-nvml &&
        go list -m -f '{{.Dir}}' github.com/NVIDIA/go-nvml)
    mock=$PWD/modules/nvml-mock
    (cd modules/nvml-mock && CGO_CFLAGS="-O2 -g -I$nvml_dir/pkg/nvml -Wno-deprecated-declarations" \
        /usr/bin/time -f "build libnvidia-ml.so.1: %e s wall, %U s user, %S s system, %M KiB peak" \
        go build -buildmode=c-shared \
        -ldflags "-s -w '-extldflags=-Wl,-soname,libnvidia-ml.so.1 -Wl,--version-script=$mock/exports.map'" \
        -o "$lib/libnvidia-ml.so.1" .)
    rm -f "$lib/libnvidia-ml.so.h"  # the cgo export header go build writes beside the library
    if undefined=$(nm -D --undefined-only "$lib/libnvidia-ml.so.1" | grep -w 'nvml[A-Za-z0-9_]*'); then
        echo "libnvidia-ml.so.1 leaves NVML functions undefined (unmodelled.c is stale: run update-modules.sh):" >&2
        echo "$undefined" >&2
        exit 1
    fi
    stamp nvml-mock > "$lib/.libnvidia-ml.so.1.stamp"
fi
LD_LIBRARY_PATH=$lib "$out/nvidia-smi" --version | sed -n 1p
echo "libnvidia-ml.so.1: $(nm -D --defined-only "$lib/libnvidia-ml.so.1" | grep -c ' nvml') NVML functions, GPUs of go-nvml $GO_NVML_VERSION's mock"

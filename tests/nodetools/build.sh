#!/usr/bin/env bash
# Build NVIDIA's node-side tools for the tests at the pinned versions (tests/nodetools/versions.env)
# from the Go module proxy, through the wrapper module of tests/nodetools/modules/, into
#   .cache/nodetools/bin/   nvidia-ctk (NVIDIA_CONTAINER_TOOLKIT_VERSION)
# as NVIDIA's own Makefile builds it: with cgo (go-nvml loads libnvidia-ml.so.1 at run time) and
# its linker flags, the version stamped into internal/info. Go's own caches (GOMODCACHE, GOCACHE)
# keep the downloaded modules and compiled packages, so a second build on the same machine (any
# clone) only links; a binary whose stamp (versions, go.mod, go.sum, this script) matches is kept.
set -euo pipefail
cd "$(dirname "$0")"
top=$(cd ../.. && pwd)
# shellcheck disable=SC1091 # versions.env: plain NAME=value lines
. ./versions.env
out=${NODETOOLS_BIN:-$top/.cache/nodetools/bin}
mkdir -p "$out"
export GOTOOLCHAIN=local GOFLAGS="-mod=readonly -trimpath" CGO_ENABLED=1

command -v go >/dev/null || { echo "go not found on PATH: the tests' node tools are built with Go 1.26 (scripts/system-deps.sh)" >&2; exit 1; }
command -v gcc >/dev/null || { echo "gcc not found on PATH: nvidia-ctk is built with cgo (scripts/system-deps.sh installs gcc)" >&2; exit 1; }

# The toolkit built is the one the role installs: a pin moved in one place only is an error.
role_version=$(sed -n 's/^gpu_container_toolkit_version: *"\([^"]*\)".*/\1/p' "$top/roles/gpu_container_toolkit/defaults/main.yml")
if [ "v$role_version" != "$NVIDIA_CONTAINER_TOOLKIT_VERSION" ]; then
    echo "tests/nodetools/versions.env pins nvidia-container-toolkit $NVIDIA_CONTAINER_TOOLKIT_VERSION, but" \
        "gpu_container_toolkit_version is \"$role_version\" (roles/gpu_container_toolkit/defaults/main.yml):" \
        "set NVIDIA_CONTAINER_TOOLKIT_VERSION to v$role_version and run tests/nodetools/update-modules.sh" >&2
    exit 1
fi
./update-modules.sh --check

stamp() { cat versions.env "modules/$1/go.mod" "modules/$1/go.sum" build.sh | sha256sum | cut -c1-16; }
fresh() {  # module, binary
    [ -x "$out/$2" ] && [ "$(cat "$out/.$2.stamp" 2>/dev/null)" = "$(stamp "$1")" ]
}

if ! fresh container-toolkit nvidia-ctk; then
    info=github.com/NVIDIA/nvidia-container-toolkit/internal/info
    extldflags="-Wl,--export-dynamic -Wl,--unresolved-symbols=ignore-in-object-files -Wl,-z,lazy"
    (cd modules/container-toolkit && /usr/bin/time -f "build nvidia-ctk: %e s wall, %U s user, %S s system, %M KiB peak" \
        go build -ldflags "-s -w '-extldflags=$extldflags' -X $info.version=${NVIDIA_CONTAINER_TOOLKIT_VERSION#v}" \
        -o "$out/" github.com/NVIDIA/nvidia-container-toolkit/cmd/nvidia-ctk)
    stamp container-toolkit > "$out/.nvidia-ctk.stamp"
fi
"$out/nvidia-ctk" --version

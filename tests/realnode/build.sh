#!/usr/bin/env bash
# Build what the real nodes need beyond the control plane's binaries (tests/realnode/README.md):
#   .cache/realnode/images/pause.tar    the pause image, its program compiled (static) from the
#                                       pause.c of the pinned Kubernetes tag, tagged as kubeadm names it
#   .cache/realnode/images/busybox.tar  a workload image of Debian's busybox-static, with glibc
#   .cache/realnode/driver/             libcuda.so's STAND-IN and Debian's pynvml.py (below)
#   localhost/gpufleet-debian:13-node   the node image (Containerfile): Debian 13 with containerd,
#                                       runc and the CNI plugins
# kubelet and kubeadm come from tests/controlplane/build.sh. Each output carries a stamp of its
# inputs and is kept while the stamp matches.
set -euo pipefail
cd "$(dirname "$0")"
top=$(cd ../.. && pwd)
# shellcheck disable=SC1091 # versions.env: plain NAME=value lines
. ../controlplane/versions.env
# shellcheck disable=SC1091
. ./versions.env
out=${REALNODE_CACHE:-$top/.cache/realnode}
image=${REALNODE_IMAGE:-${MOLECULE_IMAGE_PREFIX:-localhost/gpufleet-debian}:13-node}
base=${MOLECULE_IMAGE_PREFIX:-localhost/gpufleet-debian}:13
mkdir -p "$out/images"
export GOTOOLCHAIN=local GOFLAGS=-mod=mod

# The pinned tag's build/pause: pause.c and the image tag its Makefile gives (kubeadm's constant).
kubernetes_dir=$(go mod download -json "k8s.io/kubernetes@$KUBERNETES_VERSION" \
    | python3 -c 'import json, sys; d = json.load(sys.stdin); print(d.get("Dir") or sys.exit(d.get("Error")))')
pause_tag=$(sed -n 's/^TAG ?= *//p' "$kubernetes_dir/build/pause/Makefile")
[ -n "$pause_tag" ] || { echo "no TAG in $kubernetes_dir/build/pause/Makefile" >&2; exit 1; }
pause_image=registry.k8s.io/pause:$pause_tag

stamp() { (echo "$@"; cat build.sh versions.env Containerfile) | sha256sum | cut -c1-16; }

# An image archive from a folder: FROM scratch, the folder's files, the given entry point; saved in
# the docker-archive format that `ctr images import` reads.
archive() {  # name, tag, folder, Containerfile lines...
    local name=$1 tag=$2 dir=$3
    shift 3
    printf '%s\n' "FROM scratch" "$@" > "$dir/Containerfile"
    podman build -q --no-cache -t "$tag" -f "$dir/Containerfile" "$dir" >/dev/null
    podman save -q --format docker-archive -o "$out/images/$name.tar.partial" "$tag"
    mv "$out/images/$name.tar.partial" "$out/images/$name.tar"
    echo "$out/images/$name.tar: $tag"
}

work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT

want=$(stamp "$KUBERNETES_VERSION" "$pause_tag")
if [ "$(cat "$out/images/.pause.stamp" 2>/dev/null)" != "$want" ] || [ ! -f "$out/images/pause.tar" ]; then
    mkdir -p "$work/pause"
    gcc -Os -Wall -Werror -static -DVERSION="v$pause_tag-gpufleet-test" -o "$work/pause/pause" "$kubernetes_dir/build/pause/linux/pause.c"
    "$work/pause/pause" -v
    archive pause "$pause_image" "$work/pause" "COPY pause /pause" "USER 65535:65535" 'ENTRYPOINT ["/pause"]'
    echo "$want" > "$out/images/.pause.stamp"
fi

# The workload image: busybox's applets, and glibc's run-time files from the Debian 13 image (as
# busybox's own glibc flavour carries them), so that a program the container runtime mounts into a
# container from the node (the NVML library, nvidia-smi) finds the C library it links against.
want=$(stamp "$BUSYBOX_DEB" "$(podman image inspect --format '{{.Id}}' "$base")")
if [ "$(cat "$out/images/.busybox.stamp" 2>/dev/null)" != "$want" ] || [ ! -f "$out/images/busybox.tar" ]; then
    mkdir -p "$work/busybox/rootfs/bin"
    python3 ../controlplane/fetch-deb.py "$BUSYBOX_DEB" "$BUSYBOX_DEB_SHA256" usr/bin/busybox "$work/busybox/rootfs/bin/busybox"
    for applet in sh echo cat ls sleep id ps grep head; do ln -s busybox "$work/busybox/rootfs/bin/$applet"; done
    podman run --rm "$base" sh -c 'dpkg -L libc6 | grep -E "^/usr/lib(64)?/.*[.]so|^/etc/ld.so" | tar -c --no-recursion -T - 2>/dev/null' \
        | tar -x -C "$work/busybox/rootfs"
    ln -s usr/lib "$work/busybox/rootfs/lib"
    ln -s usr/lib64 "$work/busybox/rootfs/lib64"
    version=$(basename "$BUSYBOX_DEB" | sed -n 's/^busybox-static_\([0-9.]*\)-.*/\1/p')
    archive busybox "localhost/gpufleet-test/busybox:$version-glibc" "$work/busybox" "COPY rootfs /" 'CMD ["/bin/sh"]'
    echo "$want" > "$out/images/.busybox.stamp"
fi

# libcuda.so's STAND-IN for the nodes' GPU side (realnode.py --gpus): an empty shared object (there
# is no CUDA here) under the name of the driver's, so that nvidia-ctk finds the driver's file set
# when it writes the CDI spec; nothing loads it.
mkdir -p "$out/driver"
gcc -shared -Wl,-soname,libcuda.so.1 -o "$out/driver/libcuda.so.STAND-IN" -x c /dev/null
# Debian's real pynvml (python3-pynvml's one module; the package itself would bring Debian's real
# libnvidia-ml1 in place of the GPU side's NVML), for nvml_facts' NVML path on those nodes.
if [ "$(cat "$out/driver/.pynvml.stamp" 2>/dev/null)" != "$PYNVML_DEB" ] || [ ! -f "$out/driver/pynvml.py" ]; then
    python3 ../controlplane/fetch-deb.py "$PYNVML_DEB" "$PYNVML_DEB_SHA256" usr/lib/python3/dist-packages/pynvml.py "$out/driver/pynvml.py"
    echo "$PYNVML_DEB" > "$out/driver/.pynvml.stamp"
fi

want=$(stamp "$pause_image" "$(podman image inspect --format '{{.Id}}' "$base")")
if [ "$(podman image inspect --format '{{ index .Labels "org.gpufleet.image-inputs" }}' "$image" 2>/dev/null)" != "$want" ]; then
    podman build -q --build-arg BASE="$base" --build-arg PAUSE_IMAGE="$pause_image" \
        --label "org.gpufleet.image-inputs=$want" -t "$image" -f Containerfile . >/dev/null
fi
podman run --rm "$image" sh -c 'containerd --version; runc --version | head -1; dpkg-query -W containernetworking-plugins'
echo "node image $image (inputs $want)"

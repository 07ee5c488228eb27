#!/usr/bin/env bash
# Build what the real nodes need beyond the control plane's binaries (tests/realnode/README.md):
#   .cache/realnode/images/pause.tar    the pause image, its program compiled (static) from the
#                                       pause.c of the pinned Kubernetes tag, tagged as kubeadm names it
#   .cache/realnode/images/busybox.tar  a workload image of Debian's busybox-static
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

want=$(stamp "$BUSYBOX_DEB")
if [ "$(cat "$out/images/.busybox.stamp" 2>/dev/null)" != "$want" ] || [ ! -f "$out/images/busybox.tar" ]; then
    mkdir -p "$work/busybox/bin"
    python3 ../controlplane/fetch-deb.py "$BUSYBOX_DEB" "$BUSYBOX_DEB_SHA256" usr/bin/busybox "$work/busybox/bin/busybox"
    for applet in sh echo cat ls sleep id ps; do ln -s busybox "$work/busybox/bin/$applet"; done
    version=$(basename "$BUSYBOX_DEB" | sed -n 's/^busybox-static_\([0-9.]*\)-.*/\1/p')
    archive busybox "localhost/gpufleet-test/busybox:$version" "$work/busybox" "COPY bin /bin" 'CMD ["/bin/sh"]'
    echo "$want" > "$out/images/.busybox.stamp"
fi

want=$(stamp "$pause_image" "$(podman image inspect --format '{{.Id}}' "$base")")
if [ "$(podman image inspect --format '{{ index .Labels "org.gpufleet.image-inputs" }}' "$image" 2>/dev/null)" != "$want" ]; then
    podman build -q --build-arg BASE="$base" --build-arg PAUSE_IMAGE="$pause_image" \
        --label "org.gpufleet.image-inputs=$want" -t "$image" -f Containerfile . >/dev/null
fi
podman run --rm "$image" sh -c 'containerd --version; runc --version | head -1; dpkg-query -W containernetworking-plugins'
echo "node image $image (inputs $want)"

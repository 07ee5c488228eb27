#!/usr/bin/env bash
# Build the test control plane's binaries at the pinned versions (tests/controlplane/versions.env)
# from the Go module proxy, through the wrapper modules of tests/controlplane/modules/, into
#   .cache/controlplane/bin/                kube-apiserver kube-controller-manager kube-scheduler
#                                           kubelet kubeadm (KUBERNETES_VERSION), kwok, etcd
#   .cache/controlplane/kubernetes-oldest/  kube-apiserver kube-controller-manager kube-scheduler
#                                           kubelet (KUBERNETES_OLDEST_VERSION)
# kubelet and kubeadm run on the real nodes of tests/realnode (kubeadm join), and molecule/gpu_kubelet's
# containers run kubelet to judge the flags and configuration gpu_kubelet gives it.
# Go's own caches (GOMODCACHE, GOCACHE) keep the downloaded modules and compiled packages, so a
# second build on the same machine (any clone) only links. A binary whose stamp (versions and
# go.sum) matches is kept as it is. etcd comes from Debian's archive (etcd-server of trixie).
set -euo pipefail
cd "$(dirname "$0")"
top=$(cd ../.. && pwd)
# shellcheck disable=SC1091 # versions.env: plain NAME=value lines
. ./versions.env
out=${CONTROLPLANE_BIN:-$top/.cache/controlplane/bin}
mkdir -p "$out"
export GOTOOLCHAIN=local GOFLAGS="-mod=readonly -trimpath" CGO_ENABLED=0

command -v go >/dev/null || { echo "go not found on PATH: the test control plane is built with Go 1.26 (scripts/system-deps.sh)" >&2; exit 1; }
./update-modules.sh --check

stamp() { cat versions.env "modules/$1/go.mod" "modules/$1/go.sum" build.sh | sha256sum | cut -c1-16; }
fresh() {  # module, binary[, folder]
    local dir=${3:-$out}
    [ -x "$dir/$2" ] && [ "$(cat "$dir/.$2.stamp" 2>/dev/null)" = "$(stamp "$1")" ]
}
timed() {  # name, command...: run it, print its wall and CPU seconds
    local name=$1; shift
    /usr/bin/time -f "build $name: %e s wall, %U s user, %S s system, %M KiB peak" "$@"
}

# kube-apiserver, kube-controller-manager, kube-scheduler and kubelet: stamped as upstream's
# hack/lib/version.sh stamps them, so that /version and --version say the pinned release. The
# newest release goes to $out with kwok and etcd; the oldest supported one to its own folder beside it.
build_kubernetes() {  # wrapper module, version, folder, binary...
    local module=$1 version=$2 dir=$3 minor ldflags pkg binary fresh=true
    shift 3
    mkdir -p "$dir"
    for binary in "$@"; do
        fresh "$module" "$binary" "$dir" || fresh=false
    done
    if ! $fresh; then
        minor=${version#v1.}; minor=${minor%%.*}
        ldflags="-s -w"
        for pkg in k8s.io/component-base/version k8s.io/client-go/pkg/version; do
            ldflags="$ldflags -X $pkg.gitVersion=$version -X $pkg.gitMajor=1 -X $pkg.gitMinor=$minor"
            ldflags="$ldflags -X $pkg.gitTreeState=clean -X $pkg.buildDate=1970-01-01T00:00:00Z"
        done
        (cd "modules/$module" && timed "kubernetes $version" go build -tags selinux,notest,grpcnotrace -ldflags "$ldflags" \
            -o "$dir/" "${@/#/k8s.io/kubernetes/cmd/}")
        for binary in "$@"; do stamp "$module" > "$dir/.$binary.stamp"; done
    fi
    "$dir/kube-apiserver" --version
    "$dir/kubelet" --version
}
# kubeadm only at the newest release: it joins the real nodes (tests/realnode) to the newest control
# plane. CONTROLPLANE_NEWEST_ONLY=1 (the demo's and a developer's quick build) leaves it out, with the
# oldest release below; make test builds all of it.
newest=(kube-apiserver kube-controller-manager kube-scheduler kubelet)
[ -n "${CONTROLPLANE_NEWEST_ONLY:-}" ] || newest+=(kubeadm)
build_kubernetes kubernetes "$KUBERNETES_VERSION" "$out" "${newest[@]}"
[ -n "${CONTROLPLANE_NEWEST_ONLY:-}" ] || build_kubernetes kubernetes-oldest "$KUBERNETES_OLDEST_VERSION" "$(dirname "$out")/kubernetes-oldest" \
    kube-apiserver kube-controller-manager kube-scheduler kubelet

if ! fresh kwok kwok; then
    (cd modules/kwok && timed kwok go build -ldflags "-s -w -X sigs.k8s.io/kwok/pkg/consts.Version=$KWOK_VERSION" -o "$out/" sigs.k8s.io/kwok/cmd/kwok)
    stamp kwok > "$out/.kwok.stamp"
fi
"$out/kwok" --version 2>/dev/null || true

# etcd: Debian's etcd-server, its binary taken out of the package (the machine's own Debian may
# be older than the one that ships an etcd the pinned Kubernetes accepts).
if ! [ -x "$out/etcd" ] || [ "$(cat "$out/.etcd.stamp" 2>/dev/null)" != "$ETCD_DEB" ]; then
    python3 "$top/tests/controlplane/fetch-deb.py" "$ETCD_DEB" "$ETCD_DEB_SHA256" usr/bin/etcd "$out/etcd"
    echo "$ETCD_DEB" > "$out/.etcd.stamp"
fi
# sed reads to the end: head would close the pipe early and etcd's SIGPIPE fail the pipeline
"$out/etcd" --version | sed -n 1p

# kwok's own Stages, from its module at the pinned version: the Nodes' initialisation and
# heartbeat with a Lease, the pods' start, completion (Jobs) and deletion.
stages=$(dirname "$out")/stages
rm -rf "$stages" && mkdir -p "$stages"
kwok_dir=$(cd modules/kwok && go list -m -f '{{.Dir}}' sigs.k8s.io/kwok)
for stage in node/fast/node-initialize node/heartbeat-with-lease/node-heartbeat-with-lease \
        pod/fast/pod-ready pod/fast/pod-complete pod/fast/pod-delete; do
    install -m 644 "$kwok_dir/kustomize/stage/$stage.yaml" "$stages/"
done
echo "kwok stages:" "$stages"/*.yaml

# kwok's CustomResourceDefinition of Logs: the kubelet log each fake container serves, written per
# pod by the GPU nodes' stand-in (gpunodes.py) while the control plane runs.
crds=$(dirname "$out")/crds
rm -rf "$crds" && mkdir -p "$crds"
install -m 644 "$kwok_dir/kustomize/crd/bases/kwok.x-k8s.io_logs.yaml" "$crds/"

#!/usr/bin/env bash
# Write the wrapper modules that build the test control plane's binaries from the Go module
# proxy, at the versions pinned in tests/controlplane/versions.env, and tidy them (go.sum).
#   tests/controlplane/update-modules.sh          write go.mod and go.sum of each wrapper
#   tests/controlplane/update-modules.sh --check  fail if a committed go.mod differs from what
#                                                 the pinned tags give (the build runs this)
# k8s.io/kubernetes cannot be `go install`ed: its go.mod requires every staging module
# (k8s.io/api, k8s.io/client-go, ...) at v0.0.0 and replaces each with a folder of its own tree.
# The wrapper replaces each with its published tag instead; the list is read from the pinned
# tag's own go.mod here, never written by hand.
set -euo pipefail
cd "$(dirname "$0")"
# shellcheck disable=SC1091 # versions.env: plain NAME=value lines
. ./versions.env
check=false
[ "${1:-}" = --check ] && check=true

export GOTOOLCHAIN=local GOFLAGS=-mod=mod

# The go directive, godebug line and staging modules of a Kubernetes tag's go.mod, read into
# go_directive, godebug and staging (and staging_version, the staging modules' matching v0.x tag).
read_tag() {
    local gomod
    gomod=$(go mod download -json "k8s.io/kubernetes@$1" \
        | python3 -c 'import json, sys; d = json.load(sys.stdin); print(d.get("GoMod") or sys.exit(d.get("Error")))')
    go_directive=$(sed -n 's/^go \([0-9.]*\)$/\1/p' "$gomod")
    godebug=$(sed -n 's/^godebug \(.*\)$/\1/p' "$gomod")
    staging=$(sed -n 's#^[[:space:]]*\(k8s.io/[a-z0-9-]*\) => \./staging/src/.*#\1#p' "$gomod")
    [ -n "$staging" ] || { echo "no staging replace directives found in $gomod" >&2; exit 1; }
    staging_version=v0.${1#v1.}
}

write_kubernetes() {  # module name, Kubernetes version (read_tag run for it)
    cat <<GOMOD
// A wrapper module that exists only to build kube-apiserver, kube-controller-manager,
// kube-scheduler, kubelet and kubeadm $2 for the tests, from the Go module proxy.
// Written by tests/controlplane/update-modules.sh from the tag's own go.mod: do not edit.
module gpufleet.test/controlplane/$1

go $go_directive

godebug $godebug

tool (
	k8s.io/kubernetes/cmd/kube-apiserver
	k8s.io/kubernetes/cmd/kube-controller-manager
	k8s.io/kubernetes/cmd/kube-scheduler
	k8s.io/kubernetes/cmd/kubeadm
	k8s.io/kubernetes/cmd/kubelet
)

require k8s.io/kubernetes $2

replace (
GOMOD
    for module in $staging; do printf '\t%s => %s %s\n' "$module" "$module" "$staging_version"; done
    echo ')'
}

write_kwok() {
    cat <<GOMOD
// A wrapper module that exists only to build kwok $KWOK_VERSION (the Nodes and pods of the
// test control plane) from the Go module proxy.
// Written by tests/controlplane/update-modules.sh: do not edit.
module gpufleet.test/controlplane/kwok

go $go_directive

tool sigs.k8s.io/kwok/cmd/kwok

require sigs.k8s.io/kwok $KWOK_VERSION
GOMOD
}

# What the pinned tags give, against a go.mod as go mod tidy left it: the go directive, the
# tools, the pinned module's version and every replace directive.
summary() {
    (cd "$1" && go mod edit -json) | python3 -c '
import json, sys
d = json.load(sys.stdin)
print("go", d["Go"])
for tool in d.get("Tool") or []:
    print("tool", tool["Path"])
for req in d.get("Require") or []:
    if req["Path"] in ("k8s.io/kubernetes", "sigs.k8s.io/kwok"):
        print("require", req["Path"], req["Version"])
for rep in d.get("Replace") or []:
    print("replace", rep["Old"]["Path"], rep["New"]["Path"], rep["New"].get("Version"))
for debug in d.get("Godebug") or []:
    print("godebug", debug["Key"], debug["Value"])
'
}

status=0
# kubernetes: the newest release (KUBERNETES_VERSION), which runs every test; kubernetes-oldest:
# the oldest release the collection supports (KUBERNETES_OLDEST_VERSION); kwok last, with the
# newest's go directive.
for name in kubernetes-oldest kubernetes kwok; do
    case $name in
        kubernetes-oldest) read_tag "$KUBERNETES_OLDEST_VERSION"; want=$(write_kubernetes "$name" "$KUBERNETES_OLDEST_VERSION") ;;
        kubernetes) read_tag "$KUBERNETES_VERSION"; want=$(write_kubernetes "$name" "$KUBERNETES_VERSION") ;;
        kwok) want=$(write_kwok) ;;
    esac
    mkdir -p modules/$name
    if $check; then
        scratch=$(mktemp -d)
        echo "$want" > "$scratch/go.mod"
        if ! diff -u <(summary "$scratch") <(summary modules/$name) >&2; then
            echo "modules/$name/go.mod is not what the pinned tags give: run tests/controlplane/update-modules.sh" >&2
            status=1
        fi
        rm -rf "$scratch"
        continue
    fi
    echo "$want" > modules/$name/go.mod
    (cd modules/$name && go mod tidy)
    echo "modules/$name: $(grep -c . modules/$name/go.sum) go.sum lines"
done
exit $status

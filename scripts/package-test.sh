#!/usr/bin/env bash
# What a user gets from `ansible-galaxy collection install`: build the
# collection, install the tarball into an empty collections path, then run
# gpufleet.nvidia.facts by its FQCN from there against a Debian test container. Checks that the tarball holds what it
# should and none of the development files.
set -euo pipefail
cd "$(dirname "$0")/.."

image=${MOLECULE_IMAGE_PREFIX:-localhost/gpufleet-debian}:12
node=gpufleet-package-test
work=$(mktemp -d)
trap 'podman rm -f "$node" >/dev/null 2>&1 || true; rm -rf "$work"' EXIT

ansible-galaxy collection build --output-path "$work/dist" .
tarball=$(ls "$work"/dist/gpufleet-nvidia-*.tar.gz)
version=$(sed -n 's/^version: *//p' galaxy.yml)
[ "$(basename "$tarball")" = "gpufleet-nvidia-$version.tar.gz" ] || { echo "unexpected tarball $tarball" >&2; exit 1; }

# The tarball: what users need, none of what only development needs.
listing=$(tar -tzf "$tarball")
for needed in MANIFEST.json FILES.json README.md meta/runtime.yml meta/execution-environment.yml \
              playbooks/site.yml playbooks/facts.yml playbooks/report.yml playbooks/upgrade_driver.yml \
              plugins/modules/nvml_facts.py roles/gpu_driver/meta/argument_specs.yml CHANGELOG.rst \
              requirements.txt playbooks/templates/fleet-report.html.j2 playbooks/templates/fleet-report.md.j2 \
              inventories/example/hosts.yml docs/docsite/extra-docs.yml docs/docsite/rst/getting_started.rst; do
    grep -qx "$needed" <<<"$listing" || { echo "the tarball lacks $needed" >&2; exit 1; }
done
if grep -E '^(\.venvs?|\.collections|\.ci|\.config|demo|demo-output|fleet-report|benchmarks|scripts|docs/site|tests/output|tests/image)/|(^|/)(\.cache|\.pytest_cache|__pycache__)/|\.pyc$' <<<"$listing"; then
    echo "the tarball holds development files (above)" >&2; exit 1
fi

# Install into an empty path. No Galaxy server is reachable here, so the one
# dependency (kubernetes.core) is not fetched: --no-deps, and the test's
# collections path gives the local copy of it beside the installed tarball.
ANSIBLE_COLLECTIONS_PATH="$work/collections" ansible-galaxy collection install --no-deps -p "$work/collections" "$tarball"
installed="$work/collections/ansible_collections/gpufleet/nvidia"
if [ ! -f "$installed/MANIFEST.json" ] || [ -L "$installed" ]; then
    echo "not installed as a copy at $installed" >&2; exit 1
fi

# What ansible-builder collects from the installed collection for an EE.
ansible-builder introspect "$work/collections" | tee "$work/introspect.txt"
grep -q "kubernetes>=" "$work/introspect.txt" || { echo "ansible-builder found no Python requirement of gpufleet.nvidia" >&2; exit 1; }

podman rm -f "$node" >/dev/null 2>&1 || true
podman run -d --name "$node" "$image" /sbin/init >/dev/null
cat > "$work/hosts.yml" <<YAML
gpu_nodes:
  hosts:
    $node:
      ansible_connection: containers.podman.podman
      ansible_python_interpreter: /usr/bin/python3
YAML

# Only the installed copy, kubernetes.core and the podman connection (for the
# test container) are on the collections path; run from an empty folder, by FQCN.
podman_path=$work/others
mkdir -p "$podman_path/ansible_collections/containers" "$podman_path/ansible_collections/kubernetes"
ln -sfn "$(cd .collections/ansible_collections/containers/podman && pwd)" "$podman_path/ansible_collections/containers/podman"
ln -sfn "$(cd .collections/ansible_collections/kubernetes/core && pwd)" "$podman_path/ansible_collections/kubernetes/core"
mkdir -p "$work/run"
(cd "$work/run" && ANSIBLE_COLLECTIONS_PATH="$work/collections:$podman_path" \
    ansible-playbook -i "$work/hosts.yml" gpufleet.nvidia.facts) | tee "$work/facts.log"
grep -q "state.*no_gpu" "$work/facts.log" || { echo "facts.yml did not report the container's real state (no_gpu)" >&2; exit 1; }
grep -Eq "ok=[1-9][0-9]* +changed=0 +unreachable=0 +failed=0" "$work/facts.log" || { echo "facts.yml changed or failed something" >&2; exit 1; }
echo "package test passed: $(basename "$tarball") installed and gpufleet.nvidia.facts ran from $installed"

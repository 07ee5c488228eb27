# gpufleet.nvidia: one entry point for set-up and tests.
#   make test   lint, sanity, unit tests and molecule scenarios (sets up what it needs)
#   make setup  only the set-up: venv, collections, podman config, test images
SHELL := /bin/bash
.SHELLFLAGS := -eu -o pipefail -c
.DEFAULT_GOAL := help

VENV        := $(CURDIR)/.venv
PYTHON312   ?= $(shell pyenv root 2>/dev/null)/versions/3.12.1/bin/python3
COLLECTIONS := $(CURDIR)/.collections
IMAGE_PREFIX := localhost/gpufleet-debian
SCENARIOS   ?= $(notdir $(patsubst %/molecule.yml,%,$(wildcard molecule/*/molecule.yml)))

export PATH := $(VENV)/bin:$(PATH)
export ANSIBLE_COLLECTIONS_PATH := $(COLLECTIONS)
export ANSIBLE_INJECT_FACT_VARS := false
export ANSIBLE_FORCE_COLOR := 0
export PY_COLORS := 0
export MOLECULE_IMAGE_PREFIX := $(IMAGE_PREFIX)
# Signed local mirrors of STAND-IN packages for molecule (tests/mirror/).
export GPUFLEET_MIRRORS := $(CURDIR)/.cache/mirrors

.PHONY: help setup venv collections podman images mirrors test lint sanity units molecule bench bench-driver clean

help:
	@echo "make test    run everything CI runs: lint, sanity, units, molecule"
	@echo "make setup   create .venv (Python 3.12), collections, podman config, Debian 12/13 images"
	@echo "make lint | sanity | units | molecule [SCENARIOS=nvml_facts] | bench | bench-driver"

setup: venv collections podman images mirrors

venv: $(VENV)/.installed

$(VENV)/.installed: requirements-dev.txt constraints-dev.txt
	@test -x "$(PYTHON312)" || { echo "Python 3.12 not found at $(PYTHON312); set PYTHON312=/path/to/python3.12" >&2; exit 1; }
	test -x $(VENV)/bin/python || "$(PYTHON312)" -m venv $(VENV)
	$(VENV)/bin/pip install --quiet --upgrade pip
	$(VENV)/bin/pip install --quiet -r requirements-dev.txt -c constraints-dev.txt
	touch $@

collections: venv
	scripts/install-collections.sh $(VENV)/bin/python $(COLLECTIONS)

podman:
	scripts/podman-setup.sh

images: podman
	scripts/build-image.sh bookworm $(IMAGE_PREFIX):12
	scripts/build-image.sh trixie $(IMAGE_PREFIX):13

mirrors:
	@for list in newer cuda toolkit; do \
		test -f $(GPUFLEET_MIRRORS)/$$list/fingerprint || \
		python3 tests/mirror/build-mirror.py --packages tests/mirror/packages-$$list.json \
			--out $(GPUFLEET_MIRRORS)/$$list --key-name "gpufleet stand-in $$list"; \
	done

test: setup
	$(MAKE) lint sanity units molecule

lint: venv collections
	ansible-lint --profile production --offline

sanity: venv
	scripts/ansible-test.sh sanity

units: venv
	scripts/ansible-test.sh units

molecule: venv collections mirrors
	@for scenario in $(SCENARIOS); do \
		echo "=== molecule test -s $$scenario"; \
		molecule test -s $$scenario || exit 1; \
	done

bench: venv
	$(VENV)/bin/python benchmarks/parse_fixtures.py

bench-driver: venv collections images
	$(VENV)/bin/python benchmarks/gpu_driver_converge.py

clean:
	rm -rf .build tests/output

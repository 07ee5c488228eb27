// The bridge that builds libnvidia-ml.so.1 for the tests: NVML's C functions answered by the
// NVML mock of github.com/NVIDIA/go-nvml v0.13.4-1 (tests/nodetools/README.md).
// go.mod written by tests/nodetools/update-modules.sh: do not edit.
module gpufleet.test/nodetools/nvml-mock

go 1.26.0

require (
	github.com/NVIDIA/go-nvml v0.13.4-1
	github.com/google/uuid v1.6.0
)

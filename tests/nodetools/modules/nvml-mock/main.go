// Command nvml-mock is built with -buildmode=c-shared into a libnvidia-ml.so.1 for the tests:
// NVML's C entry points, with the C ABI of the nvml.h that github.com/NVIDIA/go-nvml carries,
// answered by go-nvml's own NVML mock (pkg/nvml/mock, servers dgxa100, dgxh100, dgxh200,
// dgxb200) instead of a driver. pynvml (or any NVML client) loads it through LD_LIBRARY_PATH.
//
// What the mock models is answered from the mock; a call the mock does not model (a nil Func
// of its moq structs, which panics) answers NVML_ERROR_NOT_SUPPORTED, and so does every other
// function nvml.h declares (unmodelled.c). tests/nodetools/README.md lists what is modelled.
//
// Environment, read by the first nvmlInit of a process:
//
//	GPUFLEET_NVML_MOCK      dgxa100 | dgxh100 | dgxh200 | dgxb200 (default dgxh100)
//	GPUFLEET_NVML_MOCK_MIG  e.g. "0:1g.10gb,1g.10gb;3:7g.80gb": MIG mode on for GPUs 0 and 3,
//	                        with those GPU instances (one compute instance each)
package main

/*
#cgo CFLAGS: -DNVML_NO_UNVERSIONED_FUNC_DEFS=1
#include <stdlib.h>
#include <nvml.h>
*/
import "C"

import (
	"fmt"
	"os"
	"strings"
	"sync"
	"unsafe"

	"github.com/NVIDIA/go-nvml/pkg/nvml"
	"github.com/NVIDIA/go-nvml/pkg/nvml/mock/dgxa100"
	"github.com/NVIDIA/go-nvml/pkg/nvml/mock/dgxb200"
	"github.com/NVIDIA/go-nvml/pkg/nvml/mock/dgxh100"
	"github.com/NVIDIA/go-nvml/pkg/nvml/mock/dgxh200"
	"github.com/NVIDIA/go-nvml/pkg/nvml/mock/server"
)

func main() {}

// The mock servers, by the name GPUFLEET_NVML_MOCK gives.
var servers = map[string]func() *server.Server{
	"dgxa100": dgxa100.New,
	"dgxh100": dgxh100.New,
	"dgxh200": dgxh200.New,
	"dgxb200": dgxb200.New,
}

const defaultServer = "dgxh100"

// One lock for the whole library: every entry point runs under it, so the handle tables and
// the MIG devices built on demand need no other.
var (
	mu    sync.Mutex
	srv   *server.Server // built by the first successful nvmlInit, kept for the process
	inits int            // nvmlInit calls not yet matched by nvmlShutdown

	// Device handles are C blocks (C.calloc), one per device, never freed: the caller holds
	// them as opaque pointers, and NVML's own handles live as long as the process too. (The
	// nvml.h of go-nvml's pkg/nvml wraps the pointer in a one-member struct for cgo: the
	// same ABI as NVML's "typedef struct nvmlDevice_st* nvmlDevice_t".)
	handles  = map[uintptr]nvml.Device{}
	handleOf = map[nvml.Device]C.nvmlDevice_t{}
)

func logf(format string, args ...any) {
	fmt.Fprintf(os.Stderr, "gpufleet nvml-mock: "+format+"\n", args...)
}

// build makes the server that GPUFLEET_NVML_MOCK names, with stable UUIDs and the MIG layout
// of GPUFLEET_NVML_MOCK_MIG.
func build() (*server.Server, error) {
	kind := strings.TrimSpace(os.Getenv("GPUFLEET_NVML_MOCK"))
	if kind == "" {
		kind = defaultServer
	}
	newServer, ok := servers[kind]
	if !ok {
		return nil, fmt.Errorf("GPUFLEET_NVML_MOCK=%q: not one of dgxa100, dgxh100, dgxh200, dgxb200", kind)
	}
	s := newServer()
	for i, d := range s.Devices {
		dev := d.(*server.Device)
		// The mock draws a random UUID per device: two processes would see different GPUs.
		dev.UUID = stableUUID("GPU-", kind, "gpu", i)
		addMigDevices(kind, dev)
	}
	if err := applyMigLayout(s, os.Getenv("GPUFLEET_NVML_MOCK_MIG")); err != nil {
		return nil, fmt.Errorf("GPUFLEET_NVML_MOCK_MIG: %v", err)
	}
	return s, nil
}

// run calls f under the library's lock, before which only nvmlInit may come. A panic is
// answered, never passed on to the caller: a call the mock leaves nil (moq's "method is nil")
// is NVML_ERROR_NOT_SUPPORTED; any other panic is a fault of this library, told on stderr and
// answered NVML_ERROR_UNKNOWN.
func run(name string, f func() nvml.Return) (ret C.nvmlReturn_t) {
	mu.Lock()
	defer mu.Unlock()
	defer func() {
		if p := recover(); p != nil {
			if strings.Contains(fmt.Sprint(p), "method is nil") {
				ret = C.NVML_ERROR_NOT_SUPPORTED
				return
			}
			logf("%s: %v", name, p)
			ret = C.NVML_ERROR_UNKNOWN
		}
	}()
	if inits == 0 {
		return C.NVML_ERROR_UNINITIALIZED
	}
	return C.nvmlReturn_t(f())
}

// onDevice is run for a call on a device handle.
func onDevice(name string, handle C.nvmlDevice_t, f func(nvml.Device) nvml.Return) C.nvmlReturn_t {
	return run(name, func() nvml.Return {
		d, ok := handles[uintptr(unsafe.Pointer(handle.handle))]
		if !ok {
			return nvml.ERROR_INVALID_ARGUMENT
		}
		return f(d)
	})
}

// handleFor gives the C handle of a device, made on first use; the caller holds mu.
func handleFor(d nvml.Device) C.nvmlDevice_t {
	if h, ok := handleOf[d]; ok {
		return h
	}
	h := C.nvmlDevice_t{handle: (*C.struct_nvmlDevice_st)(C.calloc(1, 16))}
	handles[uintptr(unsafe.Pointer(h.handle))] = d
	handleOf[d] = h
	return h
}

// putString copies s and its terminating NUL into a caller's buffer of length bytes.
func putString(dst *C.char, length C.uint, s string) nvml.Return {
	if dst == nil {
		return nvml.ERROR_INVALID_ARGUMENT
	}
	if uint64(len(s))+1 > uint64(length) {
		return nvml.ERROR_INSUFFICIENT_SIZE
	}
	buf := unsafe.Slice((*byte)(unsafe.Pointer(dst)), len(s)+1)
	copy(buf, s)
	buf[len(s)] = 0
	return nvml.SUCCESS
}

// --------------------------------------------------------------------------------------------
// Initialisation and the system
// --------------------------------------------------------------------------------------------

func initialize() (ret C.nvmlReturn_t) {
	mu.Lock()
	defer mu.Unlock()
	defer func() {
		if p := recover(); p != nil {
			logf("nvmlInit: %v", p)
			ret = C.NVML_ERROR_UNKNOWN
		}
	}()
	if srv == nil {
		s, err := build()
		if err != nil {
			logf("%v", err)
			return C.NVML_ERROR_LIBRARY_NOT_FOUND
		}
		if ret := s.Init(); ret != nvml.SUCCESS {
			return C.nvmlReturn_t(ret)
		}
		srv = s
	}
	inits++
	return C.NVML_SUCCESS
}

//export nvmlInit_v2
func nvmlInit_v2() C.nvmlReturn_t { return initialize() }

//export nvmlInit
func nvmlInit() C.nvmlReturn_t { return initialize() }

// nvmlInitWithFlags: the flags (no GPUs, no attach) change nothing for a mock.
//
//export nvmlInitWithFlags
func nvmlInitWithFlags(flags C.uint) C.nvmlReturn_t { return initialize() }

//export nvmlShutdown
func nvmlShutdown() C.nvmlReturn_t {
	return run("nvmlShutdown", func() nvml.Return {
		inits--
		return nvml.SUCCESS
	})
}

//export nvmlSystemGetDriverVersion
func nvmlSystemGetDriverVersion(version *C.char, length C.uint) C.nvmlReturn_t {
	return run("nvmlSystemGetDriverVersion", func() nvml.Return {
		v, ret := srv.SystemGetDriverVersion()
		if ret != nvml.SUCCESS {
			return ret
		}
		return putString(version, length, v)
	})
}

//export nvmlSystemGetNVMLVersion
func nvmlSystemGetNVMLVersion(version *C.char, length C.uint) C.nvmlReturn_t {
	return run("nvmlSystemGetNVMLVersion", func() nvml.Return {
		v, ret := srv.SystemGetNVMLVersion()
		if ret != nvml.SUCCESS {
			return ret
		}
		return putString(version, length, v)
	})
}

func putInt(dst *C.int, get func() (int, nvml.Return)) nvml.Return {
	if dst == nil {
		return nvml.ERROR_INVALID_ARGUMENT
	}
	v, ret := get()
	if ret == nvml.SUCCESS {
		*dst = C.int(v)
	}
	return ret
}

func putUint(dst *C.uint, get func() (int, nvml.Return)) nvml.Return {
	if dst == nil {
		return nvml.ERROR_INVALID_ARGUMENT
	}
	v, ret := get()
	if ret == nvml.SUCCESS {
		*dst = C.uint(v)
	}
	return ret
}

//export nvmlSystemGetCudaDriverVersion
func nvmlSystemGetCudaDriverVersion(version *C.int) C.nvmlReturn_t {
	return run("nvmlSystemGetCudaDriverVersion", func() nvml.Return {
		return putInt(version, srv.SystemGetCudaDriverVersion)
	})
}

//export nvmlSystemGetCudaDriverVersion_v2
func nvmlSystemGetCudaDriverVersion_v2(version *C.int) C.nvmlReturn_t {
	return run("nvmlSystemGetCudaDriverVersion_v2", func() nvml.Return {
		return putInt(version, srv.SystemGetCudaDriverVersion_v2)
	})
}

func deviceCount(count *C.uint) C.nvmlReturn_t {
	return run("nvmlDeviceGetCount", func() nvml.Return {
		return putUint(count, srv.DeviceGetCount)
	})
}

//export nvmlDeviceGetCount_v2
func nvmlDeviceGetCount_v2(count *C.uint) C.nvmlReturn_t { return deviceCount(count) }

//export nvmlDeviceGetCount
func nvmlDeviceGetCount(count *C.uint) C.nvmlReturn_t { return deviceCount(count) }

func handleByIndex(index C.uint, device *C.nvmlDevice_t) C.nvmlReturn_t {
	return run("nvmlDeviceGetHandleByIndex", func() nvml.Return {
		if device == nil {
			return nvml.ERROR_INVALID_ARGUMENT
		}
		d, ret := srv.DeviceGetHandleByIndex(int(index))
		if ret == nvml.SUCCESS {
			*device = handleFor(d)
		}
		return ret
	})
}

//export nvmlDeviceGetHandleByIndex_v2
func nvmlDeviceGetHandleByIndex_v2(index C.uint, device *C.nvmlDevice_t) C.nvmlReturn_t {
	return handleByIndex(index, device)
}

//export nvmlDeviceGetHandleByIndex
func nvmlDeviceGetHandleByIndex(index C.uint, device *C.nvmlDevice_t) C.nvmlReturn_t {
	return handleByIndex(index, device)
}

// gpufleetHandleByUUID answers nvmlDeviceGetHandleByUUID (handlebyuuid.c): a GPU by the UUID the
// mock keeps for it (server.Device.UUID). NVIDIA's container toolkit looks GPUs up so from 1.18 on
// (its jit-cdi mode). A UUID no GPU has is NVML_ERROR_NOT_FOUND, as nvml.h says, where the mock
// answers ERROR_INVALID_ARGUMENT; MIG devices' UUIDs are not looked up.
//
//export gpufleetHandleByUUID
func gpufleetHandleByUUID(uuid *C.char, device *C.nvmlDevice_t) C.nvmlReturn_t {
	return run("nvmlDeviceGetHandleByUUID", func() nvml.Return {
		if uuid == nil || device == nil {
			return nvml.ERROR_INVALID_ARGUMENT
		}
		d, ret := srv.DeviceGetHandleByUUID(C.GoString(uuid))
		switch ret {
		case nvml.SUCCESS:
			*device = handleFor(d)
		case nvml.ERROR_INVALID_ARGUMENT:
			ret = nvml.ERROR_NOT_FOUND
		}
		return ret
	})
}

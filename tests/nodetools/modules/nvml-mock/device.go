package main

// The calls on a device handle: each asks the mock's device (or a MIG device, mig.go) and
// writes the answer into the caller's memory as nvml.h lays it out.

/*
#include <nvml.h>
*/
import "C"

import (
	"fmt"
	"unsafe"

	"github.com/NVIDIA/go-nvml/pkg/nvml"
	"github.com/NVIDIA/go-nvml/pkg/nvml/mock/server"
)

func deviceString(name string, handle C.nvmlDevice_t, dst *C.char, length C.uint,
	get func(nvml.Device) (string, nvml.Return)) C.nvmlReturn_t {
	return onDevice(name, handle, func(d nvml.Device) nvml.Return {
		s, ret := get(d)
		if ret != nvml.SUCCESS {
			return ret
		}
		return putString(dst, length, s)
	})
}

func deviceUint(name string, handle C.nvmlDevice_t, dst *C.uint, get func(nvml.Device) (int, nvml.Return)) C.nvmlReturn_t {
	return onDevice(name, handle, func(d nvml.Device) nvml.Return {
		return putUint(dst, func() (int, nvml.Return) { return get(d) })
	})
}

func deviceEnableState(name string, handle C.nvmlDevice_t, dst *C.nvmlEnableState_t,
	get func(nvml.Device) (nvml.EnableState, nvml.Return)) C.nvmlReturn_t {
	return onDevice(name, handle, func(d nvml.Device) nvml.Return {
		if dst == nil {
			return nvml.ERROR_INVALID_ARGUMENT
		}
		v, ret := get(d)
		if ret == nvml.SUCCESS {
			*dst = C.nvmlEnableState_t(v)
		}
		return ret
	})
}

//export nvmlDeviceGetName
func nvmlDeviceGetName(device C.nvmlDevice_t, name *C.char, length C.uint) C.nvmlReturn_t {
	return deviceString("nvmlDeviceGetName", device, name, length, nvml.Device.GetName)
}

//export nvmlDeviceGetUUID
func nvmlDeviceGetUUID(device C.nvmlDevice_t, uuid *C.char, length C.uint) C.nvmlReturn_t {
	return deviceString("nvmlDeviceGetUUID", device, uuid, length, nvml.Device.GetUUID)
}

//export nvmlDeviceGetSerial
func nvmlDeviceGetSerial(device C.nvmlDevice_t, serial *C.char, length C.uint) C.nvmlReturn_t {
	return deviceString("nvmlDeviceGetSerial", device, serial, length, nvml.Device.GetSerial)
}

//export nvmlDeviceGetVbiosVersion
func nvmlDeviceGetVbiosVersion(device C.nvmlDevice_t, version *C.char, length C.uint) C.nvmlReturn_t {
	return deviceString("nvmlDeviceGetVbiosVersion", device, version, length, nvml.Device.GetVbiosVersion)
}

//export nvmlDeviceGetMinorNumber
func nvmlDeviceGetMinorNumber(device C.nvmlDevice_t, minorNumber *C.uint) C.nvmlReturn_t {
	return deviceUint("nvmlDeviceGetMinorNumber", device, minorNumber, nvml.Device.GetMinorNumber)
}

//export nvmlDeviceGetIndex
func nvmlDeviceGetIndex(device C.nvmlDevice_t, index *C.uint) C.nvmlReturn_t {
	return deviceUint("nvmlDeviceGetIndex", device, index, nvml.Device.GetIndex)
}

//export nvmlDeviceGetMaxMigDeviceCount
func nvmlDeviceGetMaxMigDeviceCount(device C.nvmlDevice_t, count *C.uint) C.nvmlReturn_t {
	return deviceUint("nvmlDeviceGetMaxMigDeviceCount", device, count, nvml.Device.GetMaxMigDeviceCount)
}

//export nvmlDeviceGetGpuInstanceId
func nvmlDeviceGetGpuInstanceId(device C.nvmlDevice_t, id *C.uint) C.nvmlReturn_t {
	return deviceUint("nvmlDeviceGetGpuInstanceId", device, id, nvml.Device.GetGpuInstanceId)
}

//export nvmlDeviceGetComputeInstanceId
func nvmlDeviceGetComputeInstanceId(device C.nvmlDevice_t, id *C.uint) C.nvmlReturn_t {
	return deviceUint("nvmlDeviceGetComputeInstanceId", device, id, nvml.Device.GetComputeInstanceId)
}

//export nvmlDeviceGetEnforcedPowerLimit
func nvmlDeviceGetEnforcedPowerLimit(device C.nvmlDevice_t, limit *C.uint) C.nvmlReturn_t {
	return deviceUint("nvmlDeviceGetEnforcedPowerLimit", device, limit, func(d nvml.Device) (int, nvml.Return) {
		v, ret := d.GetEnforcedPowerLimit()
		return int(v), ret
	})
}

//export nvmlDeviceGetPersistenceMode
func nvmlDeviceGetPersistenceMode(device C.nvmlDevice_t, mode *C.nvmlEnableState_t) C.nvmlReturn_t {
	return deviceEnableState("nvmlDeviceGetPersistenceMode", device, mode, nvml.Device.GetPersistenceMode)
}

//export nvmlDeviceGetRetiredPagesPendingStatus
func nvmlDeviceGetRetiredPagesPendingStatus(device C.nvmlDevice_t, isPending *C.nvmlEnableState_t) C.nvmlReturn_t {
	return deviceEnableState("nvmlDeviceGetRetiredPagesPendingStatus", device, isPending,
		nvml.Device.GetRetiredPagesPendingStatus)
}

//export nvmlDeviceGetCudaComputeCapability
func nvmlDeviceGetCudaComputeCapability(device C.nvmlDevice_t, major *C.int, minor *C.int) C.nvmlReturn_t {
	return onDevice("nvmlDeviceGetCudaComputeCapability", device, func(d nvml.Device) nvml.Return {
		if major == nil || minor == nil {
			return nvml.ERROR_INVALID_ARGUMENT
		}
		maj, mnr, ret := d.GetCudaComputeCapability()
		if ret == nvml.SUCCESS {
			*major, *minor = C.int(maj), C.int(mnr)
		}
		return ret
	})
}

//export nvmlDeviceGetArchitecture
func nvmlDeviceGetArchitecture(device C.nvmlDevice_t, arch *C.nvmlDeviceArchitecture_t) C.nvmlReturn_t {
	return onDevice("nvmlDeviceGetArchitecture", device, func(d nvml.Device) nvml.Return {
		if arch == nil {
			return nvml.ERROR_INVALID_ARGUMENT
		}
		v, ret := d.GetArchitecture()
		if ret == nvml.SUCCESS {
			*arch = C.nvmlDeviceArchitecture_t(v)
		}
		return ret
	})
}

//export nvmlDeviceGetBrand
func nvmlDeviceGetBrand(device C.nvmlDevice_t, brand *C.nvmlBrandType_t) C.nvmlReturn_t {
	return onDevice("nvmlDeviceGetBrand", device, func(d nvml.Device) nvml.Return {
		if brand == nil {
			return nvml.ERROR_INVALID_ARGUMENT
		}
		v, ret := d.GetBrand()
		if ret == nvml.SUCCESS {
			*brand = C.nvmlBrandType_t(v)
		}
		return ret
	})
}

//export nvmlDeviceGetVirtualizationMode
func nvmlDeviceGetVirtualizationMode(device C.nvmlDevice_t, mode *C.nvmlGpuVirtualizationMode_t) C.nvmlReturn_t {
	return onDevice("nvmlDeviceGetVirtualizationMode", device, func(d nvml.Device) nvml.Return {
		if mode == nil {
			return nvml.ERROR_INVALID_ARGUMENT
		}
		v, ret := d.GetVirtualizationMode()
		if ret == nvml.SUCCESS {
			*mode = C.nvmlGpuVirtualizationMode_t(v)
		}
		return ret
	})
}

//export nvmlDeviceGetMemoryInfo
func nvmlDeviceGetMemoryInfo(device C.nvmlDevice_t, memory *C.nvmlMemory_t) C.nvmlReturn_t {
	return onDevice("nvmlDeviceGetMemoryInfo", device, func(d nvml.Device) nvml.Return {
		if memory == nil {
			return nvml.ERROR_INVALID_ARGUMENT
		}
		m, ret := d.GetMemoryInfo()
		if ret == nvml.SUCCESS {
			memory.total, memory.free, memory.used = C.ulonglong(m.Total), C.ulonglong(m.Free), C.ulonglong(m.Used)
		}
		return ret
	})
}

//export nvmlDeviceGetMemoryInfo_v2
func nvmlDeviceGetMemoryInfo_v2(device C.nvmlDevice_t, memory *C.nvmlMemory_v2_t) C.nvmlReturn_t {
	return onDevice("nvmlDeviceGetMemoryInfo_v2", device, func(d nvml.Device) nvml.Return {
		if memory == nil {
			return nvml.ERROR_INVALID_ARGUMENT
		}
		if memory.version != C.nvmlMemory_v2 {
			return nvml.ERROR_ARGUMENT_VERSION_MISMATCH
		}
		m, ret := d.GetMemoryInfo_v2()
		if ret == nvml.SUCCESS {
			memory.total, memory.reserved = C.ulonglong(m.Total), C.ulonglong(m.Reserved)
			memory.free, memory.used = C.ulonglong(m.Free), C.ulonglong(m.Used)
		}
		return ret
	})
}

// nvmlDeviceGetPciInfo_v3: the mock's GetPciInfo gives the PCI device id only; the bus id is
// the address the mock keeps for the device (server.Device.PciBusID, which
// DeviceGetHandleByPciBusId answers to), written in NVML's forms.
//
//export nvmlDeviceGetPciInfo_v3
func nvmlDeviceGetPciInfo_v3(device C.nvmlDevice_t, pci *C.nvmlPciInfo_t) C.nvmlReturn_t {
	return onDevice("nvmlDeviceGetPciInfo_v3", device, func(d nvml.Device) nvml.Return {
		if pci == nil {
			return nvml.ERROR_INVALID_ARGUMENT
		}
		p, ret := d.GetPciInfo()
		if ret != nvml.SUCCESS {
			return ret
		}
		if dev, ok := d.(*server.Device); ok && p.BusId[0] == 0 {
			var domain, bus, slot, function uint32
			if _, err := fmt.Sscanf(dev.PciBusID, "%x:%x:%x.%x", &domain, &bus, &slot, &function); err != nil {
				panic(fmt.Sprintf("the mock's PCI bus id %q: %v", dev.PciBusID, err))
			}
			p.Domain, p.Bus, p.Device = domain, bus, slot
			// nvml.h: "domain:bus:device.function" in upper-case hexadecimal
			putBytes(p.BusId[:], fmt.Sprintf("%08X:%02X:%02X.%X", domain, bus, slot, function))
			putBytes(p.BusIdLegacy[:], fmt.Sprintf("%04X:%02X:%02X.%X", domain, bus, slot, function))
		}
		*pci = C.nvmlPciInfo_t{
			domain:         C.uint(p.Domain),
			bus:            C.uint(p.Bus),
			device:         C.uint(p.Device),
			pciDeviceId:    C.uint(p.PciDeviceId),
			pciSubSystemId: C.uint(p.PciSubSystemId),
		}
		for i := range p.BusIdLegacy {
			pci.busIdLegacy[i] = C.char(p.BusIdLegacy[i])
		}
		for i := range p.BusId {
			pci.busId[i] = C.char(p.BusId[i])
		}
		return nvml.SUCCESS
	})
}

// putBytes writes s, NUL-terminated, into a fixed char array of nvml's Go structs.
func putBytes(dst []int8, s string) {
	n := copy(unsafe.Slice((*byte)(unsafe.Pointer(&dst[0])), len(dst)-1), s)
	dst[n] = 0
}

//export nvmlDeviceGetMigMode
func nvmlDeviceGetMigMode(device C.nvmlDevice_t, currentMode *C.uint, pendingMode *C.uint) C.nvmlReturn_t {
	return onDevice("nvmlDeviceGetMigMode", device, func(d nvml.Device) nvml.Return {
		if currentMode == nil || pendingMode == nil {
			return nvml.ERROR_INVALID_ARGUMENT
		}
		current, pending, ret := d.GetMigMode()
		if ret == nvml.SUCCESS {
			*currentMode, *pendingMode = C.uint(current), C.uint(pending)
		}
		return ret
	})
}

//export nvmlDeviceGetMigDeviceHandleByIndex
func nvmlDeviceGetMigDeviceHandleByIndex(device C.nvmlDevice_t, index C.uint, migDevice *C.nvmlDevice_t) C.nvmlReturn_t {
	return onDevice("nvmlDeviceGetMigDeviceHandleByIndex", device, func(d nvml.Device) nvml.Return {
		if migDevice == nil {
			return nvml.ERROR_INVALID_ARGUMENT
		}
		mig, ret := d.GetMigDeviceHandleByIndex(int(index))
		if ret == nvml.SUCCESS {
			*migDevice = handleFor(mig)
		}
		return ret
	})
}

//export nvmlDeviceGetAttributes_v2
func nvmlDeviceGetAttributes_v2(device C.nvmlDevice_t, attributes *C.nvmlDeviceAttributes_t) C.nvmlReturn_t {
	return onDevice("nvmlDeviceGetAttributes_v2", device, func(d nvml.Device) nvml.Return {
		if attributes == nil {
			return nvml.ERROR_INVALID_ARGUMENT
		}
		a, ret := d.GetAttributes()
		if ret == nvml.SUCCESS {
			*attributes = C.nvmlDeviceAttributes_t{
				multiprocessorCount:       C.uint(a.MultiprocessorCount),
				sharedCopyEngineCount:     C.uint(a.SharedCopyEngineCount),
				sharedDecoderCount:        C.uint(a.SharedDecoderCount),
				sharedEncoderCount:        C.uint(a.SharedEncoderCount),
				sharedJpegCount:           C.uint(a.SharedJpegCount),
				sharedOfaCount:            C.uint(a.SharedOfaCount),
				gpuInstanceSliceCount:     C.uint(a.GpuInstanceSliceCount),
				computeInstanceSliceCount: C.uint(a.ComputeInstanceSliceCount),
				memorySizeMB:              C.ulonglong(a.MemorySizeMB),
			}
		}
		return ret
	})
}

//export nvmlDeviceGetEccMode
func nvmlDeviceGetEccMode(device C.nvmlDevice_t, current *C.nvmlEnableState_t, pending *C.nvmlEnableState_t) C.nvmlReturn_t {
	return onDevice("nvmlDeviceGetEccMode", device, func(d nvml.Device) nvml.Return {
		if current == nil || pending == nil {
			return nvml.ERROR_INVALID_ARGUMENT
		}
		cur, pend, ret := d.GetEccMode()
		if ret == nvml.SUCCESS {
			*current, *pending = C.nvmlEnableState_t(cur), C.nvmlEnableState_t(pend)
		}
		return ret
	})
}

//export nvmlDeviceGetTotalEccErrors
func nvmlDeviceGetTotalEccErrors(device C.nvmlDevice_t, errorType C.nvmlMemoryErrorType_t,
	counterType C.nvmlEccCounterType_t, eccCounts *C.ulonglong) C.nvmlReturn_t {
	return onDevice("nvmlDeviceGetTotalEccErrors", device, func(d nvml.Device) nvml.Return {
		if eccCounts == nil {
			return nvml.ERROR_INVALID_ARGUMENT
		}
		n, ret := d.GetTotalEccErrors(nvml.MemoryErrorType(errorType), nvml.EccCounterType(counterType))
		if ret == nvml.SUCCESS {
			*eccCounts = C.ulonglong(n)
		}
		return ret
	})
}

// nvmlDeviceGetRetiredPages: a count too small for the pages (or no buffer) is told the count
// and NVML_ERROR_INSUFFICIENT_SIZE, as NVML does.
//
//export nvmlDeviceGetRetiredPages
func nvmlDeviceGetRetiredPages(device C.nvmlDevice_t, cause C.nvmlPageRetirementCause_t,
	pageCount *C.uint, addresses *C.ulonglong) C.nvmlReturn_t {
	return onDevice("nvmlDeviceGetRetiredPages", device, func(d nvml.Device) nvml.Return {
		if pageCount == nil {
			return nvml.ERROR_INVALID_ARGUMENT
		}
		pages, ret := d.GetRetiredPages(nvml.PageRetirementCause(cause))
		if ret != nvml.SUCCESS {
			return ret
		}
		room := int(*pageCount)
		*pageCount = C.uint(len(pages))
		if len(pages) == 0 {
			return nvml.SUCCESS
		}
		if addresses == nil || room < len(pages) {
			return nvml.ERROR_INSUFFICIENT_SIZE
		}
		out := unsafe.Slice(addresses, len(pages))
		for i, page := range pages {
			out[i] = C.ulonglong(page)
		}
		return nvml.SUCCESS
	})
}

//export nvmlDeviceGetRemappedRows
func nvmlDeviceGetRemappedRows(device C.nvmlDevice_t, corrRows *C.uint, uncRows *C.uint,
	isPending *C.uint, failureOccurred *C.uint) C.nvmlReturn_t {
	return onDevice("nvmlDeviceGetRemappedRows", device, func(d nvml.Device) nvml.Return {
		if corrRows == nil || uncRows == nil || isPending == nil || failureOccurred == nil {
			return nvml.ERROR_INVALID_ARGUMENT
		}
		corr, unc, pending, failure, ret := d.GetRemappedRows()
		if ret == nvml.SUCCESS {
			*corrRows, *uncRows = C.uint(corr), C.uint(unc)
			*isPending, *failureOccurred = cBool(pending), cBool(failure)
		}
		return ret
	})
}

func cBool(b bool) C.uint {
	if b {
		return 1
	}
	return 0
}

//export nvmlDeviceGetGpuFabricInfo
func nvmlDeviceGetGpuFabricInfo(device C.nvmlDevice_t, info *C.nvmlGpuFabricInfo_t) C.nvmlReturn_t {
	return onDevice("nvmlDeviceGetGpuFabricInfo", device, func(d nvml.Device) nvml.Return {
		if info == nil {
			return nvml.ERROR_INVALID_ARGUMENT
		}
		f, ret := d.GetGpuFabricInfo()
		if ret == nvml.SUCCESS {
			for i := range f.ClusterUuid {
				info.clusterUuid[i] = C.uchar(f.ClusterUuid[i])
			}
			info.status = C.nvmlReturn_t(f.Status)
			info.cliqueId = C.uint(f.CliqueId)
			info.state = C.nvmlGpuFabricState_t(f.State)
		}
		return ret
	})
}

// nvmlDeviceGetGpuFabricInfoV: go-nvml's interface answers the versioned fabric structs only
// through the real library (GpuFabricInfoHandler calls the C function itself), so a mock
// cannot model them.
//
//export nvmlDeviceGetGpuFabricInfoV
func nvmlDeviceGetGpuFabricInfoV(device C.nvmlDevice_t, info *C.nvmlGpuFabricInfoV_t) C.nvmlReturn_t {
	return onDevice("nvmlDeviceGetGpuFabricInfoV", device, func(nvml.Device) nvml.Return {
		return nvml.ERROR_NOT_SUPPORTED
	})
}

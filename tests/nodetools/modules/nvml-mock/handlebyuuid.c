// nvmlDeviceGetHandleByUUID, in C: nvml.h declares its UUID const char *, which a Go export cannot
// take; the lookup is Go's (gpufleetHandleByUUID, main.go), not exported from the library.
#include <nvml.h>

extern nvmlReturn_t gpufleetHandleByUUID(char *uuid, nvmlDevice_t *device);

nvmlReturn_t nvmlDeviceGetHandleByUUID(const char *uuid, nvmlDevice_t *device)
{
    return gpufleetHandleByUUID((char *)uuid, device);
}

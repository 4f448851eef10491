/* binding.c: opening the CUDA driver and nvJPEG (binding.h). */
#define _POSIX_C_SOURCE 200809L
#include "gpu/binding.h"

#include <dlfcn.h>
#include <pthread.h>
#include <stdio.h>
#include <string.h>

typedef struct {
  const char *name;
  size_t off;
  int optional;
} sym_entry;

#define CU_SYM(field, name) {name, offsetof(cuda_api, field), 0}
static const sym_entry cuda_syms[] = {
    CU_SYM(Init, "cuInit"),
    CU_SYM(DriverGetVersion, "cuDriverGetVersion"),
    CU_SYM(DeviceGetCount, "cuDeviceGetCount"),
    CU_SYM(DeviceGet, "cuDeviceGet"),
    CU_SYM(DeviceGetName, "cuDeviceGetName"),
    CU_SYM(DeviceGetAttribute, "cuDeviceGetAttribute"),
    CU_SYM(DeviceTotalMem, "cuDeviceTotalMem_v2"),
    CU_SYM(DevicePrimaryCtxRetain, "cuDevicePrimaryCtxRetain"),
    CU_SYM(DevicePrimaryCtxRelease, "cuDevicePrimaryCtxRelease_v2"),
    CU_SYM(CtxPushCurrent, "cuCtxPushCurrent_v2"),
    CU_SYM(CtxPopCurrent, "cuCtxPopCurrent_v2"),
    CU_SYM(CtxGetCurrent, "cuCtxGetCurrent"),
    CU_SYM(MemGetInfo, "cuMemGetInfo_v2"),
    CU_SYM(MemAlloc, "cuMemAlloc_v2"),
    CU_SYM(MemFree, "cuMemFree_v2"),
    CU_SYM(MemHostAlloc, "cuMemHostAlloc"),
    CU_SYM(MemFreeHost, "cuMemFreeHost"),
    CU_SYM(MemcpyHtoD, "cuMemcpyHtoD_v2"),
    CU_SYM(MemcpyDtoH, "cuMemcpyDtoH_v2"),
    CU_SYM(MemcpyHtoDAsync, "cuMemcpyHtoDAsync_v2"),
    CU_SYM(MemcpyDtoDAsync, "cuMemcpyDtoDAsync_v2"),
    CU_SYM(MemsetD8Async, "cuMemsetD8Async"),
    CU_SYM(StreamCreate, "cuStreamCreate"),
    CU_SYM(StreamCreateWithPriority, "cuStreamCreateWithPriority"),
    CU_SYM(CtxGetStreamPriorityRange, "cuCtxGetStreamPriorityRange"),
    CU_SYM(StreamDestroy, "cuStreamDestroy_v2"),
    CU_SYM(StreamSynchronize, "cuStreamSynchronize"),
    CU_SYM(StreamWaitEvent, "cuStreamWaitEvent"),
    CU_SYM(EventCreate, "cuEventCreate"),
    CU_SYM(EventDestroy, "cuEventDestroy_v2"),
    CU_SYM(EventRecord, "cuEventRecord"),
    CU_SYM(EventSynchronize, "cuEventSynchronize"),
    CU_SYM(EventElapsedTime, "cuEventElapsedTime"),
    CU_SYM(ModuleLoadData, "cuModuleLoadData"),
    CU_SYM(ModuleUnload, "cuModuleUnload"),
    CU_SYM(ModuleGetFunction, "cuModuleGetFunction"),
    CU_SYM(LaunchKernel, "cuLaunchKernel"),
    CU_SYM(GetErrorName, "cuGetErrorName"),
    CU_SYM(GetErrorString, "cuGetErrorString"),
};

#define NJ_SYM(field, name, opt) {name, offsetof(nvjpeg_api, field), opt}
static const sym_entry nvjpeg_syms[] = {
    NJ_SYM(GetProperty, "nvjpegGetProperty", 0),
    NJ_SYM(CreateEx, "nvjpegCreateEx", 0),
    NJ_SYM(Destroy, "nvjpegDestroy", 0),
    NJ_SYM(JpegStateCreate, "nvjpegJpegStateCreate", 0),
    NJ_SYM(JpegStateDestroy, "nvjpegJpegStateDestroy", 0),
    NJ_SYM(DecodeBatchedInitialize, "nvjpegDecodeBatchedInitialize", 0),
    NJ_SYM(DecodeBatchedEx, "nvjpegDecodeBatchedEx", 0),
    NJ_SYM(DecodeBatched, "nvjpegDecodeBatched", 0),
    NJ_SYM(DecodeBatchedSupportedEx, "nvjpegDecodeBatchedSupportedEx", 0),
    NJ_SYM(JpegStreamCreate, "nvjpegJpegStreamCreate", 0),
    NJ_SYM(JpegStreamDestroy, "nvjpegJpegStreamDestroy", 0),
    NJ_SYM(JpegStreamParse, "nvjpegJpegStreamParse", 0),
    NJ_SYM(JpegStreamParseHeader, "nvjpegJpegStreamParseHeader", 0),
    NJ_SYM(JpegStreamGetFrameDimensions, "nvjpegJpegStreamGetFrameDimensions", 0),
    NJ_SYM(JpegStreamGetComponentsNum, "nvjpegJpegStreamGetComponentsNum", 0),
    NJ_SYM(DecodeParamsCreate, "nvjpegDecodeParamsCreate", 0),
    NJ_SYM(DecodeParamsDestroy, "nvjpegDecodeParamsDestroy", 0),
    NJ_SYM(DecodeParamsSetOutputFormat, "nvjpegDecodeParamsSetOutputFormat", 0),
    NJ_SYM(DecodeParamsSetROI, "nvjpegDecodeParamsSetROI", 0),
    NJ_SYM(DecoderCreate, "nvjpegDecoderCreate", 0),
    NJ_SYM(DecoderDestroy, "nvjpegDecoderDestroy", 0),
    NJ_SYM(DecoderStateCreate, "nvjpegDecoderStateCreate", 0),
    NJ_SYM(DecoderJpegSupported, "nvjpegDecoderJpegSupported", 0),
    NJ_SYM(BufferPinnedCreate, "nvjpegBufferPinnedCreate", 0),
    NJ_SYM(BufferPinnedDestroy, "nvjpegBufferPinnedDestroy", 0),
    NJ_SYM(BufferDeviceCreate, "nvjpegBufferDeviceCreate", 0),
    NJ_SYM(BufferDeviceDestroy, "nvjpegBufferDeviceDestroy", 0),
    NJ_SYM(StateAttachPinnedBuffer, "nvjpegStateAttachPinnedBuffer", 0),
    NJ_SYM(StateAttachDeviceBuffer, "nvjpegStateAttachDeviceBuffer", 0),
    NJ_SYM(DecodeJpeg, "nvjpegDecodeJpeg", 0),
    NJ_SYM(DecodeBatchedPreAllocate, "nvjpegDecodeBatchedPreAllocate", 1),
    NJ_SYM(GetHardwareDecoderInfo, "nvjpegGetHardwareDecoderInfo", 1),
};

/* The libraries are opened once per process and never closed: other users
 * in the process (PyTorch) share them, and nvJPEG may keep threads. */
static pthread_once_t g_load_once = PTHREAD_ONCE_INIT;
cuda_api stk__cu;
nvjpeg_api stk__nj;
int stk__cu_ok, stk__nj_ok;
char stk__cu_why[256], stk__nj_why[256], stk__nj_lib[32];

static int load_syms(void *lib, const sym_entry *tab, size_t n, void *api, char *why, size_t wl) {
  for (size_t i = 0; i < n; i++) {
    void *p = dlsym(lib, tab[i].name);
    if (!p && !tab[i].optional) {
      snprintf(why, wl, "%s is missing", tab[i].name);
      return 0;
    }
    memcpy((char *)api + tab[i].off, &p, sizeof p);
  }
  return 1;
}

static void load_libs(void) {
  void *cu = dlopen("libcuda.so.1", RTLD_NOW | RTLD_LOCAL);
  if (!cu) {
    const char *e = dlerror();
    snprintf(stk__cu_why, sizeof stk__cu_why, "no NVIDIA driver: libcuda.so.1 cannot be opened (%s)",
             e ? e : "not found");
    cu = dlopen("libcuda.so", RTLD_NOW | RTLD_LOCAL);
  }
  if (!cu) {
  } else if (load_syms(cu, cuda_syms, sizeof cuda_syms / sizeof *cuda_syms, &stk__cu, stk__cu_why,
                       sizeof stk__cu_why)) {
    stk__cu_ok = 1;
  }
  static const char *names[] = {"libnvjpeg.so.13", "libnvjpeg.so.12", "libnvjpeg.so.11",
                                "libnvjpeg.so"};
  void *nj = NULL;
  for (size_t i = 0; i < sizeof names / sizeof *names && !nj; i++) {
    nj = dlopen(names[i], RTLD_NOW | RTLD_LOCAL);
    if (nj) snprintf(stk__nj_lib, sizeof stk__nj_lib, "%s", names[i]);
  }
  if (!nj) {
    snprintf(stk__nj_why, sizeof stk__nj_why, "libnvjpeg.so.* cannot be opened");
  } else if (load_syms(nj, nvjpeg_syms, sizeof nvjpeg_syms / sizeof *nvjpeg_syms, &stk__nj, stk__nj_why,
                       sizeof stk__nj_why)) {
    stk__nj_ok = 1;
  }
}

void stk__gpu_load(void) { pthread_once(&g_load_once, load_libs); }

const char *stk__cu_name(CUresult r) {
  const char *s = NULL;
  if (stk__cu_ok && stk__cu.GetErrorName(r, &s) != CUDA_SUCCESS) s = NULL;
  return s ? s : "CUDA_ERROR_UNKNOWN_CODE";
}

const char *stk__cu_str(CUresult r) {
  const char *s = NULL;
  if (stk__cu_ok && stk__cu.GetErrorString(r, &s) != CUDA_SUCCESS) s = NULL;
  return s ? s : "unknown error";
}

const char *stk__nj_status(nvjpegStatus_t s) {
  static const char *names[] = {"NVJPEG_STATUS_SUCCESS",
                                "NVJPEG_STATUS_NOT_INITIALIZED",
                                "NVJPEG_STATUS_INVALID_PARAMETER",
                                "NVJPEG_STATUS_BAD_JPEG",
                                "NVJPEG_STATUS_JPEG_NOT_SUPPORTED",
                                "NVJPEG_STATUS_ALLOCATOR_FAILURE",
                                "NVJPEG_STATUS_EXECUTION_FAILED",
                                "NVJPEG_STATUS_ARCH_MISMATCH",
                                "NVJPEG_STATUS_INTERNAL_ERROR",
                                "NVJPEG_STATUS_IMPLEMENTATION_NOT_SUPPORTED",
                                "NVJPEG_STATUS_INCOMPLETE_BITSTREAM"};
  return s >= 0 && s < (int)(sizeof names / sizeof *names) ? names[s] : "NVJPEG_STATUS_UNKNOWN";
}

/* Errors after which the context is unusable. */
int stk__cu_sticky(CUresult r) { return (r >= 700 && r <= 719 && r != 701) || r == 999; }


/* binding.c: opening the CUDA driver and nvJPEG (binding.h). */
#define _GNU_SOURCE /* dladdr: the path of the nvJPEG copy opened */
#include "gpu/binding.h"

#include <dirent.h>
#include <dlfcn.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
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
    CU_SYM(MemcpyDtoHAsync, "cuMemcpyDtoHAsync_v2"),
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
    CU_SYM(FuncGetAttribute, "cuFuncGetAttribute"),
    CU_SYM(FuncSetAttribute, "cuFuncSetAttribute"),
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
    NJ_SYM(JpegStreamGetChromaSubsampling, "nvjpegJpegStreamGetChromaSubsampling", 1),
    NJ_SYM(DecodeJpegHost, "nvjpegDecodeJpegHost", 1),
    NJ_SYM(DecodeJpegTransferToDevice, "nvjpegDecodeJpegTransferToDevice", 1),
    NJ_SYM(DecodeJpegDevice, "nvjpegDecodeJpegDevice", 1),
};

/* The libraries are opened once per process and never closed: other users
 * in the process (PyTorch) share them, and nvJPEG may keep threads. */
static pthread_once_t g_load_once = PTHREAD_ONCE_INIT;
cuda_api stk__cu;
nvjpeg_api stk__nj;
int stk__cu_ok, stk__nj_ok;
char stk__cu_why[256], stk__nj_why[512], stk__nj_lib[1024];

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

/* ---- nvJPEG: where it is looked for -------------------------------------
 * In this order, the first copy that opens, has every symbol and suits the
 * driver is used:
 *   1. STOKER_NVJPEG: one library file, named explicitly;
 *   2. the sonames libnvjpeg.so.13, .12, .11, .so on the dynamic loader's
 *      path (a copy already loaded, LD_LIBRARY_PATH, ldconfig: a system
 *      CUDA toolkit);
 *   3. the directories of STOKER_NVJPEG_PATH (':'-separated), each for those
 *      sonames and then any libnvjpeg*.so* (torchvision.libs' copy carries a
 *      hash in its name), newest name first. The Python package sets it on
 *      import to the nvidia-nvjpeg wheels' and torchvision's library folders
 *      of its environment (stoker/__init__.py), so a pip-only environment
 *      needs no LD_LIBRARY_PATH.
 * A copy newer than the driver (nvJPEG 13 on a CUDA 12 driver) is passed
 * over. stk__nj_lib holds the path of the copy used (`stoker info`). */
static const char *nj_sonames[] = {"libnvjpeg.so.13", "libnvjpeg.so.12", "libnvjpeg.so.11",
                                   "libnvjpeg.so"};

static int nj_try(const char *name, char *tried, size_t tl) {
  void *nj = dlopen(name, RTLD_NOW | RTLD_LOCAL);
  if (!nj) return 0;
  nvjpeg_api api;
  char why[256] = "";
  if (!load_syms(nj, nvjpeg_syms, sizeof nvjpeg_syms / sizeof *nvjpeg_syms, &api, why,
                 sizeof why)) {
    size_t at = strlen(tried);
    snprintf(tried + at, tl - at, "%s%s: %s", at ? "; " : "", name, why);
    dlclose(nj);
    return 0;
  }
  int major = 0, drv = 0;
  if (stk__cu_ok && api.GetProperty(NVJPEG_PROP_MAJOR, &major) == NVJPEG_STATUS_SUCCESS &&
      stk__cu.DriverGetVersion(&drv) == CUDA_SUCCESS && drv > 0 && major * 1000 > drv) {
    size_t at = strlen(tried);
    snprintf(tried + at, tl - at, "%s%s: nvJPEG %d needs a CUDA %d driver (this one: %d.%d)",
             at ? "; " : "", name, major, major, drv / 1000, drv % 1000 / 10);
    dlclose(nj);
    return 0;
  }
  stk__nj = api;
  Dl_info info;
  void *sym;
  memcpy(&sym, &api.GetProperty, sizeof sym);
  const char *path = dladdr(sym, &info) && info.dli_fname && info.dli_fname[0] == '/'
                         ? info.dli_fname
                         : name;
  snprintf(stk__nj_lib, sizeof stk__nj_lib, "%s", path);
  stk__nj_ok = 1;
  return 1;
}

static int nj_name_cmp(const void *a, const void *b) {
  return -strcmp(*(char *const *)a, *(char *const *)b); /* newest (.13 > .12) first */
}

/* One directory of STOKER_NVJPEG_PATH: the sonames, then any libnvjpeg*.so*. */
static int nj_try_dir(const char *dir, size_t dl, char *tried, size_t tl) {
  char path[1024];
  for (size_t i = 0; i < sizeof nj_sonames / sizeof *nj_sonames; i++) {
    snprintf(path, sizeof path, "%.*s/%s", (int)dl, dir, nj_sonames[i]);
    if (nj_try(path, tried, tl)) return 1;
  }
  snprintf(path, sizeof path, "%.*s", (int)dl, dir);
  DIR *d = opendir(path);
  if (!d) return 0;
  char *names[64];
  size_t n = 0;
  struct dirent *e;
  while ((e = readdir(d)) && n < sizeof names / sizeof *names) {
    if (strncmp(e->d_name, "libnvjpeg", 9) == 0 && strstr(e->d_name, ".so") &&
        (names[n] = strdup(e->d_name)))
      n++;
  }
  closedir(d);
  qsort(names, n, sizeof *names, nj_name_cmp);
  int ok = 0;
  for (size_t i = 0; i < n; i++) {
    snprintf(path, sizeof path, "%.*s/%s", (int)dl, dir, names[i]);
    if (!ok) ok = nj_try(path, tried, tl);
    free(names[i]);
  }
  return ok;
}

static void open_nvjpeg(void) {
  char tried[256] = "";
  const char *file = getenv("STOKER_NVJPEG");
  if (file && *file && nj_try(file, tried, sizeof tried)) return;
  for (size_t i = 0; i < sizeof nj_sonames / sizeof *nj_sonames; i++)
    if (nj_try(nj_sonames[i], tried, sizeof tried)) return;
  const char *dirs = getenv("STOKER_NVJPEG_PATH");
  for (const char *p = dirs; p && *p;) {
    const char *end = strchr(p, ':');
    size_t dl = end ? (size_t)(end - p) : strlen(p);
    if (dl && nj_try_dir(p, dl, tried, sizeof tried)) return;
    p = end ? end + 1 : p + dl;
  }
  /* the list of what was tried is cut to what fits the message */
  snprintf(stk__nj_why, sizeof stk__nj_why,
           "libnvjpeg.so.* cannot be opened%s%.150s%s (looked on the loader's path%s; pip install "
           "nvidia-nvjpeg-cu12, or a CUDA toolkit)",
           tried[0] ? " (" : "", tried, tried[0] ? ")" : "",
           dirs && *dirs ? " and in STOKER_NVJPEG_PATH" : "");
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
  open_nvjpeg();
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


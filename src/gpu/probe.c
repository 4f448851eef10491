/* probe.c: what `stoker info` says of the GPU side (stk__gpu_probe, gpu.h):
 * the kernels built in, the driver, each device, nvJPEG and its engines. It
 * opens no gpu object, so it works where none could be opened. */
#include <stdio.h>

#include "core/common.h"
#include "gpu/binding.h"
#include "gpu/gpu.h"

/* Without a driver: why, and which nvJPEG copy a GPU loader would use (its
 * version needs no driver). */
__attribute__((noinline)) static void no_driver_lines(char *out, size_t n) {
  int w = snprintf(out, n, "gpu: %s\n", stk__cu_why);
  if (w < 0 || (size_t)w >= n) return;
  out += w, n -= (size_t)w;
  if (stk__nj_ok) {
    int a = 0, b = 0, c = 0;
    stk__nj.GetProperty(NVJPEG_PROP_MAJOR, &a);
    stk__nj.GetProperty(NVJPEG_PROP_MINOR, &b);
    stk__nj.GetProperty(NVJPEG_PROP_PATCH, &c);
    snprintf(out, n, "nvjpeg: %d.%d.%d (%s)\n", a, b, c, stk__nj_lib);
  } else {
    snprintf(out, n, "nvjpeg: not available (%s)\n", stk__nj_why);
  }
}

int stk__gpu_probe(char *buf, size_t len) {
  if (!buf || !len) return STK_EINVAL;
  buf[0] = '\0';
  size_t at = 0;
#define OUT(...)                                                          \
  do {                                                                    \
    if (at < len) {                                                       \
      int w_ = snprintf(buf + at, len - at, __VA_ARGS__);                 \
      if (w_ > 0) at += (size_t)w_ < len - at ? (size_t)w_ : len - at - 1; \
    }                                                                     \
  } while (0)
  /* why there are no kernels: a CPU-only build asked for (cmake/gpu.cmake), or no nvcc */
#ifdef STK_GPU_OFF
  const char *no_kernels = "not built (a CPU-only build, as asked)";
#else
  const char *no_kernels = "not built (nvcc was not found at build time)";
#endif
  OUT("gpu kernels: %s\n", stk__gpu_built() ? "built (sm_80, sm_90, compute_90 PTX)"
                                         : no_kernels);
  stk__gpu_load();
  if (!stk__cu_ok) {
    if (at < len) no_driver_lines(buf + at, len - at);
    return STK_ENODEV;
  }
  CUresult r = stk__cu.Init(0);
  if (r != CUDA_SUCCESS) {
    OUT("gpu: the CUDA driver cannot start: %s (%s)\n", stk__cu_name(r), stk__cu_str(r));
    return STK_ENODEV;
  }
  int drv = 0, count = 0;
  stk__cu.DriverGetVersion(&drv);
  stk__cu.DeviceGetCount(&count);
  OUT("cuda driver: %d.%d, %d device%s\n", drv / 1000, drv % 1000 / 10, count, count == 1 ? "" : "s");
  int usable = 0;
  for (int i = 0; i < count; i++) {
    CUdevice d;
    char name[128] = "?";
    int maj = 0, min = 0, sms = 0;
    size_t mem = 0;
    if (stk__cu.DeviceGet(&d, i) != CUDA_SUCCESS) continue;
    stk__cu.DeviceGetName(name, sizeof name, d);
    stk__cu.DeviceGetAttribute(&maj, CU_DEVICE_ATTRIBUTE_CC_MAJOR, d);
    stk__cu.DeviceGetAttribute(&min, CU_DEVICE_ATTRIBUTE_CC_MINOR, d);
    stk__cu.DeviceGetAttribute(&sms, CU_DEVICE_ATTRIBUTE_MULTIPROCESSOR_COUNT, d);
    stk__cu.DeviceTotalMem(&mem, d);
    OUT("device %d: %s, compute capability %d.%d, %d SMs, %.1f GiB%s\n", i, name, maj, min, sms,
        (double)mem / (1 << 30), maj >= 8 ? "" : " (too old for stoker's kernels)");
    usable += maj >= 8;
  }
  if (!stk__nj_ok) {
    OUT("nvjpeg: not available (%s): JPEGs would be decoded on the CPU\n", stk__nj_why);
  } else {
    int a = 0, b = 0, c = 0;
    stk__nj.GetProperty(NVJPEG_PROP_MAJOR, &a);
    stk__nj.GetProperty(NVJPEG_PROP_MINOR, &b);
    stk__nj.GetProperty(NVJPEG_PROP_PATCH, &c);
    OUT("nvjpeg: %d.%d.%d (%s)\n", a, b, c, stk__nj_lib);
    CUdevice d;
    CUcontext ctx = NULL;
    if (count > 0 && stk__cu.DeviceGet(&d, 0) == CUDA_SUCCESS &&
        stk__cu.DevicePrimaryCtxRetain(&ctx, d) == CUDA_SUCCESS) {
      stk__cu.CtxPushCurrent(ctx);
      nvjpegHandle_t h = NULL;
      nvjpegStatus_t s = stk__nj.CreateEx(NVJPEG_BACKEND_HARDWARE, NULL, NULL, 0, &h);
      if (s == NVJPEG_STATUS_SUCCESS) {
        unsigned eng = 0, cores = 0;
        if (stk__nj.GetHardwareDecoderInfo) stk__nj.GetHardwareDecoderInfo(h, &eng, &cores);
        if (eng)
          OUT("nvjpeg hardware decoder (device 0): available, %u engines x %u cores\n", eng, cores);
        else
          OUT("nvjpeg hardware decoder (device 0): available\n");
        stk__nj.Destroy(h);
      } else {
        OUT("nvjpeg hardware decoder (device 0): not available (%s)\n", stk__nj_status(s));
      }
      stk__cu.CtxPopCurrent(NULL);
      stk__cu.DevicePrimaryCtxRelease(d);
    }
  }
#undef OUT
  return usable > 0 ? STK_OK : STK_ENODEV;
}

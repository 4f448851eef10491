/* info.c: version and build information. */
#include <stdio.h>

#include "codecs/codec.h"
#include "gpu/gpu.h"
#include "sources/net.h"
#include "stoker.h"

int stk_version(void) { return STK_VERSION; }

const char *stk_version_string(void) {
#define STK_STR2(x) #x
#define STK_STR(x) STK_STR2(x)
  return STK_STR(STK_VERSION_MAJOR) "." STK_STR(STK_VERSION_MINOR) "." STK_STR(STK_VERSION_PATCH);
}

/* The widest vector unit this CPU offers; libjpeg-turbo picks its SIMD
 * kernels the same way at run time. */
const char *stk_simd_level(void) {
#if defined(__x86_64__) || defined(__i386__)
  __builtin_cpu_init();
  if (__builtin_cpu_supports("avx512f")) return "avx512";
  if (__builtin_cpu_supports("avx2")) return "avx2";
  if (__builtin_cpu_supports("sse4.1")) return "sse4.1";
  return "sse2";
#elif defined(__aarch64__)
  return "neon";
#else
  return "none";
#endif
}

const char *stk_build_info(void) {
  static char buf[4096];
  char gpu[2048];
  stk__gpu_probe(gpu, sizeof gpu);
  snprintf(buf, sizeof buf,
           "stoker %s\n"
           "simd: %s\n"
           "jpeg: %s (baseline, progressive%s; greyscale, YCbCr, RGB, CMYK, YCCK; "
           "region decode, DCT scaling 1/2 1/4 1/8)\n"
           "png: %s (palette, greyscale, 16-bit, alpha -> 8-bit RGB)\n"
           "webp: %s (lossy, lossless, alpha dropped; an animation's first frame)\n"
           "tiff: %s (first page; strips, tiles; 1-16 bit grey, RGB, palette, CMYK, "
           "JPEG-coded YCbCr)\n"
           "bmp, ppm/pgm/pbm: built in (BMP 1-32 bit, no RLE; netpbm P1-P6)\n"
           "remote: %s (s3://, http://, https://, hf://)\n"
           "%s",
           stk_version_string(), stk_simd_level(), stk__jpeg_lib_version(),
           stk__jpeg_has_arith() ? ", arithmetic" : "", stk__png_lib_version(),
           stk__webp_lib_version(), stk__tiff_lib_version(), stk__net_version(), gpu);
  return buf;
}

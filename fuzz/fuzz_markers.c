/*
 * fuzz_markers.c: the JPEG marker scan of the GPU planner (markers.c).
 * Input: the file. The scan must never read outside the input (the
 * sanitizers see that), and since it is meant to read the markers as
 * libjpeg does, whenever both accept a file they must agree on what the
 * planner looks at: the number of components, the colour space (RGB or
 * not), and progressive or arithmetic coding from the frame marker.
 */
#include <setjmp.h>
#include <stdio.h>

#include <jpeglib.h>

#include "codecs/markers.h"
#include "fuzz.h"

typedef struct {
  struct jpeg_error_mgr pub;
  jmp_buf jb;
} quiet_err;

static void err_exit(j_common_ptr c) { longjmp(((quiet_err *)c->err)->jb, 1); }
static void err_emit(j_common_ptr c, int level) { (void)c, (void)level; }

/* libjpeg's reading of the header: 1 and cinfo filled, or 0. */
static int lib_header(struct jpeg_decompress_struct *cinfo, const uint8_t *d, size_t n) {
  if (n == 0) return 0; /* jpeg_mem_src refuses an empty buffer */
  jpeg_mem_src(cinfo, d, (unsigned long)n);
  return jpeg_read_header(cinfo, TRUE) == JPEG_HEADER_OK;
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
  stk__jpeg_markers jm;
  int ok = stk__jpeg_scan(data, size, &jm);
  fuzz_note("markers: %d sof %02x comps %d rgb %d eoi %d", ok, jm.sof, jm.comps, jm.rgb, jm.eoi);
  if (!ok) return 0;
  FUZZ_CHECK(size >= 4 && data[0] == 0xFF && data[1] == 0xD8);
  FUZZ_CHECK(jm.sof >= 0xC0 && jm.sof <= 0xCF && jm.sof != 0xC4 && jm.sof != 0xC8 &&
             jm.sof != 0xCC);
  FUZZ_CHECK(jm.comps >= 0 && jm.comps <= 255);
  FUZZ_CHECK(!jm.rgb || jm.comps == 3);
  FUZZ_CHECK(jm.eoi == 0 || jm.eoi == 1);

  static struct jpeg_decompress_struct cinfo;
  static quiet_err err;
  static int made;
  if (!made) {
    cinfo.err = jpeg_std_error(&err.pub);
    err.pub.error_exit = err_exit;
    err.pub.emit_message = err_emit;
    jpeg_create_decompress(&cinfo);
    made = 1;
  }
  if (setjmp(err.jb)) {
    jpeg_abort_decompress(&cinfo);
    return 0; /* libjpeg refuses the file: nothing to compare */
  }
  if (lib_header(&cinfo, data, size)) {
    FUZZ_CHECK(cinfo.num_components == jm.comps);
    if (jm.comps == 3) FUZZ_CHECK(jm.rgb == (cinfo.jpeg_color_space == JCS_RGB));
    int prog = jm.sof == 0xC2 || jm.sof == 0xC6 || jm.sof == 0xCA || jm.sof == 0xCE;
    FUZZ_CHECK(prog == (cinfo.progressive_mode != 0));
    FUZZ_CHECK((jm.sof >= 0xC9) == (cinfo.arith_code != 0));
  }
  jpeg_abort_decompress(&cinfo);
  return 0;
}

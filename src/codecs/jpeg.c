/*
 * jpeg.c: JPEG decoding with libjpeg(-turbo), whole image or one region,
 * optionally at a DCT scale of 1/2, 1/4 or 1/8. decoder.c drives it in two
 * steps (header, then pixels) so that it can apply its limits in between,
 * before libjpeg allocates anything for the image.
 */
#include <limits.h>
#include <setjmp.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <jpeglib.h>
#include <jerror.h>

#include "codecs/codec.h"
#include "core/common.h"

typedef struct {
  struct jpeg_error_mgr pub;
  jmp_buf jb;
} dec_error_mgr;

typedef struct stk__jpegdec {
  struct jpeg_decompress_struct cinfo; /* created once, reused for every image */
  dec_error_mgr err;
  const uint8_t *data;      /* the file being decoded */
  size_t size;
  stk__buf pixels;          /* decoded rows of the region */
  stk__buf rows;            /* row pointers into `pixels` */
  struct jpeg_progress_mgr progress;
  int too_many_scans;       /* set by the progress monitor before it bails out */
  uint64_t max_bytes;       /* libjpeg's budget per image; 0 = none */
} stk__jpegdec;

/* A progressive JPEG may hold any number of scans, and a crafted one with
 * thousands of tiny scans can keep a worker busy for minutes. Real files have
 * about ten; refuse more than this many. */
#define MAX_SCANS 500

static void dec_error_exit(j_common_ptr cinfo) {
  dec_error_mgr *e = (dec_error_mgr *)cinfo->err;
  longjmp(e->jb, 1);
}

/* libjpeg only warns about a file that ends early and pads the rest of the
 * image with grey; PIL refuses such files, so that warning is an error here.
 * Other warnings (corrupt entropy data that libjpeg recovers from) are
 * tolerated, as PIL tolerates them. Nothing is ever printed. */
static void dec_emit_message(j_common_ptr cinfo, int msg_level) {
  if (msg_level < 0) {
    if (cinfo->err->msg_code == JWRN_JPEG_EOF)
      dec_error_exit(cinfo);
    cinfo->err->num_warnings++;
  }
}

static void dec_output_message(j_common_ptr cinfo) { (void)cinfo; }

static void dec_progress(j_common_ptr cinfo) {
  if (!cinfo->is_decompressor) return;
  j_decompress_ptr d = (j_decompress_ptr)cinfo;
  if (d->input_scan_number > MAX_SCANS) {
    /* the decoder struct starts with cinfo, so this recovers it */
    ((stk__jpegdec *)(void *)d)->too_many_scans = 1;
    dec_error_exit(cinfo);
  }
}

static int lib_failure(stk__jpegdec *j, char *msg, size_t msglen) {
  struct jpeg_error_mgr *e = &j->err.pub;
  char text[JMSG_LENGTH_MAX];
  e->format_message((j_common_ptr)&j->cinfo, text);
  int code = e->msg_code == JERR_OUT_OF_MEMORY ? STK_ENOMEM : STK_EDECODE;
  jpeg_abort_decompress(&j->cinfo);
  /* libjpeg asks for backing store when its arrays exceed max_memory_to_use */
  if (e->msg_code == JERR_NO_BACKING_STORE)
    return stk__fail(msg, msglen, STK_ELIMIT,
                     "JPEG needs more memory than the decode's budget (max_decode_bytes=%llu)",
                     (unsigned long long)j->max_bytes);
  if (j->too_many_scans)
    return stk__fail(msg, msglen, STK_ELIMIT, "progressive JPEG with over %d scans", MAX_SCANS);
  if (e->msg_code == JWRN_JPEG_EOF)
    return stk__fail(msg, msglen, code, "truncated JPEG file (%s)", text);
  return stk__fail(msg, msglen, code, "JPEG: %s", text);
}

stk__jpegdec *stk__jpegdec_create(void) {
  /* volatile: the pointer must survive the longjmp back into this frame */
  stk__jpegdec *volatile j = calloc(1, sizeof *j);
  if (!j)
    return NULL;
  j->cinfo.err = jpeg_std_error(&j->err.pub);
  j->err.pub.error_exit = dec_error_exit;
  j->err.pub.emit_message = dec_emit_message;
  j->err.pub.output_message = dec_output_message;
  if (setjmp(j->err.jb)) {
    jpeg_destroy_decompress(&j->cinfo);
    free(j);
    return NULL;
  }
  jpeg_create_decompress(&j->cinfo);
  j->progress.progress_monitor = dec_progress;
  j->cinfo.progress = &j->progress;
  return j;
}

void stk__jpegdec_destroy(stk__jpegdec *j) {
  if (!j)
    return;
  jpeg_destroy_decompress(&j->cinfo);
  stk__buf_free(&j->pixels);
  stk__buf_free(&j->rows);
  free(j);
}

void stk__jpegdec_set_budget(stk__jpegdec *j, uint64_t max_bytes) { j->max_bytes = max_bytes; }

/* Bytes of the whole-image coefficient buffer libjpeg allocates at
 * jpeg_start_decompress() for a file of several scans (progressive, or
 * components in separate scans): 64 coefficients of 2 bytes per block of
 * every component, the image rounded up to whole MCUs; 0 for a single-scan
 * file, which is decoded one MCU row at a time. A 250-byte progressive
 * 13000x13000 file asks 1 GB of it. */
static uint64_t coef_buffer_bytes(const struct jpeg_decompress_struct *c) {
  if (!c->progressive_mode && c->comps_in_scan >= c->num_components)
    return 0;
  uint64_t total = 0;
  for (int i = 0; i < c->num_components; i++) {
    const jpeg_component_info *cp = &c->comp_info[i];
    uint64_t w = (cp->width_in_blocks + (JDIMENSION)cp->h_samp_factor - 1) /
                 (JDIMENSION)cp->h_samp_factor * (uint64_t)cp->h_samp_factor;
    uint64_t h = (cp->height_in_blocks + (JDIMENSION)cp->v_samp_factor - 1) /
                 (JDIMENSION)cp->v_samp_factor * (uint64_t)cp->v_samp_factor;
    total += w * h * sizeof(JBLOCK);
  }
  return total;
}

size_t stk__jpegdec_scratch_bytes(const stk__jpegdec *j) { return j->pixels.cap + j->rows.cap; }

void stk__jpegdec_abort(stk__jpegdec *j) { jpeg_abort_decompress(&j->cinfo); }

/* Reads the header. On success the handle waits for stk__jpegdec_decode()
 * or stk__jpegdec_abort(). */
int stk__jpegdec_header(stk__jpegdec *j, const uint8_t *buf, size_t n, stk__image_info *info,
                        char *msg, size_t msglen) {
  struct jpeg_decompress_struct *cinfo = &j->cinfo;
  if (setjmp(j->err.jb))
    return lib_failure(j, msg, msglen);
  /* libjpeg keeps the Huffman and quantisation tables of the last image in
   * the handle (for abbreviated streams), so a file missing one would be
   * decoded with the previous file's: its pixels, or whether it fails at
   * all, would depend on what the thread decoded before. Each image starts
   * from a new handle (a few small allocations). */
  jpeg_destroy_decompress(cinfo);
  jpeg_create_decompress(cinfo);
  cinfo->progress = &j->progress;
  /* The backstop: libjpeg's arrays beyond this would need backing store,
   * which this build of libjpeg refuses (JERR_NO_BACKING_STORE). */
  if (j->max_bytes)
    cinfo->mem->max_memory_to_use = j->max_bytes < LONG_MAX ? (long)j->max_bytes : LONG_MAX;
  j->err.pub.num_warnings = 0;
  j->too_many_scans = 0;
  j->data = buf;
  j->size = n;
  jpeg_mem_src(cinfo, buf, (unsigned long)n);
  jpeg_read_header(cinfo, TRUE);
  info->width = (int)cinfo->image_width;
  info->height = (int)cinfo->image_height;
  info->format = STK__FMT_JPEG;
  info->components = cinfo->num_components;
  info->progressive = cinfo->progressive_mode ? 1 : 0;
  /* Refused from the header, before libjpeg allocates it (it would take
   * the memory even for a file whose scans hold nothing). */
  uint64_t coef = coef_buffer_bytes(cinfo);
  info->work_bytes = coef;
  if (j->max_bytes && coef > j->max_bytes) {
    jpeg_abort_decompress(cinfo);
    return stk__fail(msg, msglen, STK_ELIMIT,
                     "%s %dx%d JPEG needs %llu MiB of coefficient buffers, over the decode's "
                     "budget of %llu MiB (max_decode_bytes)",
                     cinfo->progressive_mode ? "progressive" : "multi-scan", info->width,
                     info->height, (unsigned long long)(coef >> 20),
                     (unsigned long long)(j->max_bytes >> 20));
  }
  return STK_OK;
}

/* jpeg_crop_scanline() sizes every component's upsampling from the sampling
 * factors alone. When DCT scaling decodes a chroma component at a larger
 * block size (e.g. 4:1:0 at 1/2), its real upsampling ratio differs and a
 * cropped decode comes out wrong, so such images are decoded full width. A
 * component decoded at the output size is unaffected. */
/* The libjpeg API of version 7 and later (Ubuntu's libjpeg-turbo8) splits
 * the scaled block size into horizontal and vertical; libjpeg-turbo scales
 * both alike, so the horizontal one stands for both. */
#if JPEG_LIB_VERSION >= 70
#define MIN_SCALED(ci) ((ci)->min_DCT_h_scaled_size)
#define COMP_SCALED(cp) ((cp)->DCT_h_scaled_size)
#else
#define MIN_SCALED(ci) ((ci)->min_DCT_scaled_size)
#define COMP_SCALED(cp) ((cp)->DCT_scaled_size)
#endif

static int crop_is_exact(const struct jpeg_decompress_struct *cinfo) {
  int min = MIN_SCALED(cinfo);
  for (int c = 0; c < cinfo->num_components; c++) {
    const jpeg_component_info *comp = &cinfo->comp_info[c];
    int s = COMP_SCALED(comp);
    if (s == min)
      continue;
    if (comp->h_samp_factor * s != cinfo->max_h_samp_factor * min ||
        comp->v_samp_factor * s != cinfo->max_v_samp_factor * min)
      return 0;
  }
  return 1;
}

/* True when an end-of-image marker lies in data[from, size). Entropy-coded
 * data cannot contain FF D9 (a literal FF is stuffed as FF 00), so any FF D9
 * after the start of the scan is the marker or follows it. */
static int has_eoi(const uint8_t *data, size_t from, size_t size) {
  for (size_t i = size; i >= from + 2; i--)
    if (data[i - 2] == 0xFF && data[i - 1] == 0xD9)
      return 1;
  return 0;
}

/* Converts n pixels of CMYK in place to RGB (3 bytes each, from the start).
 * PIL reads every CMYK JPEG as Adobe-inverted ("CMYK;I"), then its
 * convert("RGB") computes r = (255-k) - (255-k)*c/255 with c, k the ink
 * amounts; here the samples are still inverted, so 255-k is the stored k. */
static void cmyk_to_rgb(uint8_t *p, int n) {
  for (int i = 0; i < n; i++) {
    const uint8_t *s = p + 4 * i;
    int nk = s[3];
    uint8_t rgb[3];
    for (int c = 0; c < 3; c++) {
      int t = (255 - s[c]) * nk + 128; /* PIL's MULDIV255 */
      rgb[c] = (uint8_t)(nk - (((t >> 8) + t) >> 8));
    }
    memcpy(p + 3 * i, rgb, 3);
  }
}

/* The columns a cropped decode of [x0, x1) of W reads: *xoff and *cw.
 * Fancy upsampling of horizontally subsampled chroma reads one chroma
 * sample beyond each output pixel, but a cropped decode treats the crop's
 * edges as image edges: widening the crop by one pixel each side gives
 * every pixel of the region its real neighbours. A crop narrower than two
 * chroma samples also makes libjpeg fall back to plain replication, so a
 * crop spans at least three. Rows need no margin: jpeg_skip_scanlines()
 * keeps the context rows. (libjpeg's errors jump to the caller's setjmp.) */
static void crop_columns(struct jpeg_decompress_struct *cinfo, int x0, int x1, int W,
                         JDIMENSION *xoff, JDIMENSION *cw) {
  int hs = cinfo->max_h_samp_factor;
  int m = hs > 1 ? 1 : 0;
  /* A progressive file whose coefficients are incomplete is decoded with
   * block smoothing (jdcoefct.c), which reads the blocks up to two away on
   * each side and takes a cropped decode's edge for the image's: two
   * blocks of the coarsest component more each side keep those reads
   * inside the image's real blocks. */
  if (cinfo->progressive_mode)
    m += 2 * hs * MIN_SCALED(cinfo);
  int a0 = x0 > m ? x0 - m : 0;
  int a1 = x1 + m < W ? x1 + m : W;
  if (a1 - a0 < 3 * hs) {
    a1 = a0 + 3 * hs < W ? a0 + 3 * hs : W;
    a0 = a1 - 3 * hs > 0 ? a1 - 3 * hs : 0;
  }
  if (a1 - a0 < W) {
    *xoff = (JDIMENSION)a0;
    *cw = (JDIMENSION)(a1 - a0);
    jpeg_crop_scanline(cinfo, xoff, cw); /* moves xoff down to an iMCU edge */
  }
}

/* Decodes the region `want` of the image whose header was just read. */
int stk__jpegdec_decode(stk__jpegdec *j, const stk__rect *want, int d, stk__region *out,
                        char *msg, size_t msglen) {
  struct jpeg_decompress_struct *cinfo = &j->cinfo;
  if (setjmp(j->err.jb))
    return lib_failure(j, msg, msglen);

  int cmyk = cinfo->jpeg_color_space == JCS_CMYK || cinfo->jpeg_color_space == JCS_YCCK;
  cinfo->out_color_space = cmyk ? JCS_CMYK : JCS_RGB;
  cinfo->scale_num = 1;
  cinfo->scale_denom = (unsigned)d;
  jpeg_start_decompress(cinfo);

  /* Where the scan data starts, for the end-of-image check below. A
   * single-scan decode has consumed nothing beyond the scan header yet. */
  size_t scan_start = j->size - cinfo->src->bytes_in_buffer;
  int W = (int)cinfo->output_width, H = (int)cinfo->output_height;
  int x0 = 0, y0 = 0, x1 = W, y1 = H;
  if (want) {
    x0 = want->x / d;
    y0 = want->y / d;
    x1 = (want->x + want->w + d - 1) / d;
    y1 = (want->y + want->h + d - 1) / d;
    if (x1 > W)
      x1 = W;
    if (y1 > H)
      y1 = H;
  }

  JDIMENSION xoff = 0, cw = (JDIMENSION)W;
  if (want && crop_is_exact(cinfo)) crop_columns(cinfo, x0, x1, W, &xoff, &cw);

  int comps = cmyk ? 4 : 3;
  size_t stride = (size_t)cw * (size_t)comps;
  int rows = y1 - y0;
  if (stk__buf_reserve(&j->pixels, stride * (size_t)rows) ||
      stk__buf_reserve(&j->rows, sizeof(JSAMPROW) * (size_t)rows)) {
    jpeg_abort_decompress(cinfo);
    return stk__fail(msg, msglen, STK_ENOMEM, "out of memory for a %dx%d region", (int)cw, rows);
  }
  JSAMPROW *rp = j->rows.p;
  for (int r = 0; r < rows; r++)
    rp[r] = (JSAMPROW)j->pixels.p + (size_t)r * stride;

  if (y0 > 0)
    jpeg_skip_scanlines(cinfo, (JDIMENSION)y0);
  while (cinfo->output_scanline < (JDIMENSION)y1) {
    int r = (int)cinfo->output_scanline - y0;
    jpeg_read_scanlines(cinfo, rp + r, (JDIMENSION)(y1 - (int)cinfo->output_scanline));
  }

  /* Without an end-of-image marker the file was cut short somewhere libjpeg
   * did not need to read (below the region, or just the marker itself). */
  if (!jpeg_input_complete(cinfo) && !has_eoi(j->data, scan_start, j->size)) {
    jpeg_abort_decompress(cinfo);
    return stk__fail(msg, msglen, STK_EDECODE, "truncated JPEG file (no end-of-image marker)");
  }
  jpeg_abort_decompress(cinfo);

  uint8_t *first = j->pixels.p;
  if (cmyk)
    for (int r = 0; r < rows; r++)
      cmyk_to_rgb(first + (size_t)r * stride, (int)cw);
  out->pixels = first + (size_t)(x0 - (int)xoff) * 3;
  out->stride = stride;
  out->x = x0;
  out->y = y0;
  out->w = x1 - x0;
  out->h = rows;
  out->scale_denom = d;
  out->image_w = W;
  out->image_h = H;
  return STK_OK;
}

int stk__jpeg_has_arith(void) {
#if defined(D_ARITH_CODING_SUPPORTED)
  return 1;
#else
  return 0;
#endif
}

#define STK__STR2(x) #x
#define STK__STR(x) STK__STR2(x)

const char *stk__jpeg_lib_version(void) {
#if defined(LIBJPEG_TURBO_VERSION)
  return "libjpeg-turbo " STK__STR(LIBJPEG_TURBO_VERSION);
#else
  return "libjpeg " STK__STR(JPEG_LIB_VERSION);
#endif
}

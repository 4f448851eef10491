/*
 * encode.c: JPEG (libjpeg) and PNG (libspng) writers into memory.
 */
#include "codecs/encode.h"

#include <setjmp.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <jpeglib.h>
#include <jerror.h>
#include <spng.h>

#include "stoker.h"

void stk__jpeg_enc_defaults(stk__jpeg_enc_opts *o) {
  memset(o, 0, sizeof *o);
  o->quality = 90;
  o->h_samp = 2;
  o->v_samp = 2;
  o->color = STK__JCOLOR_YCC;
}

/* ---- JPEG ---------------------------------------------------------------- */

typedef struct {
  struct jpeg_error_mgr pub;
  jmp_buf jb;
} enc_error_mgr;

static void enc_error_exit(j_common_ptr cinfo) {
  enc_error_mgr *e = (enc_error_mgr *)cinfo->err;
  longjmp(e->jb, 1);
}

/* The encoder never prints: its only warnings are about odd parameters. */
static void enc_output_message(j_common_ptr cinfo) { (void)cinfo; }

static int valid_samp(int f) { return f == 1 || f == 2 || f == 4; }

/* Everything libjpeg writes to lives here, outside the frame that calls
 * setjmp, so nothing needs to be volatile. */
typedef struct {
  struct jpeg_compress_struct cinfo;
  enc_error_mgr err;
  unsigned char *buf; /* jpeg_mem_dest's output */
  unsigned long len;
  uint8_t *row;       /* one inverted row, CMYK only */
} enc_job;

static int jpeg_compress_job(enc_job *j, const uint8_t *pixels, int w, int h,
                             const stk__jpeg_enc_opts *o, int channels, J_COLOR_SPACE in_space) {
  struct jpeg_compress_struct *cinfo = &j->cinfo;
  cinfo->err = jpeg_std_error(&j->err.pub);
  j->err.pub.error_exit = enc_error_exit;
  j->err.pub.output_message = enc_output_message;
  if (setjmp(j->err.jb))
    return j->err.pub.msg_code == JERR_OUT_OF_MEMORY ? STK_ENOMEM : STK_EDECODE;
  jpeg_create_compress(cinfo);
  jpeg_mem_dest(cinfo, &j->buf, &j->len);

  cinfo->image_width = (JDIMENSION)w;
  cinfo->image_height = (JDIMENSION)h;
  cinfo->input_components = channels;
  cinfo->in_color_space = in_space;
  jpeg_set_defaults(cinfo);
  jpeg_set_quality(cinfo, o->quality, TRUE);

  switch (o->color) {
  case STK__JCOLOR_YCC:
    cinfo->comp_info[0].h_samp_factor = o->h_samp;
    cinfo->comp_info[0].v_samp_factor = o->v_samp;
    for (int c = 1; c < 3; c++) {
      cinfo->comp_info[c].h_samp_factor = 1;
      cinfo->comp_info[c].v_samp_factor = 1;
    }
    break;
  case STK__JCOLOR_RGB:
    jpeg_set_colorspace(cinfo, JCS_RGB); /* all components 1x1, no transform */
    break;
  case STK__JCOLOR_CMYK:
    jpeg_set_colorspace(cinfo, JCS_CMYK);
    cinfo->write_Adobe_marker = TRUE;
    break;
  case STK__JCOLOR_GREY:
    break;
  }

  if (o->progressive)
    jpeg_simple_progression(cinfo);
  cinfo->arith_code = o->arithmetic ? TRUE : FALSE;
  /* Optimised tables only mean something for Huffman coding. */
  cinfo->optimize_coding = (o->optimize && !o->arithmetic) ? TRUE : FALSE;
  cinfo->restart_in_rows = o->restart_interval;

  size_t row_bytes = (size_t)w * (size_t)channels;
  jpeg_start_compress(cinfo, TRUE);
  while (cinfo->next_scanline < cinfo->image_height) {
    const uint8_t *src = pixels + (size_t)cinfo->next_scanline * row_bytes;
    JSAMPROW row = (JSAMPROW)src;
    if (j->row) {
      /* libjpeg stores CMYK samples as given; Adobe files hold them
       * inverted (0 = full ink), which is how readers such as PIL expect
       * them when the Adobe marker is present. */
      for (size_t i = 0; i < row_bytes; i++)
        j->row[i] = (uint8_t)(255 - src[i]);
      row = j->row;
    }
    jpeg_write_scanlines(cinfo, &row, 1);
  }
  jpeg_finish_compress(cinfo);
  return STK_OK;
}

int stk__jpeg_encode(const uint8_t *pixels, int w, int h, const stk__jpeg_enc_opts *o,
                     uint8_t **out, size_t *outlen) {
  if (!pixels || !o || !out || !outlen || w <= 0 || h <= 0 || w > JPEG_MAX_DIMENSION ||
      h > JPEG_MAX_DIMENSION || o->quality < 1 || o->quality > 100 || o->restart_interval < 0 ||
      o->restart_interval > 65535)
    return STK_EINVAL;

  int channels;
  J_COLOR_SPACE in_space;
  switch (o->color) {
  case STK__JCOLOR_YCC:
  case STK__JCOLOR_RGB: channels = 3; in_space = JCS_RGB; break;
  case STK__JCOLOR_GREY: channels = 1; in_space = JCS_GRAYSCALE; break;
  case STK__JCOLOR_CMYK: channels = 4; in_space = JCS_CMYK; break;
  default: return STK_EINVAL;
  }
  if (o->color == STK__JCOLOR_YCC &&
      (!valid_samp(o->h_samp) || !valid_samp(o->v_samp) || o->h_samp * o->v_samp > 8))
    return STK_EINVAL;

  enc_job *j = calloc(1, sizeof *j);
  if (!j)
    return STK_ENOMEM;
  if (o->color == STK__JCOLOR_CMYK && !(j->row = malloc((size_t)w * 4))) {
    free(j);
    return STK_ENOMEM;
  }
  int rc = jpeg_compress_job(j, pixels, w, h, o, channels, in_space);
  jpeg_destroy_compress(&j->cinfo);
  if (rc == STK_OK) {
    *out = j->buf;
    *outlen = (size_t)j->len;
  } else {
    free(j->buf);
  }
  free(j->row);
  free(j);
  return rc;
}

/* ---- PNG ----------------------------------------------------------------- */

static int png_channels(stk__png_color color) {
  switch (color) {
  case STK__PNG_GREY: return 1;
  case STK__PNG_RGB: return 3;
  case STK__PNG_PALETTE: return 1;
  case STK__PNG_GREY_ALPHA: return 2;
  case STK__PNG_RGBA: return 4;
  }
  return 0;
}

int stk__png_encode(const uint8_t *pixels, int w, int h, stk__png_color color, int bit_depth,
                    const uint8_t *palette, int n_palette, uint8_t **out, size_t *outlen) {
  int channels = png_channels(color);
  if (!pixels || !out || !outlen || w <= 0 || h <= 0 || channels == 0 ||
      (bit_depth != 8 && bit_depth != 16))
    return STK_EINVAL;
  if (color == STK__PNG_PALETTE &&
      (bit_depth != 8 || !palette || n_palette < 1 || n_palette > 256))
    return STK_EINVAL;

  spng_ctx *ctx = spng_ctx_new(SPNG_CTX_ENCODER);
  if (!ctx)
    return STK_ENOMEM;

  int rc = STK_EDECODE;
  struct spng_ihdr ihdr = {
      .width = (uint32_t)w,
      .height = (uint32_t)h,
      .bit_depth = (uint8_t)bit_depth,
      .color_type = (uint8_t)color,
  };
  size_t len = (size_t)w * (size_t)h * (size_t)channels * (size_t)(bit_depth / 8);
  int e = spng_set_option(ctx, SPNG_ENCODE_TO_BUFFER, 1);
  if (!e)
    e = spng_set_ihdr(ctx, &ihdr);
  if (!e && color == STK__PNG_PALETTE) {
    struct spng_plte plte = {.n_entries = (uint32_t)n_palette};
    for (int i = 0; i < n_palette; i++) {
      plte.entries[i].red = palette[3 * i];
      plte.entries[i].green = palette[3 * i + 1];
      plte.entries[i].blue = palette[3 * i + 2];
    }
    e = spng_set_plte(ctx, &plte);
  }
  if (!e)
    /* SPNG_FMT_PNG would take 16-bit samples in host order; RAW is the
     * file's own big-endian layout, which is what callers pass. */
    e = spng_encode_image(ctx, pixels, len, SPNG_FMT_RAW, SPNG_ENCODE_FINALIZE);
  if (!e) {
    size_t n = 0;
    void *png = spng_get_png_buffer(ctx, &n, &e);
    if (png) {
      *out = png;
      *outlen = n;
      rc = STK_OK;
    }
  }
  if (e == SPNG_EMEM)
    rc = STK_ENOMEM;
  spng_ctx_free(ctx);
  return rc;
}

/* ---- files --------------------------------------------------------------- */

int stk__write_file(const char *path, const void *buf, size_t n) {
  if (!path || (!buf && n))
    return STK_EINVAL;
  FILE *f = fopen(path, "wb");
  if (!f)
    return STK_EIO;
  int ok = fwrite(buf, 1, n, f) == n;
  ok = (fclose(f) == 0) && ok;
  return ok ? STK_OK : STK_EIO;
}

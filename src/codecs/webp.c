/*
 * webp.c: WebP decoding with libwebp (lossy, lossless, alpha, and the first
 * frame of an animation through libwebpdemux) to 8-bit RGB.
 *
 * Pillow decodes every WebP through libwebp's WebPAnimDecoder: the canvas
 * starts transparent black, the first frame (a key frame, never blended)
 * is decoded into it at its offset, and convert("RGB") drops the alpha
 * without compositing. So here: the canvas's pixels are zeroed where the
 * first frame does not cover them, the frame is decoded straight into the
 * RGB pixels (MODE_RGB: libwebp leaves alpha out, the colour samples are
 * those of its RGBA output), with libwebp's default options (fancy
 * upsampling, no dithering), which are Pillow's.
 */
#include <inttypes.h>
#include <stdio.h>
#include <string.h>

#include <webp/decode.h>
#include <webp/demux.h>

#include "codecs/formats.h"

static int webp_failure(VP8StatusCode st, char *msg, size_t msglen) {
  switch (st) {
  case VP8_STATUS_OUT_OF_MEMORY: return stk__fail(msg, msglen, STK_ENOMEM, "WebP: out of memory");
  case VP8_STATUS_NOT_ENOUGH_DATA: return stk__fail(msg, msglen, STK_EDECODE, "truncated WebP file");
  case VP8_STATUS_UNSUPPORTED_FEATURE:
    return stk__fail(msg, msglen, STK_EDECODE, "WebP: unsupported feature");
  case VP8_STATUS_INVALID_PARAM: return stk__fail(msg, msglen, STK_EDECODE, "WebP: invalid file");
  default: return stk__fail(msg, msglen, STK_EDECODE, "WebP: corrupt bitstream (status %d)", (int)st);
  }
}

/* libwebp's working memory beside the RGB output, an upper estimate from
 * its allocations: lossless keeps the whole image as 32-bit ARGB plus a few
 * cache rows; lossy keeps rows of macroblocks, and a w x h alpha plane
 * (twice that when the alpha is itself lossless-coded) when there is
 * alpha; an animation's demuxer keeps a small record per frame. */
static uint64_t webp_need(int w, int h, int format, int alpha, int anim) {
  uint64_t px = (uint64_t)w * (uint64_t)h, need = 1u << 20;
  if (format != 1 || anim) /* lossless, or not known before the frame */
    need += px * 4 + (uint64_t)w * 32 * 4;
  else
    need += (uint64_t)w * 64 + (alpha ? px * 2 : 0);
  return need;
}

int stk__webp_header(stk__fmtdec *f, char *msg, size_t msglen) {
  WebPBitstreamFeatures ft;
  VP8StatusCode st = WebPGetFeatures(f->buf, f->n, &ft);
  if (st != VP8_STATUS_OK) return webp_failure(st, msg, msglen);
  f->info.width = ft.width;
  f->info.height = ft.height;
  f->info.format = STK__FMT_WEBP;
  f->info.components = ft.has_alpha ? 4 : 3;
  f->info.progressive = 0;
  f->scratch_need = webp_need(ft.width, ft.height, ft.format, ft.has_alpha, ft.has_animation);
  return STK_OK;
}

int stk__webp_decode(stk__fmtdec *f, char *msg, size_t msglen) {
  int cw = f->info.width, ch = f->info.height;
  WebPBitstreamFeatures ft;
  VP8StatusCode st = WebPGetFeatures(f->buf, f->n, &ft);
  if (st != VP8_STATUS_OK) return webp_failure(st, msg, msglen);
  const uint8_t *data = f->buf;
  size_t size = f->n;
  int fx = 0, fy = 0, fw = cw, fh = ch;
  WebPDemuxer *dmx = NULL;
  WebPIterator it;
  if (ft.has_animation) {
    WebPData wd = {f->buf, f->n};
    dmx = WebPDemux(&wd);
    if (!dmx) return stk__fail(msg, msglen, STK_EDECODE, "WebP: corrupt or truncated animation");
    if (!WebPDemuxGetFrame(dmx, 1, &it)) {
      WebPDemuxDelete(dmx);
      return stk__fail(msg, msglen, STK_EDECODE, "WebP: animation without a frame");
    }
    data = it.fragment.bytes;
    size = it.fragment.size;
    fx = it.x_offset, fy = it.y_offset, fw = it.width, fh = it.height;
    WebPDemuxReleaseIterator(&it);
    /* the demuxer checked that frames lie inside the canvas; no harm in
     * checking again before writing there */
    if (fx < 0 || fy < 0 || fw <= 0 || fh <= 0 || fw > cw - fx || fh > ch - fy) {
      WebPDemuxDelete(dmx);
      return stk__fail(msg, msglen, STK_EDECODE, "WebP: first frame outside the canvas");
    }
  }
  uint8_t *out = stk__fmtdec_pixels(f, msg, msglen);
  if (!out) {
    WebPDemuxDelete(dmx);
    return STK_ENOMEM;
  }
  size_t stride = (size_t)cw * 3;
  if (fx || fy || fw != cw || fh != ch) memset(out, 0, stride * (size_t)ch); /* transparent black */
  WebPDecoderConfig cfg;
  if (!WebPInitDecoderConfig(&cfg)) {
    WebPDemuxDelete(dmx);
    return stk__fail(msg, msglen, STK_EDECODE, "WebP: libwebp version mismatch");
  }
  cfg.output.colorspace = MODE_RGB;
  cfg.output.is_external_memory = 1;
  cfg.output.u.RGBA.rgba = out + (size_t)fy * stride + (size_t)fx * 3;
  cfg.output.u.RGBA.stride = (int)stride;
  cfg.output.u.RGBA.size = stride * (size_t)(fh - 1) + (size_t)fw * 3;
  st = WebPDecode(data, size, &cfg);
  /* a frame whose bitstream disagrees with the size the container gave */
  if (st == VP8_STATUS_OK && (cfg.output.width != fw || cfg.output.height != fh))
    st = VP8_STATUS_BITSTREAM_ERROR;
  WebPFreeDecBuffer(&cfg.output); /* external memory: frees nothing of ours */
  WebPDemuxDelete(dmx);
  if (st != VP8_STATUS_OK) return webp_failure(st, msg, msglen);
  return STK_OK;
}

const char *stk__webp_lib_version(void) {
  /* the library's own (a run-time link may be newer than the headers) */
  static char buf[32];
  int v = WebPGetDecoderVersion();
  snprintf(buf, sizeof buf, "libwebp %d.%d.%d", (v >> 16) & 0xff, (v >> 8) & 0xff, v & 0xff);
  return buf;
}

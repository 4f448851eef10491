/* pipeline.c: one sample, from file to batch slot. See pipeline.h. */
#define _POSIX_C_SOURCE 200809L
#include "loader/pipeline.h"

#include <errno.h>
#include <fcntl.h>
#include <inttypes.h>
#include <string.h>
#ifdef __GLIBC__
#include <malloc.h> /* malloc_trim */
#endif
#include <sys/stat.h>
#include <unistd.h>

void stk__plan_init(stk__plan *p, const stk_options *o) {
  memset(p, 0, sizeof *p);
  p->pipeline = o->pipeline;
  p->size = o->size;
  p->resize = o->resize_size > 0 ? o->resize_size : (int)(o->size * 256.0 / 224.0 + 0.5);
  memcpy(p->scale, o->scale, sizeof p->scale);
  memcpy(p->ratio, o->ratio, sizeof p->ratio);
  p->flip_prob = o->pipeline == STK_PIPELINE_TRAIN ? o->flip_prob : 0.0f;
  int dct = o->dct_scaling < 0 ? o->pipeline == STK_PIPELINE_TRAIN : o->dct_scaling;
  p->max_denom = dct ? 8 : 1;
  p->filter = o->interpolation;
  p->seed = o->seed;
  p->max_file_bytes = o->max_file_bytes;
  p->max_pixels = o->max_pixels;
  p->max_decode_bytes = o->max_decode_bytes;
  p->max_decode_bytes_set = 1;
  stk__store_init(&p->store, o->dtype, o->layout, o->size, o->size, o->mean, o->std);
  stk__store_init(&p->store_rgb8, STK_DTYPE_UINT8, STK_LAYOUT_NHWC, o->size, o->size, o->mean,
                  o->std);
  p->image_bytes = (size_t)o->size * o->size * 3 * stk__dtype_size(o->dtype);
  if (o->pipeline == STK_PIPELINE_TRAIN) stk__aug_plan_init(&p->aug, o, o->size, o->size);
  pthread_mutex_init(&p->budget.mu, NULL);
  pthread_cond_init(&p->budget.cv, NULL);
  p->budget.total = o->max_decode_bytes;
  p->budget.on = 1;
  /* What a worker keeps between samples: 16 MiB (a 2-megapixel decode, or
   * a 16 MB file), less when many threads share a small budget. Kept
   * buffers are outside the budget: the loader's decode memory is at most
   * max_decode_bytes plus threads x keep. */
  int threads = o->threads > 0 ? o->threads : 1;
  uint64_t keep = (uint64_t)16 << 20;
  if (o->max_decode_bytes && o->max_decode_bytes / (4 * (uint64_t)threads) < keep)
    keep = o->max_decode_bytes / (4 * (uint64_t)threads);
  p->keep = keep > ((size_t)1 << 20) ? (size_t)keep : (size_t)1 << 20;
}

void stk__plan_free(stk__plan *p) {
  if (!p->budget.on) return;
  pthread_mutex_destroy(&p->budget.mu);
  pthread_cond_destroy(&p->budget.cv);
  p->budget.on = 0;
}

/* The memory the decode of the region `want` (full-resolution) at
 * 1/denom takes: its output pixels and what its header said it allocates
 * beside them. JPEG decodes the region's rows, counted here at full width
 * (a crop is decoded full width in some subsamplings) plus an iMCU each
 * way; the other formats decode the whole image. */
static uint64_t decode_need(const stk__sample *s, const stk__rect *want, int denom) {
  const stk__image_info *in = &s->info;
  uint64_t px;
  if (in->format == STK__FMT_JPEG) {
    uint64_t w = ((uint64_t)in->width + (uint64_t)denom - 1) / (uint64_t)denom + 32;
    uint64_t h = ((uint64_t)want->h + (uint64_t)denom - 1) / (uint64_t)denom + 32;
    px = w * h * 3;
  } else {
    px = (uint64_t)in->width * (uint64_t)in->height * 3;
  }
  return px + in->work_bytes + ((uint64_t)1 << 20); /* a MiB for the libraries' own state */
}

/* The refusal of a decode larger than the whole budget: the loader's, and
 * check's and pack's, which refuse what it would. */
static int refuse_need(const stk__image_info *in, uint64_t need, uint64_t total, char *msg,
                       size_t msglen) {
  return stk__fail(msg, msglen, STK_ELIMIT,
                   "decoding this %dx%d %s image takes %" PRIu64 " MiB (its pixels and the "
                   "decoder's buffers), more than the loader's decode memory of %" PRIu64
                   " MiB (max_decode_bytes, shared by its threads)",
                   in->width, in->height, stk__format_name(in->format), need >> 20, total >> 20);
}

static int budget_take(const stk__plan *p, stk__worker *w, const stk__sample *s, uint64_t need,
                       char *msg, size_t msglen) {
  stk__budget *b = (stk__budget *)&p->budget; /* the plan is the loader's, shared */
  if (!b->on || !b->total) return STK_OK;
  if (need > b->total) return refuse_need(&s->info, need, b->total, msg, msglen);
  pthread_mutex_lock(&b->mu);
  /* the others' decodes end and give theirs back: every share is held for
   * one decode and its resampling, never across a wait for anything else */
  while (b->used + need > b->total) pthread_cond_wait(&b->cv, &b->mu);
  b->used += need;
  pthread_mutex_unlock(&b->mu);
  w->held = need;
  return STK_OK;
}

/* The worker's share back to the budget, and the waiting decodes woken. */
static void budget_give(const stk__plan *p, stk__worker *w) {
  if (!w->held) return;
  stk__budget *b = (stk__budget *)&p->budget;
  pthread_mutex_lock(&b->mu);
  b->used -= w->held;
  pthread_cond_broadcast(&b->cv);
  pthread_mutex_unlock(&b->mu);
  w->held = 0;
}

void stk__sample_release(const stk__plan *p, stk__worker *w) {
  budget_give(p, w);
  /* an outsized image's buffers go now, not when the loader closes */
  int freed = 0;
  if (p->keep && w->dec && stk__decoder_scratch_bytes(w->dec) > p->keep) {
    stk__decoder *fresh = stk__decoder_create();
    if (fresh) {
      stk__decoder_set_limits(fresh, p->max_pixels);
      if (p->max_decode_bytes_set) stk__decoder_set_max_bytes(fresh, p->max_decode_bytes);
      stk__decoder_destroy(w->dec);
      w->dec = fresh;
      freed = 1;
    }
  }
  if (p->keep && w->file.cap > p->keep) {
    stk__buf_free(&w->file);
    freed = 1;
  }
  if (freed) stk__trim_heap();
}

void stk__trim_heap(void) {
#ifdef __GLIBC__
  /* glibc keeps freed blocks below its mmap threshold (which rises to 32
   * MiB) in its heaps: give them back to the system */
  malloc_trim(0);
#endif
}

int stk__worker_init(stk__worker *w, const stk__plan *p) {
  memset(w, 0, sizeof *w);
  w->dec = stk__decoder_create();
  if (!w->dec) return STK_ENOMEM;
  stk__decoder_set_limits(w->dec, p->max_pixels);
  if (p->max_decode_bytes_set) stk__decoder_set_max_bytes(w->dec, p->max_decode_bytes);
  return STK_OK;
}

void stk__worker_free(stk__worker *w) {
  /* a share still held is the budget's to lose: the worker is gone (a
   * worker abandoned on a stuck read holds none, it never decoded) */
  stk__decoder_destroy(w->dec);
  stk__resampler_free(&w->rs);
  stk__buf_free(&w->file);
  stk__buf_free(&w->tile);
  stk__buf_free(&w->aug_scratch);
  stk__buf_free(&w->aug_mix);
  memset(w, 0, sizeof *w);
}

/* Every random choice for (epoch, index), from the sample's own stream:
 * its geometry and the DCT scale its decode uses, from its header. */
static void sample_geometry(const stk__plan *p, const stk__worker *w, uint64_t epoch,
                            int64_t index, stk__sample *s) {
  /* All random choices for this sample come from its own stream. */
  stk__rng rng;
  stk__rng_init(&rng, p->seed, epoch, (uint64_t)index + w->key_offset);
  stk__geom *g = &s->geom;
  s->denom = 1;
  if (p->pipeline == STK_PIPELINE_TRAIN) {
    stk__rect crop;
    stk__rrc_params(s->info.width, s->info.height, p->scale, p->ratio, &rng, &crop);
    stk__geom_crop(&crop, p->size, p->size, g);
    g->flip = stk__rng_uniform(&rng) < p->flip_prob;
    if (s->info.format == STK__FMT_JPEG)
      s->denom = stk__choose_denom(&crop, p->size, p->size, p->max_denom);
    if (p->aug.on)
      stk__aug_draw(&p->aug, p->seed, epoch, index + (int64_t)w->key_offset, &s->aug);
  } else {
    stk__geom_eval(s->info.width, s->info.height, p->resize, p->size, g);
    if (s->info.format == STK__FMT_JPEG && p->max_denom > 1) {
      /* the whole image is resized: shrink it no further than its resized size */
      stk__rect full = {0, 0, s->info.width, s->info.height};
      s->denom = stk__choose_denom(&full, (int)(s->info.width / g->x.scale),
                                   (int)(s->info.height / g->y.scale), p->max_denom);
    }
  }
  stk__geom_set_filter(g, p->filter);
}

int stk__sample_prepare(const stk__plan *p, stk__worker *w, const stk__source *src,
                        stk__buf *file, uint64_t epoch, int64_t index, stk__sample *s, char *msg,
                        size_t msglen) {
  double t0 = stk__now();
  w->t_read = w->t_decode = w->t_augment = 0;
  w->bytes = 0;
  stk__image_info *info = &s->info;
  int rc;
  memset(s, 0, sizeof *s);
  if (src->ops->pixels) {
    /* decoded at pack time: nothing to read but the pixels, in place */
    rc = src->ops->pixels(src, index, &s->px, msg, msglen);
    w->t_read = stk__now() - t0;
    if (w->on_read && w->on_read(w->on_read_ctx)) return STK__ELOST;
    if (rc) return rc;
    s->raw = 1;
    w->bytes = (uint64_t)s->px.w * s->px.h * 3;
    info->width = s->px.w;
    info->height = s->px.h;
    info->format = STK__FMT_RAW;
    info->components = 3;
  } else {
    stk__bytes b;
    rc = src->ops->read(src, index, file, p->max_file_bytes, &b, msg, msglen);
    w->t_read = stk__now() - t0;
    w->bytes = b.bytes_read;
    if (w->on_read && w->on_read(w->on_read_ctx)) return STK__ELOST;
    if (rc) return rc;
    s->data = b.data;
    s->len = b.len;
    rc = stk__decoder_header(w->dec, s->data, s->len, info, msg, msglen);
    if (rc) return rc;
  }

  sample_geometry(p, w, epoch, index, s);
  return STK_OK;
}

/* The geometry of s at its DCT scale (*g), the rectangle of the decoded
 * image the resampler reads (*need) and the full-resolution one the decoder
 * is asked for (*want). */
static int sample_region(stk__worker *w, const stk__sample *s, int size, stk__geom *g,
                         stk__rect *need, stk__rect *want, char *msg, size_t msglen) {
  const stk__image_info *info = &s->info;
  int denom = s->denom;
  *g = s->geom;
  stk__geom_downscale(g, info->width, info->height, denom);
  int rc = stk__resampler_plan(&w->rs, g, need);
  /* a table that cannot be allocated is memory, not the image's fault */
  if (rc == STK_ENOMEM)
    return stk__fail(msg, msglen, rc, "out of memory for the resampling tables of a %dx%d image",
                     info->width, info->height);
  if (rc) return stk__fail(msg, msglen, rc, "cannot resample a %dx%d image to %d", info->width,
                           info->height, size);
  /* The decoder takes full-resolution coordinates. */
  *want = (stk__rect){need->x * denom, need->y * denom, need->w * denom, need->h * denom};
  if (want->x + want->w > info->width) want->w = info->width - want->x;
  if (want->y + want->h > info->height) want->h = info->height - want->y;
  return STK_OK;
}

int stk__sample_decode(const stk__plan *p, stk__worker *w, const stk__sample *s, stk__geom *g,
                       stk__region *reg, stk__rect *need_out, char *msg, size_t msglen) {
  double t1 = stk__now();
  int denom = s->denom;
  stk__rect need, want;
  int rc = sample_region(w, s, p->size, g, &need, &want, msg, msglen);
  if (rc) return rc;
  if (need_out) *need_out = need;

  if (s->raw) { /* the whole image is there: the resampler reads it in place */
    *reg = (stk__region){s->px.px, s->px.stride, 0, 0, s->px.w, s->px.h, 1, s->px.w, s->px.h};
  } else {
    budget_give(p, w); /* a share still held (a caller that did not give it back) */
    rc = budget_take(p, w, s, decode_need(s, &want, denom), msg, msglen);
    if (!rc) rc = stk__decoder_decode(w->dec, s->data, s->len, &want, denom, reg, msg, msglen);
    if (rc) budget_give(p, w); /* not the buffers: s->data may be in w->file */
  }
  w->t_decode = stk__now() - t1;
  if (rc) return rc;
  if (reg->scale_denom != denom) return stk__fail(msg, msglen, STK_EDECODE, "decoder scale mismatch");
  return STK_OK;
}

int stk__sample_resample(const stk__plan *p, stk__worker *w, const stk__sample *s,
                         const stk__region *r, const stk__store *store, void *dst, char *msg,
                         size_t msglen) {
  const stk__region reg = *r;
  int rc;
  double t2 = stk__now();
  /* The GPU share's tiles (store_rgb8) get their augmentations on the GPU,
   * with the rest of the batch. */
  int augmented = p->aug.on && s->aug.n + s->aug.erase > 0 && store != &p->store_rgb8;
  if (augmented) {
    /* torchvision's order: the crop rounded to 8 bits, the ops on that
     * tile, then normalisation into the batch, then erasing */
    if (stk__buf_reserve(&w->tile, (size_t)p->size * p->size * 3)) {
      rc = STK_ENOMEM;
    } else {
      rc = stk__resampler_run(&w->rs, reg.pixels, reg.stride, reg.x, reg.y, &p->store_rgb8,
                              w->tile.p);
      if (!rc)
        rc = stk__aug_apply(&p->aug, &s->aug, w->tile.p, p->size, p->size, &w->aug_scratch,
                            &w->aug_mix);
      if (!rc) {
        stk__store_tile(store, w->tile.p, dst);
        stk__aug_erase(&p->aug, &s->aug, store->dtype, store->layout, store->w, store->h, dst);
      }
    }
  } else {
    rc = stk__resampler_run(&w->rs, reg.pixels, reg.stride, reg.x, reg.y, store, dst);
  }
  w->t_augment = stk__now() - t2;
  if (rc == STK_ENOMEM)
    return stk__fail(msg, msglen, rc, "out of memory for the %s of a %dx%d image",
                     augmented ? "augmentations" : "resampling", s->info.width, s->info.height);
  if (rc) return stk__fail(msg, msglen, rc, "resampling failed");
  return STK_OK;
}

int stk__sample_finish_cpu(const stk__plan *p, stk__worker *w, const stk__sample *s,
                           const stk__store *store, void *dst, char *msg, size_t msglen) {
  stk__geom g;
  stk__region reg;
  int rc = stk__sample_decode(p, w, s, &g, &reg, NULL, msg, msglen);
  if (rc) return rc;
  rc = stk__sample_resample(p, w, s, &reg, store, dst, msg, msglen);
  stk__sample_release(p, w);
  return rc;
}

int stk__process_sample(const stk__plan *p, stk__worker *w, const stk__source *src,
                        uint64_t epoch, int64_t index, void *dst, char *msg, size_t msglen) {
  stk__sample s;
  int rc = stk__sample_prepare(p, w, src, &w->file, epoch, index, &s, msg, msglen);
  if (rc) return rc;
  return stk__sample_finish_cpu(p, w, &s, &p->store, dst, msg, msglen);
}

/* ---- what check and pack share with the loader ------------------------- */

/* Train: the most a crop of this JPEG can take. The need grows with the
 * rows the crop spans at its DCT scale. stk__choose_denom stops at a scale
 * d below the largest only for a crop under 2 d size pixels high, or under
 * 2 d size wide and so (its aspect at least ratio[0]) under 2 d size /
 * ratio[0] high; at the largest scale the crop may be the whole image. Each
 * scale's tallest crop bounds it; the other formats decode the whole image
 * whatever the crop. */
static int train_need(const stk__plan *p, stk__worker *w, const stk__sample *s0, uint64_t *out,
                      char *msg, size_t msglen) {
  const stk__image_info *in = &s0->info;
  double rmin = p->ratio[0] < p->ratio[1] ? p->ratio[0] : p->ratio[1];
  *out = 0;
  for (int d = 1; d <= p->max_denom; d *= 2) {
    int64_t h = in->height, side = 2 * (int64_t)d * p->size;
    if (d < p->max_denom && rmin > 0) {
      int64_t tall = (int64_t)(side / rmin) + 2; /* the aspect's rounding */
      if (tall < side) tall = side;
      if (tall < h) h = tall;
    }
    if (d > 1 && (h < (int64_t)d * p->size || in->width < d * p->size)) break;
    stk__sample s = *s0;
    s.denom = d;
    stk__geom_crop(&(stk__rect){0, 0, in->width, (int)h}, p->size, p->size, &s.geom);
    stk__geom_set_filter(&s.geom, p->filter);
    stk__geom g;
    stk__rect need, want;
    int rc = sample_region(w, &s, p->size, &g, &need, &want, msg, msglen);
    if (rc) return rc;
    uint64_t n = decode_need(&s, &want, d);
    if (n > *out) *out = n;
    if (in->format != STK__FMT_JPEG) break; /* one scale, the whole image */
  }
  return STK_OK;
}

int stk__plan_refuses(const stk__plan *p, stk__worker *w, const stk__image_info *info, char *msg,
                      size_t msglen) {
  const stk__budget *b = &p->budget;
  if (!b->on || !b->total) return STK_OK;
  stk__sample s;
  memset(&s, 0, sizeof s);
  s.info = *info;
  uint64_t need = 0;
  int rc;
  if (p->pipeline == STK_PIPELINE_TRAIN) {
    rc = train_need(p, w, &s, &need, msg, msglen);
  } else {
    /* eval's geometry is the same every epoch: the loader's own need */
    sample_geometry(p, w, 0, 0, &s);
    stk__geom g;
    stk__rect rneed, want;
    rc = sample_region(w, &s, p->size, &g, &rneed, &want, msg, msglen);
    if (!rc) need = decode_need(&s, &want, s.denom);
  }
  if (rc) return rc;
  return need > b->total ? refuse_need(info, need, b->total, msg, msglen) : STK_OK;
}

int stk__whole_decode(const stk__plan *p, stk__worker *w, const stk__sample *s, int denom,
                      stk__region *reg, char *msg, size_t msglen) {
  stk__rect all = {0, 0, s->info.width, s->info.height};
  uint64_t need = decode_need(s, &all, denom);
  /* a whole decode the loader never makes (it decodes a region) is not
   * refused for its size: it waits for the whole budget and runs alone */
  if (p->budget.on && p->budget.total && need > p->budget.total) need = p->budget.total;
  budget_give(p, w);
  int rc = budget_take(p, w, s, need, msg, msglen);
  if (!rc) rc = stk__decoder_decode(w->dec, s->data, s->len, NULL, denom, reg, msg, msglen);
  if (rc) budget_give(p, w);
  return rc;
}

uint64_t stk__plan_pixel_ceiling(const stk__plan *p) {
  uint64_t px = p->max_pixels;
  if (p->budget.on && p->budget.total) {
    /* decode_need of a whole image of no other buffers: 3 bytes a pixel and
     * the libraries' MiB */
    uint64_t fit = p->budget.total > ((uint64_t)1 << 20)
                       ? (p->budget.total - ((uint64_t)1 << 20)) / 3 : 0;
    if (!px || fit < px) px = fit;
  }
  return px;
}

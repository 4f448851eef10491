/* synth.c: see synth.h. */
#define _POSIX_C_SOURCE 200809L
#include "synth/synth.h"

#include <errno.h>
#include <inttypes.h>
#include <limits.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

#include "codecs/encode.h"
#include "core/common.h"

/* Stream salts: each kind of random choice draws from its own stream. */
enum {
  SALT_CLASS = 0xc1a55,
  SALT_STYLE = 0x5c1e,
  SALT_IMAGE = 0x1ace,
  SALT_FILE = 0xf11e,
  SALT_RENDER = 0xd4a3,
};

/* The largest side pick_file() returns. */
#define MAX_SIDE 500

/* Only exactly rounded operations (arithmetic, floorf, sqrtf) reach the
 * pixels, never libm's transcendental functions, so files do not depend on
 * the libm a build links. */

static float uni(stk__rng *r, float lo, float hi) {
  return lo + (hi - lo) * (float)stk__rng_uniform(r);
}

static float clampf(float v, float lo, float hi) { return v < lo ? lo : v > hi ? hi : v; }

static float lerpf(float a, float b, float t) { return a + (b - a) * t; }

static float smooth(float t) { return t * t * (3.0f - 2.0f * t); }

/* ---- value noise ----------------------------------------------------------
 * One octave is a lattice of random values, one every `period` pixels,
 * interpolated with smoothstep weights. Lattice values are hashed from their
 * coordinates, so an octave needs no table: walking a row left to right, it
 * keeps the two lattice columns around the current pixel (already
 * interpolated in y) and hashes a new one only when it crosses a cell. */
typedef struct {
  uint64_t key;
  float inv_period, amp;
  float ox, oy;        /* non-negative offsets, so octaves' lattices do not line up */
  int iy;              /* lattice row above the current image row */
  float wy;            /* weight of lattice row iy + 1 */
  int ix;              /* lattice column left of the current pixel */
  float left, right;   /* columns ix and ix + 1 */
} octave;

static float lattice(uint64_t key, int ix, int iy) {
  uint64_t p = (uint64_t)(uint32_t)ix << 32 | (uint32_t)iy;
  uint64_t z = stk__mix64(key ^ (p * 0x9e3779b97f4a7c15ULL));
  return (float)(z >> 40) * (2.0f / 16777216.0f) - 1.0f;
}

static void octave_init(octave *o, stk__rng *r, float period, float amp) {
  o->key = stk__rng_next(r);
  o->inv_period = 1.0f / period;
  o->amp = amp;
  o->ox = uni(r, 0.0f, 1024.0f);
  o->oy = uni(r, 0.0f, 1024.0f);
}

static float octave_column(const octave *o, int ix) {
  return lerpf(lattice(o->key, ix, o->iy), lattice(o->key, ix, o->iy + 1), o->wy);
}

/* Starts image row y. */
static void octave_row(octave *o, float y) {
  float fy = (y + o->oy) * o->inv_period;
  o->iy = (int)fy;
  o->wy = smooth(fy - (float)o->iy);
  o->ix = INT_MIN;
}

/* Value at column x of the current row, in [-amp, amp]. x must not decrease
 * within a row. */
static float octave_at(octave *o, float x) {
  float fx = (x + o->ox) * o->inv_period;
  int ix = (int)fx;
  if (ix != o->ix) {
    o->left = ix == o->ix + 1 ? o->right : octave_column(o, ix);
    o->right = octave_column(o, ix + 1);
    o->ix = ix;
  }
  return o->amp * lerpf(o->left, o->right, smooth(fx - (float)ix));
}

/* ---- colours and styles -------------------------------------------------- */

typedef struct {
  float h, s, v;
} hsv;

/* RGB on the 0..255 scale, after shifting hue and scaling saturation and value. */
static void hsv_to_rgb(hsv c, float dh, float sat_gain, float gain, float out[3]) {
  float h = c.h + dh;
  h = (h - floorf(h)) * 6.0f;
  int i = (int)h;
  if (i > 5) i = 5;
  float f = h - (float)i;
  float s = clampf(c.s * sat_gain, 0.0f, 1.0f);
  float v = clampf(c.v * gain, 0.0f, 1.0f) * 255.0f;
  float p = v * (1.0f - s), q = v * (1.0f - s * f), t = v * (1.0f - s * (1.0f - f));
  float rgb[6][3] = {{v, t, p}, {q, v, p}, {p, v, t}, {p, q, v}, {t, p, v}, {v, p, q}};
  memcpy(out, rgb[i], sizeof rgb[i]);
}

/* What the images of one class share: palette, layout, texture. */
typedef struct {
  hsv back_top, back_low;    /* background (sky) from the top to the horizon */
  hsv front_far, front_near; /* foreground (ground) from the horizon down */
  hsv obj[3];
  float horizon, horizon_spread; /* fractions of the height */
  float tex_scale;           /* multiplies the texture periods */
  float tex_back, tex_front; /* texture contrast of each region */
  float persistence;         /* amplitude ratio of successive octaves */
  float detail_back, detail_front; /* contrast of the finest texture */
  int min_objects, max_objects;
  int boxy;                  /* rounded boxes rather than ellipses */
  float grain;               /* sensor noise, in 0..255 levels */
} class_style;

static void class_style_init(class_style *cs, uint64_t key) {
  stk__rng r;
  stk__rng_init(&r, key, SALT_STYLE, 0);
  float sky = uni(&r, 0.0f, 1.0f), ground = uni(&r, 0.0f, 1.0f);
  float spread = uni(&r, 0.03f, 0.25f);
  cs->back_top = (hsv){sky + spread * uni(&r, -1, 1), uni(&r, 0.1f, 0.6f), uni(&r, 0.5f, 0.95f)};
  cs->back_low = (hsv){sky + spread * uni(&r, -1, 1), uni(&r, 0.05f, 0.4f), uni(&r, 0.7f, 1.0f)};
  cs->front_far = (hsv){ground + spread * uni(&r, -1, 1), uni(&r, 0.2f, 0.7f), uni(&r, 0.35f, 0.8f)};
  cs->front_near = (hsv){ground + spread * uni(&r, -1, 1), uni(&r, 0.3f, 0.8f), uni(&r, 0.2f, 0.6f)};
  for (int k = 0; k < 3; k++)
    cs->obj[k] = (hsv){uni(&r, 0, 1), uni(&r, 0.3f, 0.9f), uni(&r, 0.3f, 0.95f)};
  cs->horizon = uni(&r, 0.2f, 0.75f);
  cs->horizon_spread = uni(&r, 0.03f, 0.15f);
  cs->tex_scale = uni(&r, 0.6f, 1.5f);
  /* The background is a smooth sky in some classes, a busy wall of foliage
   * or clutter in the others. */
  int busy = stk__rng_uniform(&r) < 0.65;
  cs->tex_back = busy ? uni(&r, 0.2f, 0.6f) : uni(&r, 0.03f, 0.15f);
  cs->tex_front = uni(&r, 0.4f, 0.9f);
  cs->persistence = uni(&r, 0.8f, 0.95f);
  cs->detail_back = busy ? uni(&r, 0.15f, 0.45f) : uni(&r, 0.0f, 0.03f);
  cs->detail_front = uni(&r, 0.25f, 0.6f);
  cs->min_objects = (int)stk__rng_range(&r, 1, 4);
  cs->max_objects = cs->min_objects + (int)stk__rng_range(&r, 0, 4);
  cs->boxy = stk__rng_uniform(&r) < 0.35;
  cs->grain = uni(&r, 5.0f, 11.0f);
}

/* ---- rendering ----------------------------------------------------------- */

#define TEX_OCTAVES 7
#define MAX_OBJECTS 6

typedef struct {
  float cx, cy, cos_a, sin_a, inv_rx, inv_ry, soft;
  int x0, y0, x1, y1; /* bounding box, inclusive */
  float rgb[3], tex, detail;
} object;

static void object_init(object *o, stk__rng *r, const class_style *cs, int w, int h,
                        float dh, float sat_gain, float gain) {
  float side = (float)(w < h ? w : h);
  float rx = side * uni(r, 0.06f, 0.35f), ry = rx * uni(r, 0.5f, 1.8f);
  o->cx = (float)w * uni(r, -0.1f, 1.1f);
  o->cy = (float)h * uni(r, 0.15f, 1.0f);
  /* A random direction from a normalised random vector keeps sin and cos out. */
  float dx, dy, n2;
  do {
    dx = uni(r, -1, 1);
    dy = uni(r, -1, 1);
    n2 = dx * dx + dy * dy;
  } while (n2 < 0.01f || n2 > 1.0f);
  float n = sqrtf(n2);
  o->cos_a = dx / n;
  o->sin_a = dy / n;
  o->inv_rx = 1.0f / rx;
  o->inv_ry = 1.0f / ry;
  /* Edge width in pixels: mostly crisp, sometimes out of focus. */
  float blur = stk__rng_uniform(r) < 0.8 ? uni(r, 0.7f, 4.0f) : uni(r, 8.0f, 30.0f);
  o->soft = clampf(blur / (rx + ry), 0.005f, 0.3f);
  float reach = sqrtf(rx * rx + ry * ry) * (1.0f + o->soft);
  o->x0 = (int)floorf(o->cx - reach);
  o->x1 = (int)(o->cx + reach);
  o->y0 = (int)floorf(o->cy - reach);
  o->y1 = (int)(o->cy + reach);
  hsv c = cs->obj[stk__rng_range(r, 0, 3)];
  c.h += uni(r, -0.03f, 0.03f);
  hsv_to_rgb(c, dh, sat_gain, gain, o->rgb);
  o->tex = uni(r, 0.1f, 0.4f);
  o->detail = uni(r, 0.05f, 0.3f);
}

/* One image's draw: the class palette varied, the horizon and hills, the
 * octaves of light, texture and detail, the objects, the light's
 * direction, vignette and grain. Drawn in this order from one stream, so
 * that a seed gives the same image. */
typedef struct {
  float top[3], low[3], far[3], near[3];
  float horizon, hill_amp, inv_blur, light_amp;
  octave hill[2], light[2], tex[TEX_OCTAVES], detail[3], mask;
  object obj[MAX_OBJECTS];
  int nobj;
  float lx, ly, lz; /* towards the light, unit length */
  float vignette, grain;
  uint64_t grain_key;
} scene;

static void scene_init(scene *sc, stk__rng *r, int w, int h, const class_style *cs) {
  /* Per-image variation of the class palette: white balance and exposure. */
  float dh = uni(r, -0.04f, 0.04f), sat_gain = uni(r, 0.8f, 1.2f), gain = uni(r, 0.8f, 1.1f);
  hsv_to_rgb(cs->back_top, dh, sat_gain, gain, sc->top);
  hsv_to_rgb(cs->back_low, dh, sat_gain, gain, sc->low);
  hsv_to_rgb(cs->front_far, dh, sat_gain, gain, sc->far);
  hsv_to_rgb(cs->front_near, dh, sat_gain, gain, sc->near);

  float fw = (float)w, fh = (float)h, big = (float)(w > h ? w : h);
  sc->horizon = fh * (cs->horizon + cs->horizon_spread * uni(r, -1, 1));
  sc->hill_amp = fh * uni(r, 0.02f, 0.12f);
  sc->inv_blur = 1.0f / uni(r, 1.5f, 12.0f); /* sharp or hazy horizon */
  octave_init(&sc->hill[0], r, fw * uni(r, 0.3f, 0.6f), 0.7f);
  octave_init(&sc->hill[1], r, fw * uni(r, 0.08f, 0.15f), 0.3f);
  octave_init(&sc->light[0], r, big * 0.8f, 0.65f);
  octave_init(&sc->light[1], r, big * 0.3f, 0.35f);
  sc->light_amp = uni(r, 0.1f, 0.3f);

  /* Octave amplitudes fall geometrically and sum to 1. */
  float period = uni(r, 60.0f, 140.0f) * cs->tex_scale;
  float persistence = cs->persistence * uni(r, 0.9f, 1.1f), amp = 1.0f, total = 0.0f;
  for (int k = 0; k < TEX_OCTAVES; k++, amp *= persistence) total += amp;
  amp = 1.0f / total;
  for (int k = 0; k < TEX_OCTAVES; k++, period *= 0.5f, amp *= persistence)
    octave_init(&sc->tex[k], r, period, amp);

  /* Fine detail (foliage, fur, gravel) comes in patches where `mask` is high. */
  float dscale = uni(r, 0.8f, 1.2f);
  octave_init(&sc->detail[0], r, 4.5f * dscale, 0.5f);
  octave_init(&sc->detail[1], r, 2.2f * dscale, 0.3f);
  octave_init(&sc->detail[2], r, 1.1f * dscale, 0.2f);
  octave_init(&sc->mask, r, big * uni(r, 0.15f, 0.4f), 1.5f);

  sc->nobj = (int)stk__rng_range(r, cs->min_objects, cs->max_objects + 1);
  for (int k = 0; k < sc->nobj; k++) object_init(&sc->obj[k], r, cs, w, h, dh, sat_gain, gain);
  /* Light from above, towards the viewer. */
  float lx = uni(r, -1, 1), ly = uni(r, -1.0f, -0.2f), lz = uni(r, 0.5f, 1.0f);
  float ln = 1.0f / sqrtf(lx * lx + ly * ly + lz * lz);
  sc->lx = lx * ln, sc->ly = ly * ln, sc->lz = lz * ln;

  sc->vignette = uni(r, 0.0f, 0.35f);
  sc->grain = cs->grain * uni(r, 0.7f, 1.3f);
  sc->grain_key = stk__rng_next(r);
}

/* The objects over pixel (x, y) of colour c, given the texture t and the
 * detail dt there. */
static void shade_objects(const scene *sc, const class_style *cs, int x, int y, float t,
                          float dt, float c[3]) {
  float fx = (float)x, fy = (float)y;
  for (int k = 0; k < sc->nobj; k++) {
    const object *o = &sc->obj[k];
    if (x < o->x0 || x > o->x1 || y < o->y0 || y > o->y1) continue;
    float dx = fx - o->cx, dy = fy - o->cy;
    float u = (dx * o->cos_a + dy * o->sin_a) * o->inv_rx;
    float v = (dy * o->cos_a - dx * o->sin_a) * o->inv_ry;
    float u2 = u * u, v2 = v * v;
    /* Squared radius: of an ellipse, or of a superellipse of exponent 4. */
    float d2 = cs->boxy ? sqrtf(u2 * u2 + v2 * v2) : u2 + v2;
    float edge = 1.0f + o->soft;
    if (d2 >= edge * edge) continue;
    float d = sqrtf(d2);
    float alpha = 1.0f - smooth(clampf((d - 1.0f + o->soft) / (2.0f * o->soft), 0.0f, 1.0f));
    /* Shade as a sphere bulging towards the viewer. */
    float nz = sqrtf(1.0f - (d2 < 1.0f ? d2 : 1.0f));
    float diffuse = clampf(u * sc->lx + v * sc->ly + nz * sc->lz, 0.0f, 1.0f);
    float shade = (0.35f + 0.8f * diffuse) * (1.0f + o->tex * t + o->detail * dt);
    for (int i = 0; i < 3; i++) c[i] = lerpf(c[i], o->rgb[i] * shade, alpha);
  }
}

/* Grain: triangular noise from 8-bit fields of one hash, shared by the
 * channels (luma) plus a weaker part of each channel's own; then the
 * pixel, rounded. */
static void put_pixel(const scene *sc, int w, int x, int y, const float c[3], uint8_t *out) {
  uint64_t z = stk__mix64(sc->grain_key + (uint64_t)y * (uint64_t)w + (uint64_t)x);
  float n[4];
  for (int i = 0; i < 4; i++, z >>= 16)
    n[i] = (float)((int)(z & 255) + (int)(z >> 8 & 255) - 255) * (1.0f / 255.0f);
  for (int i = 0; i < 3; i++) {
    float val = c[i] + sc->grain * (n[0] + 0.4f * n[i + 1]);
    out[3 * x + i] = (uint8_t)(clampf(val, 0.0f, 255.0f) + 0.5f);
  }
}

/* Row y of the image (the octaves already on that row). */
static void render_row(scene *sc, const class_style *cs, int w, int h, int y, uint8_t *out) {
  float fy = (float)y, fw = (float)w, fh = (float)h;
  float vy = (fy - 0.5f * fh) / (0.5f * fh);
  for (int x = 0; x < w; x++) {
    float fx = (float)x;
    float hz = sc->horizon +
               sc->hill_amp * (octave_at(&sc->hill[0], fx) + octave_at(&sc->hill[1], fx));
    float s = clampf((fy - hz) * sc->inv_blur + 0.5f, 0.0f, 1.0f); /* weight of the ground */
    float tb = clampf(fy / (hz > 1.0f ? hz : 1.0f), 0.0f, 1.0f);
    float tf = clampf((fy - hz) / (fh - hz > 1.0f ? fh - hz : 1.0f), 0.0f, 1.0f);
    float t = 0.0f;
    for (int k = 0; k < TEX_OCTAVES; k++) t += octave_at(&sc->tex[k], fx);
    float dt = 0.0f;
    for (int k = 0; k < 3; k++) dt += octave_at(&sc->detail[k], fx);
    /* Sharpened into two-tone blobs with crisp edges, like leaves or gravel. */
    dt = clampf(dt * 4.0f, -1.0f, 1.0f) * clampf(0.5f + octave_at(&sc->mask, fx), 0.0f, 1.0f);
    float vx = (fx - 0.5f * fw) / (0.5f * fw);
    float g = (1.0f + lerpf(cs->tex_back, cs->tex_front, s) * t +
               lerpf(cs->detail_back, cs->detail_front, s) * dt) *
              (1.0f + sc->light_amp * (octave_at(&sc->light[0], fx) + octave_at(&sc->light[1], fx))) *
              (1.0f - sc->vignette * 0.5f * (vx * vx + vy * vy));
    float c[3];
    for (int i = 0; i < 3; i++)
      c[i] = g * lerpf(lerpf(sc->top[i], sc->low[i], tb), lerpf(sc->far[i], sc->near[i], tf), s);
    shade_objects(sc, cs, x, y, t, dt, c);
    put_pixel(sc, w, x, y, c, out);
  }
}

static void render(uint8_t *rgb, int w, int h, uint64_t seed, const class_style *cs) {
  stk__rng r;
  stk__rng_init(&r, seed, SALT_RENDER, 0);
  scene sc;
  scene_init(&sc, &r, w, h, cs);
  /* Hills vary along x only: they stay on noise row 0 and restart their
   * walk along it on every image row. */
  for (int k = 0; k < 2; k++) octave_row(&sc.hill[k], 0.0f);
  for (int y = 0; y < h; y++) {
    float fy = (float)y;
    for (int k = 0; k < 2; k++) {
      sc.hill[k].ix = INT_MIN;
      octave_row(&sc.light[k], fy);
    }
    for (int k = 0; k < TEX_OCTAVES; k++) octave_row(&sc.tex[k], fy);
    for (int k = 0; k < 3; k++) octave_row(&sc.detail[k], fy);
    octave_row(&sc.mask, fy);
    render_row(&sc, cs, w, h, y, rgb + (size_t)y * (size_t)w * 3);
  }
}

void stk__synth_render(uint8_t *rgb, int w, int h, uint64_t seed) {
  class_style cs;
  class_style_init(&cs, stk__mix64(seed ^ 0x243f6a8885a308d3ULL));
  render(rgb, w, h, seed, &cs);
}

/* Size and encoding as ImageNet's files have them: mostly 500x375 landscape
 * or portrait, some 500x333, squares and a spread of other shapes with a
 * 500-pixel long side. About three files in four are stored at quality 96
 * without chroma subsampling (ImageNet's Flickr resizes); the rest are 4:2:0
 * at a lower, varying quality. */
static void pick_file(uint64_t seed, int *w, int *h, stk__jpeg_enc_opts *o) {
  stk__rng r;
  stk__rng_init(&r, seed, SALT_FILE, 0);
  int p = (int)stk__rng_range(&r, 0, 100);
  int other = (int)stk__rng_range(&r, 280, MAX_SIDE);
  static const int sizes[][3] = {/* percent up to, width, height */
                                 {52, 500, 375}, {68, 375, 500}, {78, 500, 333},
                                 {82, 333, 500}, {85, 500, 500}, {89, 500, 400}};
  size_t i = 0;
  while (i < sizeof sizes / sizeof sizes[0] && p >= sizes[i][0]) i++;
  if (i < sizeof sizes / sizeof sizes[0]) {
    *w = sizes[i][1];
    *h = sizes[i][2];
  } else {
    *w = p < 95 ? MAX_SIDE : other;
    *h = p < 95 ? other : MAX_SIDE;
  }

  stk__jpeg_enc_defaults(o);
  if (stk__rng_uniform(&r) < 0.75) {
    o->quality = 96;
    o->h_samp = o->v_samp = 1;
  } else {
    o->quality = (int)stk__rng_range(&r, 75, 93);
  }
}

/* ---- dataset --------------------------------------------------------------- */

/* mkdir -p: creates `path` and its missing parents. */
static int make_dirs(const char *path, char *msg, size_t msglen) {
  size_t n = strlen(path);
  char *p = malloc(n + 1);
  if (!p) return stk__fail(msg, msglen, STK_ENOMEM, "synth: out of memory");
  memcpy(p, path, n + 1);
  for (char *s = p + 1; *s; s++) {
    if (*s != '/') continue;
    *s = '\0';
    mkdir(p, 0777); /* errors show in the final check */
    *s = '/';
  }
  int err = mkdir(p, 0777) == 0 ? 0 : errno;
  free(p);
  struct stat st;
  if (stat(path, &st) != 0 || !S_ISDIR(st.st_mode))
    return stk__fail(msg, msglen, STK_EIO, "synth: cannot create folder %s: %s", path,
                     strerror(err ? err : ENOTDIR));
  return STK_OK;
}

static int digits(int64_t v) {
  int d = 1;
  while (v >= 10) v /= 10, d++;
  return d;
}

int stk__synth_dataset(const char *dir, int64_t images, int classes, uint64_t seed,
                       stk__synth_progress cb, void *ctx, char *msg, size_t msglen) {
  if (!dir || !*dir) return stk__fail(msg, msglen, STK_EINVAL, "synth: no output folder");
  if (classes < 1 || images < classes)
    return stk__fail(msg, msglen, STK_EINVAL,
                     "synth: need 1 <= classes <= images, got %d classes and %" PRId64 " images",
                     classes, images);
  int rc = make_dirs(dir, msg, msglen);
  if (rc) return rc;

  /* Zero-padded to at least 4 and 8 digits; an int has at most 10 and an
   * int64_t at most 19, which bounds the names. */
  int cdig = digits(classes - 1), idig = digits(images - 1);
  cdig = cdig < 4 ? 4 : cdig > 10 ? 10 : cdig;
  idig = idig < 8 ? 8 : idig > 19 ? 19 : idig;
  size_t cap = strlen(dir) + 64;
  char *path = malloc(cap);
  uint8_t *rgb = malloc((size_t)MAX_SIDE * MAX_SIDE * 3);
  if (!path || !rgb) {
    rc = stk__fail(msg, msglen, STK_ENOMEM, "synth: out of memory");
    goto done;
  }
  for (int c = 0; c < classes && !rc; c++) {
    snprintf(path, cap, "%s/n%0*d", dir, cdig, c);
    rc = make_dirs(path, msg, msglen);
  }

  for (int64_t i = 0; i < images && !rc; i++) {
    int c = (int)(i % classes);
    stk__rng r;
    stk__rng_init(&r, seed, SALT_IMAGE, (uint64_t)i);
    uint64_t image_seed = stk__rng_next(&r);
    stk__rng_init(&r, seed, SALT_CLASS, (uint64_t)c);
    class_style cs;
    class_style_init(&cs, stk__rng_next(&r));

    int w, h;
    stk__jpeg_enc_opts opts;
    pick_file(image_seed, &w, &h, &opts);
    render(rgb, w, h, image_seed, &cs);
    snprintf(path, cap, "%s/n%0*d/img_%0*" PRId64 ".JPEG", dir, cdig, c, idig, i);
    uint8_t *jpg = NULL;
    size_t len = 0;
    rc = stk__jpeg_encode(rgb, w, h, &opts, &jpg, &len);
    if (rc) {
      stk__fail(msg, msglen, rc, "synth: encoding %s failed: %s", path, stk_strerror(rc));
      break;
    }
    rc = stk__write_file(path, jpg, len);
    int err = errno;
    free(jpg);
    if (rc) {
      stk__fail(msg, msglen, rc, "synth: cannot write %s: %s", path, strerror(err));
      break;
    }
    if (cb) cb(ctx, i + 1, images);
  }
done:
  free(rgb);
  free(path);
  return rc;
}

int stk_synth(const char *dir, int64_t images, int classes, uint64_t seed,
              void (*progress)(void *user, int64_t done, int64_t total), void *user, char *err,
              size_t errlen) {
  return stk__synth_dataset(dir, images, classes, seed, progress, user, err, errlen);
}

/* options.c: stk_options_init(), validation and typed access, all from the
 * table of options.h. */
#include "core/options.h"

#include <errno.h>
#include <float.h>
#include <math.h>
#include <limits.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>
#include <sys/stat.h>

#include "core/common.h"

/* Each row's type must be the field's C type: a row that says INT for a
 * float field would have its bytes misread, so refuse it at compile time. */
#define SIZE_OK_INT(s) ((s) == sizeof(int))
#define SIZE_OK_BOOL(s) ((s) == sizeof(int))
#define SIZE_OK_ENUM(s) ((s) == sizeof(int))
#define SIZE_OK_U64(s) ((s) == sizeof(uint64_t))
#define SIZE_OK_FLOAT(s) ((s) % sizeof(float) == 0 && (s) / sizeof(float) <= 4)
#define SIZE_OK_DOUBLE(s) ((s) == sizeof(double))
#define SIZE_OK_STR(s) ((s) == sizeof(const char *))
#define CHECK_ROW(name, type, def, lo, hi, choices, cli, py, doc)         \
  _Static_assert(SIZE_OK_##type(sizeof(((stk_options *)0)->name)),        \
                 "stk_options." #name " does not have the table's type " #type);
STK__OPTIONS(CHECK_ROW)
#undef CHECK_ROW
#define CHECK_ROW(name, type, def, lo, hi, choices, cli, py, only, doc)        \
  _Static_assert(SIZE_OK_##type(sizeof(((stk_pack_options *)0)->name)),        \
                 "stk_pack_options." #name " does not have the table's type " #type);
STK__PACK_OPTIONS(CHECK_ROW)
#undef CHECK_ROW

#define FIELD_SIZE(st, name) sizeof(((st *)0)->name)
/* a FLOAT row's elements are floats, a DOUBLE row's one element a double */
#define ELEM_INT 1
#define ELEM_BOOL 1
#define ELEM_ENUM 1
#define ELEM_U64 1
#define ELEM_STR 1
#define ELEM_FLOAT sizeof(float)
#define ELEM_DOUBLE sizeof(double)
#define COUNT_OF(st, name, type) \
  (STK__OPT_##type == STK__OPT_FLOAT ? (int)(FIELD_SIZE(st, name) / ELEM_##type) : 1)
#define ROW(name, type, def, lo, hi, choices, cli, py, doc)                             \
  {#name, STK__OPT_##type, offsetof(stk_options, name), FIELD_SIZE(stk_options, name), \
   COUNT_OF(stk_options, name, type), def, lo, hi, choices, cli, py, NULL, doc},
const stk__option stk__options[] = {STK__OPTIONS(ROW)};
#undef ROW
const int stk__num_options = (int)(sizeof stk__options / sizeof stk__options[0]);
#define ROW(name, type, def, lo, hi, choices, cli, py, only, doc)                          \
  {#name, STK__OPT_##type, offsetof(stk_pack_options, name),                               \
   FIELD_SIZE(stk_pack_options, name), COUNT_OF(stk_pack_options, name, type), def, lo, hi, \
   choices, cli, py, only, doc},
const stk__option stk__pack_options[] = {STK__PACK_OPTIONS(ROW)};
#undef ROW
const int stk__num_pack_options = (int)(sizeof stk__pack_options / sizeof stk__pack_options[0]);

const char *stk__option_type_name(stk__opt_type t) {
  switch (t) {
    case STK__OPT_INT: return "int";
    case STK__OPT_BOOL: return "bool";
    case STK__OPT_ENUM: return "enum";
    case STK__OPT_U64: return "uint64";
    case STK__OPT_FLOAT: return "float";
    case STK__OPT_STR: return "str";
  }
  return "?";
}

/* The row of `table` whose string at `key` (the offset of name, cli or py)
 * is `s`. */
static const stk__option *find(const stk__option *table, int n, size_t key, const char *s) {
  for (int i = 0; s && i < n; i++) {
    const char *v;
    memcpy(&v, (const char *)&table[i] + key, sizeof v);
    if (v && !strcmp(v, s)) return &table[i];
  }
  return NULL;
}

const stk__option *stk__option_by_name(const char *name) {
  return find(stk__options, stk__num_options, offsetof(stk__option, name), name);
}
int stk__option_zero(const stk__option *d, double *v) {
  static const struct {
    const char *name;
    double value;
  } zero[] = {
#define STK__ZERO_ROW(name, value) {#name, (double)(value)},
      STK__ZERO_MEANS(STK__ZERO_ROW)
#undef STK__ZERO_ROW
  };
  for (size_t i = 0; d && i < sizeof zero / sizeof zero[0]; i++)
    if (!strcmp(zero[i].name, d->name)) {
      *v = zero[i].value;
      return 1;
    }
  return 0;
}
const stk__option *stk__option_by_cli(const char *flag) {
  return find(stk__options, stk__num_options, offsetof(stk__option, cli), flag);
}
const stk__option *stk__option_by_py(const char *keyword) {
  return find(stk__options, stk__num_options, offsetof(stk__option, py), keyword);
}
const stk__option *stk__pack_option_by_cli(const char *flag) {
  return find(stk__pack_options, stk__num_pack_options, offsetof(stk__option, cli), flag);
}
const stk__option *stk__pack_option_by_py(const char *keyword) {
  return find(stk__pack_options, stk__num_pack_options, offsetof(stk__option, py), keyword);
}

int stk__option_choice(const stk__option *d, const char *name) {
  if (d->type != STK__OPT_ENUM || !d->choices || !name) return -1;
  size_t n = strlen(name);
  const char *p = d->choices;
  for (int v = 0;; v++) {
    const char *bar = strchr(p, '|');
    size_t len = bar ? (size_t)(bar - p) : strlen(p);
    if (len == n && !strncmp(p, name, n)) return v;
    if (!bar) return -1;
    p = bar + 1;
  }
}

void stk__option_choice_name(const stk__option *d, int v, char *buf, size_t len) {
  if (len) buf[0] = '\0';
  if (d->type != STK__OPT_ENUM || !d->choices || v < 0 || !len) return;
  const char *p = d->choices;
  for (int i = 0; i < v; i++) {
    p = strchr(p, '|');
    if (!p) return;
    p++;
  }
  size_t n = strcspn(p, "|");
  if (n >= len) n = len - 1;
  memcpy(buf, p, n);
  buf[n] = '\0';
}

/* "a, b or c" from "a|b|c", for messages. */
static void choices_text(const stk__option *d, char *buf, size_t len) {
  size_t k = 0;
  int n = 1;
  for (const char *p = d->choices; *p; p++) n += *p == '|';
  for (int v = 0; v < n; v++) {
    char name[64];
    stk__option_choice_name(d, v, name, sizeof name);
    const char *sep = v == 0 ? "" : v == n - 1 ? " or " : ", ";
    int w = snprintf(buf + k, len - k, "%s%s", sep, name);
    if (w < 0 || (size_t)w >= len - k) return;
    k += (size_t)w;
  }
}

/* Fields are reached through memcpy: the enums and ints share a size (see
 * SIZE_OK_*), and memcpy sidesteps any question of access through the
 * wrong type. */
static void *field(void *o, const stk__option *d) { return (char *)o + d->offset; }
static const void *cfield(const void *o, const stk__option *d) {
  return (const char *)o + d->offset;
}

long long stk__option_get_int(const void *o, const stk__option *d) {
  int v;
  memcpy(&v, cfield(o, d), sizeof v);
  return v;
}
void stk__option_set_int(void *o, const stk__option *d, long long v) {
  int x = (int)v;
  memcpy(field(o, d), &x, sizeof x);
}
uint64_t stk__option_get_u64(const void *o, const stk__option *d) {
  uint64_t v;
  memcpy(&v, cfield(o, d), sizeof v);
  return v;
}
void stk__option_set_u64(void *o, const stk__option *d, uint64_t v) {
  memcpy(field(o, d), &v, sizeof v);
}
/* A DOUBLE row: one element of 8 bytes (a float array of two has 4 each). */
static int is_double(const stk__option *d) { return d->size / (size_t)d->count == sizeof(double); }
double stk__option_get_float(const void *o, const stk__option *d, int k) {
  if (is_double(d)) {
    double v;
    memcpy(&v, cfield(o, d), sizeof v);
    return v;
  }
  float v;
  memcpy(&v, (const char *)cfield(o, d) + (size_t)k * sizeof v, sizeof v);
  return v;
}
void stk__option_set_float(void *o, const stk__option *d, int k, double v) {
  if (is_double(d)) {
    memcpy(field(o, d), &v, sizeof v);
    return;
  }
  float f = (float)v;
  memcpy((char *)field(o, d) + (size_t)k * sizeof f, &f, sizeof f);
}
void stk__option_set_str(void *o, const stk__option *d, const char *v) {
  memcpy(field(o, d), &v, sizeof v);
}

/* Each row's default into its field. */
static void set_defaults(void *o, const stk__option *table, int n) {
  for (int i = 0; i < n; i++) {
    const stk__option *d = &table[i];
    switch (d->type) {
      case STK__OPT_INT:
      case STK__OPT_BOOL:
      case STK__OPT_ENUM: stk__option_set_int(o, d, (long long)d->def[0]); break;
      case STK__OPT_U64: stk__option_set_u64(o, d, (uint64_t)d->def[0]); break;
      case STK__OPT_FLOAT:
        for (int k = 0; k < d->count; k++) stk__option_set_float(o, d, k, d->def[k]);
        break;
      case STK__OPT_STR: stk__option_set_str(o, d, NULL); break;
    }
  }
}

/* The defaults into the first `size` bytes of the caller's struct (its
 * header's size, which may be older and shorter than this library's). */
void stk_options_init_sized(stk_options *o, size_t size) {
  if (!o || size < sizeof o->struct_size) return;
  stk_options full;
  memset(&full, 0, sizeof full);
  set_defaults(&full, stk__options, stk__num_options);
  if (size > sizeof full) size = sizeof full;
  full.struct_size = size;
  memcpy(o, &full, size);
}

void stk_pack_options_init_sized(stk_pack_options *o, size_t size) {
  if (!o || size < sizeof o->struct_size) return;
  stk_pack_options full;
  memset(&full, 0, sizeof full); /* the callbacks: none */
  set_defaults(&full, stk__pack_options, stk__num_pack_options);
  if (size > sizeof full) size = sizeof full;
  full.struct_size = size;
  memcpy(o, &full, size);
}

/* The functions behind the macros' names, for callers that cannot use the
 * macros (the parentheses keep the macros from expanding here). */
void(stk_options_init)(stk_options *o) { stk_options_init_sized(o, sizeof *o); }
void(stk_pack_options_init)(stk_pack_options *o) { stk_pack_options_init_sized(o, sizeof *o); }

int stk__option_check_int(const stk__option *d, long long v, char *err, size_t errlen) {
  if ((double)v >= d->min && (double)v <= d->max) return STK_OK;
  if (d->type == STK__OPT_BOOL)
    return stk__fail(err, errlen, STK_EINVAL, "%s must be 0 or 1, got %lld", d->name, v);
  if (d->type == STK__OPT_ENUM) {
    char names[160];
    choices_text(d, names, sizeof names);
    return stk__fail(err, errlen, STK_EINVAL, "%s must be %s, got %lld", d->name, names, v);
  }
  if (d->max >= STK__INT_MAX)
    return stk__fail(err, errlen, STK_EINVAL, "%s must be at least %lld, got %lld", d->name,
                     (long long)d->min, v);
  return stk__fail(err, errlen, STK_EINVAL, "%s must be in %lld..%lld, got %lld", d->name,
                   (long long)d->min, (long long)d->max, v);
}

int stk__option_check_float(const stk__option *d, int k, double v, char *err, size_t errlen) {
  if (v >= d->min && v <= d->max) return STK_OK; /* also refuses NaN */
  char name[64];
  if (d->count > 1)
    snprintf(name, sizeof name, "%s[%d]", d->name, k);
  else
    snprintf(name, sizeof name, "%s", d->name);
  if (d->min == -STK__INF && d->max == STK__INF)
    return stk__fail(err, errlen, STK_EINVAL, "%s must be a number, got %g", name, v);
  if (d->max == STK__INF)
    return stk__fail(err, errlen, STK_EINVAL, "%s must be at least %g, got %g", name, d->min, v);
  return stk__fail(err, errlen, STK_EINVAL, "%s must be in [%g, %g], got %g", name, d->min,
                   d->max, v);
}

int stk__option_check_u64(const stk__option *d, uint64_t v, char *err, size_t errlen) {
  if ((double)v >= d->min && (double)v <= d->max) return STK_OK;
  if (d->max >= STK__U64_MAX)
    return stk__fail(err, errlen, STK_EINVAL, "%s must be at least %.0f, got %llu", d->name,
                     d->min, (unsigned long long)v);
  return stk__fail(err, errlen, STK_EINVAL, "%s must be in [%.0f, %.0f], got %llu", d->name,
                   d->min, d->max, (unsigned long long)v);
}

/* The range part of the validation of one field. */
static int check_field(const void *o, const stk__option *d, char *err, size_t errlen) {
  switch (d->type) {
    case STK__OPT_INT:
    case STK__OPT_BOOL:
    case STK__OPT_ENUM: return stk__option_check_int(d, stk__option_get_int(o, d), err, errlen);
    case STK__OPT_U64: return stk__option_check_u64(d, stk__option_get_u64(o, d), err, errlen);
    case STK__OPT_FLOAT:
      for (int k = 0; k < d->count; k++) {
        int rc = stk__option_check_float(d, k, stk__option_get_float(o, d, k), err, errlen);
        if (rc) return rc;
      }
      return STK_OK;
    case STK__OPT_STR: return STK_OK;
  }
  return STK_OK;
}

/* The rules that tie fields together, which a per-field range cannot say,
 * in steps; each fails with the first rule broken. */
#define BAD(...) return stk__fail(err, errlen, STK_EINVAL, __VA_ARGS__)

/* The resize and the random crop. */
static int check_crop(const stk_options *o, char *err, size_t errlen) {
  if (o->resize_size > 0 && o->resize_size < o->size)
    BAD("resize_size must be 0 or at least size (%d), got %d", o->size, o->resize_size);
  if (!(o->scale[0] > 0 && o->scale[0] <= o->scale[1] && o->scale[1] <= 1.0f))
    BAD("scale must satisfy 0 < scale[0] <= scale[1] <= 1");
  /* an infinite ratio passed the range and then failed every file's crop */
  if (!(o->ratio[0] > 0 && o->ratio[0] <= o->ratio[1] && isfinite(o->ratio[1])))
    BAD("ratio must satisfy 0 < ratio[0] <= ratio[1] < inf, got (%g, %g)", (double)o->ratio[0],
        (double)o->ratio[1]);
  /* RandomResizedCrop's fallback crop is w x round(w / ratio[0]) (or
   * round(h * ratio[1]) x h): past the longest side an image can have
   * (65,535: JPEG's, WebP's 16,383), that is 0 for every image, and each
   * file failed in turn, blamed for the option's fault */
  if (o->ratio[0] > 65535.0f || o->ratio[1] < 1.0f / 65535.0f)
    BAD("ratio (%g, %g) gives every image an empty crop: an aspect ratio (width / height) "
        "must be within [1/65535, 65535], as no image side is longer; ImageNet training uses "
        "(3/4, 4/3)",
        (double)o->ratio[0], (double)o->ratio[1]);
  return STK_OK;
}

/* Where indexes are kept. */
static int check_index_dir(const stk_options *o, char *err, size_t errlen) {
  /* A file as index_dir was ignored without a word (no index written or
   * read): refuse it, as an unwritable folder is not (that is no error). */
  if (o->index != 0 && o->index_dir && *o->index_dir) {
    struct stat ist;
    int found = stat(o->index_dir, &ist) == 0, below_file = !found && errno == ENOTDIR;
    if ((found && !S_ISDIR(ist.st_mode)) || below_file)
      BAD("index_dir %s is not a folder%s", o->index_dir,
          below_file ? " (a part of its path is a file)" : "");
  }
  return STK_OK;
}

/* The normalisation. */
static int check_norm(const stk_options *o, char *err, size_t errlen) {
  for (int c = 0; c < 3; c++) {
    if (!(o->std[c] != 0)) BAD("std[%d] must not be 0", c);
    if (!isfinite(o->mean[c]) || !isfinite(o->std[c]))
      BAD("mean[%d] and std[%d] must be finite, got %g and %g", c, c, (double)o->mean[c],
          (double)o->std[c]);
    /* A tiny std made every output infinite without a word: the pixel
     * range 0..1, normalised, must stay finite in the output's type. */
    double top = o->dtype == STK_DTYPE_FLOAT16 ? 65504.0 : (double)FLT_MAX;
    float inv = 1.0f / o->std[c];
    double lo = fabs((0.0 - o->mean[c]) * (double)inv), hi = fabs((1.0 - o->mean[c]) * (double)inv);
    if (o->dtype != STK_DTYPE_UINT8 && (!isfinite(inv) || !(lo <= top) || !(hi <= top)))
      BAD("std[%d] = %g normalises pixels to +-%g, beyond what %s holds: use a std near the "
          "data's (ImageNet's is 0.229, 0.224, 0.225)",
          c, (double)o->std[c], isfinite(inv) ? (lo > hi ? lo : hi) : INFINITY,
          o->dtype == STK_DTYPE_FLOAT16 ? "float16" : "float32");
  }
  return STK_OK;
}

/* The sampler and the GPU share. */
static int check_sampling(const stk_options *o, char *err, size_t errlen) {
  if (o->rank >= o->world_size)
    BAD("rank must be in [0, world_size=%d), got %d", o->world_size, o->rank);
  if (o->ra_reps > 0 && o->weights_file)
    BAD("ra_reps and weights do not go together: weighted sampling draws with replacement, "
        "RASampler repeats each sample of a permutation");
  if (o->ra_reps > 0 && o->shard_drop_last)
    BAD("ra_reps and shard_drop_last do not go together: RASampler cuts every rank's share to "
        "the same length itself");
  /* -1 is a mode, not the end of a range: (-1, 0) means nothing */
  if (!(o->gpu_cpu_share == -1.0f || (o->gpu_cpu_share >= 0.0f && o->gpu_cpu_share <= 1.0f)))
    BAD("gpu_cpu_share must be -1 (adaptive) or in [0, 1], got %g", (double)o->gpu_cpu_share);
  return STK_OK;
}

/* The augmentations' own parameters. */
static int check_augment(const stk_options *o, char *err, size_t errlen) {
  if (o->auto_augment == 2 && o->ra_magnitude >= o->magnitude_bins)
    BAD("ra_magnitude must be below magnitude_bins (%d), got %d", o->magnitude_bins,
        o->ra_magnitude);
  if (o->color_jitter[3] > 0.5f) BAD("color_jitter hue must be in [0, 0.5], got %g",
                                     (double)o->color_jitter[3]);
  if (o->blur_kernel > 0 && o->blur_kernel % 2 == 0)
    BAD("blur_kernel must be odd, got %d", o->blur_kernel);
  if (o->blur_kernel > 0 && !(o->blur_sigma[0] > 0 && o->blur_sigma[0] <= o->blur_sigma[1] &&
                              isfinite(o->blur_sigma[1])))
    BAD("blur_sigma must satisfy 0 < blur_sigma[0] <= blur_sigma[1] < inf");
  if (o->erase_prob > 0) {
    if (!(o->erase_scale[0] <= o->erase_scale[1]))
      BAD("erase_scale must satisfy erase_scale[0] <= erase_scale[1]");
    if (!(o->erase_ratio[0] > 0 && o->erase_ratio[0] <= o->erase_ratio[1] &&
          isfinite(o->erase_ratio[1])))
      BAD("erase_ratio must satisfy 0 < erase_ratio[0] <= erase_ratio[1] < inf");
    for (int c = 0; c < 3; c++)
      if (!isfinite(o->erase_value[c])) BAD("erase_value[%d] must be finite", c);
    if (o->erase_random && o->erase_per_channel)
      BAD("erase_random (a value per element) and erase_per_channel (per channel) exclude "
          "each other");
  }
  return STK_OK;
}

/* Where the augmentations and the mix may run. */
static int check_augment_use(const stk_options *o, char *err, size_t errlen) {
  int aug = o->auto_augment || o->vflip_prob > 0 || o->grayscale_prob > 0 || o->blur_kernel > 0 ||
            o->erase_prob > 0 || o->color_jitter[0] > 0 || o->color_jitter[1] > 0 ||
            o->color_jitter[2] > 0 || o->color_jitter[3] > 0;
  if (aug && o->pipeline != STK_PIPELINE_TRAIN)
    BAD("the augmentations (auto_augment, vflip_prob, color_jitter, grayscale_prob, blur_kernel, "
        "erase_prob) belong to the train pipeline");
  if (o->auto_augment == 5 && !(o->augmix_alpha > 0))
    BAD("augmix_alpha must be positive, got %g", (double)o->augmix_alpha);
  /* AugMix mixes chains in float per pixel: the kernel that runs the ops on
   * the GPU holds one 8-bit tile per image and has no room for that */
  if (o->device >= 0 && o->auto_augment == 5)
    BAD("AugMix runs on the CPU loader only: use device=\"cpu\" (or another policy on the GPU)");
  if (o->device >= 0 && o->blur_kernel > 63)
    BAD("blur_kernel must be at most 63 on the GPU, got %d", o->blur_kernel);
  /* an infinite alpha passed the range and would draw NaN lambdas */
  if (!isfinite(o->mix_mixup_alpha) || !isfinite(o->mix_cutmix_alpha))
    BAD("mix_mixup_alpha and mix_cutmix_alpha must be finite");
  if ((o->mix_mixup_alpha > 0 || o->mix_cutmix_alpha > 0) && o->pipeline != STK_PIPELINE_TRAIN)
    BAD("mix: MixUp and CutMix (mix_mixup_alpha, mix_cutmix_alpha) belong to the train pipeline");
  return STK_OK;
}

#undef BAD

int stk__options_validate(const stk_options *o, char *err, size_t errlen) {
  int rc = stk_source_check(o->root, o->list_file, err, errlen);
  for (int i = 0; rc == STK_OK && i < stk__num_options; i++)
    rc = check_field(o, &stk__options[i], err, errlen);
  if (rc == STK_OK) rc = check_crop(o, err, errlen);
  if (rc == STK_OK) rc = check_index_dir(o, err, errlen);
  if (rc == STK_OK) rc = check_norm(o, err, errlen);
  if (rc == STK_OK) rc = check_sampling(o, err, errlen);
  if (rc == STK_OK) rc = check_augment(o, err, errlen);
  if (rc == STK_OK) rc = check_augment_use(o, err, errlen);
  return rc;
}

int stk__options_adopt(const stk_options *opt, stk_options *o, char *err, size_t errlen) {
  if (opt->struct_size == 0 || opt->struct_size > sizeof(stk_options))
    return stk__fail(err, errlen, STK_EVERSION,
                     "options struct of %zu bytes, this library knows %zu: call stk_options_init()",
                     opt->struct_size, sizeof(stk_options));
  stk_options_init(o);
  memcpy(o, opt, opt->struct_size); /* fields the caller's header lacks keep defaults */
  o->struct_size = sizeof *o;
  return STK_OK;
}

int stk_source_check(const char *root, const char *list_file, char *err, size_t errlen) {
  if (!root == !list_file)
    return stk__fail(err, errlen, STK_EINVAL, "set exactly one of root and list_file");
  return STK_OK;
}

int stk__pack_options_validate(const stk_pack_options *o, char *err, size_t errlen) {
  /* (no "pack:" prefix: the CLI and Python name the command themselves) */
  int rc = stk_source_check(o->root, o->list_file, err, errlen);
  if (rc) return rc;
  if (!o->output || !*o->output)
    return stk__fail(err, errlen, STK_EINVAL, "output must be set");
  for (int i = 0; i < stk__num_pack_options; i++) {
    rc = check_field(o, &stk__pack_options[i], err, errlen);
    if (rc) return rc;
  }
  if (o->format == STK_PACK_TAR && (o->device >= 0 || o->plain_chroma))
    return stk__fail(err, errlen, STK_EINVAL,
                     "device and plain_chroma apply to a cache (tar shards keep each file's "
                     "bytes: nothing is decoded)");
  if (o->plain_chroma && o->device < 0)
    return stk__fail(err, errlen, STK_EINVAL,
                     "plain_chroma applies to a pack on a device (the CPU pack decodes as "
                     "libjpeg-turbo does)");
  /* a GPU pack lands each image in a slot of max_side x max_side */
  if (o->device >= 0 && o->format == STK_PACK_CACHE &&
      (o->max_side < 1 || o->max_side > STK__GPU_MAX_SIDE))
    return stk__fail(err, errlen, STK_EINVAL,
                     "a pack on a device needs max_side in 1..%d (it sizes the GPU's output), "
                     "got %d", STK__GPU_MAX_SIDE, o->max_side);
  return STK_OK;
}

int stk__parse_size(const char *text, uint64_t *out) {
  if (!text || *text < '0' || *text > '9') return -1; /* no sign, no blank */
  char *end = NULL;
  errno = 0;
  unsigned long long v = strtoull(text, &end, 10);
  if (errno || end == text) return -1;
  int shift = 0;
  switch (*end) {
    case 'k': case 'K': shift = 10; end++; break;
    case 'm': case 'M': shift = 20; end++; break;
    case 'g': case 'G': shift = 30; end++; break;
    case 't': case 'T': shift = 40; end++; break;
    default: break;
  }
  if (shift && *end == 'i') end++; /* "1GiB" means what "1G" means */
  if (*end == 'B' || *end == 'b') end++;
  if (*end) return -1;
  if (shift && v > (ULLONG_MAX >> shift)) return -1;
  *out = (uint64_t)(v << shift);
  return 0;
}

int stk__option_parse(void *o, const stk__option *d, const char *text, char *err,
                      size_t errlen) {
  if (!text) return stk__fail(err, errlen, STK_EINVAL, "%s needs a value", d->name);
  switch (d->type) {
    case STK__OPT_INT: {
      char *end = NULL;
      errno = 0;
      long long v = strtoll(text, &end, 10);
      if (errno || end == text || *end)
        return stk__fail(err, errlen, STK_EINVAL, "%s expects an integer, got '%s'", d->name, text);
      int rc = stk__option_check_int(d, v, err, errlen);
      if (!rc) stk__option_set_int(o, d, v);
      return rc;
    }
    case STK__OPT_BOOL: {
      static const char *const yes[] = {"1", "true", "yes", "on"}, *const no[] = {"0", "false", "no", "off"};
      for (int i = 0; i < 4; i++) {
        if (!strcasecmp(text, yes[i])) return stk__option_set_int(o, d, 1), STK_OK;
        if (!strcasecmp(text, no[i])) return stk__option_set_int(o, d, 0), STK_OK;
      }
      return stk__fail(err, errlen, STK_EINVAL, "%s expects 0 or 1, got '%s'", d->name, text);
    }
    case STK__OPT_ENUM: {
      int v = stk__option_choice(d, text);
      if (v < 0) {
        char names[160];
        choices_text(d, names, sizeof names);
        return stk__fail(err, errlen, STK_EINVAL, "%s must be %s, got '%s'", d->name, names, text);
      }
      stk__option_set_int(o, d, v);
      return STK_OK;
    }
    case STK__OPT_U64: {
      uint64_t v;
      if (stk__parse_size(text, &v))
        return stk__fail(err, errlen, STK_EINVAL,
                         "%s expects a non-negative integer (K, M, G, T suffixes allowed), got '%s'",
                         d->name, text);
      int rc = stk__option_check_u64(d, v, err, errlen);
      if (!rc) stk__option_set_u64(o, d, v);
      return rc;
    }
    case STK__OPT_FLOAT: {
      double v[4];
      const char *p = text;
      for (int k = 0; k < d->count; k++) {
        char *end = NULL;
        errno = 0;
        double x = strtod(p, &end);
        int last = k == d->count - 1;
        if (errno || end == p || (last ? *end != '\0' : *end != ','))
          return d->count == 1
                     ? stk__fail(err, errlen, STK_EINVAL, "%s expects a number, got '%s'", d->name, text)
                     : stk__fail(err, errlen, STK_EINVAL,
                                 "%s expects %d comma-separated numbers, got '%s'", d->name,
                                 d->count, text);
        int rc = stk__option_check_float(d, k, x, err, errlen);
        if (rc) return rc;
        v[k] = x;
        p = end + 1;
      }
      for (int k = 0; k < d->count; k++) stk__option_set_float(o, d, k, v[k]);
      return STK_OK;
    }
    case STK__OPT_STR:
      if (!*text) return stk__fail(err, errlen, STK_EINVAL, "%s must not be empty", d->name);
      stk__option_set_str(o, d, text);
      return STK_OK;
  }
  return STK_EINVAL;
}

/* ---- the tables through the public API ---------------------------------- */

static const stk__option *table_of(stk_option_table t, int *n) {
  switch (t) {
    case STK_OPTIONS_LOADER: *n = stk__num_options; return stk__options;
    case STK_OPTIONS_PACK: *n = stk__num_pack_options; return stk__pack_options;
  }
  *n = 0;
  return NULL;
}

int stk_option_count(stk_option_table t) {
  int n;
  table_of(t, &n);
  return n;
}

/* The default of row d as a flag would take it, from the struct's init. */
static void default_text(const void *def, const stk__option *d, char *buf, size_t len) {
  buf[0] = '\0';
  switch (d->type) {
    case STK__OPT_ENUM: stk__option_choice_name(d, (int)stk__option_get_int(def, d), buf, len); break;
    case STK__OPT_BOOL: snprintf(buf, len, "%s", stk__option_get_int(def, d) ? "on" : "off"); break;
    case STK__OPT_INT: snprintf(buf, len, "%lld", stk__option_get_int(def, d)); break;
    case STK__OPT_U64:
      snprintf(buf, len, "%llu", (unsigned long long)stk__option_get_u64(def, d));
      break;
    case STK__OPT_FLOAT: {
      size_t k = 0;
      for (int i = 0; i < d->count && k < len; i++) {
        int w = snprintf(buf + k, len - k, "%s%g", i ? "," : "",
                         (double)stk__option_get_float(def, d, i));
        if (w < 0) break;
        k += (size_t)w;
      }
      break;
    }
    case STK__OPT_STR: break;
  }
}

int stk_option_info(stk_option_table t, int i, stk_option_desc *out) {
  int n;
  const stk__option *table = table_of(t, &n);
  if (!out || i < 0 || i >= n) return STK_EINVAL;
  const stk__option *d = &table[i];
  memset(out, 0, sizeof *out);
  out->name = d->name;
  out->type = stk__option_type_name(d->type);
  out->count = d->count;
  out->min = d->min;
  out->max = d->max;
  out->choices = d->choices;
  out->flag = d->cli;
  out->keyword = d->py;
  out->doc = d->doc;
  out->only = d->only;
  if (t == STK_OPTIONS_LOADER) {
    stk_options def;
    stk_options_init(&def);
    default_text(&def, d, out->default_text, sizeof out->default_text);
  } else {
    stk_pack_options def;
    stk_pack_options_init(&def);
    default_text(&def, d, out->default_text, sizeof out->default_text);
  }
  return STK_OK;
}

int stk_option_find_flag(stk_option_table t, const char *flag) {
  int n;
  const stk__option *table = table_of(t, &n);
  const stk__option *d = find(table, n, offsetof(stk__option, cli), flag);
  return d ? (int)(d - table) : -1;
}

/* A flag's value into its field; a bool flag without a value is a switch. */
static int parse_flag(void *o, const stk__option *d, const char *flag, const char *value,
                      char *err, size_t errlen) {
  if (!d) return stk__fail(err, errlen, STK_EINVAL, "unknown option %s", flag ? flag : "(null)");
  if (d->type == STK__OPT_BOOL && !value) {
    stk__option_set_int(o, d, 1);
    return STK_OK;
  }
  return stk__option_parse(o, d, value, err, errlen);
}

int stk_options_parse_flag(stk_options *o, const char *flag, const char *value, char *err,
                           size_t errlen) {
  return parse_flag(o, stk__option_by_cli(flag), flag, value, err, errlen);
}

int stk_pack_options_parse_flag(stk_pack_options *o, const char *flag, const char *value,
                                char *err, size_t errlen) {
  return parse_flag(o, stk__pack_option_by_cli(flag), flag, value, err, errlen);
}

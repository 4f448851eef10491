/* test_options.c: the table of core/options.h covers every field of
 * stk_options, its defaults are the documented ones, and every range is
 * enforced at its bounds. */
#include <math.h>
#include <stddef.h>
#include <stdio.h>
#include <string.h>

#include "check.h"
#include "core/options.h"
#include "stoker.h"

/* Every byte of stk_options belongs to struct_size, to a row of the table,
 * or to padding. Padding is told apart with the compiler's own knowledge of
 * the layout where it has it; otherwise a gap is accepted as padding only
 * when it is shorter than the alignment the next field needs. */
static void test_table_covers_the_struct(void) {
  unsigned char owner[sizeof(stk_options)];
  memset(owner, 0, sizeof owner);
  for (size_t b = 0; b < sizeof(size_t); b++) owner[offsetof(stk_options, struct_size) + b] = 1;
  for (int i = 0; i < stk__num_options; i++) {
    const stk__option *d = &stk__options[i];
    CHECK_MSG(d->offset + d->size <= sizeof(stk_options), "%s lies outside the struct", d->name);
    for (size_t b = d->offset; b < d->offset + d->size && b < sizeof owner; b++) {
      CHECK_MSG(owner[b] == 0, "byte %zu of %s also belongs to another row", b, d->name);
      owner[b] = 1;
    }
    if (i > 0) CHECK_MSG(d->offset > stk__options[i - 1].offset, "%s is out of declaration order", d->name);
    CHECK_MSG(stk__option_by_name(d->name) == d, "%s is listed twice", d->name);
    if (d->cli) CHECK_MSG(stk__option_by_cli(d->cli) == d, "flag %s is used twice", d->cli);
    if (d->py) CHECK_MSG(stk__option_by_py(d->py) == d, "keyword %s is used twice", d->py);
    CHECK_MSG(d->doc && d->doc[0], "%s has no doc", d->name);
    CHECK_MSG((d->type == STK__OPT_ENUM) == (d->choices != NULL), "%s: choices iff enum", d->name);
  }
  int padding_known = 0;
  unsigned char pad[sizeof(stk_options)];
#if defined(__has_builtin)
#if __has_builtin(__builtin_clear_padding)
  stk_options probe;
  memset(&probe, 0xff, sizeof probe);
  __builtin_clear_padding(&probe);
  memcpy(pad, &probe, sizeof pad);
  for (size_t b = 0; b < sizeof pad; b++) pad[b] = pad[b] == 0; /* 1 = padding */
  padding_known = 1;
#endif
#endif
  size_t gap = 0;
  for (size_t b = 0; b < sizeof owner; b++) {
    if (padding_known) {
      CHECK_MSG(owner[b] || pad[b], "byte %zu of stk_options is in no row of STK__OPTIONS", b);
    } else if (!owner[b]) {
      gap++;
    } else {
      CHECK_MSG(gap < sizeof(void *), "%zu bytes before offset %zu are in no row", gap, b);
      gap = 0;
    }
  }
  CHECK_MSG(gap < sizeof(void *), "the last %zu bytes of stk_options are in no row", gap);
}

/* The defaults of stoker.h's comments, written out independently. */
static void test_defaults(void) {
  stk_options o;
  memset(&o, 0x5a, sizeof o);
  stk_options_init(&o);
  CHECK_EQ_INT(o.struct_size, sizeof o);
  CHECK(o.root == NULL && o.list_file == NULL && o.list_base == NULL && o.index_dir == NULL);
  CHECK_EQ_INT(o.pipeline, STK_PIPELINE_TRAIN);
  CHECK_EQ_INT(o.size, 224);
  CHECK_EQ_INT(o.resize_size, 0);
  CHECK(o.scale[0] == 0.08f && o.scale[1] == 1.0f);
  CHECK(o.ratio[0] == 3.0f / 4.0f && o.ratio[1] == 4.0f / 3.0f);
  CHECK(o.flip_prob == 0.5f);
  CHECK(o.mean[0] == 0.485f && o.mean[1] == 0.456f && o.mean[2] == 0.406f);
  CHECK(o.std[0] == 0.229f && o.std[1] == 0.224f && o.std[2] == 0.225f);
  CHECK_EQ_INT(o.dct_scaling, -1);
  CHECK_EQ_INT(o.dtype, STK_DTYPE_FLOAT32);
  CHECK_EQ_INT(o.layout, STK_LAYOUT_NCHW);
  CHECK_EQ_INT(o.batch_size, 256);
  CHECK_EQ_INT(o.drop_last, 0);
  CHECK_EQ_INT(o.shuffle, -1);
  CHECK(o.seed == 0);
  CHECK_EQ_INT(o.rank, 0);
  CHECK_EQ_INT(o.world_size, 1);
  CHECK_EQ_INT(o.shard_drop_last, 0);
  CHECK_EQ_INT(o.threads, 0);
  CHECK_EQ_INT(o.prefetch, 2);
  CHECK_EQ_INT(o.device, -1);
  CHECK(o.max_device_bytes == 0);
  CHECK_EQ_INT(o.on_error, STK_ON_ERROR_RAISE);
  CHECK(o.max_pixels == 178956970ULL);
  CHECK(o.max_file_bytes == 256ULL << 20);
  CHECK_EQ_INT(o.max_consecutive_failures, 100);
  CHECK(o.gpu_cpu_share == -1.0f);
  CHECK_EQ_INT(o.index, -1);
  CHECK_EQ_INT(o.shuffle_buffer, 0);
  CHECK_EQ_INT(o.allow_stale_cache, 0);
  /* the enums' names follow their values */
  char name[32];
  stk__option_choice_name(stk__option_by_name("dtype"), STK_DTYPE_BFLOAT16, name, sizeof name);
  CHECK(!strcmp(name, "bfloat16"));
  CHECK_EQ_INT(stk__option_choice(stk__option_by_name("dtype"), "uint8"), STK_DTYPE_UINT8);
  CHECK_EQ_INT(stk__option_choice(stk__option_by_name("layout"), "nhwc"), STK_LAYOUT_NHWC);
  CHECK_EQ_INT(stk__option_choice(stk__option_by_name("on_error"), "skip"), STK_ON_ERROR_SKIP);
  CHECK_EQ_INT(stk__option_choice(stk__option_by_name("pipeline"), "eval"), STK_PIPELINE_EVAL);
  CHECK_EQ_INT(stk__option_choice(stk__option_by_name("pipeline"), "evaluate"), -1);
}

/* Options that pass validation, whatever field is then moved. */
static void valid(stk_options *o) {
  stk_options_init(o);
  o->root = "data";
  o->world_size = 4; /* so that rank's own range is reachable */
  o->resize_size = 0;
}

static int validate_msg(const stk_options *o, const char *want) {
  char err[256] = "";
  int rc = stk__options_validate(o, err, sizeof err);
  if (rc != STK_OK && want && !strstr(err, want)) {
    fprintf(stderr, "message \"%s\" does not name %s\n", err, want);
    return -1000;
  }
  return rc;
}

/* Each row's bounds: the bounds themselves pass, one step outside fails and
 * names the field. */
static void test_ranges(void) {
  stk_options o;
  valid(&o);
  CHECK_EQ_INT(validate_msg(&o, NULL), STK_OK);
  int checked = 0;
  for (int i = 0; i < stk__num_options; i++) {
    const stk__option *d = &stk__options[i];
    switch (d->type) {
      case STK__OPT_INT:
      case STK__OPT_BOOL:
      case STK__OPT_ENUM: {
        long long lo = (long long)d->min, hi = (long long)d->max;
        if (!strcmp(d->name, "rank")) hi = 3; /* below world_size (a cross rule beyond) */
        valid(&o);
        if (!strcmp(d->name, "world_size")) o.rank = 0;
        stk__option_set_int(&o, d, lo);
        CHECK_MSG(validate_msg(&o, NULL) == STK_OK, "%s = %lld refused", d->name, lo);
        valid(&o);
        stk__option_set_int(&o, d, hi);
        if (!strcmp(d->name, "size")) o.resize_size = 0;
        CHECK_MSG(validate_msg(&o, NULL) == STK_OK, "%s = %lld refused", d->name, hi);
        if (lo > -2147483647LL - 1) {
          valid(&o);
          stk__option_set_int(&o, d, lo - 1);
          CHECK_MSG(validate_msg(&o, d->name) == STK_EINVAL, "%s = %lld accepted", d->name, lo - 1);
        }
        if (hi < 2147483647LL) {
          valid(&o);
          stk__option_set_int(&o, d, hi + 1);
          CHECK_MSG(validate_msg(&o, d->name) == STK_EINVAL, "%s = %lld accepted", d->name, hi + 1);
        }
        checked++;
        break;
      }
      case STK__OPT_FLOAT:
        for (int k = 0; k < d->count; k++) {
          double lo = d->min, hi = d->max;
          if (isfinite(lo)) {
            valid(&o);
            /* a bound that a cross rule refuses on its own (scale[0] = 0,
             * ratio = 0) is checked by the rule, in test_cross_rules */
            int cross = !strcmp(d->name, "scale") || !strcmp(d->name, "ratio");
            stk__option_set_float(&o, d, k, (float)lo);
            if (!cross)
              CHECK_MSG(validate_msg(&o, NULL) == STK_OK, "%s[%d] = %g refused", d->name, k, lo);
            stk__option_set_float(&o, d, k, nextafterf((float)lo, -INFINITY));
            CHECK_MSG(validate_msg(&o, d->name) == STK_EINVAL, "%s[%d] below %g accepted", d->name, k, lo);
          }
          if (isfinite(hi)) {
            valid(&o);
            stk__option_set_float(&o, d, k, (float)hi);
            if (!strcmp(d->name, "scale") && k == 0) o.scale[1] = (float)hi;
            CHECK_MSG(validate_msg(&o, NULL) == STK_OK, "%s[%d] = %g refused", d->name, k, hi);
            stk__option_set_float(&o, d, k, nextafterf((float)hi, INFINITY));
            CHECK_MSG(validate_msg(&o, d->name) == STK_EINVAL, "%s[%d] above %g accepted", d->name, k, hi);
          }
          valid(&o);
          stk__option_set_float(&o, d, k, NAN);
          CHECK_MSG(validate_msg(&o, d->name) == STK_EINVAL, "%s[%d] = NaN accepted", d->name, k);
        }
        checked++;
        break;
      case STK__OPT_U64:
      case STK__OPT_STR: checked++; break; /* every value is in range */
    }
  }
  CHECK_EQ_INT(checked, stk__num_options);
}

/* The rules written by hand beside the table, with their messages. */
static void test_cross_rules(void) {
  stk_options o;
  char err[256];
  stk_options_init(&o);
  CHECK_EQ_INT(stk__options_validate(&o, err, sizeof err), STK_EINVAL);
  CHECK(strstr(err, "exactly one of root and list_file") != NULL);
  o.root = "a";
  o.list_file = "b";
  CHECK_EQ_INT(stk__options_validate(&o, err, sizeof err), STK_EINVAL);
  valid(&o);
  o.size = 224, o.resize_size = 223;
  CHECK_EQ_INT(validate_msg(&o, "resize_size must be 0 or at least size"), STK_EINVAL);
  o.resize_size = 224;
  CHECK_EQ_INT(validate_msg(&o, NULL), STK_OK);
  valid(&o);
  o.scale[0] = 0.6f, o.scale[1] = 0.5f;
  CHECK_EQ_INT(validate_msg(&o, "scale must satisfy"), STK_EINVAL);
  o.scale[0] = 0.0f;
  CHECK_EQ_INT(validate_msg(&o, "scale must satisfy"), STK_EINVAL);
  valid(&o);
  o.ratio[0] = 2.0f, o.ratio[1] = 1.0f;
  CHECK_EQ_INT(validate_msg(&o, "ratio must satisfy"), STK_EINVAL);
  valid(&o);
  o.std[2] = 0.0f;
  CHECK_EQ_INT(validate_msg(&o, "std[2] must not be 0"), STK_EINVAL);
  valid(&o);
  o.rank = 4;
  CHECK_EQ_INT(validate_msg(&o, "rank must be in [0, world_size=4)"), STK_EINVAL);
  valid(&o);
  o.gpu_cpu_share = -0.5f;
  CHECK_EQ_INT(validate_msg(&o, "gpu_cpu_share must be -1 (adaptive)"), STK_EINVAL);
  o.gpu_cpu_share = 0.0f;
  CHECK_EQ_INT(validate_msg(&o, NULL), STK_OK);
}

/* The text parser behind the CLI flags. */
static void test_parse(void) {
  stk_options o;
  char err[256];
  stk_options_init(&o);
  const stk__option *size = stk__option_by_cli("--size"), *dtype = stk__option_by_cli("--dtype");
  CHECK(size && dtype);
  CHECK_EQ_INT(stk__option_parse(&o, size, "96", err, sizeof err), STK_OK);
  CHECK_EQ_INT(o.size, 96);
  CHECK_EQ_INT(stk__option_parse(&o, size, "9000", err, sizeof err), STK_EINVAL);
  CHECK(strstr(err, "size must be in 1..8192, got 9000") != NULL);
  CHECK_EQ_INT(stk__option_parse(&o, size, "12x", err, sizeof err), STK_EINVAL);
  CHECK_EQ_INT(o.size, 96); /* a refused value changes nothing */
  CHECK_EQ_INT(stk__option_parse(&o, dtype, "bfloat16", err, sizeof err), STK_OK);
  CHECK_EQ_INT(o.dtype, STK_DTYPE_BFLOAT16);
  CHECK_EQ_INT(stk__option_parse(&o, dtype, "int8", err, sizeof err), STK_EINVAL);
  CHECK(strstr(err, "float32, float16, bfloat16 or uint8") != NULL);
  const stk__option *scale = stk__option_by_name("scale");
  CHECK_EQ_INT(stk__option_parse(&o, scale, "0.25,0.75", err, sizeof err), STK_OK);
  CHECK(o.scale[0] == 0.25f && o.scale[1] == 0.75f);
  CHECK_EQ_INT(stk__option_parse(&o, scale, "0.25", err, sizeof err), STK_EINVAL);
  CHECK_EQ_INT(stk__option_parse(&o, scale, "0.25,1.5", err, sizeof err), STK_EINVAL);
  CHECK(o.scale[0] == 0.25f && o.scale[1] == 0.75f);
  const stk__option *stale = stk__option_by_cli("--allow-stale-cache");
  CHECK_EQ_INT(stk__option_parse(&o, stale, "yes", err, sizeof err), STK_OK);
  CHECK_EQ_INT(o.allow_stale_cache, 1);
  const stk__option *mfb = stk__option_by_cli("--max-file-bytes");
  CHECK_EQ_INT(stk__option_parse(&o, mfb, "3M", err, sizeof err), STK_OK);
  CHECK(o.max_file_bytes == 3ULL << 20);
  CHECK_EQ_INT(stk__option_parse(&o, mfb, "-1", err, sizeof err), STK_EINVAL);
  uint64_t v = 0;
  CHECK(stk__parse_size("1G", &v) == 0 && v == 1ULL << 30);
  CHECK(stk__parse_size("256M", &v) == 0 && v == 256ULL << 20);
  CHECK(stk__parse_size("512k", &v) == 0 && v == 512ULL << 10);
  CHECK(stk__parse_size("2GiB", &v) == 0 && v == 2ULL << 30);
  CHECK(stk__parse_size("100", &v) == 0 && v == 100);
  CHECK(stk__parse_size("18446744073709551615", &v) == 0 && v == UINT64_MAX);
  CHECK(stk__parse_size("17179869184G", &v) == -1); /* 2**64 */
  CHECK(stk__parse_size("1X", &v) == -1);
  CHECK(stk__parse_size("", &v) == -1);
  CHECK(stk__parse_size("-5", &v) == -1);
  CHECK(stk__parse_size(" 5", &v) == -1);
}

/* The pack table: every field of stk_pack_options but the callbacks has a
 * row, in order, and the defaults are stoker.h's. */
static void test_pack_table(void) {
  static const char *const fields[] = {"root", "list_file", "list_base", "output", "format",
                                       "encoding", "max_side", "quality", "shard_bytes",
                                       "threads", "max_pixels", "max_file_bytes", "check",
                                       "read_timeout", "device", "plain_chroma",
                                       "max_decode_bytes"};
  int n = (int)(sizeof fields / sizeof fields[0]);
  CHECK_EQ_INT(stk__num_pack_options, n);
  for (int i = 0; i < n && i < stk__num_pack_options; i++)
    CHECK_MSG(!strcmp(stk__pack_options[i].name, fields[i]), "row %d is %s, not %s", i,
              stk__pack_options[i].name, fields[i]);
  /* every byte but the callbacks (progress, bad_file, estimate, cancel) and user */
  size_t covered = 0;
  for (int i = 0; i < stk__num_pack_options; i++) covered += stk__pack_options[i].size;
  size_t fields_bytes = sizeof(stk_pack_options) - sizeof(size_t) - 4 * sizeof(void (*)(void)) -
                        sizeof(void *);
  /* (one int padded to a pointer's alignment, after threads) */
  CHECK_MSG(covered + sizeof(void *) > fields_bytes, "%zu of %zu bytes in rows", covered,
            fields_bytes);
  stk_pack_options p;
  memset(&p, 0x5a, sizeof p);
  stk_pack_options_init(&p);
  CHECK_EQ_INT(p.struct_size, sizeof p);
  CHECK(!p.root && !p.list_file && !p.list_base && !p.output);
  CHECK_EQ_INT(p.format, STK_PACK_CACHE);
  CHECK_EQ_INT(p.encoding, STK_CACHE_RAW);
  CHECK_EQ_INT(p.max_side, 512);
  CHECK_EQ_INT(p.quality, 90);
  CHECK(p.shard_bytes == 1ULL << 30);
  CHECK_EQ_INT(p.threads, 0);
  CHECK(p.max_pixels == 178956970ULL && p.max_file_bytes == 256ULL << 20);
  CHECK_EQ_INT(p.check, 0);
  CHECK(p.read_timeout == 300.0f);
  CHECK(!p.progress && !p.bad_file && !p.user && !p.estimate);
  CHECK_EQ_INT(p.device, -1);
  CHECK_EQ_INT(p.plain_chroma, 0);
}

/* What a pack on a device refuses before any GPU is opened: tar shards,
 * an unbounded or too large max_side, plain_chroma without a device. */
static void test_pack_device_rules(void) {
  char err[256];
  struct {
    int format, device, max_side, plain;
    int want;
    const char *says;
  } cases[] = {
      {STK_PACK_CACHE, 0, 512, 0, STK_OK, NULL},
      {STK_PACK_CACHE, 0, 8192, 1, STK_OK, NULL},
      {STK_PACK_CACHE, 0, 0, 0, STK_EINVAL, "needs max_side in 1..8192"},
      {STK_PACK_CACHE, 3, 8193, 0, STK_EINVAL, "needs max_side in 1..8192"},
      {STK_PACK_CACHE, -1, 0, 1, STK_EINVAL, "plain_chroma applies to a pack on a device"},
      {STK_PACK_TAR, 0, 512, 0, STK_EINVAL, "apply to a cache"},
      {STK_PACK_TAR, -1, 512, 1, STK_EINVAL, "apply to a cache"},
      {STK_PACK_CACHE, -1, 0, 0, STK_OK, NULL},
  };
  for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
    stk_pack_options p;
    stk_pack_options_init(&p);
    p.root = "src", p.output = "out";
    p.format = cases[i].format;
    p.device = cases[i].device;
    p.max_side = cases[i].max_side;
    p.plain_chroma = cases[i].plain;
    err[0] = 0;
    int rc = stk__pack_options_validate(&p, err, sizeof err);
    CHECK_MSG(rc == cases[i].want, "case %zu: %d (%s)", i, rc, err);
    if (cases[i].says) CHECK_MSG(strstr(err, cases[i].says) != NULL, "case %zu says: %s", i, err);
  }
}

/* The flag parser of `stoker pack` and stk_pack()'s validation are the
 * same ranges: at each bound of every int row both accept, one past it
 * both refuse (the CLI once took --max-side up to 65535, which the
 * library refused above 65500). */
static void test_pack_flags_agree_with_the_library(void) {
  char err[256];
  int rows = 0;
  for (int i = 0; i < stk__num_pack_options; i++) {
    const stk__option *d = &stk__pack_options[i];
    if (d->type != STK__OPT_INT || !d->cli) continue;
    rows++;
    double bounds[2] = {d->min, d->max};
    for (int b = 0; b < 2; b++) {
      for (int off = 0; off < 2; off++) {
        long long v = (long long)bounds[b] + (off ? (b ? 1 : -1) : 0);
        char text[32];
        snprintf(text, sizeof text, "%lld", v);
        stk_pack_options p;
        stk_pack_options_init(&p);
        p.root = "src", p.output = "out";
        int cli = stk_pack_options_parse_flag(&p, d->cli, text, err, sizeof err);
        stk_pack_options q;
        stk_pack_options_init(&q);
        q.root = "src", q.output = "out";
        stk__option_set_int(&q, d, v);
        int lib = stk__pack_options_validate(&q, err, sizeof err);
        CHECK_MSG(cli == (off ? STK_EINVAL : STK_OK), "%s %s: flag gives %d", d->cli, text, cli);
        CHECK_MSG(lib == cli, "%s = %lld: the flag gives %d, the library %d", d->name, v, cli, lib);
      }
    }
  }
  CHECK(rows >= 3);
  stk_pack_options p;
  stk_pack_options_init(&p);
  CHECK_EQ_INT(stk_pack_options_parse_flag(&p, "--max-side", "65501", err, sizeof err), STK_EINVAL);
  CHECK(strstr(err, "max_side must be in 0..65500") != NULL);
  CHECK_EQ_INT(stk_pack_options_parse_flag(&p, "--shard-size", "0", err, sizeof err), STK_EINVAL);
  CHECK_EQ_INT(stk_pack_options_parse_flag(&p, "--shard-size", "256M", err, sizeof err), STK_OK);
  CHECK(p.shard_bytes == 256ULL << 20);
  CHECK_EQ_INT(stk_pack_options_parse_flag(&p, "--check", NULL, err, sizeof err), STK_OK);
  CHECK_EQ_INT(p.check, 1);
  CHECK_EQ_INT(stk_pack_options_parse_flag(&p, "--encoding", "jpeg", err, sizeof err), STK_OK);
  CHECK_EQ_INT(p.encoding, STK_CACHE_JPEG);
  CHECK_EQ_INT(stk_pack_options_parse_flag(&p, "--bogus", "1", err, sizeof err), STK_EINVAL);
}

/* One source rule for the loader, pack and check. */
static void test_source_rule(void) {
  char err[256] = "";
  CHECK_EQ_INT(stk_source_check("a", NULL, err, sizeof err), STK_OK);
  CHECK_EQ_INT(stk_source_check(NULL, "l", NULL, 0), STK_OK);
  CHECK_EQ_INT(stk_source_check(NULL, NULL, err, sizeof err), STK_EINVAL);
  CHECK(strstr(err, "exactly one of root and list_file") != NULL);
  CHECK_EQ_INT(stk_source_check("a", "l", NULL, 0), STK_EINVAL);
  stk_pack_options p;
  stk_pack_options_init(&p);
  p.root = "a", p.list_file = "l", p.output = "o";
  err[0] = '\0';
  CHECK_EQ_INT(STK_PACK(&p, NULL, err, sizeof err), STK_EINVAL);
  CHECK(strstr(err, "exactly one of root and list_file") != NULL);
  stk_options o;
  stk_options_init(&o);
  err[0] = '\0';
  CHECK_EQ_INT(stk_check(&o, NULL, NULL, NULL, err, sizeof err), STK_EINVAL);
  CHECK(strstr(err, "exactly one of root and list_file") != NULL);
}

/* The tables through the public API: every row, with the flags found. */
static void test_public_tables(void) {
  CHECK_EQ_INT(stk_option_count(STK_OPTIONS_LOADER), stk__num_options);
  CHECK_EQ_INT(stk_option_count(STK_OPTIONS_PACK), stk__num_pack_options);
  stk_option_desc d;
  CHECK_EQ_INT(stk_option_info(STK_OPTIONS_LOADER, -1, &d), STK_EINVAL);
  CHECK_EQ_INT(stk_option_info(STK_OPTIONS_PACK, stk__num_pack_options, &d), STK_EINVAL);
  for (int t = 0; t < 2; t++)
    for (int i = 0; i < stk_option_count((stk_option_table)t); i++) {
      CHECK_EQ_INT(stk_option_info((stk_option_table)t, i, &d), STK_OK);
      if (d.flag) CHECK_EQ_INT(stk_option_find_flag((stk_option_table)t, d.flag), i);
    }
  int k = stk_option_find_flag(STK_OPTIONS_LOADER, "--scale");
  CHECK(k >= 0 && stk_option_info(STK_OPTIONS_LOADER, k, &d) == STK_OK);
  CHECK(!strcmp(d.name, "scale") && !strcmp(d.type, "float") && d.count == 2);
  CHECK(!strcmp(d.default_text, "0.08,1"));
  k = stk_option_find_flag(STK_OPTIONS_PACK, "--quality");
  CHECK(k >= 0 && stk_option_info(STK_OPTIONS_PACK, k, &d) == STK_OK);
  CHECK(!strcmp(d.default_text, "90") && d.only && !strcmp(d.only, "cache") && d.max == 100);
  CHECK_EQ_INT(stk_option_find_flag(STK_OPTIONS_PACK, "--size"), -1);
  stk_options o;
  stk_options_init(&o);
  char err[256];
  CHECK_EQ_INT(stk_options_parse_flag(&o, "--dtype", "uint8", err, sizeof err), STK_OK);
  CHECK_EQ_INT(o.dtype, STK_DTYPE_UINT8);
  CHECK_EQ_INT(stk_options_parse_flag(&o, "--drop-last", NULL, err, sizeof err), STK_OK);
  CHECK_EQ_INT(o.drop_last, 1);
  CHECK_EQ_INT(stk_options_parse_flag(&o, "--index", "5", err, sizeof err), STK_EINVAL);
  CHECK(strstr(err, "index must be in -1..1, got 5") != NULL);
}

/* A program built against an older stoker.h has a shorter stk_options:
 * the sized init writes only its bytes (a canary after them survives),
 * records its size, and gives the same values as a full init on those
 * bytes; the library adopts it with the missing fields at their defaults.
 * The same for stk_pack_options. */
static void test_init_of_an_older_header(void) {
  union {
    stk_options o;
    unsigned char b[sizeof(stk_options) + 64];
  } u;
  const size_t old = offsetof(stk_options, augmix_depth); /* ends before the AugMix fields */
  memset(u.b, 0xA5, sizeof u.b);
  stk_options_init_sized(&u.o, old);
  int intact = 1;
  for (size_t i = old; i < sizeof u.b; i++) intact &= u.b[i] == 0xA5;
  CHECK(intact);
  CHECK_EQ_INT(u.o.struct_size, old);
  stk_options full;
  stk_options_init(&full);
  CHECK(memcmp((const unsigned char *)&full + sizeof full.struct_size,
               u.b + sizeof full.struct_size, old - sizeof full.struct_size) == 0);
  stk_options adopted;
  char err[256] = "";
  u.o.root = "somewhere";
  CHECK_EQ_INT(stk__options_adopt(&u.o, &adopted, err, sizeof err), STK_OK);
  CHECK_EQ_INT(adopted.struct_size, sizeof adopted);
  CHECK_EQ_INT(adopted.augmix_depth, full.augmix_depth);
  CHECK(adopted.augmix_alpha == full.augmix_alpha);
  /* too small to hold even struct_size: nothing is written */
  memset(u.b, 0xA5, sizeof u.b);
  stk_options_init_sized(&u.o, 3);
  CHECK(u.b[0] == 0xA5 && u.b[3] == 0xA5);

  union {
    stk_pack_options o;
    unsigned char b[sizeof(stk_pack_options) + 64];
  } v;
  const size_t pold = sizeof(stk_pack_options) - 8;
  memset(v.b, 0x5A, sizeof v.b);
  stk_pack_options_init_sized(&v.o, pold);
  intact = 1;
  for (size_t i = pold; i < sizeof v.b; i++) intact &= v.b[i] == 0x5A;
  CHECK(intact);
  CHECK_EQ_INT(v.o.struct_size, pold);
}

int main(void) {
  test_init_of_an_older_header();
  test_table_covers_the_struct();
  test_defaults();
  test_ranges();
  test_cross_rules();
  test_parse();
  test_pack_table();
  test_pack_device_rules();
  test_pack_flags_agree_with_the_library();
  test_source_rule();
  test_public_tables();
  return CHECK_DONE();
}

/* s3.c: S3 configuration, credentials and SigV4 signing. See s3.h.
 *
 * SHA-256 and HMAC are here rather than taken from a TLS library: libcurl
 * is loaded at run time (net.c), and linking OpenSSL only for a hash would
 * put a hard dependency back into the library and the wheel. A body's hash
 * uses libcrypto's SHA-256 when it can be loaded (sha256.h); this one is
 * the fallback, and HMAC's (a few hundred bytes per signature). */
#define _POSIX_C_SOURCE 200809L
#include "sources/s3.h"

#include <ctype.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>
#include <time.h>

#include "core/common.h"
#include "sources/sha256.h"

/* ---- SHA-256 (FIPS 180-4) and HMAC (RFC 2104) ---------------------------- */

typedef struct {
  uint32_t h[8];
  uint64_t len;
  uint8_t b[64];
  size_t nb;
} sha256;

static const uint32_t K256[64] = {
    0x428a2f98, 0x71374491, 0xb5c0fbcf, 0xe9b5dba5, 0x3956c25b, 0x59f111f1, 0x923f82a4,
    0xab1c5ed5, 0xd807aa98, 0x12835b01, 0x243185be, 0x550c7dc3, 0x72be5d74, 0x80deb1fe,
    0x9bdc06a7, 0xc19bf174, 0xe49b69c1, 0xefbe4786, 0x0fc19dc6, 0x240ca1cc, 0x2de92c6f,
    0x4a7484aa, 0x5cb0a9dc, 0x76f988da, 0x983e5152, 0xa831c66d, 0xb00327c8, 0xbf597fc7,
    0xc6e00bf3, 0xd5a79147, 0x06ca6351, 0x14292967, 0x27b70a85, 0x2e1b2138, 0x4d2c6dfc,
    0x53380d13, 0x650a7354, 0x766a0abb, 0x81c2c92e, 0x92722c85, 0xa2bfe8a1, 0xa81a664b,
    0xc24b8b70, 0xc76c51a3, 0xd192e819, 0xd6990624, 0xf40e3585, 0x106aa070, 0x19a4c116,
    0x1e376c08, 0x2748774c, 0x34b0bcb5, 0x391c0cb3, 0x4ed8aa4a, 0x5b9cca4f, 0x682e6ff3,
    0x748f82ee, 0x78a5636f, 0x84c87814, 0x8cc70208, 0x90befffa, 0xa4506ceb, 0xbef9a3f7,
    0xc67178f2};

#define ROR(x, n) (((x) >> (n)) | ((x) << (32 - (n))))

static void sha_block(sha256 *s, const uint8_t *p) {
  uint32_t w[64];
  for (int i = 0; i < 16; i++)
    w[i] = (uint32_t)p[4 * i] << 24 | (uint32_t)p[4 * i + 1] << 16 | (uint32_t)p[4 * i + 2] << 8 |
           p[4 * i + 3];
  for (int i = 16; i < 64; i++) {
    uint32_t s0 = ROR(w[i - 15], 7) ^ ROR(w[i - 15], 18) ^ (w[i - 15] >> 3);
    uint32_t s1 = ROR(w[i - 2], 17) ^ ROR(w[i - 2], 19) ^ (w[i - 2] >> 10);
    w[i] = w[i - 16] + s0 + w[i - 7] + s1;
  }
  uint32_t a = s->h[0], b = s->h[1], c = s->h[2], d = s->h[3], e = s->h[4], f = s->h[5],
           g = s->h[6], h = s->h[7];
  for (int i = 0; i < 64; i++) {
    uint32_t t1 = h + (ROR(e, 6) ^ ROR(e, 11) ^ ROR(e, 25)) + ((e & f) ^ (~e & g)) + K256[i] + w[i];
    uint32_t t2 = (ROR(a, 2) ^ ROR(a, 13) ^ ROR(a, 22)) + ((a & b) ^ (a & c) ^ (b & c));
    h = g;
    g = f;
    f = e;
    e = d + t1;
    d = c;
    c = b;
    b = a;
    a = t1 + t2;
  }
  s->h[0] += a, s->h[1] += b, s->h[2] += c, s->h[3] += d;
  s->h[4] += e, s->h[5] += f, s->h[6] += g, s->h[7] += h;
}

static void sha_init(sha256 *s) {
  static const uint32_t iv[8] = {0x6a09e667, 0xbb67ae85, 0x3c6ef372, 0xa54ff53a,
                                 0x510e527f, 0x9b05688c, 0x1f83d9ab, 0x5be0cd19};
  memcpy(s->h, iv, sizeof iv);
  s->len = 0;
  s->nb = 0;
}

static void sha_update(sha256 *s, const void *data, size_t n) {
  const uint8_t *p = data;
  s->len += n;
  while (n) {
    size_t k = 64 - s->nb < n ? 64 - s->nb : n;
    memcpy(s->b + s->nb, p, k);
    s->nb += k;
    p += k;
    n -= k;
    if (s->nb == 64) {
      sha_block(s, s->b);
      s->nb = 0;
    }
  }
}

static void sha_final(sha256 *s, uint8_t out[32]) {
  uint64_t bits = s->len * 8;
  uint8_t pad = 0x80;
  sha_update(s, &pad, 1);
  pad = 0;
  while (s->nb != 56) sha_update(s, &pad, 1);
  uint8_t l[8];
  for (int i = 0; i < 8; i++) l[i] = (uint8_t)(bits >> (56 - 8 * i));
  sha_update(s, l, 8);
  for (int i = 0; i < 8; i++) {
    out[4 * i] = (uint8_t)(s->h[i] >> 24);
    out[4 * i + 1] = (uint8_t)(s->h[i] >> 16);
    out[4 * i + 2] = (uint8_t)(s->h[i] >> 8);
    out[4 * i + 3] = (uint8_t)s->h[i];
  }
}

static void hex(const uint8_t *d, size_t n, char *out) {
  static const char x[] = "0123456789abcdef";
  for (size_t i = 0; i < n; i++) {
    out[2 * i] = x[d[i] >> 4];
    out[2 * i + 1] = x[d[i] & 15];
  }
  out[2 * n] = '\0';
}

void stk__sha256_portable(const void *data, size_t n, uint8_t out[32]) {
  sha256 s;
  sha_init(&s);
  sha_update(&s, data, n);
  sha_final(&s, out);
}

/* A body's hash: libcrypto's when loaded (sha256.h), this file's else. */
void stk__sha256_hex(const void *data, size_t n, char out[65]) {
  uint8_t d[32];
  stk__sha256(data, n, d);
  hex(d, 32, out);
}

static void hmac(const void *key, size_t klen, const void *msg, size_t n, uint8_t out[32]) {
  uint8_t k[64] = {0}, pad[64];
  if (klen > 64) {
    sha256 s;
    sha_init(&s);
    sha_update(&s, key, klen);
    sha_final(&s, k);
  } else {
    memcpy(k, key, klen);
  }
  sha256 s;
  for (int i = 0; i < 64; i++) pad[i] = k[i] ^ 0x36;
  sha_init(&s);
  sha_update(&s, pad, 64);
  sha_update(&s, msg, n);
  uint8_t inner[32];
  sha_final(&s, inner);
  for (int i = 0; i < 64; i++) pad[i] = k[i] ^ 0x5c;
  sha_init(&s);
  sha_update(&s, pad, 64);
  sha_update(&s, inner, 32);
  sha_final(&s, out);
  memset(k, 0, sizeof k); /* the key derives from the secret */
}

/* ---- configuration ------------------------------------------------------- */

static const char *env(const char *name) {
  const char *v = getenv(name);
  return v && *v ? v : NULL;
}

static void copy(char *dst, size_t cap, const char *src) {
  snprintf(dst, cap, "%s", src ? src : "");
}

/* Looks up `key` in section `section` of an INI file ("[name]" headers,
 * "key = value" lines); 1 when found. */
static int ini_get(const char *path, const char *section, const char *key, char *out, size_t cap) {
  FILE *f = path ? fopen(path, "r") : NULL;
  if (!f) return 0;
  char line[4608];
  int in = 0, found = 0;
  while (!found && fgets(line, sizeof line, f)) {
    char *p = line;
    while (isspace((unsigned char)*p)) p++;
    char *e = p + strlen(p);
    while (e > p && isspace((unsigned char)e[-1])) *--e = '\0';
    if (*p == '#' || *p == ';' || !*p) continue;
    if (*p == '[') {
      char *c = strchr(p, ']');
      if (c) *c = '\0';
      p++;
      while (isspace((unsigned char)*p)) p++;
      in = !strcmp(p, section);
      continue;
    }
    if (!in) continue;
    char *eq = strchr(p, '=');
    if (!eq) continue;
    char *k = p, *ke = eq;
    while (ke > k && isspace((unsigned char)ke[-1])) ke--;
    *ke = '\0';
    char *v = eq + 1;
    while (isspace((unsigned char)*v)) v++;
    if (!strcmp(k, key)) {
      copy(out, cap, v);
      found = 1;
    }
  }
  memset(line, 0, sizeof line); /* it may have held a secret */
  fclose(f);
  return found;
}

void stk__aws_file(char *out, size_t cap, const char *var, const char *name) {
  const char *v = env(var), *home = env("HOME");
  if (v)
    copy(out, cap, v);
  else if (home)
    snprintf(out, cap, "%s/.aws/%s", home, name);
  else
    out[0] = '\0';
}

int stk__s3_load(stk__s3 *c, char *msg, size_t msglen) {
  memset(c, 0, sizeof *c);
  const char *profile = env("AWS_PROFILE");
  if (!profile) profile = env("AWS_DEFAULT_PROFILE");
  if (!profile) profile = "default";
  char conff[1024], csec[300];
  stk__aws_file(conff, sizeof conff, "AWS_CONFIG_FILE", "config");
  /* ~/.aws/config names profiles "[profile NAME]", except the default */
  if (strcmp(profile, "default"))
    snprintf(csec, sizeof csec, "profile %s", profile);
  else
    copy(csec, sizeof csec, "default");

  if (env("AWS_REGION"))
    copy(c->region, sizeof c->region, env("AWS_REGION"));
  else if (env("AWS_DEFAULT_REGION"))
    copy(c->region, sizeof c->region, env("AWS_DEFAULT_REGION"));
  else if (!ini_get(conff, csec, "region", c->region, sizeof c->region))
    copy(c->region, sizeof c->region, "us-east-1");

  const char *ns = env("AWS_NO_SIGN_REQUEST");
  c->anonymous = ns && (!strcmp(ns, "1") || !strcasecmp(ns, "true"));
  pthread_mutex_init(&c->creds_mu, NULL);
  if (c->anonymous) {
    c->creds_state = 1;
    copy(c->creds_note, sizeof c->creds_note, "none: AWS_NO_SIGN_REQUEST (unsigned requests)");
  }

  char ep[512] = "";
  const char *e = env("AWS_ENDPOINT_URL_S3");
  if (!e) e = env("AWS_ENDPOINT_URL");
  if (!e) e = env("S3_ENDPOINT_URL");
  if (!e) {
    char tmp[300];
    if (ini_get(conff, csec, "endpoint_url", tmp, sizeof tmp)) copy(ep, sizeof ep, tmp);
  } else {
    copy(ep, sizeof ep, e);
  }
  if (ep[0]) {
    const char *p = strstr(ep, "://");
    if (!p || (size_t)(p - ep) >= sizeof c->scheme)
      return stk__fail(msg, msglen, STK_EINVAL,
                       "the S3 endpoint URL must start with http:// or https://");
    memcpy(c->scheme, ep, (size_t)(p - ep));
    if (strcmp(c->scheme, "http") && strcmp(c->scheme, "https"))
      return stk__fail(msg, msglen, STK_EINVAL,
                       "the S3 endpoint URL must start with http:// or https://");
    p += 3;
    const char *slash = strchr(p, '/');
    size_t hl = slash ? (size_t)(slash - p) : strlen(p);
    if (!hl || hl >= sizeof c->host)
      return stk__fail(msg, msglen, STK_EINVAL, "the S3 endpoint URL has no host");
    memcpy(c->host, p, hl);
    if (slash) copy(c->base, sizeof c->base, slash);
    size_t bl = strlen(c->base);
    while (bl && c->base[bl - 1] == '/') c->base[--bl] = '\0';
    c->path_style = 1;
  } else {
    copy(c->scheme, sizeof c->scheme, "https");
    snprintf(c->host, sizeof c->host, "s3.%s.amazonaws.com", c->region);
  }
  const char *st = env("STOKER_S3_ADDRESSING");
  if (st && !strcmp(st, "path"))
    c->path_style = 1;
  else if (st && !strcmp(st, "virtual"))
    c->path_style = 0;
  else if (st)
    return stk__fail(msg, msglen, STK_EINVAL, "STOKER_S3_ADDRESSING must be path or virtual");
  return STK_OK;
}

int stk__uri_encode(const char *s, int keep_slash, char *out, size_t outlen) {
  static const char x[] = "0123456789ABCDEF";
  size_t o = 0;
  for (const unsigned char *p = (const unsigned char *)s; *p; p++) {
    int keep = isalnum(*p) || *p == '-' || *p == '_' || *p == '.' || *p == '~' ||
               (keep_slash && *p == '/');
    if (o + 4 > outlen) return STK_ELIMIT;
    if (keep) {
      out[o++] = (char)*p;
    } else {
      out[o++] = '%';
      out[o++] = x[*p >> 4];
      out[o++] = x[*p & 15];
    }
  }
  if (o >= outlen) return STK_ELIMIT;
  out[o] = '\0';
  return STK_OK;
}

int stk__s3_url(const stk__s3 *c, const char *bucket, const char *key, const char *query,
                char *url, size_t urllen, char *cpath, size_t cpathlen, char *host,
                size_t hostlen) {
  char ek[3 * 1024 + 4];
  if (stk__uri_encode(key, 1, ek, sizeof ek)) return STK_ELIMIT;
  int w;
  if (c->path_style) {
    w = snprintf(cpath, cpathlen, "%s/%s/%s", c->base, bucket, ek);
    if (w < 0 || (size_t)w >= cpathlen) return STK_ELIMIT;
    copy(host, hostlen, c->host);
  } else {
    w = snprintf(cpath, cpathlen, "%s/%s", c->base, ek);
    if (w < 0 || (size_t)w >= cpathlen) return STK_ELIMIT;
    w = snprintf(host, hostlen, "%s.%s", bucket, c->host);
    if (w < 0 || (size_t)w >= hostlen) return STK_ELIMIT;
  }
  w = snprintf(url, urllen, "%s://%s%s%s%s", c->scheme, host, cpath, query && *query ? "?" : "",
               query ? query : "");
  return w < 0 || (size_t)w >= urllen ? STK_ELIMIT : STK_OK;
}

/* The empty body's hash (GET, HEAD, DELETE). */
#define EMPTY_SHA256 "e3b0c44298fc1c149afbf4c8996fb92427ae41e4649b934ca495991b7852b855"

void stk__sigv4(const stk__aws_creds *cr, const char *region, const char *service,
                const char *method, const char *host, const char *cpath, const char *query,
                const char *payload, int64_t now, char hdr[][STK__S3_HEADER_LEN], int *n) {
  *n = 0;
  if (!payload) payload = EMPTY_SHA256;
  time_t t = (time_t)now;
  struct tm tm;
  gmtime_r(&t, &tm);
  char amz[20], day[12];
  strftime(amz, sizeof amz, "%Y%m%dT%H%M%SZ", &tm);
  strftime(day, sizeof day, "%Y%m%d", &tm);
  int tok = cr->token[0] != '\0';
  /* The canonical request (headers in sorted order, lowercase names). */
  size_t cap = strlen(cpath) + (query ? strlen(query) : 0) + strlen(host) + strlen(cr->token) + 512;
  char *creq = malloc(cap);
  if (!creq) return; /* unsigned: the server refuses it with a clear 403 */
  snprintf(creq, cap,
           "%s\n%s\n%s\nhost:%s\nx-amz-content-sha256:%s\nx-amz-date:%s\n%s%s%s\n"
           "host;x-amz-content-sha256;x-amz-date%s\n%s",
           method, cpath, query ? query : "", host, payload, amz,
           tok ? "x-amz-security-token:" : "", tok ? cr->token : "", tok ? "\n" : "",
           tok ? ";x-amz-security-token" : "", payload);
  char chash[65];
  stk__sha256_hex(creq, strlen(creq), chash);
  memset(creq, 0, cap); /* it holds the session token */
  free(creq);
  char scope[160], sts[300];
  snprintf(scope, sizeof scope, "%s/%s/%s/aws4_request", day, region, service);
  snprintf(sts, sizeof sts, "AWS4-HMAC-SHA256\n%s\n%s\n%s", amz, scope, chash);
  char k0[300];
  snprintf(k0, sizeof k0, "AWS4%s", cr->secret);
  uint8_t k[32];
  hmac(k0, strlen(k0), day, strlen(day), k);
  memset(k0, 0, sizeof k0);
  hmac(k, 32, region, strlen(region), k);
  hmac(k, 32, service, strlen(service), k);
  hmac(k, 32, "aws4_request", 12, k);
  uint8_t sig[32];
  hmac(k, 32, sts, strlen(sts), sig);
  memset(k, 0, sizeof k);
  char sighex[65];
  hex(sig, 32, sighex);
  snprintf(hdr[(*n)++], STK__S3_HEADER_LEN,
           "Authorization: AWS4-HMAC-SHA256 Credential=%s/%s, SignedHeaders=host;"
           "x-amz-content-sha256;x-amz-date%s, Signature=%s",
           cr->key_id, scope, tok ? ";x-amz-security-token" : "", sighex);
  snprintf(hdr[(*n)++], STK__S3_HEADER_LEN, "x-amz-content-sha256: %s", payload);
  snprintf(hdr[(*n)++], STK__S3_HEADER_LEN, "x-amz-date: %s", amz);
  if (tok) snprintf(hdr[(*n)++], STK__S3_HEADER_LEN, "x-amz-security-token: %s", cr->token);
}

uint64_t stk__s3_sign(stk__s3 *c, const char *method, const char *host, const char *cpath,
                      const char *query, const char *payload, int64_t now,
                      char hdr[][STK__S3_HEADER_LEN], int *n) {
  *n = 0;
  if (c->anonymous || !c->creds) return 0;
  stk__aws_creds cr;
  uint64_t gen = stk__creds_get(c->creds, &cr);
  stk__sigv4(&cr, c->region, "s3", method, host, cpath, query, payload, now, hdr, n);
  memset(&cr, 0, sizeof cr);
  return gen;
}

/* ---- credentials ----------------------------------------------------------- */

int stk__s3_credentials(stk__s3 *c, char *msg, size_t msglen) {
  pthread_mutex_lock(&c->creds_mu);
  if (!c->creds_state) {
    int rc = stk__creds_open(&c->creds, c->region, c->creds_note, sizeof c->creds_note);
    if (rc) {
      c->creds_state = rc;
    } else {
      c->creds_state = 1;
      if (c->creds)
        stk__creds_describe(c->creds, c->creds_note, sizeof c->creds_note);
      else
        c->anonymous = 1; /* the note says which sources were tried */
    }
    stk__creds_set_last(c->creds_note);
  }
  int rc = c->creds_state < 0 ? c->creds_state : STK_OK;
  if (rc) stk__fail(msg, msglen, rc, "%s", c->creds_note);
  pthread_mutex_unlock(&c->creds_mu);
  return rc;
}

void stk__s3_describe(stk__s3 *c, char *out, size_t cap) {
  pthread_mutex_lock(&c->creds_mu);
  if (c->creds)
    stk__creds_describe(c->creds, out, cap);
  else
    copy(out, cap, c->creds_note[0] ? c->creds_note : "not looked for yet");
  pthread_mutex_unlock(&c->creds_mu);
}

int stk__s3_expired(stk__s3 *c, uint64_t gen) {
  return c->creds && gen ? stk__creds_stale(c->creds, gen) : 0;
}

int stk__s3_renewing(stk__s3 *c, uint64_t gen) {
  return c->creds && gen ? stk__creds_renewing(c->creds, gen) : 0;
}

void stk__s3_free(stk__s3 *c) {
  stk__creds_close(c->creds);
  pthread_mutex_destroy(&c->creds_mu);
  memset(c, 0, sizeof *c);
}

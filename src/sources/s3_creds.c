/* s3_creds.c: the AWS credential chain and the renewal of temporary
 * credentials. See s3_creds.h.
 *
 * Why a thread of its own for renewals: a provider's answer can take a
 * second or more (instance metadata, STS across a region), and the I/O
 * thread that drives the reads must not wait for it. The renewal starts
 * well before the credentials expire, so the reads go on with the valid
 * ones meanwhile, copied under a lock that is held only for the copy. */
#define _GNU_SOURCE /* memmem, timegm */
#include "sources/s3_creds.h"

#include <ctype.h>
#include <errno.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>
#include <sys/wait.h>
#include <time.h>

#include "core/common.h"
#include "sources/net.h"
#include "sources/s3.h"
#include "stoker.h"

/* ---- small helpers -------------------------------------------------------- */

static const char *env(const char *name) {
  const char *v = getenv(name);
  return v && *v ? v : NULL;
}

static void copy(char *dst, size_t cap, const char *src) {
  snprintf(dst, cap, "%s", src ? src : "");
}

static void wipe_free(char *p) {
  if (p) {
    memset(p, 0, strlen(p));
    free(p);
  }
}

static int env_true(const char *name) {
  const char *v = env(name);
  return v && (!strcasecmp(v, "true") || !strcmp(v, "1"));
}

/* A whole small file into a NUL-terminated buffer (a token, a config
 * file); NULL when it cannot be read. Callers wipe it: it may be secret. */
static char *read_small(const char *path, size_t max, size_t *len) {
  FILE *f = path && *path ? fopen(path, "rb") : NULL;
  if (!f) return NULL;
  char *b = malloc(max + 1);
  size_t n = b ? fread(b, 1, max, f) : 0;
  fclose(f);
  if (!b) return NULL;
  b[n] = '\0';
  if (len) *len = n;
  return b;
}

static void trim(char *s) {
  size_t n = strlen(s);
  while (n && isspace((unsigned char)s[n - 1])) s[--n] = '\0';
  size_t k = strspn(s, " \t\r\n");
  memmove(s, s + k, n - k + 1);
}

/* ---- the config and credentials files ------------------------------------- */

/* The field of p that an INI key sets, and its size; NULL for others. */
static char *profile_field(stk__aws_profile *p, const char *k, size_t *cap) {
#define F(name, field)        \
  if (!strcmp(k, name)) {     \
    *cap = sizeof p->field;   \
    return p->field;          \
  }
  F("aws_access_key_id", key_id)
  F("aws_secret_access_key", secret)
  F("aws_session_token", token)
  F("role_arn", role_arn)
  F("source_profile", source_profile)
  F("credential_source", credential_source)
  F("external_id", external_id)
  F("web_identity_token_file", web_identity_token_file)
  F("role_session_name", role_session_name)
  F("duration_seconds", duration)
  F("credential_process", credential_process)
  F("sso_session", sso_session)
  F("sso_start_url", sso_start_url)
  F("sso_region", sso_region)
  F("sso_account_id", sso_account_id)
  F("sso_role_name", sso_role_name)
#undef F
  return NULL;
}

/* One "key = value" line of the section: sets the field when empty. */
static void ini_line(char *line, stk__aws_profile *p, int *sub) {
  char *eq = strchr(line, '=');
  if (!eq) return;
  *eq = '\0';
  char *k = line, *v = eq + 1;
  trim(k);
  trim(v);
  /* "s3 =" opens indented sub-keys, which are not the profile's own */
  *sub = !*v;
  size_t cap = 0;
  char *f = profile_field(p, k, &cap);
  if (f && !f[0] && *v) copy(f, cap, v);
}

int stk__aws_ini_parse(const char *text, size_t len, const char *section, stk__aws_profile *p) {
  char line[4608];
  int in = 0, found = 0, sub = 0;
  for (size_t at = 0; at < len;) {
    const char *nl = memchr(text + at, '\n', len - at);
    size_t l = nl ? (size_t)(nl - (text + at)) : len - at;
    size_t k = l < sizeof line - 1 ? l : sizeof line - 1;
    memcpy(line, text + at, k);
    line[k] = '\0';
    at += l + (nl ? 1 : 0);
    line[strcspn(line, "\r")] = '\0';
    int indented = line[0] == ' ' || line[0] == '\t';
    trim(line);
    if (!line[0] || line[0] == '#' || line[0] == ';') continue;
    if (line[0] == '[') {
      char *c = strchr(line, ']');
      if (c) *c = '\0';
      char *name = line + 1;
      trim(name);
      in = !strcmp(name, section);
      found |= in;
      sub = 0;
      continue;
    }
    if (!in || (indented && sub)) continue;
    ini_line(line, p, &sub);
  }
  memset(line, 0, sizeof line); /* it may have held a secret */
  return found;
}

/* ---- credential documents ------------------------------------------------- */

int64_t stk__aws_time(const char *iso) {
  struct tm tm;
  memset(&tm, 0, sizeof tm);
  int y, mo, d, h, mi, s, used = 0;
  if (!iso || sscanf(iso, "%4d-%2d-%2dT%2d:%2d:%2d%n", &y, &mo, &d, &h, &mi, &s, &used) != 6)
    return -1;
  if (y < 1970 || y > 9999 || mo < 1 || mo > 12 || d < 1 || d > 31 || h > 23 || mi > 59 ||
      s > 60 || h < 0 || mi < 0 || s < 0)
    return -1;
  const char *r = iso + used;
  if (*r == '.')
    for (r++; isdigit((unsigned char)*r);) r++;
  if (*r != 'Z' && *r != 'z' && strncmp(r, "+00:00", 6) && strncmp(r, "+0000", 5) &&
      strcmp(r, "UTC")) /* "UTC": the SSO caches of AWS CLI v1 */
    return -1;
  tm.tm_year = y - 1900;
  tm.tm_mon = mo - 1;
  tm.tm_mday = d;
  tm.tm_hour = h;
  tm.tm_min = mi;
  tm.tm_sec = s;
  return (int64_t)timegm(&tm);
}

/* The string value of "key" in a flat JSON object, escapes decoded; 1 when
 * found. Bounded by end: the document need not be NUL-terminated. */
static int json_str(const char *doc, const char *end, const char *key, char *out, size_t cap) {
  char pat[64];
  int pl = snprintf(pat, sizeof pat, "\"%s\"", key);
  for (const char *p = doc; p < end;) {
    const char *a = memmem(p, (size_t)(end - p), pat, (size_t)pl);
    if (!a) return 0;
    p = a + pl;
    while (p < end && isspace((unsigned char)*p)) p++;
    if (p >= end || *p != ':') continue; /* the key's text as a value */
    for (p++; p < end && isspace((unsigned char)*p);) p++;
    if (p >= end || *p != '"') return 0;
    size_t o = 0;
    for (p++; p < end && *p != '"'; p++) {
      char c = *p;
      if (c == '\\' && p + 1 < end) {
        c = *++p;
        c = c == 'n' ? '\n' : c == 't' ? '\t' : c == 'r' ? '\r' : c == 'b' ? '\b' : c == 'f' ? '\f' : c;
        if (*p == 'u') { /* \uXXXX: credentials are ASCII; others become '?' */
          unsigned v = 0;
          int k = 0;
          for (; k < 4 && p + 1 < end && isxdigit((unsigned char)p[1]); k++, p++)
            v = v * 16 + (unsigned)(isdigit((unsigned char)*(p + 1)) ? p[1] - '0'
                                                                     : (tolower(p[1]) - 'a' + 10));
          c = k == 4 && v > 0 && v < 128 ? (char)v : '?';
        }
      }
      if (o + 1 < cap) out[o++] = c;
    }
    out[o] = '\0';
    return p < end;
  }
  return 0;
}

/* A parsed credential is whole, or wiped: a half one (a secret without its
 * key) never outlives its error. */
static int creds_check(stk__aws_creds *c, const char *exp, const char *what, char *msg,
                       size_t msglen) {
  int rc = STK_OK;
  c->expires = 0;
  if (!c->key_id[0] || !c->secret[0])
    rc = stk__fail(msg, msglen, STK_EINVAL, "%s has no AccessKeyId or SecretAccessKey", what);
  else if (exp && exp[0] && (c->expires = stk__aws_time(exp)) < 0)
    rc = stk__fail(msg, msglen, STK_EINVAL, "%s has a malformed Expiration", what);
  if (rc) memset(c, 0, sizeof *c);
  return rc;
}

int stk__aws_json_creds(const char *doc, size_t len, stk__aws_creds *c, char *msg, size_t msglen) {
  memset(c, 0, sizeof *c);
  const char *end = doc + len;
  char exp[64] = "", code[64] = "";
  if (json_str(doc, end, "Code", code, sizeof code) && strcmp(code, "Success"))
    return stk__fail(msg, msglen, STK_EIO, "the credential document says %s", code);
  json_str(doc, end, "AccessKeyId", c->key_id, sizeof c->key_id);
  json_str(doc, end, "SecretAccessKey", c->secret, sizeof c->secret);
  if (!json_str(doc, end, "Token", c->token, sizeof c->token))
    json_str(doc, end, "SessionToken", c->token, sizeof c->token);
  json_str(doc, end, "Expiration", exp, sizeof exp);
  return creds_check(c, exp, "the credential document", msg, msglen);
}

/* The text of the first <tag>...</tag> in [p, end), entities decoded. */
static int xml_text(const char *p, const char *end, const char *tag, char *out, size_t cap) {
  char open[48], close[48];
  int ol = snprintf(open, sizeof open, "<%s>", tag), cl = snprintf(close, sizeof close, "</%s>", tag);
  const char *a = memmem(p, (size_t)(end - p), open, (size_t)ol);
  if (!a) return 0;
  a += ol;
  const char *b = memmem(a, (size_t)(end - a), close, (size_t)cl);
  if (!b) return 0;
  size_t o = 0;
  static const struct {
    const char *e;
    char c;
  } ents[] = {{"&amp;", '&'}, {"&lt;", '<'}, {"&gt;", '>'}, {"&quot;", '"'}, {"&apos;", '\''}};
  for (const char *c = a; c < b && o + 1 < cap; c++) {
    char v = *c;
    for (size_t k = 0; v == '&' && k < sizeof ents / sizeof *ents; k++) {
      size_t el = strlen(ents[k].e);
      if ((size_t)(b - c) >= el && !memcmp(c, ents[k].e, el)) {
        v = ents[k].c;
        c += el - 1;
        break;
      }
    }
    out[o++] = v;
  }
  out[o] = '\0';
  return 1;
}

int stk__aws_sts_creds(const char *xml, size_t len, stk__aws_creds *c, char *msg, size_t msglen) {
  memset(c, 0, sizeof *c);
  const char *end = xml + len;
  const char *cr = memmem(xml, len, "<Credentials>", 13);
  if (!cr) {
    char code[96] = "", text[200] = "";
    xml_text(xml, end, "Code", code, sizeof code);
    xml_text(xml, end, "Message", text, sizeof text);
    return stk__fail(msg, msglen, STK_EIO, "STS refused: %s%s%s", code[0] ? code : "no credentials",
                     text[0] ? ": " : "", text);
  }
  char exp[64] = "";
  xml_text(cr, end, "AccessKeyId", c->key_id, sizeof c->key_id);
  xml_text(cr, end, "SecretAccessKey", c->secret, sizeof c->secret);
  xml_text(cr, end, "SessionToken", c->token, sizeof c->token);
  xml_text(cr, end, "Expiration", exp, sizeof exp);
  return creds_check(c, exp, "the STS response", msg, msglen);
}

/* ---- the providers -------------------------------------------------------- */

enum { SRC_NONE, SRC_ENV, SRC_PROFILE, SRC_WEB, SRC_CONTAINER, SRC_IMDS };

/* What a provider needs to fetch its credentials again. */
typedef struct {
  int kind;
  char profile[128];
  char region[64];
  char what[3000]; /* where they came from, for messages and `stoker info` */
} source;

#define HTTP_MAX (64u << 10)

/* The STS endpoint: the SDKs' variables, else the regional one. */
static void sts_endpoint(const char *region, char *out, size_t cap) {
  const char *e = env("AWS_ENDPOINT_URL_STS");
  if (!e) e = env("AWS_ENDPOINT_URL");
  if (e)
    copy(out, cap, e);
  else
    snprintf(out, cap, "https://sts.%s.amazonaws.com", region);
  size_t n = strlen(out);
  while (n && out[n - 1] == '/') out[--n] = '\0';
}

/* "&Name=value", value encoded, appended to a form body. */
static int form_add(char *body, size_t cap, const char *name, const char *value) {
  size_t at = strlen(body);
  int w = snprintf(body + at, cap - at, "%s%s=", at ? "&" : "", name);
  if (w < 0 || (size_t)w >= cap - at) return STK_ELIMIT;
  at += (size_t)w;
  return stk__uri_encode(value, 0, body + at, cap - at);
}

/* POSTs an STS query (form body) and reads its Credentials. `signer`: the
 * credentials that sign it (AssumeRole), NULL for an unsigned request
 * (AssumeRoleWithWebIdentity, which the token itself authorises). */
static int sts_call(const char *region, const char *body, const stk__aws_creds *signer,
                    stk__aws_creds *out, char *msg, size_t msglen) {
  char url[600], host[300], cpath[300], hdr[STK__S3_MAX_HEADERS + 2][STK__S3_HEADER_LEN];
  sts_endpoint(region, url, sizeof url);
  const char *h = strstr(url, "://");
  h = h ? h + 3 : url;
  size_t hl = strcspn(h, "/");
  snprintf(host, sizeof host, "%.*s", (int)hl, h);
  snprintf(cpath, sizeof cpath, "%s/", h + hl);
  snprintf(url + (h - url) + hl, sizeof url - (size_t)(h - url) - hl, "%s", cpath);
  int nh = 0;
  if (signer) {
    char hash[65];
    stk__sha256_hex(body, strlen(body), hash);
    stk__sigv4(signer, region, "sts", "POST", host, cpath, "", hash, (int64_t)time(NULL), hdr, &nh);
  }
  copy(hdr[nh++], STK__S3_HEADER_LEN, "Content-Type: application/x-www-form-urlencoded");
  const char *list[STK__S3_MAX_HEADERS + 3];
  for (int i = 0; i < nh; i++) list[i] = hdr[i];
  list[nh] = NULL;
  char *resp = NULL;
  long status = 0;
  int rc = stk__http_fetch("POST", url, list, body, 10000, HTTP_MAX, &resp, &status, msg, msglen);
  memset(hdr, 0, sizeof hdr);
  if (rc) return rc;
  rc = stk__aws_sts_creds(resp, strlen(resp), out, msg, msglen);
  if (rc && status >= 200 && status < 300) rc = STK_EIO;
  wipe_free(resp);
  return rc;
}

static int web_identity(const char *token_file, const char *role, const char *session,
                        const char *region, stk__aws_creds *out, char *msg, size_t msglen) {
  size_t tl = 0;
  char *tok = read_small(token_file, 16384, &tl);
  if (!tok)
    return stk__fail(msg, msglen, STK_EIO, "cannot read the web identity token file %s: %s",
                     token_file, strerror(errno));
  trim(tok);
  char *body = malloc(3 * 16384 + 4096);
  int rc = body ? STK_OK : STK_ENOMEM;
  if (body) {
    body[0] = '\0';
    const size_t cap = 3 * 16384 + 4096;
    rc = form_add(body, cap, "Action", "AssumeRoleWithWebIdentity");
    if (!rc) rc = form_add(body, cap, "RoleArn", role);
    if (!rc) rc = form_add(body, cap, "RoleSessionName", session && *session ? session : "stoker");
    if (!rc) rc = form_add(body, cap, "Version", "2011-06-15");
    if (!rc) rc = form_add(body, cap, "WebIdentityToken", tok);
    if (rc) stk__fail(msg, msglen, rc, "the web identity token is too long");
    if (!rc) rc = sts_call(region, body, NULL, out, msg, msglen);
  }
  wipe_free(body);
  wipe_free(tok);
  return rc;
}

static int assume_role(const stk__aws_profile *p, const stk__aws_creds *base, const char *region,
                       stk__aws_creds *out, char *msg, size_t msglen) {
  char body[4096] = "";
  int rc = form_add(body, sizeof body, "Action", "AssumeRole");
  if (!rc && p->duration[0]) rc = form_add(body, sizeof body, "DurationSeconds", p->duration);
  if (!rc && p->external_id[0]) rc = form_add(body, sizeof body, "ExternalId", p->external_id);
  if (!rc) rc = form_add(body, sizeof body, "RoleArn", p->role_arn);
  if (!rc)
    rc = form_add(body, sizeof body, "RoleSessionName",
                  p->role_session_name[0] ? p->role_session_name : "stoker");
  if (!rc) rc = form_add(body, sizeof body, "Version", "2011-06-15");
  if (rc) return stk__fail(msg, msglen, rc, "the role's settings are too long");
  return sts_call(region, body, base, out, msg, msglen);
}

/* credential_process: the command's standard output is the document. */
static int run_process(const char *cmd, stk__aws_creds *out, char *msg, size_t msglen) {
  FILE *f = popen(cmd, "r");
  if (!f) return stk__fail(msg, msglen, STK_EIO, "cannot run credential_process: %s", strerror(errno));
  char *doc = calloc(1, HTTP_MAX + 1);
  size_t n = doc ? fread(doc, 1, HTTP_MAX, f) : 0;
  while (doc && fgetc(f) != EOF) { /* drain: the command must not block on a full pipe */
  }
  int st = pclose(f);
  if (!doc) return stk__fail(msg, msglen, STK_ENOMEM, "out of memory");
  int rc;
  if (st == -1 || !WIFEXITED(st) || WEXITSTATUS(st))
    rc = stk__fail(msg, msglen, STK_EIO, "credential_process failed (exit status %d)",
                   st != -1 && WIFEXITED(st) ? WEXITSTATUS(st) : -1);
  else
    rc = stk__aws_json_creds(doc, n, out, msg, msglen);
  memset(doc, 0, n);
  free(doc);
  return rc;
}

/* ---- profiles ------------------------------------------------------------- */

/* A profile's settings from both files; 1 when either has it. */
static int load_profile(const char *name, stk__aws_profile *p, char *files, size_t fcap) {
  char credf[1024], conff[1024], sec[300];
  stk__aws_file(credf, sizeof credf, "AWS_SHARED_CREDENTIALS_FILE", "credentials");
  stk__aws_file(conff, sizeof conff, "AWS_CONFIG_FILE", "config");
  snprintf(files, fcap, "%s nor %s", credf, conff);
  memset(p, 0, sizeof *p);
  int found = 0;
  size_t n = 0;
  char *t = read_small(credf, 1u << 20, &n);
  if (t) found |= stk__aws_ini_parse(t, n, name, p);
  wipe_free(t);
  if ((t = read_small(conff, 1u << 20, &n))) {
    /* ~/.aws/config names profiles "[profile NAME]", the default "[default]" */
    snprintf(sec, sizeof sec, "profile %s", name);
    found |= stk__aws_ini_parse(t, n, sec, p);
    if (!strcmp(name, "default")) found |= stk__aws_ini_parse(t, n, "default", p);
  }
  wipe_free(t);
  return found;
}

/* ---- SSO: the role credentials of the token `aws sso login` cached -------- */

/* SHA-1 (FIPS 180-4), only to name the token's cache file as the AWS CLI
 * does: ~/.aws/sso/cache/<sha1 of the session name or start URL>.json. */
static void sha1_hex(const char *s, char out[41]) {
  uint32_t h[5] = {0x67452301, 0xEFCDAB89, 0x98BADCFE, 0x10325476, 0xC3D2E1F0};
  size_t n = strlen(s), total = ((n + 8) / 64 + 1) * 64;
  for (size_t blk = 0; blk < total; blk += 64) {
    uint32_t w[80];
    for (int i = 0; i < 16; i++) {
      w[i] = 0;
      for (int k = 0; k < 4; k++) {
        size_t at = blk + (size_t)(4 * i + k);
        uint8_t b = at < n ? (uint8_t)s[at] : at == n ? 0x80 : 0;
        if (at >= total - 8) b = (uint8_t)(((uint64_t)n * 8) >> (8 * (total - 1 - at)));
        w[i] = w[i] << 8 | b;
      }
    }
    for (int i = 16; i < 80; i++) {
      uint32_t x = w[i - 3] ^ w[i - 8] ^ w[i - 14] ^ w[i - 16];
      w[i] = x << 1 | x >> 31;
    }
    uint32_t a = h[0], b = h[1], c = h[2], d = h[3], e = h[4];
    for (int i = 0; i < 80; i++) {
      uint32_t f = i < 20 ? (b & c) | (~b & d) : i < 40 ? b ^ c ^ d
                   : i < 60 ? (b & c) | (b & d) | (c & d) : b ^ c ^ d;
      uint32_t k = i < 20 ? 0x5A827999 : i < 40 ? 0x6ED9EBA1 : i < 60 ? 0x8F1BBCDC : 0xCA62C1D6;
      uint32_t t = (a << 5 | a >> 27) + f + e + k + w[i];
      e = d, d = c, c = b << 30 | b >> 2, b = a, a = t;
    }
    h[0] += a, h[1] += b, h[2] += c, h[3] += d, h[4] += e;
  }
  for (int i = 0; i < 5; i++) snprintf(out + 8 * i, 9, "%08x", h[i]);
}

/* The number value of "key" in a flat JSON document; 1 when found. */
static int json_num(const char *doc, const char *end, const char *key, int64_t *v) {
  char pat[64];
  int pl = snprintf(pat, sizeof pat, "\"%s\"", key);
  const char *a = memmem(doc, (size_t)(end - doc), pat, (size_t)pl);
  if (!a) return 0;
  const char *p = a + pl;
  while (p < end && (isspace((unsigned char)*p) || *p == ':')) p++;
  int64_t x = 0;
  int digits = 0;
  for (; p < end && isdigit((unsigned char)*p) && digits < 18; p++, digits++) x = x * 10 + (*p - '0');
  *v = x;
  return digits > 0;
}

/* The portal's GetRoleCredentials answer: {"roleCredentials": {accessKeyId,
 * secretAccessKey, sessionToken, expiration (milliseconds)}}. */
static int sso_answer(const char *doc, stk__aws_creds *c, char *msg, size_t msglen) {
  const char *end = doc + strlen(doc);
  memset(c, 0, sizeof *c);
  json_str(doc, end, "accessKeyId", c->key_id, sizeof c->key_id);
  json_str(doc, end, "secretAccessKey", c->secret, sizeof c->secret);
  json_str(doc, end, "sessionToken", c->token, sizeof c->token);
  int rc = creds_check(c, NULL, "the SSO portal's answer", msg, msglen);
  int64_t ms = 0;
  if (!rc && json_num(doc, end, "expiration", &ms)) c->expires = ms / 1000;
  return rc;
}

/* The cached token of the profile's SSO session, into tok; STK_OK or why not. */
static int sso_token(const char *name, const char *key, char *tok, size_t cap, char *msg,
                     size_t msglen) {
  const char *home = env("HOME");
  char hash[41], path[1200], exp[64] = "";
  sha1_hex(key, hash);
  snprintf(path, sizeof path, "%s/.aws/sso/cache/%s.json", home ? home : "", hash);
  size_t n = 0;
  char *doc = read_small(path, HTTP_MAX, &n);
  int found = doc && json_str(doc, doc + n, "accessToken", tok, cap);
  if (doc) json_str(doc, doc + n, "expiresAt", exp, sizeof exp);
  wipe_free(doc);
  if (!found)
    return stk__fail(msg, msglen, STK_EINVAL,
                     "the AWS profile '%s' uses SSO and has no cached token (%s): run 'aws sso "
                     "login --profile %s'",
                     name, path, name);
  int64_t t = stk__aws_time(exp);
  if (t >= 0 && t <= (int64_t)time(NULL))
    return stk__fail(msg, msglen, STK_EINVAL,
                     "the SSO session of the AWS profile '%s' expired at %s: run 'aws sso login "
                     "--profile %s'",
                     name, exp, name);
  return STK_OK;
}

/* SSO: the session's settings, its cached token, then GetRoleCredentials
 * from the portal (AWS_ENDPOINT_URL_SSO, else portal.sso.REGION). The token
 * itself is not refreshed here: `aws sso login` does that. */
static int sso_creds(const char *name, stk__aws_profile *p, stk__aws_creds *out, char *msg,
                     size_t msglen) {
  if (p->sso_session[0]) { /* the [sso-session NAME] section of the config file */
    char conff[1024], sec[200];
    stk__aws_file(conff, sizeof conff, "AWS_CONFIG_FILE", "config");
    snprintf(sec, sizeof sec, "sso-session %s", p->sso_session);
    size_t n = 0;
    char *t = read_small(conff, 1u << 20, &n);
    int found = t && stk__aws_ini_parse(t, n, sec, p);
    wipe_free(t);
    if (!found)
      return stk__fail(msg, msglen, STK_EINVAL, "the AWS profile '%s' names sso_session '%s', "
                       "which %s has no [%s] section for", name, p->sso_session, conff, sec);
  }
  if (!p->sso_account_id[0] || !p->sso_role_name[0] || !p->sso_region[0])
    return stk__fail(msg, msglen, STK_EINVAL, "the AWS profile '%s' lacks sso_account_id, "
                     "sso_role_name or sso_region", name);
  char tok[8192], hdr[8300], url[1200], acct[100], role[400];
  int rc = sso_token(name, p->sso_session[0] ? p->sso_session : p->sso_start_url, tok,
                     sizeof tok, msg, msglen);
  if (rc) return rc;
  const char *e = env("AWS_ENDPOINT_URL_SSO");
  char base[600];
  if (e)
    copy(base, sizeof base, e);
  else
    snprintf(base, sizeof base, "https://portal.sso.%s.amazonaws.com", p->sso_region);
  size_t bl = strlen(base);
  while (bl && base[bl - 1] == '/') base[--bl] = '\0';
  stk__uri_encode(p->sso_account_id, 0, acct, sizeof acct);
  stk__uri_encode(p->sso_role_name, 0, role, sizeof role);
  snprintf(url, sizeof url, "%s/federation/credentials?account_id=%s&role_name=%s", base, acct, role);
  snprintf(hdr, sizeof hdr, "x-amz-sso_bearer_token: %s", tok);
  const char *list[2] = {hdr, NULL};
  char *doc = NULL;
  long status = 0;
  rc = stk__http_fetch("GET", url, list, NULL, 10000, HTTP_MAX, &doc, &status, msg, msglen);
  memset(tok, 0, sizeof tok);
  memset(hdr, 0, sizeof hdr);
  if (!rc && status != 200)
    rc = stk__fail(msg, msglen, STK_EIO, "the SSO portal %s refused the cached token (HTTP %ld): "
                   "run 'aws sso login --profile %s'", base, status, name);
  if (!rc) rc = sso_answer(doc, out, msg, msglen);
  wipe_free(doc);
  return rc;
}

static int provider(int kind, source *s, int depth, stk__aws_creds *out, char *msg, size_t msglen);

/* The credentials a role_arn profile assumes the role with. */
static int role_base(const char *name, const stk__aws_profile *p, source *s, int depth,
                     stk__aws_creds *base, char *msg, size_t msglen) {
  source sub = *s;
  const char *cs = p->credential_source;
  if (p->source_profile[0] && !strcmp(p->source_profile, name) && p->key_id[0]) {
    copy(base->key_id, sizeof base->key_id, p->key_id); /* a profile that is its own source */
    copy(base->secret, sizeof base->secret, p->secret);
    copy(base->token, sizeof base->token, p->token);
    return STK_OK;
  }
  if (p->source_profile[0]) {
    copy(sub.profile, sizeof sub.profile, p->source_profile);
    int rc = provider(SRC_PROFILE, &sub, depth + 1, base, msg, msglen);
    if (rc == 1)
      return stk__fail(msg, msglen, STK_EINVAL, "its source_profile '%s' does not exist",
                       p->source_profile);
    if (rc == 2)
      return stk__fail(msg, msglen, STK_EINVAL, "its source_profile '%s' has no credentials",
                       p->source_profile);
    return rc;
  }
  int kind = !strcmp(cs, "Environment")           ? SRC_ENV
             : !strcmp(cs, "Ec2InstanceMetadata") ? SRC_IMDS
             : !strcmp(cs, "EcsContainer")        ? SRC_CONTAINER
                                                  : SRC_NONE;
  if (kind == SRC_NONE)
    return stk__fail(msg, msglen, STK_EINVAL,
                     "the AWS profile '%s' has role_arn without source_profile, "
                     "web_identity_token_file or a known credential_source",
                     name);
  int rc = provider(kind, &sub, depth + 1, base, msg, msglen);
  if (rc > 0) {
    char m[600];
    copy(m, sizeof m, msg);
    return stk__fail(msg, msglen, STK_EIO, "credential_source %s has none: %s", cs, m);
  }
  return rc;
}

/* The profile's credentials: STK_OK; 1 when the profile does not exist; 2
 * when it exists without credentials (a region alone): the chain goes on. */
static int profile_creds(source *s, int depth, stk__aws_creds *out, char *msg, size_t msglen) {
  const char *name = s->profile;
  stk__aws_profile *p = calloc(1, sizeof *p);
  char files[2100];
  if (!p) return stk__fail(msg, msglen, STK_ENOMEM, "out of memory");
  int rc = 2;
  if (depth > 4) {
    rc = stk__fail(msg, msglen, STK_EINVAL, "the AWS profiles' source_profile chain is too long");
  } else if (!load_profile(name, p, files, sizeof files)) {
    rc = 1;
    snprintf(msg, msglen, "profile '%s' is in neither %s", name, files);
  } else if (p->role_arn[0] && p->web_identity_token_file[0]) {
    rc = web_identity(p->web_identity_token_file, p->role_arn, p->role_session_name, s->region,
                      out, msg, msglen);
    snprintf(s->what, sizeof s->what, "profile %s (role %s, web identity)", name, p->role_arn);
  } else if (p->role_arn[0]) {
    stk__aws_creds base;
    memset(&base, 0, sizeof base);
    rc = role_base(name, p, s, depth, &base, msg, msglen);
    if (!rc) rc = assume_role(p, &base, s->region, out, msg, msglen);
    memset(&base, 0, sizeof base);
    snprintf(s->what, sizeof s->what, "profile %s (role %s, from %s)", name, p->role_arn,
             p->source_profile[0] ? p->source_profile : p->credential_source);
  } else if (p->key_id[0] && p->secret[0]) {
    rc = STK_OK;
    copy(out->key_id, sizeof out->key_id, p->key_id);
    copy(out->secret, sizeof out->secret, p->secret);
    copy(out->token, sizeof out->token, p->token);
    out->expires = 0;
    snprintf(s->what, sizeof s->what, "profile %s (static keys)", name);
  } else if (p->credential_process[0]) {
    rc = run_process(p->credential_process, out, msg, msglen);
    snprintf(s->what, sizeof s->what, "profile %s (credential_process)", name);
  } else if (p->sso_session[0] || p->sso_start_url[0]) {
    rc = sso_creds(name, p, out, msg, msglen);
    snprintf(s->what, sizeof s->what, "profile %s (SSO, role %s in account %s)", name,
             p->sso_role_name, p->sso_account_id);
  }
  if (rc < 0 && depth == 0 && !strstr(msg, name)) {
    char m[512];
    copy(m, sizeof m, msg);
    stk__fail(msg, msglen, rc, "AWS profile '%s': %s", name, m);
  }
  memset(p, 0, sizeof *p);
  free(p);
  return rc;
}

/* ---- the container endpoint and instance metadata ------------------------- */

/* SDKs allow plain http only to the hosts of ECS and EKS Pod Identity and
 * to loopback: a token sent elsewhere in clear could be read on the way. */
static int container_host_ok(const char *url) {
  if (!strncasecmp(url, "https://", 8)) return 1;
  if (strncasecmp(url, "http://", 7)) return 0;
  const char *h = url + 7;
  static const char *const ok[] = {"127.", "localhost", "[::1]", "169.254.170.2",
                                   "169.254.170.23", "[fd00:ec2::23]"};
  size_t hl = strcspn(h, "/?#");
  if (memchr(h, '@', hl)) return 0; /* user info: the host is after it */
  for (size_t i = 0; i < sizeof ok / sizeof *ok; i++) {
    size_t l = strlen(ok[i]);
    if (strncasecmp(h, ok[i], l)) continue;
    if (ok[i][l - 1] == '.') { /* 127.x.y.z: digits and dots up to the port */
      size_t k = l;
      while (k < hl && (isdigit((unsigned char)h[k]) || h[k] == '.')) k++;
      if (k == hl || h[k] == ':') return 1;
    } else if (h[l] == '\0' || h[l] == ':' || h[l] == '/' || h[l] == '?') {
      return 1;
    }
  }
  return 0;
}

static int container_creds(source *s, stk__aws_creds *out, char *msg, size_t msglen) {
  const char *rel = env("AWS_CONTAINER_CREDENTIALS_RELATIVE_URI");
  const char *full = env("AWS_CONTAINER_CREDENTIALS_FULL_URI");
  char url[1200];
  if (!rel && !full) {
    snprintf(msg, msglen, "container endpoint (AWS_CONTAINER_CREDENTIALS_*_URI not set)");
    return 1;
  }
  if (rel)
    snprintf(url, sizeof url, "http://169.254.170.2%s", rel);
  else
    copy(url, sizeof url, full);
  char shown[600];
  stk__url_redact(url, shown, sizeof shown);
  if (!container_host_ok(url))
    return stk__fail(msg, msglen, STK_EINVAL,
                     "AWS_CONTAINER_CREDENTIALS_FULL_URI %s: plain http only to loopback, "
                     "169.254.170.2 or 169.254.170.23",
                     shown);
  char *tok = NULL;
  const char *tf = env("AWS_CONTAINER_AUTHORIZATION_TOKEN_FILE");
  if (tf && !(tok = read_small(tf, 16384, NULL)))
    return stk__fail(msg, msglen, STK_EIO, "cannot read AWS_CONTAINER_AUTHORIZATION_TOKEN_FILE %s: %s",
                     tf, strerror(errno));
  if (!tok && env("AWS_CONTAINER_AUTHORIZATION_TOKEN"))
    tok = strdup(env("AWS_CONTAINER_AUTHORIZATION_TOKEN"));
  char *hdr = NULL;
  if (tok) {
    trim(tok);
    size_t hl = strlen(tok) + 32;
    if ((hdr = malloc(hl))) snprintf(hdr, hl, "Authorization: %s", tok);
  }
  const char *list[2] = {hdr, NULL};
  char *doc = NULL;
  long status = 0;
  int rc = stk__http_fetch("GET", url, list, NULL, 5000, HTTP_MAX, &doc, &status, msg, msglen);
  wipe_free(hdr);
  wipe_free(tok);
  if (!rc && status != 200)
    rc = stk__fail(msg, msglen, STK_EIO, "the container endpoint %s answered HTTP %ld", shown, status);
  if (!rc) rc = stk__aws_json_creds(doc, strlen(doc), out, msg, msglen);
  wipe_free(doc);
  snprintf(s->what, sizeof s->what, "container endpoint (%s)", shown);
  return rc;
}

static void imds_endpoint(char *out, size_t cap) {
  const char *e = env("AWS_EC2_METADATA_SERVICE_ENDPOINT");
  const char *mode = env("AWS_EC2_METADATA_SERVICE_ENDPOINT_MODE");
  if (e)
    copy(out, cap, e);
  else if (mode && !strcasecmp(mode, "IPv6"))
    copy(out, cap, "http://[fd00:ec2::254]");
  else
    copy(out, cap, "http://169.254.169.254");
  size_t n = strlen(out);
  while (n && out[n - 1] == '/') out[--n] = '\0';
}

/* GET of a metadata path with the session token (or none: IMDSv1). */
static int imds_get(const char *ep, const char *path, const char *token, long ms, char **out,
                    char *msg, size_t msglen) {
  char url[1400], hdr[200];
  snprintf(url, sizeof url, "%s%s", ep, path);
  snprintf(hdr, sizeof hdr, "X-aws-ec2-metadata-token: %s", token ? token : "");
  const char *list[2] = {token ? hdr : NULL, NULL};
  long status = 0;
  int rc = stk__http_fetch("GET", url, list, NULL, ms, HTTP_MAX, out, &status, msg, msglen);
  memset(hdr, 0, sizeof hdr);
  if (!rc && status != 200) {
    wipe_free(*out);
    *out = NULL;
    rc = stk__fail(msg, msglen, STK_EIO, "instance metadata %s%s answered HTTP %ld", ep, path,
                   status);
  }
  return rc;
}

/* IMDSv2: a session token (PUT), the role's name, its credentials. No
 * answer at all is "not on EC2": the chain ends without credentials. */
static int imds_creds(source *s, stk__aws_creds *out, char *msg, size_t msglen) {
  if (env_true("AWS_EC2_METADATA_DISABLED")) {
    snprintf(msg, msglen, "instance metadata (AWS_EC2_METADATA_DISABLED)");
    return 1;
  }
  char ep[600], *tok = NULL, *role = NULL, *doc = NULL, path[400];
  imds_endpoint(ep, sizeof ep);
  const char *t = env("AWS_METADATA_SERVICE_TIMEOUT");
  long ms = t && atof(t) > 0 ? (long)(atof(t) * 1000) : 1000;
  const char *v1 = env("AWS_EC2_METADATA_V1_DISABLED");
  int v1_ok = v1 && (!strcasecmp(v1, "false") || !strcmp(v1, "0"));
  const char *ttl[2] = {"X-aws-ec2-metadata-token-ttl-seconds: 21600", NULL};
  long status = 0;
  char url[700];
  snprintf(url, sizeof url, "%s/latest/api/token", ep);
  int rc = stk__http_fetch("PUT", url, ttl, "", ms, 4096, &tok, &status, msg, msglen);
  if (rc && !v1_ok) {
    char m[400];
    copy(m, sizeof m, msg);
    snprintf(msg, msglen, "instance metadata (no answer: %s)", m);
    return 1;
  }
  if (!rc && status != 200) {
    wipe_free(tok);
    tok = NULL;
    if (!v1_ok)
      return stk__fail(msg, msglen, STK_EIO,
                       "instance metadata %s refused a session token (HTTP %ld); IMDSv1 is off "
                       "(AWS_EC2_METADATA_V1_DISABLED=false allows it)",
                       ep, status);
  }
  if (tok) trim(tok);
  const char *base = "/latest/meta-data/iam/security-credentials/";
  rc = imds_get(ep, base, tok, ms, &role, msg, msglen);
  if (!rc) {
    role[strcspn(role, "\r\n")] = '\0';
    trim(role);
    if (!role[0] || strchr(role, '/') || strlen(role) > 200)
      rc = stk__fail(msg, msglen, STK_EIO, "instance metadata %s names no IAM role", ep);
  }
  if (!rc) {
    snprintf(path, sizeof path, "%s%s", base, role);
    rc = imds_get(ep, path, tok, ms, &doc, msg, msglen);
    snprintf(s->what, sizeof s->what, "instance metadata (role %s at %s%s)", role, ep,
             tok ? "" : ", IMDSv1");
  }
  if (!rc) rc = stk__aws_json_creds(doc, strlen(doc), out, msg, msglen);
  wipe_free(doc);
  free(role);
  wipe_free(tok);
  return rc;
}

static int env_creds(source *s, stk__aws_creds *out, char *msg, size_t msglen) {
  if (!env("AWS_ACCESS_KEY_ID") || !env("AWS_SECRET_ACCESS_KEY")) {
    snprintf(msg, msglen, "environment (AWS_ACCESS_KEY_ID not set)");
    return 1;
  }
  copy(out->key_id, sizeof out->key_id, env("AWS_ACCESS_KEY_ID"));
  copy(out->secret, sizeof out->secret, env("AWS_SECRET_ACCESS_KEY"));
  copy(out->token, sizeof out->token, env("AWS_SESSION_TOKEN"));
  out->expires = 0;
  copy(s->what, sizeof s->what, "environment (AWS_ACCESS_KEY_ID)");
  return STK_OK;
}

static int env_web_identity(source *s, stk__aws_creds *out, char *msg, size_t msglen) {
  const char *tf = env("AWS_WEB_IDENTITY_TOKEN_FILE"), *role = env("AWS_ROLE_ARN");
  if (!tf || !role) {
    snprintf(msg, msglen, "web identity (AWS_WEB_IDENTITY_TOKEN_FILE and AWS_ROLE_ARN not set)");
    return 1;
  }
  snprintf(s->what, sizeof s->what, "web identity (role %s, token %s)", role, tf);
  return web_identity(tf, role, env("AWS_ROLE_SESSION_NAME"), s->region, out, msg, msglen);
}

/* One provider: STK_OK, > 0 when it has nothing here (msg says why), or an
 * error. `depth` bounds the profiles' source_profile chain. */
static int provider(int kind, source *s, int depth, stk__aws_creds *out, char *msg, size_t msglen) {
  memset(out, 0, sizeof *out);
  switch (kind) {
    case SRC_ENV: return env_creds(s, out, msg, msglen);
    case SRC_PROFILE: return profile_creds(s, depth, out, msg, msglen);
    case SRC_WEB: return env_web_identity(s, out, msg, msglen);
    case SRC_CONTAINER: return container_creds(s, out, msg, msglen);
    case SRC_IMDS: return imds_creds(s, out, msg, msglen);
    default: return stk__fail(msg, msglen, STK_EINVAL, "no such credential provider");
  }
}

/* The chain: the first provider with credentials gives them. An explicit
 * AWS_PROFILE that exists nowhere is an error, not a step over. */
static int chain(source *s, stk__aws_creds *out, char *msg, size_t msglen) {
  const char *named = env("AWS_PROFILE");
  if (!named) named = env("AWS_DEFAULT_PROFILE");
  copy(s->profile, sizeof s->profile, named ? named : "default");
  char tried[1500] = "", why[600];
  for (int kind = SRC_ENV; kind <= SRC_IMDS; kind++) {
    why[0] = s->what[0] = '\0';
    int rc = provider(kind, s, 0, out, why, sizeof why);
    if (rc == STK_OK) {
      s->kind = kind;
      return STK_OK;
    }
    if (rc < 0)
      return stk__fail(msg, msglen, rc, "AWS credentials%s%s%s: %s", s->what[0] ? " from " : "",
                       s->what, "", why);
    if (kind == SRC_PROFILE && rc == 1 && named)
      return stk__fail(msg, msglen, STK_EINVAL, "the AWS profile '%s' (AWS_PROFILE) does not exist: %s",
                       named, why);
    if (kind == SRC_PROFILE && rc == 2)
      snprintf(why, sizeof why, "profile '%s' (no credentials in it)", s->profile);
    size_t tl = strlen(tried);
    snprintf(tried + tl, sizeof tried - tl, "%s%s", tl ? "; " : "", why);
  }
  memset(out, 0, sizeof *out);
  s->kind = SRC_NONE;
  snprintf(msg, msglen, "no AWS credentials found (tried: %s)", tried);
  return STK_OK;
}

/* ---- the credentials of a client, and their renewal ----------------------- */

struct stk__creds {
  pthread_mutex_t mu; /* guards what follows; held only to copy or swap */
  pthread_cond_t cv;  /* wakes the renewal thread */
  stk__aws_creds cur;
  uint64_t gen;
  source src;
  double renew_at; /* wall-clock seconds */
  int force, renewing, stop, renewals;
  int has_thread, detached;
  pthread_t thread;
};

static double wall_now(void) {
  struct timespec ts;
  clock_gettime(CLOCK_REALTIME, &ts);
  return (double)ts.tv_sec + ts.tv_nsec * 1e-9;
}

/* When to renew: 5 minutes before the expiry, or at half the remaining
 * life when that is shorter (credentials of 15 minutes or less). */
static double renew_time(const stk__aws_creds *c, double now) {
  double life = (double)c->expires - now;
  if (life <= 2) return now + 1; /* already (nearly) expired: soon, not in a loop */
  double lead = life / 2 < 300 ? life / 2 : 300;
  return (double)c->expires - lead;
}

static void *renew_main(void *arg) {
  stk__creds *c = arg;
  double backoff = 1;
  pthread_mutex_lock(&c->mu);
  while (!c->stop) {
    double now = wall_now();
    if (!c->force && now < c->renew_at) {
      struct timespec ts;
      double at = c->renew_at < now + 60 ? c->renew_at : now + 60;
      ts.tv_sec = (time_t)at;
      ts.tv_nsec = (long)((at - (double)ts.tv_sec) * 1e9);
      pthread_cond_timedwait(&c->cv, &c->mu, &ts);
      continue;
    }
    c->renewing = 1;
    source s = c->src;
    pthread_mutex_unlock(&c->mu);
    stk__aws_creds fresh;
    char why[700];
    int rc = provider(s.kind, &s, 0, &fresh, why, sizeof why);
    pthread_mutex_lock(&c->mu);
    if (c->detached) { /* closed during the renewal: the thread frees it */
      memset(&fresh, 0, sizeof fresh);
      pthread_mutex_unlock(&c->mu);
      pthread_mutex_destroy(&c->mu);
      pthread_cond_destroy(&c->cv);
      memset(c, 0, sizeof *c);
      free(c);
      return NULL;
    }
    if (rc == STK_OK) {
      c->cur = fresh;
      c->gen++;
      c->renewals++;
      c->renew_at = fresh.expires ? renew_time(&fresh, wall_now()) : 1e18;
      backoff = 1;
    } else {
      /* keep the current ones (they may still be valid) and try again */
      c->renew_at = wall_now() + backoff;
      backoff = backoff * 2 < 30 ? backoff * 2 : 30;
    }
    memset(&fresh, 0, sizeof fresh);
    c->force = 0;
    c->renewing = 0;
    pthread_cond_broadcast(&c->cv);
  }
  pthread_mutex_unlock(&c->mu);
  return NULL;
}

int stk__creds_open(stk__creds **out, const char *region, char *msg, size_t msglen) {
  *out = NULL;
  stk__creds *c = calloc(1, sizeof *c);
  if (!c) return stk__fail(msg, msglen, STK_ENOMEM, "out of memory");
  copy(c->src.region, sizeof c->src.region, region && *region ? region : "us-east-1");
  int rc = chain(&c->src, &c->cur, msg, msglen);
  if (rc || c->src.kind == SRC_NONE) {
    memset(c, 0, sizeof *c);
    free(c);
    return rc;
  }
  pthread_mutex_init(&c->mu, NULL);
  pthread_cond_init(&c->cv, NULL);
  c->gen = 1;
  /* static keys never expire: no thread */
  if (c->cur.expires) {
    c->renew_at = renew_time(&c->cur, wall_now());
    c->has_thread = !pthread_create(&c->thread, NULL, renew_main, c);
  }
  *out = c;
  return STK_OK;
}

uint64_t stk__creds_get(stk__creds *c, stk__aws_creds *out) {
  pthread_mutex_lock(&c->mu);
  *out = c->cur;
  uint64_t g = c->gen;
  pthread_mutex_unlock(&c->mu);
  return g;
}

int stk__creds_stale(stk__creds *c, uint64_t gen) {
  pthread_mutex_lock(&c->mu);
  int can = c->has_thread;
  if (can && gen == c->gen && !c->renewing) {
    c->force = 1;
    pthread_cond_broadcast(&c->cv);
  }
  pthread_mutex_unlock(&c->mu);
  return can;
}

int stk__creds_renewing(stk__creds *c, uint64_t gen) {
  pthread_mutex_lock(&c->mu);
  int r = gen == c->gen && (c->force || c->renewing);
  pthread_mutex_unlock(&c->mu);
  return r;
}

void stk__creds_describe(stk__creds *c, char *out, size_t cap) {
  pthread_mutex_lock(&c->mu);
  if (c->cur.expires) {
    char when[32];
    time_t t = (time_t)c->cur.expires;
    struct tm tm;
    gmtime_r(&t, &tm);
    strftime(when, sizeof when, "%Y-%m-%dT%H:%M:%SZ", &tm);
    snprintf(out, cap, "%s, temporary: expire %s, renewed %d times so far", c->src.what, when,
             c->renewals);
  } else {
    snprintf(out, cap, "%s", c->src.what);
  }
  pthread_mutex_unlock(&c->mu);
}

void stk__creds_close(stk__creds *c) {
  if (!c) return;
  if (c->has_thread) {
    pthread_mutex_lock(&c->mu);
    c->stop = 1;
    if (c->renewing) {
      /* a renewal under way may take its request's whole timeout: closing
       * does not wait for it, the thread frees what is left */
      c->detached = 1;
      pthread_detach(c->thread);
      pthread_mutex_unlock(&c->mu);
      return;
    }
    pthread_cond_broadcast(&c->cv);
    pthread_mutex_unlock(&c->mu);
    pthread_join(c->thread, NULL);
  }
  pthread_mutex_destroy(&c->mu);
  pthread_cond_destroy(&c->cv);
  memset(c, 0, sizeof *c); /* the secret and the token */
  free(c);
}

static pthread_mutex_t last_mu = PTHREAD_MUTEX_INITIALIZER;
static char last_what[512];

void stk__creds_set_last(const char *what) {
  pthread_mutex_lock(&last_mu);
  copy(last_what, sizeof last_what, what);
  pthread_mutex_unlock(&last_mu);
}

int stk_remote_credentials(char *out, size_t cap) {
  pthread_mutex_lock(&last_mu);
  int any = last_what[0] != '\0';
  if (cap) copy(out, cap, last_what);
  pthread_mutex_unlock(&last_mu);
  return any;
}

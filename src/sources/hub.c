/* hub.c: the Hugging Face Hub's names, URLs, token and tree listing. See
 * hub.h. */
#define _GNU_SOURCE /* strcasestr */
#include "sources/hub.h"

#include <ctype.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>

#include "core/common.h"
#include "sources/s3.h"

#define HF_DEFAULT_ENDPOINT "https://huggingface.co"

int stk__is_hf(const char *url) { return url && !strncmp(url, "hf://", 5); }

/* %XX decoded in place (a revision that holds '/' is written
 * refs%2Fpr%2F1, as HfFileSystem writes it). -1 for a bad escape. */
static int pct_decode(char *s) {
  char *o = s;
  for (const char *p = s; *p; p++) {
    if (*p != '%') {
      *o++ = *p;
      continue;
    }
    if (!isxdigit((unsigned char)p[1]) || !isxdigit((unsigned char)p[2])) return -1;
    char hex[3] = {p[1], p[2], 0};
    *o++ = (char)strtol(hex, NULL, 16);
    p += 2;
  }
  *o = '\0';
  return 0;
}

/* The revision after '@' at s, to the '/' that ends it; HfFileSystem also
 * takes refs/pr/N and refs/convert/NAME unencoded, slashes and all. Its
 * length in the name. */
static size_t rev_len(const char *s) {
  size_t n = strcspn(s, "/");
  if (!strncmp(s, "refs/pr/", 8) || !strncmp(s, "refs/convert/", 13)) {
    const char *third = strchr(strchr(s, '/') + 1, '/') + 1;
    n = (size_t)(third - s) + strcspn(third, "/");
  }
  return n;
}

static int repo_char_ok(char c) {
  return isalnum((unsigned char)c) || c == '-' || c == '_' || c == '.';
}

int stk__hf_parse(const char *url, stk__hf_ref *r, char *msg, size_t msglen) {
  memset(r, 0, sizeof *r);
  if (!stk__is_hf(url)) return stk__fail(msg, msglen, STK_EINVAL, "%s is no hf:// name", url);
  const char *p = url + 5;
  static const char *const types[] = {"datasets/", "spaces/", "models/"};
  snprintf(r->type, sizeof r->type, "models");
  for (size_t i = 0; i < 3; i++)
    if (!strncmp(p, types[i], strlen(types[i]))) {
      snprintf(r->type, sizeof r->type, "%.*s", (int)strlen(types[i]) - 1, types[i]);
      p += strlen(types[i]);
      break;
    }
  /* OWNER/NAME: both required (a repository without an owner is ambiguous
   * with a folder of one), of the characters the Hub allows */
  const char *slash = strchr(p, '/');
  size_t ol = slash ? (size_t)(slash - p) : 0;
  const char *name = slash ? slash + 1 : p;
  size_t nl = strcspn(name, "/@");
  int ok = ol && nl && ol + 1 + nl < sizeof r->repo;
  for (size_t i = 0; ok && i < ol; i++) ok = repo_char_ok(p[i]);
  for (size_t i = 0; ok && i < nl; i++) ok = repo_char_ok(name[i]);
  if (!ok)
    return stk__fail(msg, msglen, STK_EINVAL,
                     "%s: expected hf://datasets/OWNER/NAME[@REVISION]/PATH, as huggingface_hub's "
                     "HfFileSystem writes it",
                     url);
  snprintf(r->repo, sizeof r->repo, "%.*s", (int)(ol + 1 + nl), p);
  const char *q = name + nl;
  snprintf(r->rev, sizeof r->rev, "main");
  if (*q == '@') {
    size_t rl = rev_len(q + 1);
    if (!rl || rl >= sizeof r->rev)
      return stk__fail(msg, msglen, STK_EINVAL, "%s: an empty or overlong revision", url);
    snprintf(r->rev, sizeof r->rev, "%.*s", (int)rl, q + 1);
    if (pct_decode(r->rev) || !r->rev[0])
      return stk__fail(msg, msglen, STK_EINVAL, "%s: a bad %%-escape in the revision", url);
    q += 1 + rl;
  }
  r->root_len = (size_t)(q - url);
  while (*q == '/') q++;
  if (strlen(q) >= sizeof r->path)
    return stk__fail(msg, msglen, STK_EINVAL, "%s: the path is too long", url);
  snprintf(r->path, sizeof r->path, "%s", q);
  return STK_OK;
}

void stk__hf_endpoint(char *out, size_t cap) {
  const char *e = getenv("HF_ENDPOINT");
  snprintf(out, cap, "%s", e && *e ? e : HF_DEFAULT_ENDPOINT);
  size_t l = strlen(out);
  while (l && out[l - 1] == '/') out[--l] = '\0';
}

/* "{endpoint}[/api]/{TYPE}/OWNER/NAME/" of r: a model has no type in its
 * URLs, but has it in the API's (/api/models/). */
static int repo_base(const stk__hf_ref *r, int api, char *out, size_t cap) {
  char ep[1024];
  stk__hf_endpoint(ep, sizeof ep);
  const char *type = !strcmp(r->type, "models") && !api ? "" : r->type;
  int w = snprintf(out, cap, "%s%s/%s%s%s/", ep, api ? "/api" : "", type, type[0] ? "/" : "",
                   r->repo);
  return w < 0 || (size_t)w >= cap ? -1 : 0;
}

int stk__hf_resolve_url(const char *url, char *out, size_t cap, char *msg, size_t msglen) {
  stk__hf_ref r;
  int rc = stk__hf_parse(url, &r, msg, msglen);
  if (rc) return rc;
  /* as hf_hub_url writes it: the revision encoded whole ('/' too), the
   * path with its '/' kept */
  char base[1400], rev[3 * 256], path[3 * 4096];
  if (repo_base(&r, 0, base, sizeof base) || stk__uri_encode(r.rev, 0, rev, sizeof rev) ||
      stk__uri_encode(r.path, 1, path, sizeof path))
    return stk__fail(msg, msglen, STK_EINVAL, "%s: the name is too long", url);
  int w = snprintf(out, cap, "%sresolve/%s/%s", base, rev, path);
  if (w < 0 || (size_t)w >= cap)
    return stk__fail(msg, msglen, STK_EINVAL, "%s: the name is too long", url);
  return STK_OK;
}

int stk__hf_tree_url(const char *url, char *out, size_t cap, char *msg, size_t msglen) {
  stk__hf_ref r;
  int rc = stk__hf_parse(url, &r, msg, msglen);
  if (rc) return rc;
  /* as HfApi.list_repo_tree writes it: revision and path encoded whole */
  char base[1400], rev[3 * 256], path[3 * 4096];
  size_t pl = strlen(r.path);
  while (pl && r.path[pl - 1] == '/') r.path[--pl] = '\0';
  if (repo_base(&r, 1, base, sizeof base) || stk__uri_encode(r.rev, 0, rev, sizeof rev) ||
      stk__uri_encode(r.path, 0, path, sizeof path))
    return stk__fail(msg, msglen, STK_EINVAL, "%s: the name is too long", url);
  int w = snprintf(out, cap, "%stree/%s%s%s?recursive=true&expand=false", base, rev,
                   path[0] ? "/" : "", path);
  if (w < 0 || (size_t)w >= cap)
    return stk__fail(msg, msglen, STK_EINVAL, "%s: the name is too long", url);
  return STK_OK;
}

static int env_true(const char *name) {
  const char *v = getenv(name);
  return v && (!strcasecmp(v, "1") || !strcasecmp(v, "true") || !strcasecmp(v, "yes") ||
               !strcasecmp(v, "on"));
}

/* The token file's first line, into out: 1 when there is one. */
static int token_file(char *out, size_t cap, const char **where) {
  char path[4096];
  const char *tp = getenv("HF_TOKEN_PATH"), *hh = getenv("HF_HOME");
  const char *xdg = getenv("XDG_CACHE_HOME"), *home = getenv("HOME");
  if (tp && *tp)
    snprintf(path, sizeof path, "%s", tp);
  else if (hh && *hh)
    snprintf(path, sizeof path, "%s/token", hh);
  else if (xdg && *xdg)
    snprintf(path, sizeof path, "%s/huggingface/token", xdg);
  else if (home && *home)
    snprintf(path, sizeof path, "%s/.cache/huggingface/token", home);
  else
    return 0;
  FILE *f = fopen(path, "r");
  if (!f) return 0;
  int got = fgets(out, (int)cap, f) != NULL;
  fclose(f);
  out[strcspn(out, "\r\n")] = '\0';
  if (got && out[0]) *where = "the token file of huggingface-cli login";
  return got && out[0];
}

int stk__hf_token(char *out, size_t cap, const char **where) {
  out[0] = '\0';
  *where = "none";
  /* huggingface_hub's switch: the token goes only where it is passed */
  if (env_true("HF_HUB_DISABLE_IMPLICIT_TOKEN")) return 0;
  static const char *const vars[] = {"HF_TOKEN", "HUGGING_FACE_HUB_TOKEN"};
  for (size_t i = 0; i < 2; i++) {
    const char *v = getenv(vars[i]);
    if (v && *v) {
      snprintf(out, cap, "%s", v);
      out[strcspn(out, "\r\n")] = '\0'; /* no header injection */
      *where = vars[i];
      return out[0] != '\0';
    }
  }
  return token_file(out, cap, where);
}

int stk_remote_hub_token(char *out, size_t cap) {
  char t[1024], ep[1024];
  const char *where;
  int has = stk__hf_token(t, sizeof t, &where);
  memset(t, 0, sizeof t);
  stk__hf_endpoint(ep, sizeof ep);
  int dflt = !strcmp(ep, HF_DEFAULT_ENDPOINT);
  if (!cap) return has;
  if (has)
    snprintf(out, cap, "from %s, sent to %s%s only (never to a redirect's other host)", where, ep,
             dflt ? "" : " and " HF_DEFAULT_ENDPOINT);
  else if (env_true("HF_HUB_DISABLE_IMPLICIT_TOKEN"))
    snprintf(out, cap, "none sent (HF_HUB_DISABLE_IMPLICIT_TOKEN is set): public repositories "
                       "only");
  else
    snprintf(out, cap, "none (neither HF_TOKEN, HUGGING_FACE_HUB_TOKEN nor the login token "
                       "file has one): public repositories only");
  return has;
}

int stk__url_origin(const char *url, char *out, size_t cap) {
  int https = !strncasecmp(url, "https://", 8);
  if (!https && strncasecmp(url, "http://", 7)) return -1;
  const char *h = url + (https ? 8 : 7);
  size_t hl = strcspn(h, "/?#");
  /* the user info, up to the last '@' of the authority, is no part of it */
  for (size_t i = hl; i > 0; i--)
    if (h[i - 1] == '@') {
      h += i;
      hl -= i;
      break;
    }
  const char *colon = NULL;
  for (size_t i = hl; i > 0 && h[i - 1] != ']'; i--)
    if (h[i - 1] == ':') {
      colon = h + i - 1;
      break;
    }
  size_t name = colon ? (size_t)(colon - h) : hl;
  const char *port = colon ? colon + 1 : https ? "443" : "80";
  size_t portl = colon ? hl - name - 1 : strlen(port);
  if (!name || !portl) return -1;
  int w = snprintf(out, cap, "%s://%.*s:%.*s", https ? "https" : "http", (int)name, h, (int)portl,
                   port);
  if (w < 0 || (size_t)w >= cap) return -1;
  for (char *c = out; *c; c++) *c = (char)tolower((unsigned char)*c);
  return 0;
}

int stk__hf_token_origin(const char *url) {
  char ep[1024], a[1100], b[1100];
  if (stk__url_origin(url, a, sizeof a)) return 0;
  stk__hf_endpoint(ep, sizeof ep);
  if (!stk__url_origin(ep, b, sizeof b) && !strcmp(a, b)) return 1;
  return !stk__url_origin(HF_DEFAULT_ENDPOINT, b, sizeof b) && !strcmp(a, b);
}

int stk__link_next(const char *value, char *out, size_t cap) {
  /* Link: <url1>; rel="prev", <url2>; rel="next" (RFC 8288) */
  for (const char *p = value; (p = strchr(p, '<'));) {
    const char *gt = strchr(p, '>');
    if (!gt) return 0;
    const char *end = strchr(gt, '<');
    size_t pl = end ? (size_t)(end - gt) : strlen(gt);
    char params[256];
    snprintf(params, sizeof params, "%.*s", (int)(pl < sizeof params ? pl : sizeof params - 1), gt);
    const char *rel = strcasestr(params, "rel=");
    if (rel) {
      rel += 4;
      if (*rel == '"') rel++;
      if (!strncasecmp(rel, "next", 4) && !isalnum((unsigned char)rel[4])) {
        size_t ul = (size_t)(gt - p - 1);
        if (ul + 1 > cap) return 0;
        memcpy(out, p + 1, ul);
        out[ul] = '\0';
        return 1;
      }
    }
    p = gt;
  }
  return 0;
}

/* ---- the tree API's JSON ---------------------------------------------------
 *
 * A page is an array of objects: {"type": "file"|"directory", "path": ...,
 * "size": N, "oid": GIT_ID, "lfs": {"oid": SHA256, "size": N, ...}, ...}.
 * The reader below takes exactly that, and skips any other member or value
 * (to a bounded depth): the server is not trusted, and a field the Hub adds
 * later must not break the listing. */

#define JS_DEPTH 32

typedef struct {
  const char *p, *end;
} js;

static void js_ws(js *j) {
  while (j->p < j->end && (*j->p == ' ' || *j->p == '\t' || *j->p == '\n' || *j->p == '\r')) j->p++;
}

static int js_eat(js *j, char c) {
  js_ws(j);
  if (j->p < j->end && *j->p == c) {
    j->p++;
    return 1;
  }
  return 0;
}

static int hex4(const char *p, unsigned *v) {
  *v = 0;
  for (int i = 0; i < 4; i++) {
    if (!isxdigit((unsigned char)p[i])) return -1;
    *v = *v * 16 + (unsigned)(isdigit((unsigned char)p[i]) ? p[i] - '0' : (p[i] | 32) - 'a' + 10);
  }
  return 0;
}

/* A code point as UTF-8 into out[*o..cap); -1 when it does not fit. */
static int put_utf8(char *out, size_t cap, size_t *o, unsigned cp) {
  unsigned char b[4];
  size_t n = cp < 0x80 ? 1 : cp < 0x800 ? 2 : cp < 0x10000 ? 3 : 4;
  if (n == 1) b[0] = (unsigned char)cp;
  if (n == 2) b[0] = (unsigned char)(0xC0 | cp >> 6);
  if (n == 3) b[0] = (unsigned char)(0xE0 | cp >> 12);
  if (n == 4) b[0] = (unsigned char)(0xF0 | cp >> 18);
  for (size_t k = 1; k < n; k++) b[k] = (unsigned char)(0x80 | ((cp >> (6 * (n - 1 - k))) & 0x3F));
  if (!out) return 0;
  if (*o + n >= cap) return -1;
  memcpy(out + *o, b, n);
  *o += n;
  return 0;
}

/* The \u escape at j->p (after the backslash and 'u'), a surrogate pair
 * read whole; -1 for a bad one. */
static int js_unicode(js *j, unsigned *cp) {
  if (j->end - j->p < 4 || hex4(j->p, cp)) return -1;
  j->p += 4;
  if (*cp >= 0xDC00 && *cp < 0xE000) return -1;
  if (*cp < 0xD800 || *cp >= 0xDC00) return 0;
  unsigned lo;
  if (j->end - j->p < 6 || j->p[0] != '\\' || j->p[1] != 'u' || hex4(j->p + 2, &lo) ||
      lo < 0xDC00 || lo >= 0xE000)
    return -1;
  j->p += 6;
  *cp = 0x10000 + ((*cp - 0xD800) << 10) + (lo - 0xDC00);
  return 0;
}

/* A string into out (NUL-terminated; NULL: skipped). -1 when it is no
 * string, has a control character or a NUL, or does not fit. */
static int js_string(js *j, char *out, size_t cap) {
  if (!js_eat(j, '"')) return -1;
  size_t o = 0;
  while (j->p < j->end && *j->p != '"') {
    unsigned char c = (unsigned char)*j->p++;
    unsigned cp = c;
    if (c < 0x20) return -1;
    if (c == '\\') {
      if (j->p >= j->end) return -1;
      char e = *j->p++;
      const char *from = "\"\\/bfnrt", *to = "\"\\/\b\f\n\r\t";
      const char *at = e ? strchr(from, e) : NULL;
      if (e == 'u') {
        if (js_unicode(j, &cp) || cp == 0) return -1;
      } else if (at) {
        cp = (unsigned char)to[at - from];
      } else {
        return -1;
      }
      if (put_utf8(out, cap, &o, cp)) return -1;
      continue;
    }
    if (out && o + 1 >= cap) return -1;
    if (out) out[o++] = (char)c;
  }
  if (j->p >= j->end) return -1;
  j->p++;
  if (out) out[o] = '\0';
  return 0;
}

/* A byte count (digits only, at most 2^63 - 1); -1 otherwise. */
static int js_count(js *j, uint64_t *v) {
  js_ws(j);
  const char *d = j->p;
  *v = 0;
  for (; j->p < j->end && isdigit((unsigned char)*j->p); j->p++) {
    if (*v > ((UINT64_MAX >> 1) - (uint64_t)(*j->p - '0')) / 10) return -1;
    *v = *v * 10 + (uint64_t)(*j->p - '0');
  }
  return j->p == d || (j->p < j->end && strchr(".eE", *j->p)) ? -1 : 0;
}

/* Any value, skipped; -1 for what is no JSON (or nests over JS_DEPTH). */
static int js_skip(js *j, int depth) {
  js_ws(j);
  if (j->p >= j->end || depth > JS_DEPTH) return -1;
  char c = *j->p;
  if (c == '"') return js_string(j, NULL, 0);
  if (c == '{' || c == '[') {
    char close = c == '{' ? '}' : ']';
    j->p++;
    if (js_eat(j, close)) return 0;
    do {
      if (c == '{' && (js_string(j, NULL, 0) || !js_eat(j, ':'))) return -1;
      if (js_skip(j, depth + 1)) return -1;
    } while (js_eat(j, ','));
    return js_eat(j, close) ? 0 : -1;
  }
  const char *s = j->p;
  while (j->p < j->end && (isalnum((unsigned char)*j->p) || strchr("+-.", *j->p))) j->p++;
  return j->p == s ? -1 : 0;
}

typedef struct {
  char type[16], path[4096], oid[96], lfs_oid[96];
  uint64_t size;
  int has_size;
} tree_entry;

/* The members of an object, each handed to fn(j, key, ud); fn skips what it
 * does not take. */
static int js_object(js *j, int (*fn)(js *, const char *, void *), void *ud) {
  if (!js_eat(j, '{')) return -1;
  if (js_eat(j, '}')) return 0;
  do {
    char key[256];
    if (js_string(j, key, sizeof key)) return -1;
    if (!js_eat(j, ':') || fn(j, key, ud)) return -1;
  } while (js_eat(j, ','));
  return js_eat(j, '}') ? 0 : -1;
}

static int lfs_member(js *j, const char *key, void *ud) {
  tree_entry *e = ud;
  js_ws(j);
  if (!strcmp(key, "oid") && j->p < j->end && *j->p == '"')
    return js_string(j, e->lfs_oid, sizeof e->lfs_oid);
  return js_skip(j, 2);
}

static int entry_member(js *j, const char *key, void *ud) {
  tree_entry *e = ud;
  js_ws(j);
  int str = j->p < j->end && *j->p == '"';
  if (!strcmp(key, "type") && str) return js_string(j, e->type, sizeof e->type);
  if (!strcmp(key, "path") && str) return js_string(j, e->path, sizeof e->path);
  if (!strcmp(key, "oid") && str) return js_string(j, e->oid, sizeof e->oid);
  if (!strcmp(key, "size")) {
    e->has_size = 1;
    return js_count(j, &e->size);
  }
  if (!strcmp(key, "lfs") && j->p < j->end && *j->p == '{') return js_object(j, lfs_member, e);
  return js_skip(j, 1);
}

/* A path that is no file's name in a repository: empty, absolute, or with
 * an empty, "." or ".." segment (which would make another URL of it). */
static int bad_path(const char *p) {
  if (!*p || *p == '/') return 1;
  for (const char *s = p;;) {
    size_t l = strcspn(s, "/");
    if (!l || (l == 1 && s[0] == '.') || (l == 2 && s[0] == '.' && s[1] == '.')) return 1;
    if (!s[l]) return 0;
    s += l + 1;
  }
}

/* A file of the page, appended as root/PATH. */
static int add_file(const tree_entry *e, const char *root, stk__net_object **objs, int *count,
                    int *cap) {
  if (*count == *cap) {
    int nc = *cap ? *cap * 2 : 64;
    stk__net_object *v = nc > *cap ? realloc(*objs, (size_t)nc * sizeof *v) : NULL;
    if (!v) return STK_ENOMEM;
    *objs = v;
    *cap = nc;
  }
  size_t ul = strlen(root) + 1 + strlen(e->path) + 1;
  char *u = malloc(ul);
  if (!u) return STK_ENOMEM;
  snprintf(u, ul, "%s/%s", root, e->path);
  stk__net_object *o = &(*objs)[(*count)++];
  memset(o, 0, sizeof *o);
  o->url = u;
  o->size = e->size;
  snprintf(o->etag, sizeof o->etag, "%s", e->lfs_oid[0] ? e->lfs_oid : e->oid);
  return STK_OK;
}

int stk__hf_tree_page(const char *body, size_t len, const char *root, stk__net_object **objs,
                      int *count, int *cap, char *msg, size_t msglen) {
  js j = {body, body + len};
  int bad = !js_eat(&j, '[');
  if (!bad && !js_eat(&j, ']')) {
    do {
      tree_entry e;
      memset(&e, 0, sizeof e);
      const char *at = j.p;
      bad = js_object(&j, entry_member, &e);
      /* a path that leaves the repository's names (empty, absolute, with
       * "..") is refused rather than made into a URL */
      if (!bad && !strcmp(e.type, "file") &&
          (bad_path(e.path) || !e.has_size))
        bad = 1;
      if (bad) {
        j.p = at;
        break;
      }
      if (strcmp(e.type, "file")) continue;
      if (add_file(&e, root, objs, count, cap))
        return stk__fail(msg, msglen, STK_ENOMEM, "out of memory for the listing");
    } while (js_eat(&j, ','));
    if (!bad) bad = !js_eat(&j, ']');
  }
  js_ws(&j);
  if (bad || j.p != j.end)
    return stk__fail(msg, msglen, STK_EFORMAT,
                     "the Hub's tree listing is not the JSON expected (at byte %zu of %zu): an "
                     "array of {\"type\", \"path\", \"size\"} objects",
                     (size_t)(j.p - body), len);
  return STK_OK;
}

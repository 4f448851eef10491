/* net.c: the HTTP(S) client of remote datasets. See net.h.
 *
 * One I/O thread per client drives libcurl's multi handle: requests are
 * queued by any thread, the I/O thread starts them (at most MAX_ACTIVE at
 * once, over a pool of keep-alive connections that the multi handle
 * keeps), writes bodies straight into each request's buffer, and wakes the
 * waiters. Each attempt is a fresh easy handle: an S3 request is signed
 * anew with the time of that attempt, and a resumed one asks for the bytes
 * it still lacks. */
#define _GNU_SOURCE /* strcasestr, memmem */
#include "sources/net.h"

#include <ctype.h>
#include <ctype.h>
#include <dlfcn.h>
#include <errno.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>
#include <time.h>
#include <unistd.h>

#include "core/common.h"
#include "sources/hub.h"
#include "sources/redact.h"
#include "sources/s3.h"

/* ---- the part of libcurl's ABI (soname 4) that stoker uses --------------- */

typedef void CURL;
typedef void CURLM;
struct curl_slist {
  char *data;
  struct curl_slist *next;
};
typedef struct {
  int msg; /* CURLMSG_DONE = 1 */
  CURL *easy;
  union {
    void *whatever;
    int result;
  } data;
} CURLMsg;
typedef struct {
  int age;
  const char *version;
  unsigned int version_num;
  const char *host;
  int features;
  const char *ssl_version;
} curl_version_info_data;

enum {
  O_WRITEDATA = 10001, O_URL = 10002, O_ERRORBUFFER = 10010, O_WRITEFUNCTION = 20011,
  O_USERAGENT = 10018, O_LOW_SPEED_LIMIT = 19, O_LOW_SPEED_TIME = 20, O_HTTPHEADER = 10023,
  O_HEADERDATA = 10029, O_NOBODY = 44, O_CAINFO = 10065, O_HEADERFUNCTION = 20079,
  O_NOSIGNAL = 99, O_PRIVATE = 10103, O_TIMEOUT_MS = 155, O_CONNECTTIMEOUT_MS = 156,
  O_TCP_KEEPALIVE = 213, O_PROTOCOLS_STR = 10318, O_CUSTOMREQUEST = 10036, O_POSTFIELDS = 10015,
  O_POSTFIELDSIZE_LARGE = 30120,
  I_RESPONSE_CODE = 0x200002, I_REDIRECT_URL = 0x10001F,
  M_MAXCONNECTS = 6,
  E_OK = 0, E_UNSUPPORTED_PROTOCOL = 1, E_URL_MALFORMAT = 3, E_COULDNT_RESOLVE_HOST = 6, E_WRITE_ERROR = 23,
  E_PEER_FAILED_VERIFICATION = 60, E_SSL_CACERT_BADFILE = 77,
};

static struct {
  int (*global_init)(long);
  CURL *(*easy_init)(void);
  int (*easy_setopt)(CURL *, int, ...);
  int (*easy_getinfo)(CURL *, int, ...);
  void (*easy_cleanup)(CURL *);
  int (*easy_perform)(CURL *);
  const char *(*easy_strerror)(int);
  CURLM *(*multi_init)(void);
  int (*multi_setopt)(CURLM *, int, ...);
  int (*multi_add_handle)(CURLM *, CURL *);
  int (*multi_remove_handle)(CURLM *, CURL *);
  int (*multi_perform)(CURLM *, int *);
  int (*multi_poll)(CURLM *, void *, unsigned, int, int *);
  int (*multi_wakeup)(CURLM *);
  CURLMsg *(*multi_info_read)(CURLM *, int *);
  int (*multi_cleanup)(CURLM *);
  struct curl_slist *(*slist_append)(struct curl_slist *, const char *);
  void (*slist_free_all)(struct curl_slist *);
  curl_version_info_data *(*version_info)(int);
} cu;

static pthread_once_t cu_once = PTHREAD_ONCE_INIT;
static char cu_why[256];
static char cu_version[160];

static void cu_load(void) {
  void *h = dlopen("libcurl.so.4", RTLD_NOW | RTLD_LOCAL);
  if (!h) h = dlopen("libcurl-gnutls.so.4", RTLD_NOW | RTLD_LOCAL);
  if (!h) {
    snprintf(cu_why, sizeof cu_why,
             "remote datasets need libcurl, which is not installed (libcurl.so.4: apt install "
             "libcurl4, dnf install libcurl)");
    return;
  }
  struct {
    const char *name;
    void **slot;
  } syms[] = {
      {"curl_global_init", (void **)&cu.global_init},
      {"curl_easy_init", (void **)&cu.easy_init},
      {"curl_easy_setopt", (void **)&cu.easy_setopt},
      {"curl_easy_getinfo", (void **)&cu.easy_getinfo},
      {"curl_easy_cleanup", (void **)&cu.easy_cleanup},
      {"curl_easy_perform", (void **)&cu.easy_perform},
      {"curl_easy_strerror", (void **)&cu.easy_strerror},
      {"curl_multi_init", (void **)&cu.multi_init},
      {"curl_multi_setopt", (void **)&cu.multi_setopt},
      {"curl_multi_add_handle", (void **)&cu.multi_add_handle},
      {"curl_multi_remove_handle", (void **)&cu.multi_remove_handle},
      {"curl_multi_perform", (void **)&cu.multi_perform},
      {"curl_multi_poll", (void **)&cu.multi_poll},
      {"curl_multi_wakeup", (void **)&cu.multi_wakeup},
      {"curl_multi_info_read", (void **)&cu.multi_info_read},
      {"curl_multi_cleanup", (void **)&cu.multi_cleanup},
      {"curl_slist_append", (void **)&cu.slist_append},
      {"curl_slist_free_all", (void **)&cu.slist_free_all},
      {"curl_version_info", (void **)&cu.version_info},
  };
  for (size_t i = 0; i < sizeof syms / sizeof *syms; i++) {
    /* dlsym returns an object pointer; POSIX guarantees it converts */
    void *p = dlsym(h, syms[i].name);
    if (!p) {
      /* curl_multi_poll and _wakeup came with 7.66 and 7.68 (2019) */
      snprintf(cu_why, sizeof cu_why, "the libcurl found is too old (no %s): 7.68 or later needed",
               syms[i].name);
      dlclose(h);
      return;
    }
    memcpy(syms[i].slot, &p, sizeof p);
  }
  /* CURL_GLOBAL_ALL; libcurl >= 7.84 makes this thread-safe */
  if (cu.global_init(3) != E_OK) {
    snprintf(cu_why, sizeof cu_why, "libcurl failed to initialise");
    return;
  }
  curl_version_info_data *v = cu.version_info(0);
  snprintf(cu_version, sizeof cu_version, "libcurl %s (%s)", v && v->version ? v->version : "?",
           v && v->ssl_version ? v->ssl_version : "no TLS");
}

const char *stk__net_version(void) {
  pthread_once(&cu_once, cu_load);
  return cu_why[0] ? cu_why : cu_version;
}

/* ---- one blocking request, for the credential providers ------------------ */

typedef struct {
  char *data;
  size_t len, max;
} fetch_buf;

static size_t fetch_body(char *p, size_t sz, size_t nm, void *ud) {
  fetch_buf *b = ud;
  size_t n = sz * nm;
  if (b->len + n > b->max) return 0; /* over the bound: the transfer fails */
  memcpy(b->data + b->len, p, n);
  b->len += n;
  b->data[b->len] = '\0';
  return n;
}

/* Outside any client and its I/O thread: the providers run it from the
 * opening thread or their own renewal thread, so a slow metadata service
 * never holds up a read. */
int stk__http_fetch(const char *method, const char *url, const char *const *headers,
                    const char *body, long timeout_ms, size_t max, char **out, long *status,
                    char *msg, size_t msglen) {
  *out = NULL;
  *status = 0;
  pthread_once(&cu_once, cu_load);
  if (cu_why[0]) return stk__fail(msg, msglen, STK_EIO, "%s", cu_why);
  fetch_buf b = {calloc(1, max + 1), 0, max};
  CURL *e = b.data ? cu.easy_init() : NULL;
  if (!e) {
    free(b.data);
    return stk__fail(msg, msglen, STK_ENOMEM, "out of memory for a request");
  }
  struct curl_slist *hl = NULL;
  for (int i = 0; headers && headers[i]; i++) {
    struct curl_slist *s = cu.slist_append(hl, headers[i]);
    if (s) hl = s;
  }
  char err[256] = "";
  cu.easy_setopt(e, O_URL, url);
  cu.easy_setopt(e, O_PROTOCOLS_STR, "http,https");
  cu.easy_setopt(e, O_NOSIGNAL, 1L);
  cu.easy_setopt(e, O_USERAGENT, "stoker");
  cu.easy_setopt(e, O_HTTPHEADER, hl);
  cu.easy_setopt(e, O_WRITEFUNCTION, fetch_body);
  cu.easy_setopt(e, O_WRITEDATA, &b);
  cu.easy_setopt(e, O_ERRORBUFFER, err);
  cu.easy_setopt(e, O_CUSTOMREQUEST, method);
  if (body) { /* an empty body is sent with its Content-Length: 0 */
    cu.easy_setopt(e, O_POSTFIELDS, body);
    cu.easy_setopt(e, O_POSTFIELDSIZE_LARGE, (int64_t)strlen(body));
  }
  const char *ca = getenv("AWS_CA_BUNDLE");
  if (!ca || !*ca) ca = getenv("CURL_CA_BUNDLE");
  if (ca && *ca) cu.easy_setopt(e, O_CAINFO, ca);
  cu.easy_setopt(e, O_CONNECTTIMEOUT_MS, timeout_ms);
  cu.easy_setopt(e, O_TIMEOUT_MS, timeout_ms);
  int r = cu.easy_perform(e);
  cu.easy_getinfo(e, I_RESPONSE_CODE, status);
  cu.easy_cleanup(e);
  cu.slist_free_all(hl);
  if (r != E_OK) {
    char u[512];
    stk__url_redact(url, u, sizeof u);
    memset(b.data, 0, b.len); /* a credential document may have come in part */
    free(b.data);
    return stk__fail(msg, msglen, STK_EIO, "%s: %s", u, err[0] ? err : cu.easy_strerror(r));
  }
  *out = b.data;
  return STK_OK;
}

int stk__is_url(const char *name) {
  return name && (!strncmp(name, "s3://", 5) || !strncasecmp(name, "http://", 7) ||
                  !strncasecmp(name, "https://", 8) || stk__is_hf(name));
}

void stk__url_redact(const char *url, char *out, size_t cap) {
  const char *p = strstr(url, "://");
  const char *host = p ? p + 3 : url;
  const char *end = host + strcspn(host, "/?#");
  const char *at = NULL;
  for (const char *c = host; c < end; c++)
    if (*c == '@') at = c;
  size_t q = strcspn(url, "?#");
  if (at) {
    snprintf(out, cap, "%.*s%.*s", (int)(host - url), url, (int)(url + q - (at + 1)), at + 1);
  } else {
    snprintf(out, cap, "%.*s", (int)q, url);
  }
}

/* ---- requests ------------------------------------------------------------ */

#define MAX_ACTIVE 32
/* Attempts at a host name that does not resolve (most often a typo); other
 * failures are retried until the request's deadline (read_timeout), however
 * many attempts that takes: an outage of minutes must not fail a batch
 * that read_timeout allows to wait. */
#define DNS_ATTEMPTS 3
/* Redirects one request follows (requests allows 30, browsers about 20; the
 * Hub takes one, a CDN behind it maybe one more): a loop ends here. */
#define MAX_REDIRECTS 10
/* Where a redirect chain led is remembered per URL for this long and tried
 * first: the Hub answers every read of a file with a redirect to its CDN,
 * and walking it again for each 8 MiB part of a shard would cost a round
 * trip each. Short enough that a pre-signed target of any sensible lifetime
 * is still valid; one that fails anyway is forgotten and the chain walked
 * again (one round trip lost, no failure). */
#define REDIRECT_TTL 60.0
#define REDIRECT_SLOTS 256

enum { Q_QUEUED, Q_ACTIVE, Q_DONE };

struct stk__net_req {
  stk__net *net;
  stk__net_req *next;      /* in the queue */
  char *url;               /* as given: for messages (redacted) and s3 names */
  uint64_t off, len, max;  /* the range; len 0 = to the end */
  int head;
  int probe;               /* a probe that may 404 by design: not a failure */
  int state;
  int rc;
  int attempt;
  double t0, deadline, not_before;
  /* the current attempt */
  CURL *easy;
  struct curl_slist *hdrs;
  long status;        /* the last status line's code */
  uint64_t skip;      /* bytes of a 200 to drop (the server ignored Range) */
  uint64_t att_from;  /* the offset this attempt asked for */
  uint64_t att_got;   /* bytes this attempt wrote */
  char errbuf[256];
  char errbody[512];  /* the start of an error response (S3's XML) */
  size_t errlen;
  /* a request with a body (PUT, POST): the method, the body (borrowed) and
   * its SHA-256 for the signature */
  const char *method;
  const uint8_t *send;
  size_t send_len;
  char send_hash[65];
  /* a body written to a file (fd >= 0) instead of memory, at its offset */
  int fd;
  int write_errno;
  _Atomic uint64_t written;
  /* the result */
  uint8_t *data;
  size_t got, cap;
  uint64_t size;
  char etag[96];
  char why[700];
  size_t why_at;      /* where the reason starts in why, after "URL: " */
  uint64_t cred_gen;  /* the credentials' generation this attempt was signed with */
  int renewed;        /* an ExpiredToken refusal renewed them once already */
  int bare;           /* the waiter wants the reason without the URL */
  /* redirects, followed here rather than by libcurl, so that what goes to
   * the next host (a token, a signature) is decided here */
  char *at_url;       /* the URL the current attempt was sent to */
  char *target;       /* where the last redirect led; NULL before any */
  int hops;           /* redirects followed by this attempt's chain */
  int cross;          /* one of them led to another origin: no token since */
  int cached;         /* target came from the redirect cache */
  int nocache;        /* a cached target failed: walk the chain */
  char *link;         /* the response's Link header (the Hub's pages) */
  uint64_t linked_size;  /* the Hub's X-Linked-Size (of a redirect) */
  char linked_etag[96];  /* and X-Linked-Etag */
};

struct stk__net {
  stk__s3 s3;
  int s3_ok;
  char s3_err[256];
  double timeout;
  pthread_mutex_t mu;
  pthread_cond_t done_cv;
  pthread_t thread;
  CURLM *multi;
  stk__net_req *queue, *queue_tail; /* waiting to start (also retries) */
  stk__net_req *active[MAX_ACTIVE];
  int nactive;
  int stop;
  uint64_t rng;
  _Atomic uint64_t bytes, requests, retries, failures;
  _Atomic uint64_t micros;
  /* the Hub's token (hub.h): sent to its origins only, and never after a
   * redirect to another */
  char hf_token[1024];
  int hf_has;
  const char *hf_where;
  /* where redirect chains led (REDIRECT_TTL), by URL; under mu */
  struct {
    char *from, *to;
    double until;
    int hops, cross;
  } redir[REDIRECT_SLOTS];
};

/* strlcpy: truncating a long ETag or reason is fine here */
static void scopy(char *dst, size_t cap, const char *src) {
  size_t n = strnlen(src, cap - 1);
  memcpy(dst, src, n);
  dst[n] = '\0';
}

/* memset through a volatile pointer: a secret's copy is cleared even where
 * the compiler sees no later read of it */
static void *(*const volatile wipe_fn)(void *, int, size_t) = memset;
static void wipe(void *p, size_t n) { wipe_fn(p, 0, n); }

static double wall(void) {
  struct timespec ts;
  clock_gettime(CLOCK_REALTIME, &ts);
  return (double)ts.tv_sec + ts.tv_nsec * 1e-9;
}

static void finish(stk__net_req *q, int rc) {
  q->rc = rc;
  q->state = Q_DONE;
  stk__net *n = q->net;
  atomic_fetch_add(&n->micros, (uint64_t)((stk__now() - q->t0) * 1e6));
  /* a probe's 404 (classes.txt, an index beside a shard) is an answer */
  if (rc && !(q->probe && q->status == 404)) atomic_fetch_add(&n->failures, 1);
  pthread_cond_broadcast(&n->done_cv);
}

static void fail(stk__net_req *q, int rc, const char *fmt, ...) STK__PRINTF(3, 4);
static void fail(stk__net_req *q, int rc, const char *fmt, ...) {
  char u[512];
  stk__url_redact(q->url, u, sizeof u);
  int w = snprintf(q->why, sizeof q->why, "%s: ", u);
  q->why_at = w > 0 && (size_t)w < sizeof q->why ? (size_t)w : 0;
  va_list ap;
  va_start(ap, fmt);
  if (w > 0 && (size_t)w < sizeof q->why) vsnprintf(q->why + w, sizeof q->why - (size_t)w, fmt, ap);
  va_end(ap);
  size_t l = strlen(q->why);
  if (q->target && l < sizeof q->why)
    snprintf(q->why + l, sizeof q->why - l, " (at %s, after %d redirect%s)", q->target, q->hops,
             q->hops == 1 ? "" : "s");
  /* a redirect's target is often pre-signed (its signature in the query),
   * and libcurl's reasons may quote a URL: none leaves with its secrets */
  stk__url_scrub(q->why);
  finish(q, rc);
}

/* A decimal count (a size, an offset) of at most 2^63 - 1 bytes, digits
 * only after blanks: STK_OK, or STK_EFORMAT for a sign, a blank, no digit,
 * or an overflow, where strtoull took "-1" for 2^64 - 1. */
static int parse_count(const char *s, const char *end, uint64_t *out) {
  while (s < end && (*s == ' ' || *s == '\t')) s++;
  uint64_t v = 0;
  const char *d = s;
  for (; s < end && *s >= '0' && *s <= '9'; s++) {
    if (v > ((UINT64_MAX >> 1) - (uint64_t)(*s - '0')) / 10) return STK_EFORMAT;
    v = v * 10 + (uint64_t)(*s - '0');
  }
  while (s < end && (*s == ' ' || *s == '\t')) s++;
  if (s == d || s != end) return STK_EFORMAT;
  *out = v;
  return STK_OK;
}

int stk__http_header(stk__http_head *h, const char *p, size_t n) {
  /* libcurl's line is not NUL-terminated: it is read from a copy */
  char line[256];
  size_t l = n < sizeof line - 1 ? n : sizeof line - 1;
  memcpy(line, p, l);
  line[l] = '\0';
  line[strcspn(line, "\r\n")] = '\0';
  char *end = line + strlen(line);
  uint64_t v;
  if (n >= 5 && !strncmp(line, "HTTP/", 5)) {
    /* "HTTP/1.1 206 Partial Content": three digits after the version */
    const char *sp = strchr(line, ' ');
    h->status = 0;
    if (sp && sp[1] >= '1' && sp[1] <= '5' && isdigit((unsigned char)sp[2]) &&
        isdigit((unsigned char)sp[3]) && (!sp[4] || sp[4] == ' '))
      h->status = (sp[1] - '0') * 100 + (sp[2] - '0') * 10 + (sp[3] - '0');
    return 1;
  }
  if (!strncasecmp(line, "content-range:", 14)) {
    /* "bytes 0-99/1234": the total; "*" (unknown) or garbage say nothing */
    const char *s = strchr(line, '/');
    if (s && parse_count(s + 1, end, &v) == STK_OK) h->size = v;
  } else if (!strncasecmp(line, "content-length:", 15) && h->status == 200 && !h->size) {
    if (parse_count(line + 15, end, &v) == STK_OK) h->size = v;
  } else if (!strncasecmp(line, "etag:", 5)) {
    const char *e = line + 5;
    while (*e == ' ' || *e == '"' || (e[0] == 'W' && e[1] == '/')) e += (*e == 'W') ? 2 : 1;
    scopy(h->etag, sizeof h->etag, e);
    size_t el = strlen(h->etag);
    while (el && (h->etag[el - 1] == '"' || h->etag[el - 1] == ' ')) h->etag[--el] = '\0';
  }
  return 0;
}

/* The headers a redirect and the Hub's listing carry (outside
 * stk__http_header, whose line copy is too short for a Link URL). */
static void hub_header(stk__net_req *q, const char *p, size_t n) {
  char v[96];
  if (n > 5 && !strncasecmp(p, "link:", 5)) {
    free(q->link);
    q->link = strndup(p + 5, n - 5 < 16384 ? n - 5 : 16384);
    if (q->link) q->link[strcspn(q->link, "\r\n")] = '\0';
  } else if (n > 14 && !strncasecmp(p, "x-linked-size:", 14)) {
    snprintf(v, sizeof v, "%.*s", (int)(n - 14 < 40 ? n - 14 : 40), p + 14);
    uint64_t s;
    if (parse_count(v, v + strcspn(v, "\r\n"), &s) == STK_OK) q->linked_size = s;
  } else if (n > 14 && !strncasecmp(p, "x-linked-etag:", 14)) {
    stk__http_head h;
    memset(&h, 0, sizeof h);
    char line[200];
    snprintf(line, sizeof line, "ETag:%.*s", (int)(n - 14 < 150 ? n - 14 : 150), p + 14);
    stk__http_header(&h, line, strlen(line));
    memcpy(q->linked_etag, h.etag, sizeof q->linked_etag);
  }
}

static size_t on_header(char *p, size_t sz, size_t nm, void *ud) {
  stk__net_req *q = ud;
  size_t n = sz * nm;
  hub_header(q, p, n);
  stk__http_head h;
  h.status = q->status;
  h.size = q->size;
  memcpy(h.etag, q->etag, sizeof h.etag);
  if (stk__http_header(&h, p, n)) {
    /* a new status line (after a 100 Continue, say): what came before is moot */
    q->status = h.status;
    /* a 200 to a Range request is the whole object: what precedes the
     * bytes asked for is dropped as it comes */
    q->skip = q->status == 200 && !q->method ? q->att_from : 0;
    return n;
  }
  q->size = h.size;
  memcpy(q->etag, h.etag, sizeof q->etag);
  return n;
}

static size_t on_body(char *p, size_t sz, size_t nm, void *ud) {
  stk__net_req *q = ud;
  size_t n = sz * nm;
  if (q->status < 200 || q->status >= 300) {
    size_t k = sizeof q->errbody - 1 - q->errlen;
    if (k > n) k = n;
    memcpy(q->errbody + q->errlen, p, k);
    q->errlen += k;
    q->errbody[q->errlen] = '\0';
    return n;
  }
  if (q->skip) { /* a 200 to a Range request: drop what precedes the range */
    size_t k = q->skip < n ? (size_t)q->skip : n;
    q->skip -= k;
    p += k;
    n -= k;
    if (!n) return sz * nm;
  }
  uint64_t want = q->len ? q->len - q->got : (uint64_t)-1;
  size_t take = (uint64_t)n < want ? n : (size_t)want;
  if (q->fd >= 0) {
    for (size_t put = 0; put < take;) {
      ssize_t w = pwrite(q->fd, p + put, take - put, (off_t)(q->got + put));
      if (w < 0 && errno == EINTR) continue;
      if (w <= 0) {
        q->write_errno = w < 0 ? errno : ENOSPC;
        return 0;
      }
      put += (size_t)w;
    }
    q->got += take;
    q->att_got += take;
    atomic_store(&q->written, q->got);
    atomic_fetch_add(&q->net->bytes, take);
    /* readers waiting for these bytes (stk__net_wait_bytes) */
    pthread_cond_broadcast(&q->net->done_cv);
    return sz * nm;
  }
  if (q->max && q->got + take > q->max) return 0; /* over the bound: the write fails */
  if (q->got + take > q->cap) {
    size_t cap = q->cap ? q->cap : 65536;
    while (cap < q->got + take) cap *= 2;
    uint8_t *d = realloc(q->data, cap);
    if (!d) return 0;
    q->data = d;
    q->cap = cap;
  }
  memcpy(q->data + q->got, p, take);
  q->got += take;
  q->att_got += take;
  atomic_fetch_add(&q->net->bytes, take);
  return sz * nm; /* bytes past the range (a server that sent more) are dropped */
}

static void enqueue(stk__net *n, stk__net_req *q);

/* The S3 URL of an s3:// request, and its signature's headers. 0, 1 (it
 * waits for a renewal) or -1 (failed). */
static int prepare_s3(stk__net *n, stk__net_req *q, char *url, size_t cap) {
  char hdr[STK__S3_MAX_HEADERS][STK__S3_HEADER_LEN];
  int nh = 0;
  if (!n->s3_ok) {
    fail(q, STK_EINVAL, "%s", n->s3_err);
    return -1;
  }
  if (q->renewed && stk__s3_renewing(&n->s3, q->cred_gen) &&
      (!q->deadline || stk__now() < q->deadline)) {
    /* refused as expired: wait for the renewal, without holding up others */
    q->not_before = stk__now() + 0.02;
    enqueue(n, q);
    return 1;
  }
  const char *b = q->url + 5, *slash = strchr(b, '/');
  char bucket[256];
  size_t bl = slash ? (size_t)(slash - b) : strlen(b);
  if (!bl || bl >= sizeof bucket) {
    fail(q, STK_EINVAL, "not an s3://bucket/key name");
    return -1;
  }
  memcpy(bucket, b, bl);
  bucket[bl] = '\0';
  const char *key = slash ? slash + 1 : "";
  const char *query = strchr(key, '?'); /* listings carry their canonical query */
  char k[2048], cpath[3 * 2048], host[300];
  size_t kl = query ? (size_t)(query - key) : strlen(key);
  if (kl >= sizeof k) {
    fail(q, STK_EINVAL, "the key is too long");
    return -1;
  }
  memcpy(k, key, kl);
  k[kl] = '\0';
  if (stk__s3_url(&n->s3, bucket, k, query ? query + 1 : "", url, cap, cpath, sizeof cpath, host,
                  sizeof host)) {
    fail(q, STK_EINVAL, "the URL is too long");
    return -1;
  }
  q->cred_gen = stk__s3_sign(&n->s3, q->method ? q->method : q->head ? "HEAD" : "GET", host,
                             cpath, query ? query + 1 : "", q->method ? q->send_hash : NULL,
                             (int64_t)wall(), hdr, &nh);
  for (int i = 0; i < nh; i++) {
    struct curl_slist *s = cu.slist_append(q->hdrs, hdr[i]);
    if (!s) break;
    q->hdrs = s;
  }
  memset(hdr, 0, sizeof hdr); /* a signature and maybe a session token */
  return 0;
}

/* The Hub's token and the Range of an attempt to url. */
static void add_headers(stk__net *n, stk__net_req *q, const char *url) {
  /* the Hub's token: to its own origins, and not once a redirect went to
   * another (a CDN that would otherwise see it), as browsers and requests
   * drop Authorization */
  if (n->hf_has && !q->cross && stk__hf_token_origin(url)) {
    char bearer[1100];
    snprintf(bearer, sizeof bearer, "Authorization: Bearer %s", n->hf_token);
    struct curl_slist *sl = cu.slist_append(q->hdrs, bearer);
    if (sl) q->hdrs = sl;
    wipe(bearer, sizeof bearer);
  }
  uint64_t from = q->off + q->got;
  if (q->method) {
    /* no form content type for a body, and no 100-continue round trip */
    static const char *const plain[] = {"Content-Type:", "Expect:"};
    for (size_t i = 0; i < 2; i++) {
      struct curl_slist *sl = cu.slist_append(q->hdrs, plain[i]);
      if (sl) q->hdrs = sl;
    }
  } else if (!q->head && (from || q->len)) {
    char r[80];
    if (q->len)
      snprintf(r, sizeof r, "Range: bytes=%llu-%llu", (unsigned long long)from,
               (unsigned long long)(q->off + q->len - 1));
    else
      snprintf(r, sizeof r, "Range: bytes=%llu-", (unsigned long long)from);
    struct curl_slist *s = cu.slist_append(q->hdrs, r);
    if (s) q->hdrs = s;
  }
}

static void redir_recall(stk__net *n, stk__net_req *q);

/* The HTTP URL of a request, and its headers: an s3:// request's
 * signature, the Hub's token, a Range. 0, 1 (queued again) or -1 (failed). */
static int prepare(stk__net *n, stk__net_req *q, char *url, size_t cap) {
  redir_recall(n, q);
  if (q->target) {
    /* a redirect's target as it is: a signature covers the first host and
     * path only (the target is most often pre-signed itself) */
    snprintf(url, cap, "%s", q->target);
  } else if (stk__is_hf(q->url)) {
    char why[300];
    const char *off = getenv("HF_HUB_OFFLINE");
    if (off && off[0] && strcmp(off, "0") && strcasecmp(off, "false")) {
      fail(q, STK_EIO, "HF_HUB_OFFLINE is set: the Hub is not reached");
      return -1;
    }
    if (stk__hf_resolve_url(q->url, url, cap, why, sizeof why)) {
      fail(q, STK_EINVAL, "%s", why);
      return -1;
    }
  } else if (!strncmp(q->url, "s3://", 5)) {
    int rc = prepare_s3(n, q, url, cap);
    if (rc) return rc;
  } else {
    snprintf(url, cap, "%s", q->url);
  }
  add_headers(n, q, url);
  return 0;
}

/* Starts an attempt (I/O thread, mutex held). */
static void start(stk__net *n, stk__net_req *q) {
  char url[8192];
  q->hdrs = NULL;
  if (prepare(n, q, url, sizeof url)) return;
  CURL *e = cu.easy_init();
  if (!e) {
    fail(q, STK_ENOMEM, "out of memory for a transfer");
    return;
  }
  q->easy = e;
  free(q->at_url);
  q->at_url = strdup(url); /* (NULL: a redirect from it keeps the token off) */
  q->linked_size = 0;
  q->linked_etag[0] = '\0';
  free(q->link);
  q->link = NULL;
  q->status = 0;
  q->att_got = 0;
  q->errlen = 0;
  q->errbody[0] = q->errbuf[0] = '\0';
  q->skip = 0;
  q->att_from = q->off + q->got;
  cu.easy_setopt(e, O_URL, url);
  cu.easy_setopt(e, O_PROTOCOLS_STR, "http,https");
  cu.easy_setopt(e, O_NOSIGNAL, 1L);
  cu.easy_setopt(e, O_TCP_KEEPALIVE, 1L);
  cu.easy_setopt(e, O_USERAGENT, "stoker");
  cu.easy_setopt(e, O_HTTPHEADER, q->hdrs);
  cu.easy_setopt(e, O_HEADERFUNCTION, on_header);
  cu.easy_setopt(e, O_HEADERDATA, q);
  cu.easy_setopt(e, O_WRITEFUNCTION, on_body);
  cu.easy_setopt(e, O_WRITEDATA, q);
  cu.easy_setopt(e, O_PRIVATE, q);
  cu.easy_setopt(e, O_ERRORBUFFER, q->errbuf);
  if (q->head) cu.easy_setopt(e, O_NOBODY, 1L);
  if (q->method) {
    cu.easy_setopt(e, O_CUSTOMREQUEST, q->method);
    if (q->send) {
      cu.easy_setopt(e, O_POSTFIELDS, (const void *)q->send);
      cu.easy_setopt(e, O_POSTFIELDSIZE_LARGE, (int64_t)q->send_len);
    }
  }
  const char *ca = getenv("AWS_CA_BUNDLE");
  if (!ca || !*ca) ca = getenv("CURL_CA_BUNDLE");
  if (ca && *ca) cu.easy_setopt(e, O_CAINFO, ca);
  /* A body that stalls (under 1 byte/s for this long) is retried; the
   * request's own deadline bounds the whole. */
  /* (no deadline: read_timeout=0, no limit; libcurl's 0 is none either) */
  double left = q->deadline > 0 ? q->deadline - stk__now() : 0;
  long stall = q->deadline > 0 && left < 30 ? (long)(left > 1 ? left : 1) : 30;
  cu.easy_setopt(e, O_LOW_SPEED_LIMIT, 1L);
  cu.easy_setopt(e, O_LOW_SPEED_TIME, stall);
  cu.easy_setopt(e, O_CONNECTTIMEOUT_MS, (long)(stall * 1000 < 10000 ? stall * 1000 : 10000));
  cu.easy_setopt(e, O_TIMEOUT_MS, q->deadline > 0 ? (long)(left > 0.05 ? left * 1000 : 50) : 0L);
  atomic_fetch_add(&n->requests, 1);
  if (cu.multi_add_handle(n->multi, e) != E_OK) {
    cu.easy_cleanup(e);
    q->easy = NULL;
    fail(q, STK_EIO, "libcurl refused the transfer");
    return;
  }
  q->state = Q_ACTIVE;
  n->active[n->nactive++] = q;
}

static void end_attempt(stk__net *n, stk__net_req *q) {
  cu.multi_remove_handle(n->multi, q->easy);
  cu.easy_cleanup(q->easy);
  q->easy = NULL;
  cu.slist_free_all(q->hdrs);
  q->hdrs = NULL;
  for (int i = 0; i < n->nactive; i++)
    if (n->active[i] == q) {
      n->active[i] = n->active[--n->nactive];
      break;
    }
}

static void enqueue(stk__net *n, stk__net_req *q) {
  q->next = NULL;
  q->state = Q_QUEUED;
  if (n->queue_tail)
    n->queue_tail->next = q;
  else
    n->queue = q;
  n->queue_tail = q;
}

/* The S3 error code of an XML error body ("SlowDown", "AccessDenied"). */
static void s3_code(const stk__net_req *q, char *out, size_t cap) {
  out[0] = '\0';
  const char *c = strstr(q->errbody, "<Code>");
  if (!c) return;
  c += 6;
  size_t l = strcspn(c, "<");
  snprintf(out, cap, " %.*s", (int)(l < 64 ? l : 64), c);
}

/* A 401/403 of an http(s):// or hf:// request: what was sent, and where the
 * token comes from (never the token). */
static int refused_http(stk__net *n, stk__net_req *q, long status) {
  int hub = !q->cross && (stk__is_hf(q->url) || (q->at_url && stk__hf_token_origin(q->at_url)));
  if (hub)
    fail(q, STK_EIO,
         "access denied (HTTP %ld): a gated or private repository needs the token of an account "
         "that has access (HF_TOKEN, or huggingface-cli login); %s%s",
         status, n->hf_has ? "a token was sent, from " : "no token was sent: none is set",
         n->hf_has ? n->hf_where : "");
  else
    fail(q, STK_EIO, "access denied (HTTP %ld)%s", status,
         q->hops ? ": the redirect's target refused it (a pre-signed URL expired, or a token "
                   "was needed there)"
                 : "");
  return 1;
}

/* A 401/403, or S3's ExpiredToken (400 or 403): credentials that expired
 * before their renewal (a clock off, a revoked session) are renewed now
 * and the request sent once more; anything else fails, saying where the
 * credentials came from. 1 when the request was dealt with. */
static int refused(stk__net *n, stk__net_req *q, long status, const char *code) {
  int expired = !strcmp(code, " ExpiredToken");
  if (!expired && status != 401 && status != 403) return 0;
  if (strncmp(q->url, "s3://", 5)) return refused_http(n, q, status);
  if (expired && !q->renewed && stk__s3_expired(&n->s3, q->cred_gen)) {
    q->renewed = 1;
    atomic_fetch_add(&n->retries, 1);
    q->not_before = stk__now();
    enqueue(n, q);
    return 1;
  }
  char cred[700];
  stk__s3_describe(&n->s3, cred, sizeof cred);
  fail(q, STK_EIO,
       "access denied (HTTP %ld%s): check the credentials (AWS_ACCESS_KEY_ID, "
       "AWS_SECRET_ACCESS_KEY, AWS_SESSION_TOKEN, AWS_PROFILE; these came from %s) and the "
       "object's permissions",
       status, code, cred);
  return 1;
}

static size_t redir_slot(const char *url) {
  uint64_t h = 1469598103934665603ULL; /* FNV-1a */
  for (const char *c = url; *c; c++) h = (h ^ (unsigned char)*c) * 1099511628211ULL;
  return (size_t)(h % REDIRECT_SLOTS);
}

static void redir_forget(stk__net *n, const char *url) {
  size_t k = redir_slot(url);
  if (!n->redir[k].from || strcmp(n->redir[k].from, url)) return;
  free(n->redir[k].from);
  if (n->redir[k].to) wipe(n->redir[k].to, strlen(n->redir[k].to)); /* a signature */
  free(n->redir[k].to);
  n->redir[k].from = n->redir[k].to = NULL;
}

/* A chain that ended in a success: remembered (I/O thread, mu held). */
static void redir_remember(stk__net *n, const stk__net_req *q) {
  if (!q->target || q->cached || q->method) return;
  size_t k = redir_slot(q->url);
  if (n->redir[k].from) redir_forget(n, n->redir[k].from);
  n->redir[k].from = strdup(q->url);
  n->redir[k].to = strdup(q->target);
  if (!n->redir[k].from || !n->redir[k].to) {
    free(n->redir[k].from);
    free(n->redir[k].to);
    n->redir[k].from = n->redir[k].to = NULL;
    return;
  }
  n->redir[k].until = stk__now() + REDIRECT_TTL;
  n->redir[k].hops = q->hops;
  n->redir[k].cross = q->cross;
}

/* A request not redirected yet goes where its URL led last time, if that
 * was within REDIRECT_TTL. */
static void redir_recall(stk__net *n, stk__net_req *q) {
  /* (not for a HEAD: the Hub answers it itself, its CDN's target is signed
   * for GET) */
  if (q->target || q->method || q->head || q->nocache) return;
  size_t k = redir_slot(q->url);
  if (!n->redir[k].from || strcmp(n->redir[k].from, q->url)) return;
  if (stk__now() > n->redir[k].until || !(q->target = strdup(n->redir[k].to))) {
    redir_forget(n, q->url);
    return;
  }
  q->hops = n->redir[k].hops;
  q->cross = n->redir[k].cross;
  q->cached = 1;
}

/* A retry starts again from the request's own URL, not from a redirect's
 * target: a pre-signed target may have expired since, and the first host
 * gives a fresh one. */
static void restart_chain(stk__net_req *q) {
  if (q->cached) {
    redir_forget(q->net, q->url);
    q->cached = 0;
    q->nocache = 1;
  }
  free(q->target);
  q->target = NULL;
  q->hops = 0;
  q->cross = 0;
}

/* A 3xx answer to a GET or HEAD, followed here: the token goes on only
 * while the chain stays on one origin (scheme, host and port), as browsers
 * and requests drop Authorization on a cross-host redirect; an S3
 * signature never goes on (prepare). 1 when dealt with; takes loc. */
static int redirected(stk__net *n, stk__net_req *q, long status, char *loc) {
  int follow = status == 301 || status == 302 || status == 303 || status == 307 || status == 308;
  if (!follow || q->method || !loc) { /* an upload's redirect is an error */
    free(loc);
    return 0;
  }
  if (q->head && q->linked_size) {
    /* the Hub answers a HEAD of a file with its redirect, the size and ETag
     * in X-Linked-Size and X-Linked-Etag (as huggingface_hub reads them):
     * the CDN's pre-signed target is signed for GET and may refuse a HEAD */
    free(loc);
    q->size = q->linked_size;
    if (q->linked_etag[0]) memcpy(q->etag, q->linked_etag, sizeof q->etag);
    finish(q, STK_OK);
    return 1;
  }
  char a[1100], b[1100];
  int http = !strncasecmp(loc, "http://", 7) || !strncasecmp(loc, "https://", 8);
  if (!http || q->hops >= MAX_REDIRECTS) {
    if (http)
      fail(q, STK_EIO, "HTTP %ld: too many redirects (over %d)", status, MAX_REDIRECTS);
    else
      fail(q, STK_EIO, "HTTP %ld: a redirect to a URL that is not HTTP(S)", status);
    free(loc);
    return 1;
  }
  if (!q->at_url || stk__url_origin(q->at_url, a, sizeof a) ||
      stk__url_origin(loc, b, sizeof b) || strcmp(a, b))
    q->cross = 1;
  free(q->target);
  q->target = loc;
  q->hops++;
  /* the target's headers say the size and the ETag, not the redirect's */
  q->size = 0;
  q->etag[0] = '\0';
  q->not_before = 0;
  enqueue(n, q);
  return 1;
}

/* A response that is no success (status outside 2xx): 1 when the request
 * failed for good, 0 with the reason in why when it is retried. */
static int status_failed(stk__net *n, stk__net_req *q, long status, char *why, size_t cap) {
  char code[80];
  if (status >= 300 && status < 400) {
    fail(q, STK_EIO, "HTTP %ld: %s", status,
         q->method ? "a redirect of an upload, not followed" : "a redirect without a Location");
    return 1;
  }
  s3_code(q, code, sizeof code);
  if (refused(n, q, status, code)) return 1;
  if (status == 404) {
    fail(q, STK_EIO, "not found (HTTP 404%s)", code);
    return 1;
  }
  if (status == 416) {
    fail(q, STK_EDECODE, "range not satisfiable (HTTP 416): the object is shorter than expected");
    return 1;
  }
  if (status >= 500 || status == 429 || status == 408) {
    snprintf(why, cap, "HTTP %ld%s", status, code);
    return 0;
  }
  fail(q, STK_EIO, "HTTP %ld%s", status, code);
  return 1;
}

static void retry_later(stk__net *n, stk__net_req *q, int result, const char *why);

/* An attempt ended (I/O thread, mutex held): done, failed, or retried. */
static void completed(stk__net *n, stk__net_req *q, int result) {
  long status = q->status;
  char errbuf[256];
  snprintf(errbuf, sizeof errbuf, "%s", q->errbuf[0] ? q->errbuf : cu.easy_strerror(result));
  char *loc = NULL;
  if (result == E_OK && status >= 300 && status < 400) {
    /* libcurl resolves a relative Location against the request's URL */
    char *r = NULL;
    if (cu.easy_getinfo(q->easy, I_REDIRECT_URL, &r) == E_OK && r) loc = strdup(r);
  }
  end_attempt(n, q);
  if (loc && redirected(n, q, status, loc)) return;
  char why[300] = "";
  if (result == E_OK && status >= 200 && status < 300) {
    int partial = q->len && q->got < q->len && !q->head && !q->method;
    if (partial && q->size && q->off + q->len > q->size) {
      fail(q, STK_EDECODE,
           "the object is %llu bytes, shorter than expected (bytes %llu-%llu were asked for): it "
           "changed or was truncated",
           (unsigned long long)q->size, (unsigned long long)q->off,
           (unsigned long long)(q->off + q->len - 1));
      return;
    }
    if (!partial) {
      redir_remember(n, q);
      finish(q, STK_OK);
      return;
    }
    /* the body was cut short: resumed below */
    snprintf(why, sizeof why, "the body ended after %llu of %llu bytes",
             (unsigned long long)q->got, (unsigned long long)q->len);
  } else if (result == E_OK && q->cached && (status < 300 || status >= 400)) {
    /* a remembered target that no longer serves: the chain walked again */
    restart_chain(q);
    q->not_before = 0;
    enqueue(n, q);
    return;
  } else if (result == E_OK) {
    if (status_failed(n, q, status, why, sizeof why)) return;
  } else if (result == E_WRITE_ERROR && q->write_errno) {
    fail(q, STK_EIO, "cannot write the local copy: %s", strerror(q->write_errno));
    return;
  } else if (result == E_WRITE_ERROR) {
    fail(q, q->max && q->got >= q->max ? STK_ELIMIT : STK_ENOMEM,
         q->max && q->got >= q->max ? "the object is over the limit of %llu bytes"
                                    : "out of memory for the object (%llu bytes)",
         (unsigned long long)(q->max ? q->max : q->got));
    return;
  } else if (result == E_PEER_FAILED_VERIFICATION || result == E_SSL_CACERT_BADFILE ||
             result == E_UNSUPPORTED_PROTOCOL || result == E_URL_MALFORMAT) {
    fail(q, STK_EIO, "%s", errbuf);
    return;
  } else {
    /* resets, refusals, timeouts, DNS: the network may come back */
    snprintf(why, sizeof why, "%s", errbuf);
  }
  retry_later(n, q, result, why);
}

/* A failed attempt that may succeed later: queued again after a backoff,
 * or failed once the deadline (or the DNS attempts) would pass. */
static void retry_later(stk__net *n, stk__net_req *q, int result, const char *why) {
  q->attempt++;
  /* a name that does not resolve is most often a typo: a few tries only */
  int most = result == E_COULDNT_RESOLVE_HOST ? DNS_ATTEMPTS : INT32_MAX;
  /* jittered exponential backoff: 50 ms, 100 ms, ... up to 5 s, times [0.5, 1) */
  double base = 0.05 * (double)(1u << (q->attempt < 7 ? q->attempt : 7));
  if (base > 5) base = 5;
  n->rng = stk__mix64(n->rng + 0x9e3779b97f4a7c15ULL);
  double wait = base * (0.5 + 0.5 * (double)(n->rng >> 11) * 0x1.0p-53);
  double now = stk__now();
  if (q->attempt >= most || (q->deadline > 0 && now + wait >= q->deadline)) {
    fail(q, STK_EIO, "%s; gave up after %d attempts in %.1f s", why, q->attempt, now - q->t0);
    return;
  }
  atomic_fetch_add(&n->retries, 1);
  q->not_before = now + wait;
  restart_chain(q);
  enqueue(n, q);
}

static void *io_main(void *arg) {
  stk__net *n = arg;
  pthread_mutex_lock(&n->mu);
  while (!n->stop) {
    /* start what may start: the queue is in submission order, retries
     * waiting for their backoff are passed over */
    double now = stk__now(), next_due = now + 0.1;
    stk__net_req **pp = &n->queue, *prev = NULL;
    while (*pp && n->nactive < MAX_ACTIVE) {
      stk__net_req *q = *pp;
      if (q->not_before > now) {
        if (q->not_before < next_due) next_due = q->not_before;
        prev = q;
        pp = &q->next;
        continue;
      }
      *pp = q->next;
      if (n->queue_tail == q) n->queue_tail = prev;
      q->next = NULL;
      start(n, q);
    }
    pthread_mutex_unlock(&n->mu);
    int running = 0;
    cu.multi_perform(n->multi, &running);
    pthread_mutex_lock(&n->mu);
    CURLMsg *m;
    int left;
    while ((m = cu.multi_info_read(n->multi, &left))) {
      if (m->msg != 1) continue;
      stk__net_req *q = NULL;
      cu.easy_getinfo(m->easy, 0x100015 /* CURLINFO_PRIVATE */, (char **)&q);
      if (q) completed(n, q, m->data.result);
    }
    if (n->stop) break;
    pthread_mutex_unlock(&n->mu);
    int ms = (int)((next_due - stk__now()) * 1000);
    cu.multi_poll(n->multi, NULL, 0, ms < 1 ? 1 : ms > 100 ? 100 : ms, NULL);
    pthread_mutex_lock(&n->mu);
  }
  /* closing: what is still in flight fails */
  while (n->nactive) {
    stk__net_req *q = n->active[0];
    end_attempt(n, q);
    fail(q, STK_EIO, "the loader was closed during the transfer");
  }
  for (stk__net_req *q = n->queue; q;) {
    stk__net_req *nx = q->next;
    fail(q, STK_EIO, "the loader was closed before the transfer");
    q = nx;
  }
  n->queue = n->queue_tail = NULL;
  pthread_mutex_unlock(&n->mu);
  return NULL;
}

int stk__net_open(stk__net **out, double timeout, char *msg, size_t msglen) {
  *out = NULL;
  pthread_once(&cu_once, cu_load);
  if (cu_why[0]) return stk__fail(msg, msglen, STK_EIO, "%s", cu_why);
  stk__net *n = calloc(1, sizeof *n);
  if (!n) return stk__fail(msg, msglen, STK_ENOMEM, "out of memory");
  n->timeout = timeout > 0 ? timeout : 0; /* 0: no deadline */
  /* an S3 configuration error fails only s3:// requests */
  n->s3_ok = stk__s3_load(&n->s3, n->s3_err, sizeof n->s3_err) == STK_OK;
  n->hf_has = stk__hf_token(n->hf_token, sizeof n->hf_token, &n->hf_where);
  n->rng = (uint64_t)(wall() * 1e6) ^ (uint64_t)(uintptr_t)n;
  pthread_mutex_init(&n->mu, NULL);
  pthread_cond_init(&n->done_cv, NULL);
  if (!(n->multi = cu.multi_init())) {
    free(n);
    return stk__fail(msg, msglen, STK_ENOMEM, "libcurl: cannot make a multi handle");
  }
  cu.multi_setopt(n->multi, M_MAXCONNECTS, (long)MAX_ACTIVE);
  if (pthread_create(&n->thread, NULL, io_main, n)) {
    cu.multi_cleanup(n->multi);
    free(n);
    return stk__fail(msg, msglen, STK_ENOMEM, "cannot start the network thread");
  }
  *out = n;
  return STK_OK;
}

void stk__net_cancel(stk__net *n) {
  if (!n) return;
  pthread_mutex_lock(&n->mu);
  n->stop = 1;
  pthread_mutex_unlock(&n->mu);
  cu.multi_wakeup(n->multi);
}

void stk__net_close(stk__net *n) {
  if (!n) return;
  stk__net_cancel(n);
  pthread_join(n->thread, NULL);
  cu.multi_cleanup(n->multi);
  pthread_mutex_destroy(&n->mu);
  pthread_cond_destroy(&n->done_cv);
  stk__s3_free(&n->s3); /* the secret */
  wipe(n->hf_token, sizeof n->hf_token);
  for (size_t k = 0; k < REDIRECT_SLOTS; k++)
    if (n->redir[k].from) redir_forget(n, n->redir[k].from);
  free(n);
}

static stk__net_req *submit(stk__net *n, const char *url, uint64_t off, uint64_t len,
                            uint64_t max, int head, int fd, int probe);

/* An s3:// request needs the credentials: found at the first one, by the
 * thread that submits it (never the I/O thread, which reads meanwhile). */
static int needs_creds(stk__net *n, const char *url, char *msg, size_t msglen) {
  if (strncmp(url, "s3://", 5) || !n->s3_ok) return STK_OK;
  return stk__s3_credentials(&n->s3, msg, msglen);
}

stk__net_req *stk__net_get(stk__net *n, const char *url, uint64_t off, uint64_t len, uint64_t max,
                           int head) {
  return submit(n, url, off, len, max, head, -1, 0);
}

stk__net_req *stk__net_probe(stk__net *n, const char *url, uint64_t max, int head) {
  return submit(n, url, 0, 0, max, head, -1, 1);
}

stk__net_req *stk__net_get_file(stk__net *n, const char *url, uint64_t len, int fd) {
  return submit(n, url, 0, len, 0, 0, fd, 0);
}

stk__net_req *stk__net_send(stk__net *n, const char *method, const char *url, const void *body,
                            size_t len) {
  stk__net_req *q = calloc(1, sizeof *q);
  if (!q || !(q->url = strdup(url))) {
    free(q);
    return NULL;
  }
  q->fd = -1;
  q->net = n;
  q->method = method;
  q->send = body;
  q->send_len = len;
  stk__sha256_hex(body ? body : "", body ? len : 0, q->send_hash);
  q->max = 16u << 20; /* a response: XML of a few KiB */
  q->t0 = stk__now();
  q->deadline = n->timeout > 0 ? q->t0 + n->timeout : 0;
  char cw[700];
  int crc = needs_creds(n, q->url, cw, sizeof cw);
  pthread_mutex_lock(&n->mu);
  if (crc)
    fail(q, crc, "%s", cw);
  else if (n->stop)
    fail(q, STK_EIO, "the client was closed before the transfer");
  else
    enqueue(n, q);
  pthread_mutex_unlock(&n->mu);
  cu.multi_wakeup(n->multi);
  return q;
}

uint64_t stk__net_wait_bytes(stk__net_req *q, uint64_t want) {
  stk__net *n = q->net;
  pthread_mutex_lock(&n->mu);
  while (q->state != Q_DONE && atomic_load(&q->written) < want) {
    /* the I/O thread signals without the mutex: a bounded wait covers a
     * wake-up that came between the check and the wait */
    struct timespec ts;
    clock_gettime(CLOCK_REALTIME, &ts);
    ts.tv_nsec += 20 * 1000 * 1000;
    if (ts.tv_nsec >= 1000000000) {
      ts.tv_sec++;
      ts.tv_nsec -= 1000000000;
    }
    pthread_cond_timedwait(&n->done_cv, &n->mu, &ts);
  }
  uint64_t w = atomic_load(&q->written);
  pthread_mutex_unlock(&n->mu);
  return w;
}

static stk__net_req *submit(stk__net *n, const char *url, uint64_t off, uint64_t len,
                            uint64_t max, int head, int fd, int probe) {
  stk__net_req *q = calloc(1, sizeof *q);
  if (!q || !(q->url = strdup(url))) {
    free(q);
    return NULL;
  }
  q->probe = probe;
  q->fd = fd;
  q->net = n;
  q->off = off;
  q->len = len;
  q->max = max;
  q->head = head;
  if (len && fd < 0 && !(q->data = malloc(len))) {
    free(q->url);
    free(q);
    return NULL;
  }
  q->cap = fd < 0 ? len : 0;
  q->t0 = stk__now();
  q->deadline = n->timeout > 0 ? q->t0 + n->timeout : 0;
  char cw[700];
  int crc = needs_creds(n, url, cw, sizeof cw);
  pthread_mutex_lock(&n->mu);
  if (crc) {
    fail(q, crc, "%s", cw);
  } else if (n->stop) {
    fail(q, STK_EIO, "the loader was closed before the transfer");
  } else {
    enqueue(n, q);
  }
  pthread_mutex_unlock(&n->mu);
  cu.multi_wakeup(n->multi);
  return q;
}

int stk__net_done(stk__net_req *q) {
  pthread_mutex_lock(&q->net->mu);
  int d = q->state == Q_DONE;
  pthread_mutex_unlock(&q->net->mu);
  return d;
}

int stk__net_wait(stk__net_req *q, stk__net_body *body, char *msg, size_t msglen) {
  if (!q) return stk__fail(msg, msglen, STK_ENOMEM, "out of memory for a request");
  stk__net *n = q->net;
  pthread_mutex_lock(&n->mu);
  while (q->state != Q_DONE) pthread_cond_wait(&n->done_cv, &n->mu);
  pthread_mutex_unlock(&n->mu);
  if (body) {
    body->data = q->data;
    body->len = q->got;
    body->size = q->size;
    snprintf(body->etag, sizeof body->etag, "%s", q->etag);
  }
  if (q->rc) stk__fail(msg, msglen, q->rc, "%s", q->why + (q->bare ? q->why_at : 0));
  return q->rc;
}

int stk__net_wait_reason(stk__net_req *q, stk__net_body *body, char *msg, size_t msglen) {
  if (q) q->bare = 1;
  return stk__net_wait(q, body, msg, msglen);
}

uint8_t *stk__net_take(stk__net_req *q) {
  uint8_t *d = q->data;
  q->data = NULL;
  q->got = q->cap = 0;
  return d;
}

void stk__net_free(stk__net_req *q) {
  if (!q) return;
  free(q->at_url);
  free(q->target);
  free(q->link);
  free(q->data);
  free(q->url);
  free(q);
}

void stk__net_get_stats(const stk__net *n, stk__net_stats *s) {
  memset(s, 0, sizeof *s);
  if (!n) return;
  stk__net *m = (stk__net *)n; /* atomics are read, nothing is changed */
  s->bytes = atomic_load(&m->bytes);
  s->requests = atomic_load(&m->requests);
  s->retries = atomic_load(&m->retries);
  s->failures = atomic_load(&m->failures);
  s->seconds = (double)atomic_load(&m->micros) * 1e-6;
}

/* ---- S3 listings --------------------------------------------------------- */

/* A numeric character reference at c ("&#34;", "&#x22;"; SeaweedFS quotes
 * ETags so) of an ASCII character, before end: its length, the character
 * in *ch; 0 when there is none. */
static size_t xml_char_ref(const char *c, const char *end, char *ch) {
  if (end - c < 4 || c[0] != '&' || c[1] != '#') return 0;
  int hex = c[2] == 'x' || c[2] == 'X';
  unsigned v = 0;
  const char *d = c + 2 + hex;
  for (; d < end && d - c < 10 && isxdigit((unsigned char)*d); d++) {
    if (!hex && !isdigit((unsigned char)*d)) return 0;
    unsigned digit = (unsigned)(isdigit((unsigned char)*d) ? *d - '0' : (*d | 32) - 'a' + 10);
    v = v * (hex ? 16u : 10u) + digit;
  }
  if (d == c + 2 + hex || d >= end || *d != ';' || v == 0 || v > 127) return 0;
  *ch = (char)v;
  return (size_t)(d - c) + 1;
}

/* The text of <tag>...</tag> after *p, XML entities decoded, into out;
 * advances *p past it. 0 when there is none before `end`. */
static int xml_take(const char **p, const char *end, const char *tag, char *out, size_t cap) {
  char open[64], close[64];
  snprintf(open, sizeof open, "<%s>", tag);
  snprintf(close, sizeof close, "</%s>", tag);
  const char *a = memmem(*p, (size_t)(end - *p), open, strlen(open));
  if (!a) return 0;
  a += strlen(open);
  const char *b = memmem(a, (size_t)(end - a), close, strlen(close));
  if (!b) return 0;
  size_t o = 0;
  for (const char *c = a; c < b && o + 1 < cap; c++) {
    static const struct {
      const char *e;
      char c;
    } ents[] = {{"&amp;", '&'}, {"&lt;", '<'}, {"&gt;", '>'}, {"&quot;", '"'}, {"&apos;", '\''}};
    int done = 0;
    size_t ref = xml_char_ref(c, b, &out[o]);
    if (ref) {
      o++;
      c += ref - 1;
      done = 1;
    }
    if (*c == '&' && !done)
      for (size_t k = 0; k < sizeof ents / sizeof *ents && !done; k++)
        if (!strncmp(c, ents[k].e, strlen(ents[k].e))) {
          out[o++] = ents[k].c;
          c += strlen(ents[k].e) - 1;
          done = 1;
        }
    if (!done) out[o++] = *c;
  }
  out[o] = '\0';
  *p = b + strlen(close);
  return 1;
}

void stk__net_objects_free(stk__net_object *v, int count) {
  for (int i = 0; v && i < count; i++) free(v[i].url);
  free(v);
}

int stk__s3_list_page(const char *body, size_t len, const char *bucket, stk__net_object **objs,
                      int *count, int *cap, char *token, size_t token_cap, int *more, char *msg,
                      size_t msglen) {
  const char *p = body, *end = p + len;
  stk__net_object *v = *objs;
  int rc = STK_OK;
  *more = 0;
  /* body is not NUL-terminated: every search is bounded by end */
  for (;;) {
    const char *c = memmem(p, (size_t)(end - p), "<Contents>", 10);
    if (!c) break;
    const char *ce = memmem(c, (size_t)(end - c), "</Contents>", 11);
    if (!ce) break;
    char key[2048], size[32], etag[96] = "";
    const char *k = c;
    if (!xml_take(&k, ce, "Key", key, sizeof key)) break;
    k = c;
    uint64_t bytes = 0; /* no <Size>: 0, as before; one that is no count: refused */
    if (xml_take(&k, ce, "Size", size, sizeof size) &&
        parse_count(size, size + strlen(size), &bytes) != STK_OK) {
      rc = stk__fail(msg, msglen, STK_EFORMAT,
                     "the listing is malformed: the <Size> of %.200s is no byte count", key);
      break;
    }
    k = c;
    xml_take(&k, ce, "ETag", etag, sizeof etag);
    p = ce + 11;
    if (*count == *cap) {
      int nc = *cap ? *cap * 2 : 256;
      stk__net_object *nv = realloc(v, (size_t)nc * sizeof *nv);
      if (!nv) {
        rc = stk__fail(msg, msglen, STK_ENOMEM, "out of memory");
        break;
      }
      v = nv;
      *cap = nc;
    }
    stk__net_object *o = &v[*count];
    size_t ul = strlen(bucket) + strlen(key) + 7;
    if (!(o->url = malloc(ul))) {
      rc = stk__fail(msg, msglen, STK_ENOMEM, "out of memory");
      break;
    }
    snprintf(o->url, ul, "s3://%s/%s", bucket, key);
    o->size = bytes;
    const char *e = etag;
    while (*e == '"') e++;
    snprintf(o->etag, sizeof o->etag, "%s", e);
    size_t el = strlen(o->etag);
    while (el && o->etag[el - 1] == '"') o->etag[--el] = '\0';
    (*count)++;
  }
  *objs = v;
  if (rc) return rc;
  const char *t = body;
  char trunc[16] = "";
  xml_take(&t, end, "IsTruncated", trunc, sizeof trunc);
  t = body;
  if (strcmp(trunc, "true")) return STK_OK;
  /* more follow: without a token to ask for them, the next request would
   * be this page again, and again */
  if (!xml_take(&t, end, "NextContinuationToken", token, token_cap) || !token[0])
    return stk__fail(msg, msglen, STK_EFORMAT,
                     "the listing is malformed: it is truncated without a NextContinuationToken");
  *more = 1;
  return STK_OK;
}

static int by_url(const void *a, const void *b) {
  return strcmp(((const stk__net_object *)a)->url, ((const stk__net_object *)b)->url);
}

/* One page of an hf:// listing at *next (replaced by the next page's URL,
 * "" after the last). */
static int hf_page(stk__net *n, const char *url, const char *root, char *next, size_t cap,
                   stk__net_object **v, int *count, int *vcap, char *msg, size_t msglen) {
  stk__net_req *q = stk__net_get(n, next, 0, 0, 64u << 20, 0);
  stk__net_body body;
  char why[800];
  int rc = stk__net_wait(q, &body, why, sizeof why);
  if (rc) {
    /* name the listing as the user wrote it, not the API's URL */
    const char *r = q ? strstr(why, ": ") : NULL;
    stk__fail(msg, msglen, rc, "cannot list %s%s", url, r ? r : why);
    stk__net_free(q);
    return rc;
  }
  rc = stk__hf_tree_page((const char *)body.data, body.len, root, v, count, vcap, why,
                         sizeof why);
  if (rc) stk__fail(msg, msglen, rc, "cannot list %s: %s", url, why);
  char nx[16384] = "";
  if (rc == STK_OK && q->link && stk__link_next(q->link, nx, sizeof nx) && !strcmp(nx, next))
    rc = stk__fail(msg, msglen, STK_EFORMAT,
                   "cannot list %s: the Hub's listing links a page to itself", url);
  stk__net_free(q);
  if (strlen(nx) >= cap)
    rc = stk__fail(msg, msglen, STK_EFORMAT, "cannot list %s: a next page's URL too long", url);
  if (rc == STK_OK) snprintf(next, cap, "%s", nx);
  return rc;
}

/* The files under an hf:// folder, by the Hub's tree API, page after page
 * as its Link headers lead, sorted by name as an S3 listing is. */
static int hf_list(stk__net *n, const char *url, stk__net_object **out, int *count, char *msg,
                   size_t msglen) {
  stk__hf_ref r;
  int rc = stk__hf_parse(url, &r, msg, msglen);
  if (rc) return rc;
  char root[4200], next[16384];
  snprintf(root, sizeof root, "%.*s", (int)r.root_len, url);
  if ((rc = stk__hf_tree_url(url, next, sizeof next, msg, msglen))) return rc;
  stk__net_object *v = NULL;
  int cap = 0;
  /* (a bound on the pages: a server whose cursors never end cannot keep
   * the opening going forever) */
  for (int page = 0; rc == STK_OK && next[0]; page++)
    rc = page < 1000000
             ? hf_page(n, url, root, next, sizeof next, &v, count, &cap, msg, msglen)
             : stk__fail(msg, msglen, STK_EFORMAT, "cannot list %s: over a million pages", url);
  if (rc) {
    stk__net_objects_free(v, *count);
    *count = 0;
    return rc;
  }
  if (*count > 1) qsort(v, (size_t)*count, sizeof *v, by_url);
  *out = v;
  return STK_OK;
}

int stk__net_list(stk__net *n, const char *url, stk__net_object **out, int *count, char *msg,
                  size_t msglen) {
  *out = NULL;
  *count = 0;
  if (stk__is_hf(url)) return hf_list(n, url, out, count, msg, msglen);
  const char *b = url + 5, *slash = strchr(b, '/');
  char bucket[256];
  size_t bl = slash ? (size_t)(slash - b) : strlen(b);
  if (strncmp(url, "s3://", 5) || !bl || bl >= sizeof bucket)
    return stk__fail(msg, msglen, STK_EINVAL, "%s is not an s3://bucket/prefix name", url);
  memcpy(bucket, b, bl);
  bucket[bl] = '\0';
  const char *prefix = slash ? slash + 1 : "";
  char token[1024] = "";
  int cap = 0, rc = STK_OK;
  stk__net_object *v = NULL;
  for (int page = 0; rc == STK_OK; page++) {
    /* the canonical query: parameters sorted by name, values encoded */
    char ep[3 * 1024 + 4], et[3 * 1024 + 4], name[8192];
    if (stk__uri_encode(prefix, 0, ep, sizeof ep) || stk__uri_encode(token, 0, et, sizeof et)) {
      rc = stk__fail(msg, msglen, STK_EINVAL, "%s: the prefix is too long", url);
      break;
    }
    snprintf(name, sizeof name, "s3://%s/?%s%s%slist-type=2&prefix=%s", bucket,
             token[0] ? "continuation-token=" : "", et, token[0] ? "&" : "", ep);
    stk__net_req *q = stk__net_get(n, name, 0, 0, 64u << 20, 0);
    stk__net_body body;
    char why[800];
    rc = stk__net_wait(q, &body, why, sizeof why);
    if (rc) {
      /* name the listing as the user wrote it, not with its query */
      const char *r = strstr(why, ": ");
      stk__fail(msg, msglen, rc, "cannot list s3://%s/%s%s", bucket, prefix, r ? r : why);
      stk__net_free(q);
      break;
    }
    int more = 0;
    char why2[400], last[sizeof token];
    memcpy(last, token, sizeof token);
    rc = stk__s3_list_page((const char *)body.data, body.len, bucket, &v, count, &cap, token,
                           sizeof token, &more, why2, sizeof why2);
    stk__net_free(q);
    if (rc == STK_OK && more && !strcmp(token, last))
      rc = stk__fail(why2, sizeof why2, STK_EFORMAT,
                     "the listing is malformed: it gave the same continuation token twice");
    if (rc) stk__fail(msg, msglen, rc, "cannot list s3://%s/%s: %s", bucket, prefix, why2);
    if (!more) break;
  }
  if (rc) {
    stk__net_objects_free(v, *count);
    *count = 0;
    return rc;
  }
  *out = v;
  return STK_OK;
}

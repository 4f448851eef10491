/*
 * hub.h: the Hugging Face Hub as a remote store, spelled as huggingface_hub's
 * HfFileSystem spells it:
 *
 *   hf://datasets/OWNER/NAME[@REVISION][/PATH]   (also spaces/, models/ or
 *   no type: a model)
 *
 * A file is read at the Hub's resolve URL,
 * {HF_ENDPOINT}/datasets/OWNER/NAME/resolve/{REVISION}/{PATH}, which
 * redirects to a CDN (net.c follows it); a folder is listed through the
 * Hub's tree API, {HF_ENDPOINT}/api/datasets/OWNER/NAME/tree/{REVISION}/{PATH}
 * ?recursive=true, JSON pages linked by their `Link: <...>; rel="next"`
 * header.
 *
 * The token (HF_TOKEN, else HUGGING_FACE_HUB_TOKEN, else the file
 * `huggingface-cli login` writes) goes as `Authorization: Bearer` to the
 * Hub's own origins only: HF_ENDPOINT's and https://huggingface.co; never
 * to a host a redirect leads to.
 */
#ifndef STK_HUB_H
#define STK_HUB_H

#include <stddef.h>

#include "sources/net.h"

/* 1 for an hf:// name. */
int stk__is_hf(const char *url);

/* What an hf:// name says. */
typedef struct {
  char type[16];  /* "datasets", "spaces" or "models" */
  char repo[256]; /* OWNER/NAME */
  char rev[256];  /* the revision, percent-decoded; "main" when none */
  char path[4096]; /* the path in the repository, "" for its root */
  size_t root_len; /* bytes of the name up to the path (hf://TYPE/OWNER/NAME[@REV]) */
} stk__hf_ref;

/* Parses an hf:// name: STK_OK, or STK_EINVAL with the reason. */
int stk__hf_parse(const char *url, stk__hf_ref *r, char *msg, size_t msglen);

/* HF_ENDPOINT without its trailing '/', else https://huggingface.co. */
void stk__hf_endpoint(char *out, size_t cap);

/* The resolve URL of an hf:// file; the tree API URL (first page) of an
 * hf:// folder. STK_OK, or STK_EINVAL with the reason. */
int stk__hf_resolve_url(const char *url, char *out, size_t cap, char *msg, size_t msglen);
int stk__hf_tree_url(const char *url, char *out, size_t cap, char *msg, size_t msglen);

/* The token to send to the Hub, into out: 1 when there is one, 0 when none
 * (or HF_HUB_DISABLE_IMPLICIT_TOKEN is set). Read from HF_TOKEN, then
 * HUGGING_FACE_HUB_TOKEN, then HF_TOKEN_PATH (else $HF_HOME/token, HF_HOME
 * defaulting to $XDG_CACHE_HOME/huggingface or ~/.cache/huggingface), as
 * huggingface_hub does. *where names its source, for messages. */
int stk__hf_token(char *out, size_t cap, const char **where);

/* "scheme://host:port" of an http(s) URL, lower case, the default port
 * made explicit, without user info: what a redirect is compared by. 0, or
 * -1 for a URL that has none. */
int stk__url_origin(const char *url, char *out, size_t cap);

/* Whether a request to url may carry the Hub's token: its origin is
 * HF_ENDPOINT's or https://huggingface.co's. */
int stk__hf_token_origin(const char *url);

/* One page of the tree API (body, len bytes, from the server: untrusted
 * JSON): its files are appended to (*objs, *count, *cap) as root/PATH, with
 * their sizes and their ETags (the LFS object's SHA-256, else the git
 * object id, as the Hub's X-Linked-Etag and ETag say them); folders are
 * skipped. STK_OK; STK_EFORMAT for what is not the expected JSON;
 * STK_ENOMEM; with the reason in msg. What was appended stays, for the
 * caller to free. */
int stk__hf_tree_page(const char *body, size_t len, const char *root, stk__net_object **objs,
                      int *count, int *cap, char *msg, size_t msglen);

/* The URL of a Link header's rel="next" (value: what follows "Link:"), into
 * out: 1 when there is one. */
int stk__link_next(const char *value, char *out, size_t cap);

#endif

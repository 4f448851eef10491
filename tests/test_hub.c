/* The Hugging Face Hub's names, URLs and origins (hub.c): hf:// names as
 * HfFileSystem writes them, the resolve and tree URLs as huggingface_hub
 * builds them, and the origin test that decides where the token may go,
 * against the URLs that try to pass for the Hub (user info, a longer host,
 * another port or scheme). */
#define _POSIX_C_SOURCE 200809L /* setenv */
#include <stdlib.h>

#include "check.h"
#include "sources/hub.h"

static void resolves(const char *name, const char *want) {
  char out[8192], msg[512];
  int rc = stk__hf_resolve_url(name, out, sizeof out, msg, sizeof msg);
  CHECK_MSG(rc == 0 && !strcmp(out, want), "%s: %s (%s), not %s", name, rc ? "failed" : out,
            rc ? msg : "", want);
}

static void trees(const char *name, const char *want) {
  char out[8192], msg[512];
  int rc = stk__hf_tree_url(name, out, sizeof out, msg, sizeof msg);
  CHECK_MSG(rc == 0 && !strcmp(out, want), "%s: %s (%s), not %s", name, rc ? "failed" : out,
            rc ? msg : "", want);
}

static void refused(const char *name) {
  stk__hf_ref r;
  char msg[512];
  CHECK_MSG(stk__hf_parse(name, &r, msg, sizeof msg) != 0, "%s was taken", name);
}

static void names(void) {
  unsetenv("HF_ENDPOINT");
  resolves("hf://datasets/o/n/a/b.tar", "https://huggingface.co/datasets/o/n/resolve/main/a/b.tar");
  resolves("hf://datasets/o/n@v1.0/x.tar", "https://huggingface.co/datasets/o/n/resolve/v1.0/x.tar");
  /* a revision with '/' is encoded whole, %-encoded or refs/pr/N as written */
  resolves("hf://datasets/o/n@refs%2Fpr%2F1/x.tar",
           "https://huggingface.co/datasets/o/n/resolve/refs%2Fpr%2F1/x.tar");
  resolves("hf://datasets/o/n@refs/pr/12/x.tar",
           "https://huggingface.co/datasets/o/n/resolve/refs%2Fpr%2F12/x.tar");
  resolves("hf://datasets/o/n@refs/convert/parquet/d/x.tar",
           "https://huggingface.co/datasets/o/n/resolve/refs%2Fconvert%2Fparquet/d/x.tar");
  /* a path's blanks and '%' encoded, its '/' kept */
  resolves("hf://datasets/o/n/my dir/a%b.tar",
           "https://huggingface.co/datasets/o/n/resolve/main/my%20dir/a%25b.tar");
  resolves("hf://o/model/w.tar", "https://huggingface.co/o/model/resolve/main/w.tar");
  resolves("hf://spaces/o/s/w.tar", "https://huggingface.co/spaces/o/s/resolve/main/w.tar");
  setenv("HF_ENDPOINT", "http://127.0.0.1:8080/hub//", 1);
  resolves("hf://datasets/o/n/x.tar", "http://127.0.0.1:8080/hub/datasets/o/n/resolve/main/x.tar");
  trees("hf://datasets/o/n/a/b/", "http://127.0.0.1:8080/hub/api/datasets/o/n/tree/main/a%2Fb"
                                  "?recursive=true&expand=false");
  trees("hf://datasets/o/n@refs/pr/3", "http://127.0.0.1:8080/hub/api/datasets/o/n/tree/"
                                       "refs%2Fpr%2F3?recursive=true&expand=false");
  trees("hf://o/m", "http://127.0.0.1:8080/hub/api/models/o/m/tree/main"
                    "?recursive=true&expand=false");
  unsetenv("HF_ENDPOINT");
  refused("hf://datasets/only-one");
  refused("hf://datasets//n/x.tar");
  refused("hf://datasets/o/n@/x.tar");
  refused("hf://datasets/o/n@bad%zz/x.tar");
  refused("hf://datasets/o/n m/x.tar");
  refused("s3://b/k");
  stk__hf_ref r;
  char msg[256];
  CHECK(stk__hf_parse("hf://datasets/o/n@dev/ds/", &r, msg, sizeof msg) == 0);
  CHECK(!strcmp(r.type, "datasets") && !strcmp(r.repo, "o/n") && !strcmp(r.rev, "dev"));
  CHECK(!strcmp(r.path, "ds/") && r.root_len == strlen("hf://datasets/o/n@dev"));
}

static void origins(void) {
  unsetenv("HF_ENDPOINT");
  CHECK(stk__hf_token_origin("https://huggingface.co/api/datasets/o/n/tree/main"));
  CHECK(stk__hf_token_origin("HTTPS://HuggingFace.CO:443/x"));
  /* what only looks like the Hub */
  static const char *const not_hub[] = {
      "https://huggingface.co@evil.example/x", "https://huggingface.co.evil.example/x",
      "https://evil.example/huggingface.co",   "http://huggingface.co/x",
      "https://huggingface.co:8443/x",         "https://cdn-lfs.huggingface.co/x",
      "https://user:pw@evil.example/https://huggingface.co/", "ftp://huggingface.co/x"};
  for (size_t i = 0; i < sizeof not_hub / sizeof *not_hub; i++)
    CHECK_MSG(!stk__hf_token_origin(not_hub[i]), "%s taken for the Hub", not_hub[i]);
  setenv("HF_ENDPOINT", "http://127.0.0.1:8080/", 1);
  CHECK(stk__hf_token_origin("http://127.0.0.1:8080/datasets/o/n/resolve/main/x"));
  CHECK(stk__hf_token_origin("https://huggingface.co/x")); /* the Hub itself stays one */
  CHECK(!stk__hf_token_origin("http://localhost:8080/x"));
  CHECK(!stk__hf_token_origin("http://127.0.0.1:8081/x"));
  CHECK(!stk__hf_token_origin("https://127.0.0.1:8080/x"));
  unsetenv("HF_ENDPOINT");
  char o[256];
  CHECK(stk__url_origin("http://u:p@[::1]:9/x?q", o, sizeof o) == 0 && !strcmp(o, "http://[::1]:9"));
  CHECK(stk__url_origin("https://[::1]/x", o, sizeof o) == 0 && !strcmp(o, "https://[::1]:443"));
  CHECK(stk__url_origin("https:///x", o, sizeof o) != 0);
}

static void tokens(void) {
  char t[256];
  const char *where;
  setenv("HF_TOKEN", "hf_a\r\nX-Injected: 1", 1);
  CHECK(stk__hf_token(t, sizeof t, &where) && !strcmp(t, "hf_a") && !strcmp(where, "HF_TOKEN"));
  setenv("HF_HUB_DISABLE_IMPLICIT_TOKEN", "1", 1);
  CHECK(!stk__hf_token(t, sizeof t, &where));
  unsetenv("HF_HUB_DISABLE_IMPLICIT_TOKEN");
  unsetenv("HF_TOKEN");
  setenv("HUGGING_FACE_HUB_TOKEN", "hf_b", 1);
  CHECK(stk__hf_token(t, sizeof t, &where) && !strcmp(t, "hf_b"));
  unsetenv("HUGGING_FACE_HUB_TOKEN");
  setenv("HF_TOKEN_PATH", "/nonexistent/token", 1);
  CHECK(!stk__hf_token(t, sizeof t, &where));
  unsetenv("HF_TOKEN_PATH");
}

static void links(void) {
  char u[256];
  CHECK(stk__link_next("<https://a/p?c=2>; rel=\"next\"", u, sizeof u) && !strcmp(u, "https://a/p?c=2"));
  CHECK(stk__link_next(" <https://a/1>; rel=\"prev\", <https://a/3>; rel=\"next\"", u, sizeof u) &&
        !strcmp(u, "https://a/3"));
  CHECK(!stk__link_next("<https://a/1>; rel=\"prev\"", u, sizeof u));
  CHECK(!stk__link_next("<https://a/1>; rel=\"nextpage\"", u, sizeof u));
  CHECK(!stk__link_next("<https://a/1; rel=\"next\"", u, sizeof u));
}

static void pages(void) {
  static const char page[] =
      "[{\"type\":\"directory\",\"oid\":\"d\",\"size\":0,\"path\":\"ds\"},"
      "{\"type\":\"file\",\"oid\":\"g1\",\"size\":7,\"path\":\"ds/a.tar\",\"lfs\":{\"oid\":\"sha\","
      "\"size\":7,\"pointerSize\":134},\"xetHash\":null,\"lastCommit\":{\"id\":\"c\",\"x\":[1,"
      "2.5e3,true]}},"
      "{\"type\":\"file\",\"oid\":\"g2\",\"size\":3,\"path\":\"caf\\u00e9 \\ud83d\\ude00.tar\"}]";
  stk__net_object *v = NULL;
  int n = 0, cap = 0;
  char msg[256];
  CHECK(stk__hf_tree_page(page, sizeof page - 1, "hf://datasets/o/n", &v, &n, &cap, msg,
                          sizeof msg) == 0);
  CHECK_EQ_INT(n, 2);
  if (n == 2) {
    CHECK(!strcmp(v[0].url, "hf://datasets/o/n/ds/a.tar") && v[0].size == 7 &&
          !strcmp(v[0].etag, "sha"));
    CHECK(!strcmp(v[1].url, "hf://datasets/o/n/caf\xc3\xa9 \xf0\x9f\x98\x80.tar") &&
          !strcmp(v[1].etag, "g2"));
  }
  static const char *const bad[] = {
      "{}", "[{\"type\":\"file\",\"path\":\"../x.tar\",\"size\":1}]",
      "[{\"type\":\"file\",\"path\":\"a//x.tar\",\"size\":1}]",
      "[{\"type\":\"file\",\"path\":\"x.tar\"}]", "[{\"type\":\"file\",\"path\":\"x\",\"size\":-1}]",
      "[{\"type\":\"file\",\"path\":\"x\",\"size\":99999999999999999999}]", "[1,]", "[",
      "[{\"type\":\"file\",\"path\":\"x\\u0000\",\"size\":1}]", "[{\"a\":\"\\ud800\"}]"};
  for (size_t i = 0; i < sizeof bad / sizeof *bad; i++)
    CHECK_MSG(stk__hf_tree_page(bad[i], strlen(bad[i]), "hf://datasets/o/n", &v, &n, &cap, msg,
                                sizeof msg) == STK_EFORMAT,
              "%s was taken", bad[i]);
  stk__net_objects_free(v, n);
}

int main(void) {
  names();
  origins();
  tokens();
  links();
  pages();
  return CHECK_DONE();
}

/*
 * fuzz_awsconfig.c: what the AWS credential chain parses from files and
 * from the network (src/sources/s3_creds.c). The first byte picks the
 * parser, the rest is its input:
 *   0 (mod 4)  an AWS config or credentials file (stk__aws_ini_parse), read
 *              for the sections "default" and "profile ci"
 *   1          a JSON credential document (container endpoint, instance
 *              metadata, credential_process)
 *   2          an STS AssumeRole(WithWebIdentity) XML response
 *   3          an ISO 8601 expiry time
 * Every field that comes back is a NUL-terminated string within its array,
 * and an accepted credential has a key and a secret.
 */
#include <stdlib.h>
#include <string.h>

#include "core/common.h"
#include "fuzz.h"
#include "sources/s3_creds.h"

#define TERMINATED(a) FUZZ_CHECK(memchr((a), '\0', sizeof(a)) != NULL)

static void check_profile(const stk__aws_profile *p) {
  TERMINATED(p->key_id);
  TERMINATED(p->secret);
  TERMINATED(p->token);
  TERMINATED(p->role_arn);
  TERMINATED(p->source_profile);
  TERMINATED(p->credential_source);
  TERMINATED(p->external_id);
  TERMINATED(p->web_identity_token_file);
  TERMINATED(p->role_session_name);
  TERMINATED(p->duration);
  TERMINATED(p->credential_process);
  TERMINATED(p->sso_session);
  TERMINATED(p->sso_start_url);
  TERMINATED(p->sso_region);
  TERMINATED(p->sso_account_id);
  TERMINATED(p->sso_role_name);
}

static void check_creds(int rc, const stk__aws_creds *c) {
  TERMINATED(c->key_id);
  TERMINATED(c->secret);
  TERMINATED(c->token);
  if (rc == STK_OK) FUZZ_CHECK(c->key_id[0] && c->secret[0] && c->expires >= 0);
  /* a refused document leaves nothing of itself behind */
  if (rc != STK_OK) FUZZ_CHECK(!c->key_id[0] && !c->secret[0] && !c->token[0]);
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
  if (!size) return 0;
  const char *text = (const char *)data + 1;
  size_t n = size - 1;
  char msg[512] = "";
  /* heap copies: ASan sees a read past the input's end */
  char *buf = malloc(n ? n : 1);
  if (!buf) return 0;
  memcpy(buf, text, n);
  switch (data[0] & 3) {
    case 0: {
      stk__aws_profile *p = calloc(1, sizeof *p);
      if (!p) break;
      int a = stk__aws_ini_parse(buf, n, "default", p);
      int b = stk__aws_ini_parse(buf, n, "profile ci", p);
      fuzz_note("ini: default %d, profile ci %d", a, b);
      check_profile(p);
      free(p);
      break;
    }
    case 1:
    case 2: {
      stk__aws_creds c;
      int rc = (data[0] & 3) == 1 ? stk__aws_json_creds(buf, n, &c, msg, sizeof msg)
                                  : stk__aws_sts_creds(buf, n, &c, msg, sizeof msg);
      fuzz_note("%s: rc %d %s", (data[0] & 3) == 1 ? "json" : "sts", rc, rc ? msg : "");
      check_creds(rc, &c);
      break;
    }
    default: {
      char t[64];
      size_t k = n < sizeof t - 1 ? n : sizeof t - 1;
      memcpy(t, text, k);
      t[k] = '\0';
      int64_t v = stk__aws_time(t);
      fuzz_note("time: %lld", (long long)v);
      FUZZ_CHECK(v >= -1);
    }
  }
  free(buf);
  return 0;
}

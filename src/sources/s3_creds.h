/*
 * s3_creds.h: the AWS credential chain, in the order of the AWS SDKs, and
 * the renewal of temporary credentials before they expire.
 *
 *   1. environment   AWS_ACCESS_KEY_ID + AWS_SECRET_ACCESS_KEY
 *                    (+ AWS_SESSION_TOKEN)
 *   2. profile       AWS_PROFILE (else AWS_DEFAULT_PROFILE, else "default")
 *                    of AWS_SHARED_CREDENTIALS_FILE (~/.aws/credentials)
 *                    and AWS_CONFIG_FILE (~/.aws/config): role_arn with
 *                    source_profile or credential_source (STS AssumeRole,
 *                    signed) or with web_identity_token_file (STS
 *                    AssumeRoleWithWebIdentity); static keys;
 *                    credential_process; SSO (the role credentials of the
 *                    token that `aws sso login` cached). A
 *                    profile named by AWS_PROFILE that exists in neither
 *                    file is an error that names it.
 *   3. web identity  AWS_WEB_IDENTITY_TOKEN_FILE + AWS_ROLE_ARN
 *                    (+ AWS_ROLE_SESSION_NAME): AssumeRoleWithWebIdentity,
 *                    unsigned; the token file is read again at each renewal
 *   4. container     AWS_CONTAINER_CREDENTIALS_RELATIVE_URI (at
 *                    169.254.170.2) or _FULL_URI, with the Authorization
 *                    header from AWS_CONTAINER_AUTHORIZATION_TOKEN_FILE or
 *                    AWS_CONTAINER_AUTHORIZATION_TOKEN
 *   5. instance      IMDSv2 (a token PUT, the role's name, its
 *      metadata      credentials) at AWS_EC2_METADATA_SERVICE_ENDPOINT (else
 *                    http://169.254.169.254); AWS_EC2_METADATA_DISABLED=true
 *                    skips it; IMDSv1 only with
 *                    AWS_EC2_METADATA_V1_DISABLED=false
 *
 * STS is AWS_ENDPOINT_URL_STS, else AWS_ENDPOINT_URL, else
 * https://sts.REGION.amazonaws.com.
 *
 * Temporary credentials are fetched again by a thread of their own, from
 * the provider that gave them, 5 minutes before they expire or at half
 * their life when it is shorter; readers copy the current ones under a
 * lock held only for the copy, so reads never wait for a renewal.
 *
 * Secrets (secret keys, session tokens, web identity tokens, container
 * authorization tokens) are held in memory only and wiped after use; no
 * message of this file contains one.
 */
#ifndef STK_S3_CREDS_H
#define STK_S3_CREDS_H

#include <stddef.h>
#include <stdint.h>

typedef struct {
  char key_id[128];
  char secret[256];
  char token[4096];
  int64_t expires; /* seconds since the epoch; 0: they do not expire */
} stk__aws_creds;

/* The settings of one profile that the chain reads. */
typedef struct {
  char key_id[128], secret[256], token[4096];
  char role_arn[256], source_profile[128], credential_source[64], external_id[256];
  char web_identity_token_file[1024], role_session_name[128], duration[16];
  char credential_process[1024];
  /* SSO (IAM Identity Center): a profile's sso_session names an
   * [sso-session NAME] section with the start URL and region; a legacy
   * profile has them itself */
  char sso_session[128], sso_start_url[512], sso_region[64], sso_account_id[32];
  char sso_role_name[128];
} stk__aws_profile;

/* Reads the keys of section `section` of an AWS config or credentials file
 * (text of len bytes, not NUL-terminated) into p, leaving the fields
 * already set as they are (so that the credentials file, read first, wins
 * over the config file). 1 when the section exists, else 0. Lines indented
 * under a key without a value (the "s3 =" sub-sections) are skipped. */
int stk__aws_ini_parse(const char *text, size_t len, const char *section, stk__aws_profile *p);

/* A JSON credential document (the container endpoint's, instance
 * metadata's, credential_process's output): AccessKeyId, SecretAccessKey,
 * Token or SessionToken, Expiration. STK_OK, or STK_EINVAL with the reason
 * (never a value of the document). */
int stk__aws_json_creds(const char *doc, size_t len, stk__aws_creds *c, char *msg, size_t msglen);

/* The Credentials of an STS AssumeRole or AssumeRoleWithWebIdentity
 * response; for an error response, STK_EIO with its Code and Message. */
int stk__aws_sts_creds(const char *xml, size_t len, stk__aws_creds *c, char *msg, size_t msglen);

/* An ISO 8601 UTC time ("2026-12-06T03:00:00Z", fractions and "+00:00"
 * accepted) as seconds since the epoch; -1 when malformed. */
int64_t stk__aws_time(const char *iso);

typedef struct stk__creds stk__creds;

/* Walks the chain. STK_OK with *out set; or STK_OK with *out NULL when no
 * source has credentials, msg then saying which sources were tried; or an
 * error naming the source that failed and why. */
int stk__creds_open(stk__creds **out, const char *region, char *msg, size_t msglen);
/* The current credentials into *out (wipe them after use); returns their
 * generation, which renewals increase. */
uint64_t stk__creds_get(stk__creds *c, stk__aws_creds *out);
/* A request signed with generation `gen` was refused as expired: renew now
 * unless that already happened. 1 when the credentials can be renewed. */
int stk__creds_stale(stk__creds *c, uint64_t gen);
/* 1 while a renewal asked for by stk__creds_stale(gen) is under way. */
int stk__creds_renewing(stk__creds *c, uint64_t gen);
/* Where the credentials came from ("instance metadata (role R at URL),
 * temporary, expire ..."), never a secret. */
void stk__creds_describe(stk__creds *c, char *out, size_t cap);
void stk__creds_close(stk__creds *c);

/* Where the last client's credentials came from, for `stoker info`. */
void stk__creds_set_last(const char *what);

#endif

/*
 * redact.h: URLs shown without their secrets. A URL may carry a user name
 * and password (https://user:pw@host/...) or a signature in its query (a
 * pre-signed URL's X-Amz-Signature): neither may reach a message, a
 * statistic or a report, which end up in logs and bug reports.
 */
#ifndef STK_REDACT_H
#define STK_REDACT_H

#include <stddef.h>

/* Every URL in the text s (in place): its user info and its query and
 * fragment removed. A URL ends at a blank, a quote or an angle bracket; a
 * ':' that ends it (the "URL: reason" form of messages) is kept. Text
 * that holds no "://" is left as it is. */
void stk__url_scrub(char *s);

/* A sample's name for a message or a statistic: name with every URL in it
 * scrubbed, into out (truncated to cap). */
void stk__name_shown(const char *name, char *out, size_t cap);

#endif

/* redact.c: URLs shown without their secrets. See redact.h. */
#include "sources/redact.h"

#include <ctype.h>
#include <stdio.h>
#include <string.h>

/* Whether c ends a URL inside a message. */
static int url_end(char c) {
  return !c || isspace((unsigned char)c) || c == '"' || c == '\'' || c == '<' || c == '>';
}

void stk__url_scrub(char *s) {
  for (char *p = s; (p = strstr(p, "://"));) {
    char *host = p + 3;
    /* the user info: up to the last '@' before the path */
    char *e = host, *at = NULL;
    for (; !url_end(*e) && *e != '/' && *e != '?' && *e != '#'; e++)
      if (*e == '@') at = e;
    if (at) memmove(host, at + 1, strlen(at + 1) + 1);
    /* the query and the fragment, to the URL's end */
    char *q = host;
    while (!url_end(*q) && *q != '?' && *q != '#') q++;
    if (*q == '?' || *q == '#') {
      char *end = q;
      while (!url_end(*end)) end++;
      if (end > q + 1 && end[-1] == ':') end--; /* "URL?query: reason" keeps its ':' */
      memmove(q, end, strlen(end) + 1);
    }
    p = host;
  }
}

void stk__name_shown(const char *name, char *out, size_t cap) {
  if (!cap) return;
  snprintf(out, cap, "%s", name ? name : "");
  stk__url_scrub(out);
}

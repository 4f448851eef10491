/* list.c: the list-file source: lines of "path label". See dataset.h. */
#define _POSIX_C_SOURCE 200809L
#include <ctype.h>
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "core/common.h"
#include "sources/source.h"

int stk__dataset_from_list(stk__dataset *ds, const char *list, const char *base, char *msg,
                           size_t msglen) {
  memset(ds, 0, sizeof *ds);
  FILE *f = fopen(list, "r");
  if (!f) return stk__fail(msg, msglen, STK_EIO, "cannot open list file %s: %s", list, strerror(errno));
  char *dirbuf = NULL;
  if (!base) {
    dirbuf = strdup(list);
    if (!dirbuf) {
      fclose(f);
      return STK_ENOMEM;
    }
    char *slash = strrchr(dirbuf, '/');
    if (slash)
      slash[slash == dirbuf ? 1 : 0] = '\0';
    else
      strcpy(dirbuf, ".");
    base = dirbuf;
  }
  char *line = NULL;
  size_t cap = 0;
  ssize_t len;
  int64_t lineno = 0;
  int rc = STK_OK;
  int32_t maxlabel = -1;
  while (rc == STK_OK && (len = getline(&line, &cap, f)) >= 0) {
    lineno++;
    while (len > 0 && isspace((unsigned char)line[len - 1])) line[--len] = '\0';
    char *s = line;
    while (isspace((unsigned char)*s)) s++;
    if (*s == '\0' || *s == '#') continue;
    char *sp = s + strlen(s);
    while (sp > s && !isspace((unsigned char)sp[-1])) sp--;
    char *end = NULL;
    errno = 0;
    long lab = sp > s ? strtol(sp, &end, 10) : -1;
    if (sp == s || errno || !end || *end || lab < 0 || lab > INT32_MAX) {
      rc = stk__fail(msg, msglen, STK_EINVAL,
                     "%s:%lld: expected \"path label\" with a non-negative integer label",
                     list, (long long)lineno);
      break;
    }
    char *pe = sp;
    while (pe > s && isspace((unsigned char)pe[-1])) pe--;
    *pe = '\0';
    char *path = s[0] == '/' ? strdup(s) : stk__path_join(base, s);
    if (!path) {
      rc = STK_ENOMEM;
      break;
    }
    rc = stk__dataset_add(ds, path, (int32_t)lab);
    free(path);
    if (lab > maxlabel) maxlabel = (int32_t)lab;
  }
  free(line);
  free(dirbuf);
  fclose(f);
  if (rc == STK_OK && ds->n == 0)
    rc = stk__fail(msg, msglen, STK_EEMPTY, "list file %s names no samples", list);
  if (rc == STK_OK) {
    /* A list has no class names: classes are the label numbers. */
    ds->nclasses = maxlabel + 1;
    ds->classes = calloc((size_t)ds->nclasses, sizeof(char *));
    if (!ds->classes) rc = STK_ENOMEM;
    for (int i = 0; rc == STK_OK && i < ds->nclasses; i++) {
      char num[16];
      snprintf(num, sizeof num, "%d", i);
      if (!(ds->classes[i] = strdup(num))) rc = STK_ENOMEM;
    }
  }
  if (rc) stk__dataset_free(ds);
  return rc;
}

int stk__list_open(stk__source *s, const stk_options *opt, char *msg, size_t msglen) {
  s->ops = &stk__list_ops;
  return stk__dataset_from_list(&s->ds, opt->list_file, opt->list_base, msg, msglen);
}

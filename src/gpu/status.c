/* status.c: the GPU back end's failures and notes (gpu_internal.h), which
 * both gpu.c and decode.c report through. */
#include <stdarg.h>
#include <stdio.h>
#include <string.h>

#include "gpu/gpu_internal.h"

int stk__gpu_fail(stk__gpu *g, CUresult r, const char *what, char *msg, size_t msglen) {
  if (g && stk__cu_sticky(r)) {
    pthread_mutex_lock(&g->mu);
    if (!g->poisoned) {
      g->poisoned = 1;
      snprintf(g->poison_msg, sizeof g->poison_msg, "%s: %s (%s)", what, stk__cu_name(r), stk__cu_str(r));
    }
    pthread_mutex_unlock(&g->mu);
  }
  return stk__fail(msg, msglen, STK_ECUDA, "%s: %s (%s)", what, stk__cu_name(r), stk__cu_str(r));
}

void stk__gpu_note(stk__gpu *g, const char *fmt, ...) {
  size_t at = strlen(g->st.notes);
  if (at + 3 >= sizeof g->st.notes) return;
  if (at) {
    memcpy(g->st.notes + at, "; ", 3);
    at += 2;
  }
  va_list ap;
  va_start(ap, fmt);
  vsnprintf(g->st.notes + at, sizeof g->st.notes - at, fmt, ap);
  va_end(ap);
}

/* sink.c: opening a sink by kind (sink.h). */
#include "loader/sink.h"

#include <string.h>

int stk__sink_open(stk__sink *k, const stk__sink_config *c, char *err, size_t errlen) {
  memset(k, 0, sizeof *k);
  if (c->opt->device >= 0) return stk__sink_gpu_open(k, c, err, errlen);
  return stk__sink_cpu_open(k, c, err, errlen);
}

void stk__sink_close(stk__sink *k) {
  if (!k) return;
  if (k->ops && k->ops->close) k->ops->close(k);
  memset(k, 0, sizeof *k);
}

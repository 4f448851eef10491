/* sink_cpu.c: the sink of host memory (sink.h). A worker decodes and
 * augments its sample straight into its place in the slot, so a batch is
 * ready as soon as it is finalised and there is nothing to wait for. */
#include <stdlib.h>
#include <string.h>

#include "core/common.h"
#include "loader/sink.h"

typedef struct {
  const stk__plan *plan;
  const stk__source *src;
  int nslots;
  size_t slot_bytes;  /* batch_size images */
  uint8_t **data;     /* per slot */
} cpu_sink;

static int cpu_slot_open(stk__sink *k, int slot, uint8_t **data) {
  cpu_sink *c = k->impl;
  c->data[slot] = malloc(c->slot_bytes);
  *data = c->data[slot];
  return *data ? STK_OK : STK_ENOMEM;
}

static int cpu_produce(stk__sink *k, stk__worker *w, int slot, int j, uint64_t epoch, int64_t idx,
                       int share, char *reason, size_t reasonlen, int64_t *held) {
  cpu_sink *c = k->impl;
  return stk__process_sample(c->plan, w, c->src, epoch, idx,
                             c->data[slot] + (size_t)j * c->plan->image_bytes, reason, reasonlen);
}

static void cpu_move(stk__sink *k, int slot, int from, int to) {
  cpu_sink *c = k->impl;
  size_t ib = c->plan->image_bytes;
  memmove(c->data[slot] + (size_t)to * ib, c->data[slot] + (size_t)from * ib, ib);
}

static void cpu_lend(stk__sink *k, int slot, stk_batch *out) { out->device = -1; }

static void cpu_close(stk__sink *k) {
  cpu_sink *c = k->impl;
  if (!c) return;
  if (c->data)
    for (int i = 0; i < c->nslots; i++) free(c->data[i]);
  free(c->data);
  free(c);
}

static const stk__sink_ops cpu_ops = {
    .kind = "cpu",
    .slot_open = cpu_slot_open,
    .produce = cpu_produce,
    .move = cpu_move,
    .lend = cpu_lend,
    .close = cpu_close,
};

int stk__sink_cpu_open(stk__sink *k, const stk__sink_config *cfg, char *err, size_t errlen) {
  k->ops = &cpu_ops;
  cpu_sink *c = calloc(1, sizeof *c);
  if (!c) return stk__fail(err, errlen, STK_ENOMEM, "out of memory");
  k->impl = c;
  c->plan = cfg->plan;
  c->src = cfg->src;
  c->nslots = cfg->nslots;
  c->slot_bytes = (size_t)cfg->opt->batch_size * cfg->plan->image_bytes;
  c->data = calloc((size_t)cfg->nslots, sizeof *c->data);
  if (!c->data) return stk__fail(err, errlen, STK_ENOMEM, "out of memory");
  return STK_OK;
}

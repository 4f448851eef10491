/*
 * sink.h: what the positions of a batch become, and where the batch lives.
 * The executor (loader.c) owns the ring of slots, the worker threads and
 * the order of events (claims, finalisation, refills, resets, stalled
 * reads); it sees the output only through this interface. Each kind of
 * output is one implementation of it, in one file of src/loader/:
 *
 *   sink_cpu.c  host memory: each worker decodes and augments its sample
 *               straight into the slot; a batch is ready once finalised
 *   sink_gpu.c  the GPU back end (gpu/gpu.h): workers read each file and
 *               plan it (or finish it on the CPU, for the CPU share), and
 *               the finaliser submits the batch, which the GPU decodes and
 *               writes into device memory; the adaptive share (share.h)
 *
 * Slot i of a sink is slot i of the loader's ring; each holds up to
 * opt->batch_size positions. Position j of a slot is written by the worker
 * that claimed it (produce), and everything else happens to a slot between
 * finalisation and its release by the consumer.
 *
 * Locking: the loader has one mutex. Each operation says whether it is
 * called with it held ("mutex held": it must not block for long, and must
 * not call back into the loader) or without it ("no mutex"). Operations that
 * may be left NULL say what NULL means, as in sources/source.h.
 */
#ifndef STK_SINK_H
#define STK_SINK_H

#include <stddef.h>
#include <stdint.h>

#include "gpu/gpu.h"
#include "loader/pipeline.h"
#include "sources/source.h"
#include "stoker.h"

/* Bytes of a failure reason: the loader's, per position and per call (its
 * MSG_LEN), and what a sink hands below before it words its own message, so
 * that messages are cut where they always were. */
#define STK__SINK_MSG_LEN 512

typedef struct stk__sink stk__sink;

/* What a sink is opened with: all of it belongs to the loader, is
 * read-only and outlives the sink. */
typedef struct {
  const stk_options *opt;  /* validated; batch_size positions per slot */
  const stk__plan *plan;
  const stk__source *src;
  int nslots;              /* slots of the ring */
  int mix_classes;         /* > 0: batches are mixed (MixUp/CutMix), with
                              soft labels of this many columns */
} stk__sink_config;

typedef struct {
  const char *kind; /* "cpu", "gpu" */
  /* Allocates slot `slot`'s buffers, once per slot when the loader is
   * built (before any worker runs); *data = the memory of its images (host
   * or device), handed out as stk_batch.data. STK_OK or STK_ENOMEM (the
   * loader words the message). */
  int (*slot_open)(stk__sink *k, int slot, uint8_t **data);
  /* No mutex; any worker, for different positions at once. Makes position
   * j of `slot` from sample idx of `epoch`, through the worker's pipeline
   * state. A failure's code is returned with its reason (without the
   * sample's name) in reason. The read may stall, and the position be
   * taken away meanwhile: nothing outside the worker (w's buffers, reason)
   * may be written before stk__sample_prepare (or stk__process_sample) has
   * come back without STK__ELOST, and on STK__ELOST produce returns it
   * without touching the slot. `share`: the position is in the sink's CPU
   * share (the value of `share` below at the claim; 0 for refills, which
   * the finaliser makes while the rest of the batch waits, so they take the
   * sink's fastest path). *held: the change, in bytes, of the memory the
   * sink keeps for the slot's positions (added to; the loader publishes it
   * for stk_stats.host_bytes). */
  int (*produce)(stk__sink *k, stk__worker *w, int slot, int j, uint64_t epoch, int64_t idx,
                 int share, char *reason, size_t reasonlen, int64_t *held);
  /* Mutex held; the finaliser closing up the holes a batch kept (the epoch
   * ran out of refills), before any submission: position `from` becomes
   * position `to` (to < from; `to` failed or was moved already). */
  void (*move)(stk__sink *k, int slot, int from, int to);
  /* Mutex held, when a worker claims position j of a batch (refills are
   * not claimed): whether it is in the sink's CPU share, passed back to
   * produce. NULL = never. */
  int (*share)(stk__sink *k, int j);
  /* Submission: NULL = a batch is ready as soon as it is finalised (its
   * positions are the batch). Otherwise every finalised batch with
   * positions and no error is submitted before the consumer may take it:
   * by the thread that finalised it, after it let go of finalisation, so
   * that another thread can finalise and submit the next batch meanwhile.
   * No mutex; calls for different slots may run at once, a reset waits
   * for them to return. n positions; the code of each (0 = made) goes to
   * codes[j], its reason to msgs + j * msglen. A failure of the whole
   * batch returns its code with the message for the consumer in msg. */
  int (*submit)(stk__sink *k, int slot, int n, int32_t *codes, char *msgs, size_t msglen,
                char *msg, size_t msgsize);
  /* With submit, mutex held: a batch of the current epoch was finalised
   * and is about to be submitted (not those of the next epoch, started
   * ahead). NULL = nothing to do. */
  void (*finalised)(stk__sink *k);
  /* With submit, mutex held, by the submitting thread after a submission
   * in which some positions failed and the rest are kept: closes up the n
   * positions, dropping those with codes[j] != 0 and keeping the order.
   * A failure returns its code with the message for the consumer in msg. */
  int (*compact)(stk__sink *k, int slot, int n, const int32_t *codes, char *msg, size_t msgsize);
  /* Mutex held: the batch in `slot` is handed out; fills out->device and,
   * for device memory, out->labels_device and out->ready_event. */
  void (*lend)(stk__sink *k, int slot, stk_batch *out);
  /* No mutex, any thread: the calling thread waits until the batch lent
   * from `slot` is written. NULL = it is (STK_OK). */
  int (*wait)(stk__sink *k, int slot, char *msg, size_t msglen);
  /* No mutex, any thread: `stream` waits for the batch lent from `slot`
   * to be written; the calling thread does not. NULL = nothing to wait
   * for (STK_OK). */
  int (*wait_on)(stk__sink *k, int slot, void *stream, char *msg, size_t msglen);
  /* Mutex held: the consumer gives `slot` back, done with it once the work
   * queued so far on `stream` completes. NULL = done now (STK_OK). */
  int (*release)(stk__sink *k, int slot, void *stream, char *msg, size_t msglen);
  /* No mutex, the consumer, right after `slot` was lent into *out: MixUp
   * or CutMix (m) of its out->n images into memory of the sink's, with the
   * soft labels (one-hot values on and off, the options' mix_classes
   * columns); points out->data and out->mix_labels_device at them. NULL =
   * the sink's batches are host memory, which the loader mixes in place
   * (stk__mix_apply) after finalisation, in the submission step (after
   * submit, when the sink has one), before the batch is ready. */
  int (*mix)(stk__sink *k, int slot, const stk__mix *m, float on, float off, stk_batch *out,
             char *msg, size_t msglen);
  /* Mutex held: a reset dropped every unfinished batch. NULL = nothing. */
  void (*reset)(stk__sink *k);
  /* Mutex held: fills the sink's fields of o and adds its own memory to
   * o->host_bytes. NULL = nothing to add. */
  void (*stats)(stk__sink *k, stk_stats *o);
  /* No mutex: stk_loader_destroy, once no worker runs any more except
   * abandoned ones, which may still be inside produce or submit (so finish
   * must free nothing they use; the loader itself may be freed later).
   * NULL = nothing. */
  void (*finish)(stk__sink *k);
  /* Frees everything, also after a failed open or slot_open. No other
   * thread is left. */
  void (*close)(stk__sink *k);
} stk__sink_ops;

struct stk__sink {
  const stk__sink_ops *ops;
  void *impl; /* the implementation's state */
  /* The consumer's seconds inside next() so far, kept by the loader under
   * its mutex; the GPU sink chooses the engines' way from it (share.h). */
  double consumer_wait_s;
};

/* Opens the sink the options ask for: the GPU's for opt->device >= 0, the
 * CPU's otherwise. On failure returns the code with the reason in err; the
 * sink must still be closed (what was opened is freed there). */
int stk__sink_open(stk__sink *k, const stk__sink_config *c, char *err, size_t errlen);
/* Frees what the sink holds; a sink never opened (zeroed) is a no-op. */
void stk__sink_close(stk__sink *k);

/* The implementations' entry points (sink.c dispatches). */
int stk__sink_cpu_open(stk__sink *k, const stk__sink_config *c, char *err, size_t errlen);
int stk__sink_gpu_open(stk__sink *k, const stk__sink_config *c, char *err, size_t errlen);

#endif

/*
 * workers.h: the library's one thread pool. It knows nothing of the work:
 * an item is a function and its argument (`work`), and a function that
 * runs once it returned (`done`), as in libuv. The pool owns its threads:
 * their names, their CPUs when asked, their start and their end. The
 * folder scan, the index check, the cache's stat pass, stk_check and pack
 * fan out on it; the executor (loader.c) runs its workers on it.
 *
 * A thread that cannot start is left out, never an error by itself: the
 * pool runs with fewer, and with none runs submitted items in the caller.
 * Every thread start goes through STK__FAIL() (core/fault.h), so the tests
 * can refuse one.
 */
#ifndef STK_WORKERS_H
#define STK_WORKERS_H

typedef struct stk__workers stk__workers;

/* One item. The caller owns it (embedded where it likes) and keeps it
 * until it runs; the pool only links it into its queue, and reads it no
 * more once work starts, so work or done may free it. */
typedef struct stk__work {
  void (*work)(void *arg);
  void (*done)(void *arg); /* NULL: none; runs after work, on the same thread */
  void *arg;
  struct stk__work *next; /* the pool's */
} stk__work;

/* A pool of up to n threads named "<name>-<k>" (name cut to 10 bytes).
 * cpus, when not NULL, pins the k-th thread started to cpus[k % ncpus].
 * NULL only when out of memory. */
stk__workers *stk__workers_create(int n, const char *name, const int *cpus, int ncpus);

/* Threads in the pool now (started, not detached). */
int stk__workers_size(stk__workers *p);

/* Queues w to run work(arg), then done(arg), on a pool thread; in the
 * caller, at once, when the pool has no thread. */
void stk__workers_submit(stk__workers *p, stk__work *w, void (*work)(void *),
                         void (*done)(void *), void *arg);

/* Starts one more thread, which runs w first and then joins the others.
 * For long-lived items (the executor's workers, pack's decoders) that each
 * need a thread of their own. STK_OK, or STK_ENOMEM when the thread could
 * not start: then w does not run. */
int stk__workers_spawn(stk__workers *p, stk__work *w, void (*work)(void *),
                       void (*done)(void *), void *arg);

/* The thread running w leaves the pool: it is never joined, and once w's
 * work and done return it ends without touching the pool again, which may
 * be gone by then. For a thread stuck in a read that may never return.
 * 1 when w was running and its thread is detached, 0 otherwise. */
int stk__workers_detach(stk__workers *p, const stk__work *w);

/* Returns once the queue is empty and no item runs (detached ones aside). */
void stk__workers_wait(stk__workers *p);

/* Runs every queued item (none is lost), joins the threads and frees the
 * pool. Detached threads are left to end on their own. NULL is a no-op. */
void stk__workers_destroy(stk__workers *p);

/* Runs fn(arg) n times (at least once) at the same time, the caller being
 * one of them, on threads named after `name`, and returns when every copy
 * has returned. The copies that find no thread run after the others, so fn
 * is meant to share out its work itself (a claimed counter): then fewer
 * threads only mean less parallelism. */
void stk__workers_fanout(const char *name, int n, void (*fn)(void *), void *arg);

/* Starts a thread of its own, detached and named `name`, for fn(arg): the
 * bounded reader's helper (sources/bounded_read.c), which may block in a
 * read past the end of every owner, so that no pool could join it.
 * STK_OK or STK_ENOMEM. */
int stk__workers_detached(const char *name, void (*fn)(void *), void *arg);

#endif

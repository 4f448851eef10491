/* workers.c: the thread pool. See workers.h. */
#define _GNU_SOURCE /* pthread_setname_np, pthread_setaffinity_np */
#include "core/workers.h"

#include <pthread.h>
#include <sched.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "core/fault.h"
#include "stoker.h"

/* A thread's state, changed by compare-and-swap between the thread (after
 * an item returns) and stk__workers_detach, so that exactly one of them
 * decides whether the thread is still the pool's. */
enum { T_IDLE, T_RUNNING, T_DETACHED };

typedef struct thr {
  pthread_t id;
  stk__workers *p;
  stk__work *cur; /* the item it runs (p->mu) */
  atomic_int state;
  int cpu; /* -1: any */
  char name[16];
} thr;

struct stk__workers {
  pthread_mutex_t mu;
  pthread_cond_t work_cv; /* threads: an item was queued, or the pool closes */
  pthread_cond_t idle_cv; /* wait: an item finished, or a thread left */
  stk__work *head, *tail;
  thr **threads; /* the pool's, detached ones removed */
  int nthreads, cap;
  int running; /* items running on the pool's threads */
  int closing;
  int started; /* threads ever started: the next one's number */
  char name[11];
  int *cpus, ncpus;
};

/* w is not read once work starts: work or done may free it. */
static void run_item(stk__work *w) {
  void (*done)(void *) = w->done;
  void *arg = w->arg;
  w->work(arg);
  if (done) done(arg);
}

static void name_self(const char *name, int cpu) {
  if (name[0]) pthread_setname_np(pthread_self(), name);
  if (cpu >= 0 && cpu < CPU_SETSIZE) {
    cpu_set_t set;
    CPU_ZERO(&set);
    CPU_SET(cpu, &set);
    pthread_setaffinity_np(pthread_self(), sizeof set, &set); /* best effort */
  }
}

static void *thread_main(void *arg) {
  thr *t = arg;
  name_self(t->name, t->cpu);
  /* a spawned thread runs its item before it looks at the pool, which its
   * owner may already have left (detached) and destroyed */
  stk__work *w = t->cur;
  stk__workers *p = t->p;
  for (;;) {
    if (w) {
      run_item(w);
      int st = T_RUNNING;
      if (!atomic_compare_exchange_strong(&t->state, &st, T_IDLE)) {
        free(t); /* detached while it ran: the pool is not its own any more */
        return NULL;
      }
    }
    pthread_mutex_lock(&p->mu);
    if (w) {
      t->cur = NULL;
      if (--p->running == 0 && !p->head) pthread_cond_broadcast(&p->idle_cv);
    }
    while (!p->head && !p->closing) pthread_cond_wait(&p->work_cv, &p->mu);
    w = p->head;
    if (!w) break; /* closing, and nothing left to run */
    if (!(p->head = w->next)) p->tail = NULL;
    t->cur = w;
    atomic_store(&t->state, T_RUNNING);
    p->running++;
    pthread_mutex_unlock(&p->mu);
  }
  pthread_mutex_unlock(&p->mu);
  return NULL; /* joined and freed by stk__workers_destroy */
}

/* Starts a thread for the pool, running `first` when not NULL (mutex
 * held, or the pool not yet shared). STK_OK or STK_ENOMEM. */
static int start_thread(stk__workers *p, stk__work *first) {
  if (p->nthreads == p->cap) {
    int cap = p->cap ? p->cap * 2 : 4;
    thr **v = realloc(p->threads, (size_t)cap * sizeof *v);
    if (!v) return STK_ENOMEM;
    p->threads = v;
    p->cap = cap;
  }
  thr *t = calloc(1, sizeof *t);
  if (!t) return STK_ENOMEM;
  int k = p->started;
  t->p = p;
  t->cur = first;
  atomic_init(&t->state, first ? T_RUNNING : T_IDLE);
  t->cpu = p->ncpus > 0 ? p->cpus[k % p->ncpus] : -1;
  if (p->name[0]) snprintf(t->name, sizeof t->name, "%s-%d", p->name, k);
  if (STK__FAIL() || pthread_create(&t->id, NULL, thread_main, t) != 0) {
    free(t);
    return STK_ENOMEM;
  }
  p->started++;
  p->threads[p->nthreads++] = t;
  if (first) p->running++;
  return STK_OK;
}

stk__workers *stk__workers_create(int n, const char *name, const int *cpus, int ncpus) {
  stk__workers *p = calloc(1, sizeof *p);
  if (!p) return NULL;
  if (cpus && ncpus > 0) {
    if (!(p->cpus = malloc((size_t)ncpus * sizeof *p->cpus))) {
      free(p);
      return NULL;
    }
    memcpy(p->cpus, cpus, (size_t)ncpus * sizeof *p->cpus);
    p->ncpus = ncpus;
  }
  snprintf(p->name, sizeof p->name, "%s", name ? name : "");
  pthread_mutex_init(&p->mu, NULL);
  pthread_cond_init(&p->work_cv, NULL);
  pthread_cond_init(&p->idle_cv, NULL);
  pthread_mutex_lock(&p->mu);
  for (int i = 0; i < n; i++) start_thread(p, NULL); /* fewer is not an error */
  pthread_mutex_unlock(&p->mu);
  return p;
}

int stk__workers_size(stk__workers *p) {
  pthread_mutex_lock(&p->mu);
  int n = p->nthreads;
  pthread_mutex_unlock(&p->mu);
  return n;
}

static void fill(stk__work *w, void (*work)(void *), void (*done)(void *), void *arg) {
  w->work = work;
  w->done = done;
  w->arg = arg;
  w->next = NULL;
}

void stk__workers_submit(stk__workers *p, stk__work *w, void (*work)(void *),
                         void (*done)(void *), void *arg) {
  fill(w, work, done, arg);
  pthread_mutex_lock(&p->mu);
  if (p->nthreads == 0) {
    pthread_mutex_unlock(&p->mu);
    run_item(w);
    return;
  }
  if (p->tail)
    p->tail->next = w;
  else
    p->head = w;
  p->tail = w;
  pthread_cond_signal(&p->work_cv);
  pthread_mutex_unlock(&p->mu);
}

int stk__workers_spawn(stk__workers *p, stk__work *w, void (*work)(void *),
                       void (*done)(void *), void *arg) {
  fill(w, work, done, arg);
  pthread_mutex_lock(&p->mu);
  int rc = start_thread(p, w);
  pthread_mutex_unlock(&p->mu);
  return rc;
}

int stk__workers_detach(stk__workers *p, const stk__work *w) {
  pthread_mutex_lock(&p->mu);
  int found = 0;
  for (int i = 0; i < p->nthreads; i++) {
    thr *t = p->threads[i];
    if (t->cur != w) continue;
    pthread_t id = t->id; /* t is the thread's to free once the swap is won */
    int st = T_RUNNING;
    if (atomic_compare_exchange_strong(&t->state, &st, T_DETACHED)) {
      p->threads[i] = p->threads[--p->nthreads];
      p->running--;
      pthread_detach(id);
      pthread_cond_broadcast(&p->idle_cv);
      found = 1;
    }
    break;
  }
  pthread_mutex_unlock(&p->mu);
  return found;
}

/* Mutex held. Until the queue is empty and nothing runs; with no thread
 * left, the caller runs what is queued. */
static void drain_locked(stk__workers *p) {
  for (;;) {
    if (p->head && p->nthreads == 0) {
      stk__work *w = p->head;
      if (!(p->head = w->next)) p->tail = NULL;
      pthread_mutex_unlock(&p->mu);
      run_item(w);
      pthread_mutex_lock(&p->mu);
      continue;
    }
    if (!p->head && p->running == 0) return;
    pthread_cond_wait(&p->idle_cv, &p->mu);
  }
}

void stk__workers_wait(stk__workers *p) {
  pthread_mutex_lock(&p->mu);
  drain_locked(p);
  pthread_mutex_unlock(&p->mu);
}

void stk__workers_destroy(stk__workers *p) {
  if (!p) return;
  pthread_mutex_lock(&p->mu);
  drain_locked(p);
  p->closing = 1;
  pthread_cond_broadcast(&p->work_cv);
  pthread_mutex_unlock(&p->mu);
  /* nothing is queued or running: no thread can be detached any more */
  for (int i = 0; i < p->nthreads; i++) {
    pthread_join(p->threads[i]->id, NULL);
    free(p->threads[i]);
  }
  free(p->threads);
  free(p->cpus);
  pthread_cond_destroy(&p->work_cv);
  pthread_cond_destroy(&p->idle_cv);
  pthread_mutex_destroy(&p->mu);
  free(p);
}

void stk__workers_fanout(const char *name, int n, void (*fn)(void *), void *arg) {
  if (n < 1) n = 1;
  stk__work *w = n > 1 ? calloc((size_t)n - 1, sizeof *w) : NULL;
  stk__workers *p = w ? stk__workers_create(n - 1, name, NULL, 0) : NULL;
  if (!p) { /* out of memory: every copy in the caller, one after another */
    free(w);
    for (int i = 0; i < n; i++) fn(arg);
    return;
  }
  for (int i = 0; i < n - 1; i++) stk__workers_submit(p, &w[i], fn, NULL, arg);
  fn(arg);
  stk__workers_destroy(p);
  free(w);
}

typedef struct {
  void (*fn)(void *);
  void *arg;
  char name[16];
} lone;

static void *lone_main(void *arg) {
  lone c = *(lone *)arg;
  free(arg);
  name_self(c.name, -1);
  c.fn(c.arg);
  return NULL;
}

int stk__workers_detached(const char *name, void (*fn)(void *), void *arg) {
  lone *c = calloc(1, sizeof *c);
  if (!c) return STK_ENOMEM;
  c->fn = fn;
  c->arg = arg;
  snprintf(c->name, sizeof c->name, "%.15s", name ? name : "");
  pthread_t id;
  pthread_attr_t ta;
  pthread_attr_init(&ta);
  pthread_attr_setdetachstate(&ta, PTHREAD_CREATE_DETACHED); /* nobody waits for it */
  int e = STK__FAIL() || pthread_create(&id, &ta, lone_main, c) != 0;
  pthread_attr_destroy(&ta);
  if (e) {
    free(c);
    return STK_ENOMEM;
  }
  return STK_OK;
}

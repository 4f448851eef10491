/*
 * fault.h: fault injection for the tests. Built with STK_FAULT_INJECTION
 * (the sanitizer build of `make test` turns it on), the library's own
 * allocations on its hot paths and its file reads go through the STK__*
 * macros below, and a test makes one call in `one_in` fail at random
 * (allocations return NULL, reads fail with EIO) or makes the reads of
 * chosen files stall, as a hung network mount would. Without the macro
 * they are the plain calls: release builds carry nothing of this.
 */
#ifndef STK_FAULT_H
#define STK_FAULT_H

#include <stddef.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>
#include <sys/types.h>
#include <unistd.h>

#ifdef STK_FAULT_INJECTION
void *stk__fi_malloc(size_t n);
void *stk__fi_calloc(size_t n, size_t size);
void *stk__fi_realloc(void *p, size_t n);
char *stk__fi_strdup(const char *s);
/* read() of the file `path` (for the stall filter). */
ssize_t stk__fi_read(int fd, void *buf, size_t n, const char *path);
/* 1 when the next call should fail (a failure the caller makes itself). */
int stk__fi_fail(void);

/* The test side. one_in = 0 turns random failures off. */
void stk__fault_set(uint64_t seed, unsigned one_in);
/* Reads of files whose path contains `substr` (NULL = none) block until
 * stk__fault_unstall() or for at most `max_seconds`. */
void stk__fault_stall(const char *substr, double max_seconds);
void stk__fault_unstall(void);
/* Calls failed so far, and reads that stalled. */
uint64_t stk__fault_count(void);
uint64_t stk__fault_stalls(void);

#define STK__MALLOC(n) stk__fi_malloc(n)
#define STK__CALLOC(n, s) stk__fi_calloc((n), (s))
#define STK__REALLOC(p, n) stk__fi_realloc((p), (n))
#define STK__STRDUP(s) stk__fi_strdup(s)
#define STK__READ(fd, b, n, path) stk__fi_read((fd), (b), (n), (path))
#define STK__FAIL() stk__fi_fail()
#else
#define STK__MALLOC(n) malloc(n)
#define STK__CALLOC(n, s) calloc((n), (s))
#define STK__REALLOC(p, n) realloc((p), (n))
#define STK__STRDUP(s) strdup(s)
#define STK__READ(fd, b, n, path) ((void)(path), read((fd), (b), (n)))
#define STK__FAIL() 0
#endif

#endif

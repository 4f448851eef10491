/*
 * fuzz.h: what the fuzz targets share. Each target is one file defining
 * LLVMFuzzerTestOneInput; it links either with libFuzzer (make fuzz) or with
 * replay.c, a plain main that runs files through it (the ctest replays).
 */
#ifndef STK_FUZZ_H
#define STK_FUZZ_H

#include <stddef.h>
#include <stdint.h>

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

/* The decoder's pixel limit in the harnesses, 1 megapixel, as libjpeg-
 * turbo's own fuzzers cap it: a few bytes can claim a large image that is
 * then decoded in full from corrupt data, and nothing our code does depends
 * on the size beyond a few MCUs. (4 megapixels ran the JPEG target at a
 * third of the rate.) */
#define FUZZ_MAX_PIXELS (1u << 20)

/* A folder of this process's own, on tmpfs when there is one (/dev/shm),
 * removed with everything in it when the process exits. Never NULL: the
 * process aborts when it cannot make one. */
const char *fuzz_tmpdir(void);

/* Writes data[0..n) to path (created or replaced); aborts on failure, which
 * is the machine's fault, not the input's. */
void fuzz_write(const char *path, const void *data, size_t n);

/* Reads every byte of p[0..n), so that the sanitizers see a region that is
 * not all there; the result only keeps the reads from being optimised out. */
unsigned fuzz_touch(const uint8_t *p, size_t n);

/* With FUZZ_VERBOSE set in the environment, prints a line to stderr: what a
 * replay did with each input, for looking at what the seeds reach. */
void fuzz_note(const char *fmt, ...)
#if defined(__GNUC__)
    __attribute__((format(printf, 1, 2)))
#endif
    ;

/* Aborts with a message when cond is false: an invariant of the parser's
 * result that the input broke (a bug, as a crash is). */
#define FUZZ_CHECK(cond) fuzz_check((cond), #cond, __FILE__, __LINE__)
void fuzz_check(int cond, const char *what, const char *file, int line);

#endif

/*
 * markers.h: a scan of a JPEG's markers, up to its first scan, that reads
 * them the way libjpeg does. The GPU planner uses it to choose which files
 * nvJPEG decodes; it needs no GPU, so the tests and the fuzzer reach it.
 */
#ifndef STK_MARKERS_H
#define STK_MARKERS_H

#include <stddef.h>
#include <stdint.h>

/* What the JPEG markers say, read the way libjpeg reads them. */
typedef struct {
  int sof;        /* the frame marker (0xC0 baseline, 0xC1, 0xC2 progressive...), 0 if none */
  int comps;      /* components of the frame */
  int rgb;        /* three components stored as RGB, not YCbCr (libjpeg's rule) */
  int eoi;        /* an end-of-image marker follows the first scan */
} stk__jpeg_markers;

/* Scans d[0..n). 1 when the file has a start-of-image, a frame and a scan
 * header within bounds (jm filled in), 0 otherwise. Reads nothing outside
 * d[0..n). */
int stk__jpeg_scan(const uint8_t *d, size_t n, stk__jpeg_markers *jm);

#endif

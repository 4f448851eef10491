/*
 * markers.c: the JPEG marker scan (see markers.h), moved here from the GPU
 * planner so that both decode paths and the fuzzer share one copy.
 */
#include "codecs/markers.h"

#include <string.h>

int stk__jpeg_scan(const uint8_t *d, size_t n, stk__jpeg_markers *jm) {
  memset(jm, 0, sizeof *jm);
  if (n < 4 || d[0] != 0xFF || d[1] != 0xD8) return 0;
  int jfif = 0, adobe = 0, transform = -1, ids[3] = {0, 0, 0};
  size_t i = 2, sos = 0;
  while (i + 4 <= n) {
    if (d[i] != 0xFF) return 0;
    int m = d[i + 1];
    if (m == 0xFF) {
      i++;
      continue;
    }
    /* FF 00 is a stuffed zero, not a marker: libjpeg (next_marker) skips it
     * and the bytes after it to the next FF, where this scan would read a
     * length and land elsewhere; and an EOI before the scan ends the image
     * for libjpeg. Either file stays on the CPU path, which libjpeg decodes. */
    if (m == 0x00 || m == 0xD9) return 0;
    if (m == 0xD8 || m == 0x01 || (m >= 0xD0 && m <= 0xD7)) {
      i += 2;
      continue;
    }
    size_t len = (size_t)d[i + 2] << 8 | d[i + 3];
    if (len < 2 || i + 2 + len > n) return 0;
    const uint8_t *seg = d + i + 4;
    size_t sl = len - 2;
    /* jdmarker.c: an APP0 counts as JFIF only when it holds the whole
     * 14-byte JFIF header; a shorter one is ignored, as for Adobe's 12 */
    if (m == 0xE0 && sl >= 14 && !memcmp(seg, "JFIF", 5)) jfif = 1;
    if (m == 0xEE && sl >= 12 && !memcmp(seg, "Adobe", 5)) {
      adobe = 1;
      transform = seg[11];
    }
    if (m >= 0xC0 && m <= 0xCF && m != 0xC4 && m != 0xC8 && m != 0xCC && sl >= 6 && !jm->sof) {
      jm->sof = m;
      jm->comps = seg[5];
      for (int c = 0; c < 3 && c < jm->comps && 6 + 3 * (size_t)c < sl; c++) ids[c] = seg[6 + 3 * c];
    }
    if (m == 0xDA) {
      sos = i + 2 + len;
      break;
    }
    i += 2 + len;
  }
  if (!sos || !jm->sof) return 0;
  /* jdapimin.c: JFIF wins, then Adobe's transform flag, then component ids */
  if (jm->comps == 3 && !jfif)
    jm->rgb = adobe ? transform == 0 : (ids[0] == 'R' && ids[1] == 'G' && ids[2] == 'B');
  /* FF D9 cannot occur inside entropy-coded data: any one after the scan
   * header is the marker (the check the CPU decoder makes for truncation) */
  for (size_t k = n; k >= sos + 2; k--)
    if (d[k - 2] == 0xFF && d[k - 1] == 0xD9) {
      jm->eoi = 1;
      break;
    }
  return 1;
}

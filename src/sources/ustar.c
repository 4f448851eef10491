/* ustar.c: the tar format's 512-byte headers, read by the scan
 * (tar_scan.c) and written by the pack (tar_write.c). See ustar.h. Every
 * field is untrusted when read: lengths are checked against what is there. */
#define _POSIX_C_SOURCE 200809L
#include "sources/ustar.h"

#include <stdlib.h>
#include <string.h>

/* A numeric header field: octal digits (leading blanks, ending at a NUL or
 * blank), or GNU's base-256 form (first byte 0x80, then big-endian bytes),
 * which tar uses for sizes of 8 GiB and more. 0 on a malformed field. */
int stk__ustar_number(const unsigned char *f, size_t n, uint64_t *out) {
  uint64_t v = 0;
  if (f[0] & 0x80) {
    if (f[0] != 0x80) return 0; /* negative, or a form we do not know */
    for (size_t i = 1; i < n; i++) {
      if (v >> 55) return 0; /* would overflow 63 bits */
      v = v << 8 | f[i];
    }
    *out = v;
    return 1;
  }
  size_t i = 0;
  while (i < n && f[i] == ' ') i++;
  int digits = 0;
  for (; i < n && f[i] >= '0' && f[i] <= '7'; i++, digits++) {
    if (v >> 60) return 0;
    v = v << 3 | (uint64_t)(f[i] - '0');
  }
  if (i < n && f[i] != '\0' && f[i] != ' ') return 0;
  *out = v;
  return digits > 0 || i == n || f[i] == '\0';
}

/* The header checksum: the bytes summed with the checksum field read as
 * blanks. Some old writers summed signed chars: either form is accepted. */
int stk__ustar_checksum_ok(const unsigned char *h) {
  uint64_t want;
  if (!stk__ustar_number(h + 148, 8, &want)) return 0;
  uint64_t u = 0;
  int64_t s = 0;
  for (int i = 0; i < STK__TAR_BLOCK; i++) {
    unsigned char c = (i >= 148 && i < 156) ? ' ' : h[i];
    u += c;
    s += (signed char)c;
  }
  return want == u || (int64_t)want == s;
}

int stk__ustar_all_zero(const unsigned char *h) {
  for (int i = 0; i < STK__TAR_BLOCK; i++)
    if (h[i]) return 0;
  return 1;
}

/* Absolute names and names with a ".." component could point outside the
 * dataset if a tool extracted them; they are never samples. */
int stk__ustar_unsafe_name(const char *name) {
  if (name[0] == '/') return 1;
  for (const char *p = name; *p;) {
    const char *e = strchr(p, '/');
    size_t n = e ? (size_t)(e - p) : strlen(p);
    if (n == 2 && p[0] == '.' && p[1] == '.') return 1;
    p += n;
    if (*p == '/') p++;
  }
  return 0;
}

/* The member name of header h: POSIX ustar ("ustar\0") keeps a prefix;
 * GNU ("ustar  ") uses that space for other fields. */
void stk__ustar_name(const unsigned char *h, char out[260]) {
  size_t nl = strnlen((const char *)h, 100);
  size_t pl = 0;
  if (!memcmp(h + 257, "ustar\0", 6)) pl = strnlen((const char *)h + 345, 155);
  if (pl) {
    memcpy(out, h + 345, pl);
    out[pl] = '/';
    memcpy(out + pl + 1, h, nl);
    out[pl + 1 + nl] = '\0';
  } else {
    memcpy(out, h, nl);
    out[nl] = '\0';
  }
}

void stk__ustar_pax_clear(stk__ustar_pending *p) {
  free(p->name);
  memset(p, 0, sizeof *p);
}

/* Parses pax records "LEN key=value\n" in d[0..n). Every length is checked
 * against what is left, so a record claiming a huge length is refused
 * rather than followed. 0 when malformed. */
int stk__ustar_pax(const char *d, size_t n, stk__ustar_pending *p) {
  size_t i = 0;
  while (i < n) {
    if (d[i] == '\0') break; /* some writers pad the block with NULs */
    size_t len = 0, j = i;
    while (j < n && d[j] >= '0' && d[j] <= '9') {
      len = len * 10 + (size_t)(d[j] - '0');
      if (len > n) return 0;
      j++;
    }
    if (j == i || j >= n || d[j] != ' ' || len > n - i || len < (j - i) + 3 ||
        d[i + len - 1] != '\n')
      return 0;
    const char *kv = d + j + 1, *end = d + i + len - 1;
    const char *eq = memchr(kv, '=', (size_t)(end - kv));
    if (!eq) return 0;
    size_t klen = (size_t)(eq - kv), vlen = (size_t)(end - eq - 1);
    const char *v = eq + 1;
    if (klen == 4 && !memcmp(kv, "path", 4)) {
      if (vlen == 0 || memchr(v, '\0', vlen)) return 0;
      char *nm = malloc(vlen + 1);
      if (!nm) return 0;
      memcpy(nm, v, vlen);
      nm[vlen] = '\0';
      free(p->name);
      p->name = nm;
      p->name_from_pax = 1;
    } else if (klen == 4 && !memcmp(kv, "size", 4)) {
      uint64_t s = 0;
      if (vlen == 0 || vlen > 19) return 0;
      for (size_t q = 0; q < vlen; q++) {
        if (v[q] < '0' || v[q] > '9') return 0;
        s = s * 10 + (uint64_t)(v[q] - '0');
      }
      p->size = s;
      p->has_size = 1;
    }
    i += len;
  }
  return 1;
}

/* An octal field of n bytes: n-1 digits and a NUL. */
static void put_octal(unsigned char *f, size_t n, uint64_t v) {
  f[n - 1] = '\0';
  for (size_t i = n - 1; i-- > 0;) {
    f[i] = (unsigned char)('0' + (v & 7));
    v >>= 3;
  }
}

/* A POSIX ustar header of a regular file. mtime is 0 so that the same
 * input packs to the same bytes. name is shorter than 100 bytes. */
void stk__ustar_header(unsigned char h[STK__TAR_BLOCK], const char *name, uint64_t size) {
  memset(h, 0, STK__TAR_BLOCK);
  memcpy(h, name, strlen(name));
  put_octal(h + 100, 8, 0644);
  put_octal(h + 108, 8, 0);
  put_octal(h + 116, 8, 0);
  put_octal(h + 124, 12, size);
  put_octal(h + 136, 12, 0);
  h[156] = '0';
  memcpy(h + 257, "ustar", 6); /* with its NUL */
  memcpy(h + 263, "00", 2);
  put_octal(h + 329, 8, 0);
  put_octal(h + 337, 8, 0);
  memset(h + 148, ' ', 8);
  unsigned sum = 0;
  for (int i = 0; i < STK__TAR_BLOCK; i++) sum += h[i];
  put_octal(h + 148, 7, sum); /* six digits, a NUL, then the blank left there */
}


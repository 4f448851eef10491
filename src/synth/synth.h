/*
 * synth.h: a deterministic generator of ImageNet-like datasets, behind
 * `stoker synth`. The images are photo-like (sky and ground gradients, soft
 * shaded objects, multi-octave texture, sensor grain) so that JPEG sizes and
 * decode costs resemble real photographs, and every class has its own palette
 * and structure so that classes can be told apart.
 */
#ifndef STK_SYNTH_H
#define STK_SYNTH_H

#include <stddef.h>
#include <stdint.h>

/* Called after each written image. */
typedef void (*stk__synth_progress)(void *ctx, int64_t done, int64_t total);

/* Writes `images` JPEG files, spread round-robin over `classes` class folders
 * (1 <= classes <= images), as DIR/nCCCC/img_IIIIIIII.JPEG: class and image
 * numbers are zero-padded so that names sort, and the image number is the
 * image's index in the whole dataset. Sizes and encodings vary as in
 * ImageNet: mostly 500x375 or 375x500, three files in four at quality 96
 * 4:4:4, the rest 4:2:0 at quality 75..92, about 110 KB on average. Creates
 * DIR and its parents when missing. The same arguments give
 * byte-identical files. `cb` may be NULL. Returns STK_OK, or an STK_E* code
 * with a message in msg[0..msglen). */
int stk__synth_dataset(const char *dir, int64_t images, int classes, uint64_t seed,
                       stk__synth_progress cb, void *ctx, char *msg, size_t msglen);

/* Renders one photo-like w x h RGB8 image (w*h*3 bytes, interleaved),
 * determined by `seed` alone. Allocates nothing. */
void stk__synth_render(uint8_t *rgb, int w, int h, uint64_t seed);

#endif

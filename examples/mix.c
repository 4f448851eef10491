/* mix.c: MixUp and CutMix batches from C, with stoker.h alone.
 *
 * usage: mix DIR OUT [--flag value]...
 *
 * The flags are those of `stoker bench` (the library's options table, set
 * through stk_options_parse_flag), for example
 *
 *   mix data batches.bin --mixup-alpha 0.2 --cutmix-alpha 1.0 --size 224
 *
 * for torchvision's RandomChoice([MixUp(0.2), CutMix(1.0)]), or with
 * --mix-mode timm --mix-prob 0.8 --mix-label-smoothing 0.1 for timm's
 * Mixup. The loader mixes every batch itself: stk_batch.data holds the
 * mixed images and stk_batch.mix_labels the soft labels. Epoch 0 is
 * written to OUT, batch after batch: the images (n x 3 x size x size of the
 * dtype, as data holds them), then the soft labels (n x mix_classes
 * float32); one line per batch goes to stdout. */
#include <stdio.h>

#include "stoker.h"

int main(int argc, char **argv) {
  if (argc < 3 || (argc - 3) % 2) {
    fprintf(stderr, "usage: %s DIR OUT [--flag value]...\n", argv[0]);
    return 2;
  }
  stk_options opt;
  stk_options_init(&opt);
  opt.root = argv[1];
  opt.batch_size = 32;
  opt.threads = 2;
  char err[512];
  for (int i = 3; i < argc; i += 2)
    if (stk_options_parse_flag(&opt, argv[i], argv[i + 1], err, sizeof err) != STK_OK) {
      fprintf(stderr, "mix: %s\n", err);
      return 2;
    }
  if (!(opt.mix_mixup_alpha > 0) && !(opt.mix_cutmix_alpha > 0)) {
    fprintf(stderr, "mix: give --mixup-alpha or --cutmix-alpha\n");
    return 2;
  }

  stk_loader *loader;
  int rc = STK_LOADER_CREATE(&opt, &loader, err, sizeof err);
  if (rc != STK_OK) {
    fprintf(stderr, "mix: %s\n", err);
    return 1;
  }
  FILE *out = fopen(argv[2], "wb");
  if (!out) {
    perror(argv[2]);
    stk_loader_destroy(loader);
    return 1;
  }
  stk_batch b;
  while ((rc = stk_loader_next(loader, &b)) == STK_OK) {
    /* b.labels still holds the class indices; b.mix_labels the targets */
    size_t soft = (size_t)b.n * (size_t)b.mix_classes;
    int ok = fwrite(b.data, 1, b.nbytes, out) == b.nbytes &&
             fwrite(b.mix_labels, sizeof(float), soft, out) == soft;
    printf("batch %lld: %lld images, %s, lambda %.6f\n", (long long)b.batch_index,
           (long long)b.n, b.mix_kind == 1 ? "MixUp" : b.mix_kind == 2 ? "CutMix" : "not mixed",
           b.mix_lambda);
    stk_batch_release(loader, &b);
    if (!ok) {
      perror(argv[2]);
      rc = STK_EIO;
      break;
    }
  }
  if (fclose(out) != 0 && rc == STK_EEND) rc = STK_EIO;
  if (rc != STK_EEND) {
    if (rc != STK_EIO) fprintf(stderr, "mix: %s\n", stk_loader_error(loader));
    stk_loader_destroy(loader);
    return 1;
  }
  stk_loader_destroy(loader);
  return 0;
}

/* minimal.c: the smallest complete use of libstoker, as shown in the README.
 * usage: minimal DIR   (DIR/<class>/<image>) */
#include <stdio.h>

#include "stoker.h"

int main(int argc, char **argv) {
  if (argc != 2) {
    fprintf(stderr, "usage: %s DIR\n", argv[0]);
    return 2;
  }
  stk_options opt;
  stk_options_init(&opt);          /* torchvision's ImageNet defaults */
  opt.root = argv[1];
  opt.batch_size = 32;
  opt.threads = 2;

  stk_loader *loader;
  char err[512];
  int rc = STK_LOADER_CREATE(&opt, &loader, err, sizeof err);
  if (rc != STK_OK) {
    fprintf(stderr, "stoker: %s\n", err);
    return 1;
  }
  for (uint64_t epoch = 0; epoch < 2; epoch++) {
    stk_loader_set_epoch(loader, epoch);
    stk_batch b;
    long images = 0;
    while ((rc = stk_loader_next(loader, &b)) == STK_OK) {
      /* b.data: float32 [n,3,224,224]; b.labels: n int64 */
      images += (long)b.n;
      stk_batch_release(loader, &b); /* the slot may now be refilled */
    }
    if (rc != STK_EEND) {
      fprintf(stderr, "stoker: %s\n", stk_loader_error(loader));
      stk_loader_destroy(loader);
      return 1;
    }
    printf("epoch %llu: %ld images\n", (unsigned long long)epoch, images);
  }
  stk_loader_destroy(loader);
  return 0;
}

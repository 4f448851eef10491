/* tar.c: WebDataset tar shards. Not written yet: opening one fails. */
#include "sources/source.h"

int stk__tar_open(stk__source *s, const char *path, const stk_options *opt, char *msg,
                  size_t msglen) {
  return stk__fail(msg, msglen, STK_EFORMAT, "%s: tar shards are not supported by this build", path);
}

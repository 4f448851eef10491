/* tar.c: WebDataset tar shards. Not written yet: opening one fails. */
#include "sources/source.h"

int stk__tar_open(stk__source *s, const char *path, const stk_options *opt, char *msg,
                  size_t msglen) {
  return stk__fail(msg, msglen, STK_EFORMAT, "%s: tar shards are not supported by this build", path);
}

int stk__tar_pack(const stk_pack_options *o, const stk__dataset *ds, stk_pack_result *res,
                  char *err, size_t errlen) {
  return stk__fail(err, errlen, STK_EFORMAT, "tar shards are not supported by this build");
}

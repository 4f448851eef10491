/*
 * dataset.h: the list of samples a loader reads: a path and a label each,
 * plus the class names. Built once, when the loader is created, from a
 * folder (torchvision ImageFolder rules) or from a list file.
 */
#ifndef STK_DATASET_H
#define STK_DATASET_H

#include <stddef.h>
#include <stdint.h>

typedef struct {
  int64_t n;            /* samples */
  char *arena;          /* every path, NUL-terminated, back to back */
  size_t arena_len, arena_cap;
  size_t *path_off;     /* n offsets into arena */
  int32_t *labels;      /* n labels */
  int64_t cap;
  int nclasses;
  char **classes;       /* nclasses names */
  char *class_block;    /* when set, every name lies in it (freed once) */
} stk__dataset;

/* Names classes 0..n-1 by their numbers ("0", "1", ...), for a source that
 * has labels but no names. The names share one block, so a large label
 * costs two allocations rather than one per class. */
int stk__dataset_number_classes(stk__dataset *ds, int n);

/* ImageFolder: classes are the sorted sub-folder names of root; each class
 * holds the files below its folder (recursively, following links) whose
 * extension is a known image extension, case-insensitively, in the order of
 * Python's sorted(os.walk(...)) then sorted(file names). A class folder with
 * no image is an error, as in torchvision. Paths are stored in full. */
int stk__dataset_from_folder(stk__dataset *ds, const char *root, char *msg, size_t msglen);

/* List file: one sample per line, "path label" (label a non-negative
 * integer, separated by the last run of blanks so paths may hold spaces).
 * Blank lines and lines starting with '#' are ignored. Relative paths start
 * from `base` (NULL = the list file's folder). */
int stk__dataset_from_list(stk__dataset *ds, const char *list, const char *base, double wait_s,
                           char *msg, size_t msglen);
/* (wait_s: how long a list that is a named FIFO may wait for its writer's
 * first bytes; 0 = no limit. Regular files and pipes never wait.) */
/* (A list's classes are its label numbers: it sets nclasses to the largest
 * label + 1 and leaves classes NULL; stk__dataset_number_classes names them.) */

/* The same, from the list's bytes text[0..n) in memory; `list` names it in
 * messages and, when base is NULL, gives the folder relative paths start
 * from. */
int stk__dataset_from_list_buffer(stk__dataset *ds, const char *text, size_t n, const char *list,
                                  const char *base, char *msg, size_t msglen);

static inline const char *stk__dataset_path(const stk__dataset *ds, int64_t i) {
  return ds->arena + ds->path_off[i];
}

void stk__dataset_free(stk__dataset *ds);

/* Appends a sample (the name is copied). STK_OK or STK_ENOMEM. */
int stk__dataset_add(stk__dataset *ds, const char *name, int32_t label);

/* a + "/" + b (no doubled slash), malloc'd; NULL when out of memory. */
char *stk__path_join(const char *a, const char *b);

/* True when the name ends in an image extension torchvision accepts. */
int stk__has_image_extension(const char *name);

/* Fingerprint of a sample list: every name and label, in order. A cache
 * keeps the one of the list it was packed from. */
uint64_t stk__dataset_list_fp(const stk__dataset *ds);

#endif

/*
 * options.h: every field of stk_options in one table.
 *
 * STK__OPTIONS(X) lists the fields in declaration order, one
 *
 *   X(name, type, default, min, max, choices, cli_flag, py_keyword, doc)
 *
 * each. From it come stk_options_init()'s defaults, the range checks of
 * stk__options_validate(), the keyword parsing of the Python extension (and
 * its _stoker.options() introspection) and the flags of `stoker bench` with
 * their --help lines. Adding a field to stk_options means adding its row
 * here; tests/test_options.c fails when a field has no row.
 *
 *   type      INT (int), BOOL (int, 0 or 1), ENUM (an enum of stoker.h,
 *             named by `choices`), U64 (uint64_t), FLOAT (float, or an
 *             array of floats: every element has the same range), DOUBLE
 *             (one double: a FLOAT row to every front end, for values
 *             that must reach the library as typed, such as MixUp's alpha,
 *             whose draws Python reproduces), STR (a const char * path,
 *             copied by the loader)
 *   default   STK__V(v) or, for arrays, STK__V(v0, v1, ...)
 *   min, max  inclusive bounds; STK__INF for none (U64: 0 and STK__U64_MAX
 *             mean unchecked). Cross-field rules (resize_size 0 or >= size,
 *             scale[0] <= scale[1], ...) are written by hand in options.c;
 *             the source rule (exactly one of root and list_file) is
 *             stk_source_check(), shared with every front end.
 *   choices   ENUM: the names of the values 0, 1, ... separated by '|'
 *             ("train|eval"); NULL for the other types
 *   cli_flag  the flag of `stoker bench` ("--size"), or NULL
 *   py_keyword the keyword of the extension's Loader(), or NULL
 *   doc       one line for --help and _stoker.options()
 */
#ifndef STK_OPTIONS_H
#define STK_OPTIONS_H

#include <math.h>
#include <stddef.h>
#include <stdint.h>

#include "stoker.h"

#define STK__V(...) {__VA_ARGS__}
/* the most batches prepared ahead: the loader's arrays of slots are sized by it */
#define STK__PREFETCH_MAX 64
/* the longest side a GPU produces: the bound of `size` (every loader's output
 * must be one the GPU path can make: a tile of size x size pixels stays far
 * below 2**31 bytes) and of a device pack's max_side (its slot) */
#define STK__GPU_MAX_SIDE 8192
#define STK__INF ((double)INFINITY)
#define STK__STR_(x) #x
#define STK__STR(x) STK__STR_(x)

/* Defaults that more than one place holds: both tables (the loader's and
 * the pack's), and the code that runs without options (a decoder before
 * its limits are set, the GPU back end's config). Each is written here
 * once. */
#define STK__MAX_PIXELS_DEFAULT 178956970 /* Pillow's decompression-bomb threshold */
#define STK__MAX_FILE_BYTES_DEFAULT (256.0 * 1024 * 1024)
#define STK__MAX_DECODE_BYTES_DEFAULT (384.0 * 1024 * 1024)
#define STK__READ_TIMEOUT_DEFAULT 300 /* seconds */

/* The values that 0 stands for, in the options whose 0 is not "none" but
 * a value of the code's (STK__ZERO_MEANS below; the rows' doc lines and
 * _stoker.options()'s "zero" show them). */
#define STK__SHUFFLE_BUFFER_DEFAULT 1000 /* tar shards: samples */
#define STK__REMOTE_MEMORY_DEFAULT_MIB 256
#define STK__REMOTE_MEMORY_DEFAULT ((uint64_t)STK__REMOTE_MEMORY_DEFAULT_MIB << 20)
#define STK__TIMM_MMAX_DEFAULT 10 /* timm's full magnitude (_LEVEL_DENOM) */
/* Remote shards are read in parts of this size (the parts remote_memory
 * keeps, the scan's window). */
#define STK__REMOTE_PART_MIB 8
#define STK__REMOTE_PART_BYTES ((uint64_t)STK__REMOTE_PART_MIB << 20)
#define STK__INT_MAX 2147483647.0
#define STK__U64_MAX 18446744073709551616.0 /* 2**64: a double above every uint64_t */

/* clang-format off */
#define STK__OPTIONS(X) \
  X(root, STR, STK__V(0), 0, 0, NULL, NULL, "root", \
    "image folder (DIR/<class>/<image>), cache file or folder of tar shards") \
  X(list_file, STR, STK__V(0), 0, 0, NULL, "--list", "list_file", \
    "instead of a folder: a file of 'path label' lines (a pipe or FIFO too)") \
  X(list_base, STR, STK__V(0), 0, 0, NULL, "--list-base", "list_base", \
    "folder relative list paths start from (the list's folder; for a pipe, the current one)") \
  X(pipeline, ENUM, STK__V(STK_PIPELINE_TRAIN), 0, 1, "train|eval", "--pipeline", "pipeline", \
    "train: RandomResizedCrop + flip; eval: Resize + CenterCrop") \
  X(size, INT, STK__V(224), 1, STK__GPU_MAX_SIDE, NULL, "--size", "size", \
    "output side in pixels") \
  X(resize_size, INT, STK__V(0), 0, STK__INT_MAX, NULL, "--resize-size", "resize_size", \
    "eval: shorter side before the crop; 0 = size * 256 / 224") \
  X(scale, FLOAT, STK__V(0.08, 1.0), 0, 1, NULL, "--scale", "scale", \
    "train: crop area fraction, lo,hi") \
  X(ratio, FLOAT, STK__V(3.0 / 4.0, 4.0 / 3.0), 0, STK__INF, NULL, "--ratio", "ratio", \
    "train: crop aspect ratio, lo,hi") \
  X(flip_prob, FLOAT, STK__V(0.5), 0, 1, NULL, "--flip-prob", "flip_prob", \
    "train: horizontal flip probability") \
  X(mean, FLOAT, STK__V(0.485, 0.456, 0.406), -STK__INF, STK__INF, NULL, "--mean", "mean", \
    "normalisation mean per channel, on the 0..1 scale") \
  X(std, FLOAT, STK__V(0.229, 0.224, 0.225), -STK__INF, STK__INF, NULL, "--std", "std", \
    "normalisation std per channel (not 0)") \
  X(dct_scaling, INT, STK__V(-1), -1, 1, NULL, "--dct-scaling", "dct_scaling", \
    "JPEG DCT shrinking: -1 = on for train, off for eval") \
  X(dtype, ENUM, STK__V(STK_DTYPE_FLOAT32), 0, 3, "float32|float16|bfloat16|uint8", "--dtype", \
    "dtype", "element type of the output (uint8 is not normalised)") \
  X(layout, ENUM, STK__V(STK_LAYOUT_NCHW), 0, 1, "nchw|nhwc", "--layout", "layout", \
    "memory layout of the output") \
  X(batch_size, INT, STK__V(256), 1, 1048576, NULL, "--batch", "batch_size", \
    "images per batch") \
  X(drop_last, BOOL, STK__V(0), 0, 1, NULL, "--drop-last", "drop_last", \
    "drop the last, partial batch") \
  X(shuffle, INT, STK__V(-1), -1, 1, NULL, "--shuffle", "shuffle", \
    "-1 = shuffle for train, not for eval; 0 = no; 1 = yes") \
  X(seed, U64, STK__V(0), 0, STK__U64_MAX, NULL, "--seed", "seed", \
    "seed of shuffle and augmentation") \
  X(rank, INT, STK__V(0), 0, STK__INT_MAX, NULL, "--rank", "rank", \
    "this process's shard, below world_size") \
  X(world_size, INT, STK__V(1), 1, STK__INT_MAX, NULL, "--world-size", "world_size", \
    "number of shards") \
  X(shard_drop_last, BOOL, STK__V(0), 0, 1, NULL, "--shard-drop-last", "shard_drop_last", \
    "drop the tail instead of padding shards to equal length") \
  X(threads, INT, STK__V(0), 0, 1024, NULL, "--threads", "threads", \
    "worker threads, 0 = all CPUs") \
  X(prefetch, INT, STK__V(2), 1, STK__PREFETCH_MAX, NULL, "--prefetch", "prefetch", \
    "batches prepared ahead") \
  X(device, INT, STK__V(-1), -1, 1023, NULL, "--device", "device", \
    "CUDA device that decodes and augments (nvJPEG + kernels); -1 = CPU") \
  X(max_device_bytes, U64, STK__V(0), 0, STK__U64_MAX, NULL, "--max-device-bytes", \
    "max_device_bytes", "cap on the device memory of a GPU loader; 0 = none") \
  X(on_error, ENUM, STK__V(STK_ON_ERROR_RAISE), 0, 1, "raise|skip", "--on-error", "on_error", \
    "a bad file fails its batch (raise) or is left out (skip)") \
  X(max_pixels, U64, STK__V(STK__MAX_PIXELS_DEFAULT), 0, STK__U64_MAX, NULL, "--max-pixels", \
    "max_pixels", "width*height limit, checked before decoding; 0 = none") \
  X(max_file_bytes, U64, STK__V(STK__MAX_FILE_BYTES_DEFAULT), 0, STK__U64_MAX, NULL, \
    "--max-file-bytes", "max_file_bytes", "file size limit; 0 = none") \
  X(max_consecutive_failures, INT, STK__V(100), 0, STK__INT_MAX, NULL, \
    "--max-consecutive-failures", "max_consecutive_failures", \
    "under skip, failures in a row that end the epoch; 0 = none") \
  X(gpu_cpu_share, FLOAT, STK__V(-1), -1, 1, NULL, "--cpu-share", "gpu_cpu_share", \
    "GPU loaders: share of each batch decoded on the CPU, 0..1; -1 = adaptive") \
  X(index, INT, STK__V(-1), -1, 1, NULL, "--index", "index", \
    "image folders: keep the scan in an index file; -1 = auto, 0 = never, 1 = always") \
  X(index_dir, STR, STK__V(0), 0, 0, NULL, "--index-dir", "index_dir", \
    "folder of the index files (default $XDG_CACHE_HOME/stoker)") \
  X(shuffle_buffer, INT, STK__V(0), 0, STK__INT_MAX, NULL, "--shuffle-buffer", "shuffle_buffer", \
    "tar shards: samples in the shuffle buffer; 0 = " STK__STR(STK__SHUFFLE_BUFFER_DEFAULT) \
    ", 1 = shard order only") \
  X(allow_stale_cache, BOOL, STK__V(0), 0, 1, NULL, "--allow-stale-cache", "allow_stale_cache", \
    "use a cache whose source folder changed since it was packed") \
  X(read_timeout, FLOAT, STK__V(STK__READ_TIMEOUT_DEFAULT), 0, STK__INF, NULL, "--read-timeout", \
    "read_timeout", "seconds a file read (or a FIFO list's writer) may take before it fails; 0 = no limit") \
  X(auto_augment, ENUM, STK__V(0), 0, 5, "none|ta_wide|ra|imagenet|timm|augmix", "--auto-augment", \
    "auto_augment", "train: TrivialAugmentWide, RandAugment, AutoAugment(IMAGENET) or timm's " \
    "RandAugment (the timm_ options) after the flip") \
  X(ra_num_ops, INT, STK__V(2), 0, 16, NULL, "--ra-num-ops", "ra_num_ops", \
    "RandAugment (torchvision's or timm's n): ops per image") \
  X(ra_magnitude, INT, STK__V(9), 0, 255, NULL, "--ra-magnitude", "ra_magnitude", \
    "RandAugment: magnitude bin, below magnitude_bins") \
  X(magnitude_bins, INT, STK__V(31), 2, 256, NULL, "--magnitude-bins", "magnitude_bins", \
    "TrivialAugmentWide and RandAugment: magnitude bins") \
  X(aug_interpolation, ENUM, STK__V(0), 0, 3, "nearest|bilinear|bicubic|random", \
    "--aug-interpolation", "aug_interpolation", \
    "the policies' warps; bicubic is PIL's; random: bilinear or bicubic per warp (timm)") \
  X(aug_fill, FLOAT, STK__V(-1, -1, -1), -1, 255, NULL, "--aug-fill", "aug_fill", \
    "the warps' fill per channel, 0..255; -1 = none (zeros, torchvision's fill=None)") \
  X(vflip_prob, FLOAT, STK__V(0), 0, 1, NULL, "--vflip-prob", "vflip_prob", \
    "train: vertical flip probability") \
  X(color_jitter, FLOAT, STK__V(0, 0, 0, 0), 0, STK__INF, NULL, "--color-jitter", "color_jitter", \
    "train: ColorJitter brightness,contrast,saturation,hue (hue <= 0.5; 0 = off)") \
  X(jitter_prob, FLOAT, STK__V(1), 0, 1, NULL, "--jitter-prob", "jitter_prob", \
    "train: probability of the colour jitter (RandomApply)") \
  X(grayscale_prob, FLOAT, STK__V(0), 0, 1, NULL, "--grayscale-prob", "grayscale_prob", \
    "train: RandomGrayscale probability") \
  X(blur_kernel, INT, STK__V(0), 0, 255, NULL, "--blur-kernel", "blur_kernel", \
    "train: GaussianBlur kernel side (odd); 0 = off") \
  X(blur_sigma, FLOAT, STK__V(0.1, 2.0), 0, STK__INF, NULL, "--blur-sigma", "blur_sigma", \
    "train: GaussianBlur sigma range lo,hi") \
  X(blur_prob, FLOAT, STK__V(1), 0, 1, NULL, "--blur-prob", "blur_prob", \
    "train: probability of the blur (RandomApply)") \
  X(erase_prob, FLOAT, STK__V(0), 0, 1, NULL, "--erase-prob", "erase_prob", \
    "train: RandomErasing probability, after normalisation") \
  X(erase_scale, FLOAT, STK__V(0.02, 0.33), 0, 1, NULL, "--erase-scale", "erase_scale", \
    "train: RandomErasing area fraction lo,hi") \
  X(erase_ratio, FLOAT, STK__V(0.3, 3.3), 0, STK__INF, NULL, "--erase-ratio", "erase_ratio", \
    "train: RandomErasing aspect ratio lo,hi") \
  X(erase_value, FLOAT, STK__V(0, 0, 0), -STK__INF, STK__INF, NULL, "--erase-value", \
    "erase_value", "train: RandomErasing value per channel (normalised)") \
  X(erase_random, BOOL, STK__V(0), 0, 1, NULL, "--erase-random", "erase_random", \
    "train: RandomErasing value='random' (standard normal per element)") \
  X(interpolation, ENUM, STK__V(STK_INTERPOLATION_BILINEAR), 0, 1, "bilinear|bicubic", \
    "--interpolation", "interpolation", \
    "the train crop's and the eval resize's filter: Pillow's antialiased bilinear or bicubic") \
  X(ra_reps, INT, STK__V(0), 0, 64, NULL, "--ra-reps", "ra_reps", \
    "repeated augmentation: RASampler's order, each sample reps times; 0 = off") \
  X(max_decode_bytes, U64, STK__V(STK__MAX_DECODE_BYTES_DEFAULT), 0, STK__U64_MAX, NULL, \
    "--max-decode-bytes", "max_decode_bytes", \
    "memory the loader's decodes take together, shared by its threads (pixels, libjpeg's " \
    "buffers, PNG chunks); 0 = none") \
  X(max_skipped_fraction, FLOAT, STK__V(0.1), 0, 1, NULL, "--max-skipped-fraction", \
    "max_skipped_fraction", "under skip, the share of an epoch that may fail before it raises") \
  X(verify, BOOL, STK__V(0), 0, 1, NULL, "--verify", "verify", \
    "caches: check each image's checksum as it is read") \
  X(timm_magnitude, FLOAT, STK__V(10), 0, 1000, NULL, "--timm-magnitude", "timm_magnitude", \
    "timm's RandAugment: magnitude m (rand-m9: 9; timm's scale, 10 = full)") \
  X(timm_mstd, FLOAT, STK__V(0), 0, STK__INF, NULL, "--timm-mstd", "timm_mstd", \
    "timm's RandAugment: magnitude noise std (mstd); above 100: uniform in [0, m]") \
  X(timm_mmax, INT, STK__V(0), 0, 1000, NULL, "--timm-mmax", "timm_mmax", \
    "timm's RandAugment: magnitude upper bound (mmax); 0 = " STK__STR(STK__TIMM_MMAX_DEFAULT)) \
  X(timm_increasing, BOOL, STK__V(0), 0, 1, NULL, "--timm-increasing", "timm_increasing", \
    "timm's RandAugment: the increasing ops (inc1)") \
  X(timm_prob, FLOAT, STK__V(0.5), 0, 1, NULL, "--timm-prob", "timm_prob", \
    "timm's RandAugment: probability of each drawn op (p)") \
  X(timm_translate_pct, FLOAT, STK__V(0.45), 0, 10, NULL, "--timm-translate-pct", \
    "timm_translate_pct", "timm's RandAugment: TranslateXRel/YRel's range (hparams' translate_pct)") \
  X(augmix_severity, INT, STK__V(3), 1, 10, NULL, "--augmix-severity", "augmix_severity", \
    "AugMix: the magnitude bins its ops draw from (severity)") \
  X(augmix_width, INT, STK__V(3), 1, 4, NULL, "--augmix-width", "augmix_width", \
    "AugMix: chains mixed (mixture_width)") \
  X(augmix_depth, INT, STK__V(-1), -1, 4, NULL, "--augmix-depth", "augmix_depth", \
    "AugMix: ops per chain (chain_depth); -1 or 0 = 1..3 at random") \
  X(augmix_alpha, FLOAT, STK__V(1), 0, STK__INF, NULL, "--augmix-alpha", "augmix_alpha", \
    "AugMix: the Dirichlet and Beta parameter (alpha)") \
  X(augmix_all_ops, BOOL, STK__V(1), 0, 1, NULL, "--augmix-all-ops", "augmix_all_ops", \
    "AugMix: also Brightness, Color, Contrast and Sharpness (all_ops)") \
  X(cache_dir, STR, STK__V(0), 0, 0, NULL, "--cache-dir", "cache_dir", \
    "remote shards: keep a local copy of each shard read in this folder") \
  X(cache_bytes, U64, STK__V(0), 0, STK__U64_MAX, NULL, "--cache-bytes", "cache_bytes", \
    "remote shards: bound on the local copies; 0 = half the free space") \
  X(remote_memory, U64, STK__V(0), 0, STK__U64_MAX, NULL, "--remote-memory", "remote_memory", \
    "remote shards: bytes of " STK__STR(STK__REMOTE_PART_MIB) " MiB parts kept for later reads; 0 = " \
    STK__STR(STK__REMOTE_MEMORY_DEFAULT_MIB) " MiB, or 1/32 of the memory when more (to 4 GiB)") \
  X(erase_count, INT, STK__V(1), 1, 4, NULL, "--erase-count", "erase_count", \
    "train: RandomErasing boxes, 1 to erase_count at random (timm's max_count)") \
  X(erase_per_channel, BOOL, STK__V(0), 0, 1, NULL, "--erase-per-channel", "erase_per_channel", \
    "train: RandomErasing one standard normal per channel and box (timm's mode 'rand')") \
  X(mix_mixup_alpha, DOUBLE, STK__V(0), 0, STK__INF, NULL, "--mixup-alpha", "mix_mixup_alpha", \
    "train: MixUp of each batch, lambda ~ Beta(alpha, alpha); 0 = off") \
  X(mix_cutmix_alpha, DOUBLE, STK__V(0), 0, STK__INF, NULL, "--cutmix-alpha", \
    "mix_cutmix_alpha", "train: CutMix of each batch, lambda ~ Beta(alpha, alpha); 0 = off") \
  X(mix_mode, ENUM, STK__V(STK_MIX_TORCHVISION), 0, 1, "torchvision|timm", "--mix-mode", \
    "mix_mode", "MixUp/CutMix as torchvision v2 (pairs i, i - 1) or timm's Mixup (i, n - 1 - i)") \
  X(mix_prob, DOUBLE, STK__V(1), 0, 1, NULL, "--mix-prob", "mix_prob", \
    "timm mix mode: the chance that a batch is mixed") \
  X(mix_switch_prob, DOUBLE, STK__V(0.5), 0, 1, NULL, "--mix-switch-prob", "mix_switch_prob", \
    "timm mix mode: with both alphas on, the chance of CutMix") \
  X(mix_correct_lam, BOOL, STK__V(1), 0, 1, NULL, "--mix-correct-lam", "mix_correct_lam", \
    "timm mix mode: CutMix's lambda from the clipped box's area") \
  X(mix_label_smoothing, DOUBLE, STK__V(0), 0, 1, NULL, "--mix-label-smoothing", \
    "mix_label_smoothing", "MixUp/CutMix soft labels' smoothing (off = eps / classes)") \
  X(mix_classes, INT, STK__V(0), 0, STK__INT_MAX, NULL, "--mix-classes", "mix_classes", \
    "MixUp/CutMix soft-label columns; 0 = the source's classes") \
  X(weights_file, STR, STK__V(0), 0, 0, NULL, "--weights", "weights_file", \
    "weighted sampling with replacement: a file of one weight a sample, in sample order") \
  X(stream_first_epoch, BOOL, STK__V(0), 0, 1, NULL, "--stream-first-epoch", \
    "stream_first_epoch", \
    "remote shards without an index: 1 = stream the first epoch, indexing as it reads (its length an estimate); 0 = scan all at open")
/* The fields of stk_pack_options, in declaration order, as STK__OPTIONS
 * with one more column before doc:
 *
 *   X(name, type, default, min, max, choices, cli_flag, py_keyword, only, doc)
 *
 *   only      "cache" or "tar" when the option applies to that format only
 *             (`stoker pack` refuses it with the other), or NULL
 *
 * From it come stk_pack_options_init()'s defaults, stk_pack()'s range
 * checks, the flags and --help lines of `stoker pack` and the keywords of
 * the extension's pack(). The callbacks (progress, bad_file, user,
 * estimate) have no row. The command line names the format with --cache
 * and --tar, and the source and output by position. */
#define STK__PACK_OPTIONS(X) \
  X(root, STR, STK__V(0), 0, 0, NULL, NULL, "source", NULL, \
    "the image folder to pack (SRC/<class>/<image>)") \
  X(list_file, STR, STK__V(0), 0, 0, NULL, "--list", "list_file", NULL, \
    "instead of a folder: a file of 'path label' lines (a pipe or FIFO too)") \
  X(list_base, STR, STK__V(0), 0, 0, NULL, "--list-base", "list_base", NULL, \
    "folder relative list paths start from (the list's folder; for a pipe, the current one)") \
  X(output, STR, STK__V(0), 0, 0, NULL, NULL, "output", NULL, \
    "the cache file, or the folder of tar shards, to write") \
  X(format, ENUM, STK__V(STK_PACK_CACHE), 0, 1, "cache|tar", NULL, "format", NULL, \
    "a pre-decoded cache file or WebDataset tar shards") \
  X(encoding, ENUM, STK__V(STK_CACHE_RAW), 0, 1, "raw|jpeg", "--encoding", "encoding", "cache", \
    "cache: raw RGB8 pixels, or re-encoded JPEG") \
  X(max_side, INT, STK__V(512), 0, 65500, NULL, "--max-side", "max_side", "cache", \
    "cache: bound the longer side to N pixels (the most a JPEG holds); 0 = keep") \
  X(quality, INT, STK__V(90), 1, 100, NULL, "--quality", "quality", "cache", \
    "cache, jpeg: encoder quality") \
  X(shard_bytes, U64, STK__V(1024.0 * 1024 * 1024), 1, STK__U64_MAX, NULL, "--shard-size", \
    "shard_bytes", "tar", "tar: close a shard at this size; K, M, G suffixes") \
  X(threads, INT, STK__V(0), 0, 1024, NULL, "--threads", "threads", NULL, \
    "worker threads, 0 = all CPUs") \
  X(max_pixels, U64, STK__V(STK__MAX_PIXELS_DEFAULT), 0, STK__U64_MAX, NULL, "--max-pixels", \
    "max_pixels", NULL, "leave out images over N pixels; 0 = no limit") \
  X(max_file_bytes, U64, STK__V(STK__MAX_FILE_BYTES_DEFAULT), 0, STK__U64_MAX, NULL, \
    "--max-file-bytes", "max_file_bytes", NULL, "leave out files over this size; 0 = no limit") \
  X(check, BOOL, STK__V(0), 0, 1, NULL, "--check", "check", "tar", \
    "tar: decode every image in full, as --cache does, and leave out the ones that fail " \
    "(without it only each file's header is read: damage past it is packed)") \
  X(read_timeout, FLOAT, STK__V(STK__READ_TIMEOUT_DEFAULT), 0, STK__INF, NULL, "--read-timeout", \
    "read_timeout", NULL, \
    "seconds a file read (or a FIFO or pipe list) may take before the file is left out; " \
    "0 = no limit") \
  X(device, INT, STK__V(-1), -1, 1023, NULL, "--device", "device", "cache", \
    "cache: decode (nvJPEG) and resize on CUDA device N, then write; -1 = the CPU") \
  X(plain_chroma, BOOL, STK__V(0), 0, 1, NULL, "--plain-chroma", "plain_chroma", "cache", \
    "cache, --device: the engines' plain chroma upsampling: up to 2.3x faster, but some " \
    "values more than 1 level from the CPU pack's (docs/storage.md)") \
  X(max_decode_bytes, U64, STK__V(STK__MAX_DECODE_BYTES_DEFAULT), 0, STK__U64_MAX, NULL, \
    "--max-decode-bytes", "max_decode_bytes", NULL, \
    "memory the pack's decodes take together, shared by its threads (a larger one waits to " \
    "run alone); 0 = none")
/* The loader options whose 0 is not "none" but a value of the code's,
 * X(name, value): the code reads these values, the rows' doc lines name
 * them, and _stoker.options() gives them as "zero". */
#define STK__ZERO_MEANS(X) \
  X(shuffle_buffer, STK__SHUFFLE_BUFFER_DEFAULT) \
  X(remote_memory, STK__REMOTE_MEMORY_DEFAULT) \
  X(timm_mmax, STK__TIMM_MMAX_DEFAULT)
/* clang-format on */

typedef enum {
  STK__OPT_INT,
  STK__OPT_BOOL,
  STK__OPT_ENUM,
  STK__OPT_U64,
  STK__OPT_FLOAT,
  STK__OPT_STR,
} stk__opt_type;
/* DOUBLE rows are FLOAT rows whose one element is a double (the row's size
 * says which): every switch over the types reads them through
 * stk__option_get_float. */
#define STK__OPT_DOUBLE STK__OPT_FLOAT

/* One row of the table, with where its field lies in stk_options. */
typedef struct {
  const char *name;
  stk__opt_type type;
  size_t offset, size;
  int count;          /* elements: 1, or the length of a float array */
  double def[4];      /* default of each element */
  double min, max;
  const char *choices; /* ENUM: "a|b|c" */
  const char *cli;
  const char *py;
  const char *only;    /* pack: "cache" or "tar", or NULL */
  const char *doc;
} stk__option;

extern const stk__option stk__options[];
extern const int stk__num_options;
extern const stk__option stk__pack_options[];
extern const int stk__num_pack_options;

/* "int", "bool", "enum", "uint64", "float", "str". */
const char *stk__option_type_name(stk__opt_type t);

/* The row of a field, a CLI flag or a Python keyword; NULL if none. */
const stk__option *stk__option_by_name(const char *name);
const stk__option *stk__option_by_cli(const char *flag);
const stk__option *stk__option_by_py(const char *keyword);
/* A flag's or a keyword's row in the table of stk_pack_options. */
const stk__option *stk__pack_option_by_cli(const char *flag);
const stk__option *stk__pack_option_by_py(const char *keyword);

/* A loader option's row of STK__ZERO_MEANS: 1 and the value its 0 stands
 * for in *v, or 0 when it has none. */
int stk__option_zero(const stk__option *d, double *v);

/* ENUM: the value named `name`, or -1. */
int stk__option_choice(const stk__option *d, const char *name);
/* ENUM: the name of value v into buf ("" when out of range). */
void stk__option_choice_name(const stk__option *d, int v, char *buf, size_t len);

/* Typed access to a field (no checks beyond the type) of the struct the
 * row belongs to: stk_options for a row of stk__options, stk_pack_options
 * for one of stk__pack_options. INT, BOOL and ENUM fields are read and
 * written as int; FLOAT element k (a float, or a DOUBLE row's double). */
long long stk__option_get_int(const void *o, const stk__option *d);
void stk__option_set_int(void *o, const stk__option *d, long long v);
uint64_t stk__option_get_u64(const void *o, const stk__option *d);
void stk__option_set_u64(void *o, const stk__option *d, uint64_t v);
double stk__option_get_float(const void *o, const stk__option *d, int k);
void stk__option_set_float(void *o, const stk__option *d, int k, double v);
void stk__option_set_str(void *o, const stk__option *d, const char *v);

/* Is v (an INT/BOOL/ENUM value, or a FLOAT element) inside the row's
 * range? If not, returns STK_EINVAL with "<name> must be ..., got v" in err. */
int stk__option_check_int(const stk__option *d, long long v, char *err, size_t errlen);
int stk__option_check_float(const stk__option *d, int k, double v, char *err, size_t errlen);
int stk__option_check_u64(const stk__option *d, uint64_t v, char *err, size_t errlen);

/* Parses a text value (a CLI argument) into the field, range included:
 * INT an integer; BOOL 0/1/true/false/yes/no; ENUM one of the choices; U64
 * an integer with an optional K/M/G/T suffix (powers of 1024); FLOAT
 * `count` numbers separated by commas; STR the text itself (not copied:
 * it must outlive the options). STK_OK or STK_EINVAL with a message. */
int stk__option_parse(void *o, const stk__option *d, const char *text, char *err,
                      size_t errlen);

/* An unsigned size: digits with an optional K, M, G or T suffix (powers of
 * 1024; "1G" = 1073741824, "256M", "512k"), or an optional trailing B.
 * Returns 0 or -1 when malformed or over 2**64 - 1. */
int stk__parse_size(const char *text, uint64_t *out);

/* Every range of the table, then the cross-field rules. STK_OK or
 * STK_EINVAL with the reason in err. */
int stk__options_validate(const stk_options *o, char *err, size_t errlen);
/* The caller's options (of its header's struct_size, which may be older and
 * shorter) into a full struct o: the fields it lacks keep their defaults.
 * STK_EVERSION when struct_size is 0 or larger than this library's. */
int stk__options_adopt(const stk_options *opt, stk_options *o, char *err, size_t errlen);
/* The same for stk_pack_options (the source rule, output set, the ranges). */
int stk__pack_options_validate(const stk_pack_options *o, char *err, size_t errlen);

#endif

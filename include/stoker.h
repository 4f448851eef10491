/*
 * stoker.h: the one public header of libstoker.
 *
 * libstoker turns a folder of images (or a list file) into batches of
 * decoded, augmented, normalised training tensors, in memory that the library
 * owns and lends to the caller. A loader is built once from stk_options; every
 * buffer it will ever use is sized then. stk_loader_next() hands out batches in
 * a deterministic order; stk_batch_release() gives a batch's slot back.
 *
 * Errors
 * ------
 * Every function that can fail returns an int: STK_OK (0) or a negative
 * STK_E* code. stk_strerror() names a code. A loader also keeps a message
 * that names the function, the file and the reason for the last failure;
 * stk_loader_error() returns it. Creating a loader reports its error through
 * the optional `err` buffer of stk_loader_create(), because there is no loader
 * yet to hold it.
 *
 * Ownership rules
 * ---------------
 *  1. stk_loader_create() allocates a loader; only stk_loader_destroy() frees it.
 *     The options struct and every string it points to are copied during
 *     create: the caller may free them as soon as create returns.
 *  2. A batch filled by stk_loader_next() points into one of the loader's
 *     batch slots. The caller owns that slot until it passes the batch to
 *     stk_batch_release(); the library never writes into a slot that the caller
 *     still owns. A caller may hold several batches at once, up to all
 *     stk_loader_num_slots() of them; while it holds every slot the loader
 *     has none to fill, so asking for another returns STK_EBUSY instead of
 *     waiting forever.
 *  3. Every pointer inside a stk_batch (data, labels, indices) stays valid
 *     until that batch is released, and no longer.
 *  4. Strings returned by stk_loader_error(), stk_loader_skipped() and
 *     stk_loader_class_name() belong to the loader. They stay valid until the
 *     next call on the same loader from the same thread (error), or until the
 *     loader is destroyed (skipped list, class names).
 *  5. stk_loader_destroy() may be called at any time, also mid-epoch with
 *     batches still held: it stops and joins every worker thread, then frees
 *     all slots. Pointers from unreleased batches are invalid afterwards.
 *     It returns within about half a second whatever the workers do: a
 *     worker still inside a file read (a hung mount) or a long decode by
 *     then is detached instead of joined; it owns the loader's memory from
 *     then on (it writes nothing the caller can see) and frees it, its file
 *     descriptor included, when it leaves the read.
 *  6. One loader is used by one consumer thread at a time. The exception is
 *     stk_batch_release(), which may be called from any thread, also while
 *     the consumer waits in stk_loader_next() (a framework frees tensors on
 *     its own threads). Different loaders are independent.
 *
 * Versioning
 * ----------
 * Call stk_loader_create() through the STK_LOADER_CREATE macro, or pass
 * STK_VERSION yourself: the library refuses a header whose major version
 * differs from its own (while the major version is 0, whose minor version
 * differs: the structs may still change between them), and refuses an
 * options struct larger than it knows.
 */
#ifndef STOKER_H
#define STOKER_H

#include <stddef.h>
#include <stdint.h>

#ifdef __cplusplus
extern "C" {
#endif

#define STK_VERSION_MAJOR 0
#define STK_VERSION_MINOR 3
#define STK_VERSION_PATCH 0
#define STK_VERSION (STK_VERSION_MAJOR * 10000 + STK_VERSION_MINOR * 100 + STK_VERSION_PATCH)

#if defined(__GNUC__)
#define STK_API __attribute__((visibility("default")))
#else
#define STK_API
#endif

/* ---- error codes ------------------------------------------------------- */
enum {
  STK_OK = 0,
  STK_EINVAL = -1,    /* bad argument or option */
  STK_ENOMEM = -2,    /* out of memory */
  STK_EIO = -3,       /* a file or folder could not be read */
  STK_EDECODE = -4,   /* corrupt, truncated or unsupported image data */
  STK_ELIMIT = -5,    /* a limit was exceeded (pixels, file size) */
  STK_EFORMAT = -6,   /* the content is no image format this build decodes */
  STK_EEND = -7,      /* the epoch has no more batches */
  STK_ESTATE = -8,    /* the loader was poisoned by an earlier fatal error */
  STK_EVERSION = -9,  /* the header and the library disagree */
  STK_EBUSY = -10,    /* every batch slot is held by the caller */
  STK_EEMPTY = -11,   /* the dataset has no images */
  STK_ETOOMANY = -12, /* too many consecutive files failed under on_error=skip */
  STK_ENODEV = -13,   /* a GPU was asked for and none can be used */
  STK_ECUDA = -14,    /* the CUDA driver or nvJPEG reported an error */
  STK_ESTALE = -15,   /* a cache no longer matches the folder it was packed from */
  STK_ETIMEDOUT = -16, /* stk_loader_next_timed(): no batch within the time given */
  STK_ECANCELED = -17, /* stk_pack(): the caller's cancel callback stopped it */
};

/* Static string naming an error code. Never NULL. */
STK_API const char *stk_strerror(int code);

/* ---- enums -------------------------------------------------------------- */
typedef enum { STK_PIPELINE_TRAIN = 0, STK_PIPELINE_EVAL = 1 } stk_pipeline;

/* Element type of the output tensor. STK_DTYPE_UINT8 writes raw 0..255 RGB
 * values: it is not normalised (mean/std are ignored). */
typedef enum {
  STK_DTYPE_FLOAT32 = 0,
  STK_DTYPE_FLOAT16 = 1,
  STK_DTYPE_BFLOAT16 = 2,
  STK_DTYPE_UINT8 = 3,
} stk_dtype;

typedef enum { STK_LAYOUT_NCHW = 0, STK_LAYOUT_NHWC = 1 } stk_layout;

typedef enum { STK_ON_ERROR_RAISE = 0, STK_ON_ERROR_SKIP = 1 } stk_on_error;

/* Resampling filters (stk_options.interpolation). */
typedef enum { STK_INTERPOLATION_BILINEAR = 0, STK_INTERPOLATION_BICUBIC = 1 } stk_interpolation;

/* MixUp/CutMix semantics (stk_options.mix_mode). */
typedef enum { STK_MIX_TORCHVISION = 0, STK_MIX_TIMM = 1 } stk_mix_mode;

/* ---- options ------------------------------------------------------------ */
/* Fill with stk_options_init(), then change what you need. The defaults are
 * those of torchvision's ImageNet recipe. */
typedef struct stk_options {
  size_t struct_size;        /* set by stk_options_init(); do not change */

  /* source: exactly one of root / list_file */
  const char *root;          /* one of, detected from the content: an
                                ImageFolder tree root/<class>/<image>; a
                                pre-decoded cache file (stoker pack --cache);
                                a folder of WebDataset tar shards, or one
                                shard. NULL */
  const char *list_file;     /* lines "relative/or/absolute/path label". NULL */
  const char *list_base;     /* folder that relative list paths start from;
                                NULL = the list file's own folder (a pipe
                                under /dev or /proc, as a shell's <(...)
                                gives: the current folder) */

  /* pipeline */
  stk_pipeline pipeline;     /* STK_PIPELINE_TRAIN */
  int size;                  /* output height and width. 224 */
  int resize_size;           /* eval: shorter side before the centre crop;
                                0 = round(size * 256 / 224) = 256 for 224 */
  float scale[2];            /* train crop area fraction. {0.08, 1.0} */
  float ratio[2];            /* train crop aspect ratio. {3/4, 4/3} */
  float flip_prob;           /* train horizontal flip probability. 0.5;
                                eval never flips */
  float mean[3];             /* on the 0..1 scale. {0.485, 0.456, 0.406} */
  float std[3];              /* on the 0..1 scale. {0.229, 0.224, 0.225} */
  int dct_scaling;           /* let the JPEG decoder shrink by 1/2, 1/4 or 1/8
                                when the crop is at least that much larger
                                than the output. -1 = on for train, off for
                                eval (exactness against torchvision) */
  stk_dtype dtype;           /* STK_DTYPE_FLOAT32 */
  stk_layout layout;         /* STK_LAYOUT_NCHW */

  /* batching and order */
  int batch_size;            /* 256 */
  int drop_last;             /* drop the last, partial batch. 0 */
  int shuffle;               /* -1 = shuffle for train, not for eval */
  uint64_t seed;             /* 0 */
  int rank;                  /* 0 */
  int world_size;            /* 1 */
  int shard_drop_last;       /* DistributedSampler(drop_last=): drop the tail
                                instead of padding shards to equal length. 0 */

  /* executor */
  int threads;               /* worker threads; 0 = number of online CPUs */
  int prefetch;              /* batches prepared ahead of the consumer. 2 */
  int device;                /* -1 = CPU output; >= 0 = that CUDA device:
                                JPEGs are decoded with nvJPEG (the hardware
                                engines where present) and augmented by CUDA
                                kernels; batches and labels land in device
                                memory. STK_ENODEV when no GPU can be used */
  uint64_t max_device_bytes; /* cap on the device memory the loader
                                allocates (all of it at create); 0 = none */

  /* bad input */
  stk_on_error on_error;     /* STK_ON_ERROR_RAISE */
  uint64_t max_pixels;       /* width*height limit, checked from the header
                                before any allocation. 178956970 (PIL's
                                decompression-bomb limit); 0 = no limit */
  uint64_t max_file_bytes;   /* 256 MiB; 0 = no limit */
  int max_consecutive_failures; /* under skip, this many failures in a row end
                                the epoch with STK_ETOOMANY. 100; 0 = none */

  /* GPU loaders: the share of each batch the worker threads decode and
   * resize on the CPU (bit-identical to the CPU loader) while the GPU's
   * decoders take the rest. -1 = adaptive (the default): the share moves
   * after every batch towards the point where neither side waits for the
   * other, so that the CPU cores add their throughput to the GPU's. 0..1 =
   * that fixed share, for reproducible output (the GPU's JPEG decoders and
   * libjpeg-turbo differ by rounding, see docs/gpu.md). Files the hardware
   * engines cannot take (PNG, progressive, CMYK) go to the workers at any
   * share. */
  float gpu_cpu_share;

  /* sources */
  int index;                 /* image folders: keep the scan in an index
                                file and reuse it while no folder of the
                                tree changed (directory mtimes). -1 = auto:
                                for trees of at least 10,000 files; 0 =
                                never; 1 = always */
  const char *index_dir;     /* where index files go. NULL = $XDG_CACHE_HOME
                                /stoker (~/.cache/stoker when unset) */
  int shuffle_buffer;        /* tar shards: samples in the shuffle buffer
                                that follows the shuffled shard order. 0 =
                                1000; 1 = shard order only */
  int allow_stale_cache;     /* a cache whose source folder changed since it
                                was packed: 0 = refuse it (STK_ESTALE), 1 =
                                use it and say so (stk_loader_note()) */

  /* stalls (fields added in 0.3: keep them last) */
  float read_timeout;        /* seconds a file read may take before its
                                sample fails with "read timed out" (raise:
                                its batch fails; skip: it is skipped) while
                                the other samples go on; the stuck thread is
                                left behind and replaced. 300; 0 = none.
                                Checked while the consumer waits in
                                stk_loader_next(), to within a quarter of the
                                timeout (at most 0.25 s). A list_file that is
                                a FIFO waits this long for its writer's first
                                bytes at create. */

  /* train augmentations after the flip (fields added in 0.4), in this
   * order, on the crop rounded to 8 bits as torchvision's PIL path holds
   * it: vertical flip, the policy, colour jitter, greyscale, blur; then
   * normalisation, then random erasing. Semantics and limits:
   * docs/augment.md. */
  int auto_augment;          /* 0 none, 1 TrivialAugmentWide, 2 RandAugment,
                                3 AutoAugment(IMAGENET), 4 timm's
                                RandAugment (the timm_ fields), 5 AugMix
                                (the augmix_ fields; CPU loaders only). 0 */
  int ra_num_ops;            /* RandAugment: ops per image. 2 */
  int ra_magnitude;          /* RandAugment: magnitude bin. 9 */
  int magnitude_bins;        /* TrivialAugmentWide, RandAugment: bins. 31 */
  int aug_interpolation;     /* the policies' warps: 0 nearest (torchvision's
                                default), 1 bilinear, 2 bicubic (PIL's
                                transform, as torchvision runs bicubic
                                warps on PIL images), 3 bilinear or
                                bicubic at random per warp (timm's
                                default) */
  float aug_fill[3];         /* warp fill per channel, 0..255; -1 = none
                                (zeros, as torchvision's fill=None). -1 */
  float vflip_prob;          /* RandomVerticalFlip. 0 */
  float color_jitter[4];     /* ColorJitter brightness, contrast, saturation,
                                hue (0 = that one off). 0 */
  float jitter_prob;         /* RandomApply around ColorJitter. 1 */
  float grayscale_prob;      /* RandomGrayscale. 0 */
  int blur_kernel;           /* GaussianBlur kernel side, odd; 0 = off */
  float blur_sigma[2];       /* GaussianBlur sigma range. {0.1, 2.0} */
  float blur_prob;           /* RandomApply around GaussianBlur. 1 */
  float erase_prob;          /* RandomErasing p. 0 */
  float erase_scale[2];      /* {0.02, 0.33} */
  float erase_ratio[2];      /* {0.3, 3.3} */
  float erase_value[3];      /* per channel, in normalised units. 0 */
  int erase_random;          /* value="random": standard normal values */
  int interpolation;         /* stk_interpolation: the filter of the train
                                crop's and the eval resize's resampling,
                                Pillow's antialiased one (torchvision's on
                                PIL images). STK_INTERPOLATION_BILINEAR */
  int ra_reps;               /* repeated augmentation: the order of
                                torchvision's RASampler, each sample ra_reps
                                times in a row over the ranks, cut to
                                n // 256 * 256 / world_size per rank;
                                copies are augmented apart. 0 = off */

  /* bounds on hostile input (fields added in 0.4) */
  uint64_t max_decode_bytes; /* the loader's decode memory, shared by its
                                threads: each decode's output pixels and
                                what its header asks beside them (libjpeg's
                                whole-image coefficient buffers of
                                progressive and arithmetic JPEGs, PNG
                                ancillary chunks: at most 64 MiB of them,
                                inflated). A decode waits for others to give
                                theirs back; one over the whole budget fails
                                (STK_ELIMIT). One decode of stk_check_file
                                or stk_pack has it to itself. 384 MiB;
                                0 = none */
  float max_skipped_fraction;/* under skip, an epoch whose failed samples
                                exceed this share of it ends with
                                STK_ETOOMANY. 0.1; 1 = no bound */
  int verify;                /* caches: check each image's checksum as it
                                is read (STK_EDECODE naming it). 0 */

  /* timm's RandAugment, auto_augment 4 (fields added in 0.4): the options
   * of its config string ("rand-m9-n2-mstd0.5-mmax10-inc1-p0.5"; n is
   * ra_num_ops), its ops with PIL's arithmetic as timm runs them, the
   * warps bilinear (timm also draws bicubic) or nearest, filled with
   * aug_fill (timm's img_mean; default 128). docs/augment.md. */
  float timm_magnitude;      /* m. 10 */
  float timm_mstd;           /* mstd: Gaussian noise on m; > 100: uniform in
                                [0, m]. 0 */
  int timm_mmax;             /* mmax: m is clipped to [0, mmax]; 0 = 10 */
  int timm_increasing;       /* inc: the "Increasing" op variants. 0 */
  float timm_prob;           /* p: probability of each drawn op. 0.5 */
  float timm_translate_pct;  /* TranslateXRel/YRel range. 0.45 */

  /* torchvision's AugMix, auto_augment 5 (fields added in 0.4): width
   * chains of depth ops each, mixed with the image by Dirichlet and Beta
   * weights; the warps as aug_interpolation says (AugMix's default is
   * bilinear). The CPU loader runs it; a GPU loader refuses it. */
  int augmix_severity;       /* magnitude bins drawn from, 1..10. 3 */
  int augmix_width;          /* chains (mixture_width), 1..4. 3 */
  int augmix_depth;          /* ops per chain, 1..4; <= 0: 1..3 at random. -1 */
  float augmix_alpha;        /* the Dirichlet and Beta parameter. 1 */
  int augmix_all_ops;        /* also Brightness, Color, Contrast, Sharpness. 1 */

  /* remote tar shards (s3://, http(s)://; fields added in 0.5): a local
   * copy of each shard read, so that later epochs read local disk. A shard
   * is downloaded once, whole, into cache_dir (the ranks of a node share
   * it: one download per shard, renamed into place when complete) while
   * the epoch reads it; the least recently used copies go first when the
   * copies would exceed cache_bytes. docs/remote.md */
  const char *cache_dir;     /* NULL = no local copies */
  uint64_t cache_bytes;      /* 0 = half the free space of cache_dir's disk
                                when the loader opens */
  uint64_t remote_memory;    /* parts of remote shards kept in memory beyond
                                what the started batches need (for the
                                shuffle buffer's stragglers); 0 = 256 MiB */

  /* timm's RandomErasing (fields added in 0.5): its max_count and its mode
   * "rand" (mode "pixel" is erase_random, "const" erase_value 0) */
  int erase_count;           /* 1 to erase_count boxes, uniform, each
                                tried with 1/count of the drawn area. 1 */
  int erase_per_channel;     /* a standard normal value per channel and box.
                                0 */

  /* MixUp and CutMix of whole batches (fields added in 0.5): on when an
   * alpha is above 0; train pipelines only. Each batch is mixed with
   * itself, by one draw per batch keyed by (seed, epoch, batch index), so
   * that a seek repeats it: stk_loader_next() hands out the mixed images
   * in data and their soft labels in stk_batch.mix_labels. With both
   * alphas on, one of the two per batch. docs/augment.md */
  double mix_mixup_alpha;    /* MixUp's lambda ~ Beta(alpha, alpha); 0 = no
                                MixUp. 0 */
  double mix_cutmix_alpha;   /* CutMix's; 0 = no CutMix. 0 */
  int mix_mode;              /* stk_mix_mode: STK_MIX_TORCHVISION
                                (torchvision v2's MixUp, CutMix and
                                RandomChoice of them: image i mixed with
                                image i - 1, image 0 with the last; equal
                                odds) or STK_MIX_TIMM (timm's Mixup in its
                                "batch" mode: image i with image n - 1 - i,
                                and the three fields below).
                                STK_MIX_TORCHVISION */
  double mix_prob;           /* timm: the chance that a batch is mixed at
                                all, 0..1. 1 */
  double mix_switch_prob;    /* timm: with both alphas on, the chance of
                                CutMix, 0..1. 0.5 */
  int mix_correct_lam;       /* timm: CutMix's lambda from the area of the
                                box as clipped. 1 */
  double mix_label_smoothing; /* the soft labels' one-hot values, 0..1:
                                off = eps / classes, on = 1 - eps + off
                                (timm's label_smoothing). 0 */
  int mix_classes;           /* columns of the soft labels, at least the
                                source's classes; 0 = the source's number
                                of classes. 0 */

  /* Weighted sampling (a field added in 0.6): each epoch draws its samples
   * with replacement, sample i with probability weights[i] / sum, as
   * torch's WeightedRandomSampler (torch.multinomial with replacement from
   * a generator seeded with seed + epoch, bit for bit). The ranks draw the
   * same sequence of world_size * shard_size samples and take positions
   * rank, rank + world_size, ... of it. Folders, lists and caches; not
   * with ra_reps or tar shards. */
  const char *weights_file;  /* a text file of the weights, one a sample in
                                sample order (numbers separated by white
                                space; finite, >= 0, not all 0); NULL =
                                off */

  /* Remote tar shards without an index (a field added in 0.6): 1 = the
   * open reads the listing and one part, and the first epoch streams the
   * shards, indexing them as it reads them (its len() is an estimate); 0 =
   * the open reads every shard that is not indexed yet. docs/remote.md */
  int stream_first_epoch;    /* 0 */
} stk_options;

/* Fills `opt` with the defaults above. stk_options_init is a macro that
 * passes the size of the caller's struct: a program built against an older
 * stoker.h (a shorter stk_options) gets the fields it has and nothing is
 * written past them; struct_size records that size, and the fields it
 * lacks take their defaults inside the library. The plain function
 * stk_options_init (for bindings that cannot use the macro) fills this
 * header's whole struct. */
STK_API void stk_options_init_sized(stk_options *opt, size_t size);
STK_API void stk_options_init(stk_options *opt);
#define stk_options_init(opt) stk_options_init_sized((opt), sizeof *(opt))

/* ---- loader ------------------------------------------------------------- */
typedef struct stk_loader stk_loader;

/* One batch, lent by the loader (ownership rule 2). */
typedef struct stk_batch {
  void *data;              /* the images; device memory when device >= 0 */
  int64_t shape[4];        /* NCHW: {n,3,h,w}; NHWC: {n,h,w,3} */
  int64_t strides[4];      /* in elements, C-contiguous */
  stk_dtype dtype;
  stk_layout layout;
  int device;              /* -1 for host memory */
  int64_t n;               /* images in this batch (shape[0]) */
  size_t nbytes;           /* bytes of data */
  int64_t *labels;         /* n class indices, host memory */
  int64_t *indices;        /* n sample indices into the dataset, host memory */
  int64_t *labels_device;  /* n labels in device memory, or NULL on the CPU */
  void *ready_event;       /* CUDA event (CUevent) recorded when the data is
                              written, or NULL on the CPU */
  uint64_t epoch;
  int64_t batch_index;     /* position of this batch within the epoch */
  int slot;                /* internal slot number; pass the batch back */
  /* MixUp/CutMix (fields added in 0.5; NULL and 0 when the options' mix
   * is off): data holds the mixed images (on a GPU loader a buffer of its
   * own beside the unmixed slot; labels stay the class indices), and
   * these the soft labels, n rows of mix_classes floats: row i is
   * lambda * onehot(label i) + (1 - lambda) * onehot(label of its partner).
   * Owned by the loader, valid until the batch is released (rule 3). A
   * program built against a header without these fields (its stk_options
   * ends before the mix_ fields) has them neither written nor zeroed. */
  float *mix_labels;       /* host memory */
  float *mix_labels_device; /* device memory on a GPU loader, else NULL */
  int mix_classes;         /* columns of a row */
  int mix_kind;            /* this batch's draw: 0 not mixed (timm's
                              mix_prob), 1 MixUp, 2 CutMix */
  double mix_lambda;       /* the weight of each image's own label */
} stk_batch;

/* Builds a loader: scans the source, plans every buffer, starts the threads.
 * `header_version` must be STK_VERSION. On failure returns a code and, when
 * `err` is not NULL, writes a message into err[0..errlen). */
STK_API int stk_loader_create(const stk_options *opt, int header_version,
                              stk_loader **out, char *err, size_t errlen);
#define STK_LOADER_CREATE(opt, out, err, errlen) \
  stk_loader_create((opt), STK_VERSION, (out), (err), (errlen))

/* Stops and joins every thread, frees every buffer. NULL is a no-op. */
STK_API void stk_loader_destroy(stk_loader *l);

/* Stops and joins every worker thread now, but keeps the batch memory, so
 * that batches the caller still holds stay valid and can be released; free
 * everything later with stk_loader_destroy(). Afterwards stk_loader_next()
 * returns STK_ESTATE. For bindings whose tensors may outlive the loader. */
STK_API void stk_loader_shutdown(stk_loader *l);

/* Next batch of the current epoch, in order. Blocks until it is ready.
 * Returns STK_OK, STK_EEND once at the end of an epoch (the next call starts
 * the following epoch), or an error. Under on_error=raise a bad file fails
 * its batch: the call returns STK_EDECODE (or EIO, ELIMIT, EFORMAT) with a
 * message naming the file, and the next call goes on with the next batch. */
STK_API int stk_loader_next(stk_loader *l, stk_batch *out);
/* The same, waiting at most `timeout_s` seconds (< 0 = no limit): returns
 * STK_ETIMEDOUT when no batch came in that time, with the loader's state
 * unchanged, so that the call can be repeated. For bindings that must
 * look at signals while they wait (Python's Ctrl-C). */
STK_API int stk_loader_next_timed(stk_loader *l, stk_batch *out, double timeout_s);

/* Gives a batch's slot back to the loader. Thread-safe (rule 6). Returns
 * STK_EINVAL, without touching the loader's message, for a batch that is
 * not held. For a device batch, stk_batch_release_on() says which CUDA
 * stream (a CUstream / cudaStream_t; NULL = the legacy default stream) the
 * consumer used: the slot is rewritten only after the work queued on that
 * stream so far has completed, so releasing right after queuing kernels
 * that read the batch is safe. */
STK_API int stk_batch_release(stk_loader *l, stk_batch *b);
STK_API int stk_batch_release_on(stk_loader *l, stk_batch *b, void *stream);

/* Device batches are handed out as soon as their work is queued: a consumer
 * makes its stream wait on b->ready_event (cuStreamWaitEvent), or calls
 * this to block the calling thread until the data is written. A no-op for
 * host batches. */
STK_API int stk_batch_wait(stk_loader *l, const stk_batch *b);
/* Makes the CUDA stream `stream` (NULL = the legacy default stream) wait on
 * the device until the batch is written; the calling thread does not wait.
 * A no-op for host batches. */
STK_API int stk_batch_wait_on(stk_loader *l, const stk_batch *b, void *stream);

/* Abandons the current epoch (waits for work in flight) and positions the
 * loader at batch `batch` of `epoch`. set_epoch(e) is seek(e, 0). Batches the
 * caller still holds stay valid. The output of a seek is identical to what the
 * same batches would have been in an uninterrupted epoch, which is what makes
 * exact mid-epoch resume possible. */
STK_API int stk_loader_set_epoch(stk_loader *l, uint64_t epoch);
STK_API int stk_loader_seek(stk_loader *l, uint64_t epoch, int64_t batch);

/* Position of the next batch stk_loader_next() will return. */
STK_API void stk_loader_position(const stk_loader *l, uint64_t *epoch, int64_t *batch);

/* Counts. len = batches per epoch for this rank when no file is skipped. */
STK_API int64_t stk_loader_num_samples(const stk_loader *l);   /* whole dataset */
STK_API int64_t stk_loader_shard_size(const stk_loader *l);    /* this rank, per epoch */
STK_API int64_t stk_loader_len(const stk_loader *l);
STK_API int stk_loader_num_slots(const stk_loader *l);
STK_API int stk_loader_num_classes(const stk_loader *l);
STK_API const char *stk_loader_class_name(const stk_loader *l, int label);
/* Path of sample `index` (absolute or relative to the root), or NULL. */
STK_API const char *stk_loader_sample_path(const stk_loader *l, int64_t index);
STK_API int64_t stk_loader_sample_label(const stk_loader *l, int64_t index);

/* Message of the last failure on this loader ("" if none). */
STK_API const char *stk_loader_error(const stk_loader *l);

/* The kind of source the loader reads: "folder", "list", "cache" or "tar". */
STK_API const char *stk_loader_source_kind(const stk_loader *l);
/* A warning about the source made at create ("" if none): a stale cache
 * used under allow_stale_cache, tar members left out. Loader-owned. */
STK_API const char *stk_loader_note(const stk_loader *l);

/* ---- statistics --------------------------------------------------------- */
typedef struct stk_stats {
  uint64_t images;           /* images delivered in batches */
  uint64_t batches;          /* batches delivered */
  uint64_t skipped;          /* files skipped under on_error=skip */
  uint64_t failed;           /* files that failed (skipped or raised) */
  uint64_t bytes_read;       /* file bytes read */
  double seconds;            /* wall time since the loader was created */
  double images_per_s;       /* images / seconds */
  double wait_seconds;       /* time the consumer spent blocked in next() */
  double read_seconds;       /* summed over threads: reading files */
  double decode_seconds;     /* summed over threads: entropy decode + IDCT */
  double augment_seconds;    /* summed over threads: resize, flip, normalise, store */
  uint64_t host_bytes;       /* host memory held by batch slots and scratch */
  uint64_t device_bytes;     /* device memory held (0 on the CPU) */
  uint64_t decoded_hw;       /* GPU loaders: images decoded by the hardware
                                JPEG engines, */
  uint64_t decoded_cuda;     /* by nvJPEG's CUDA (hybrid) decoder, */
  uint64_t decoded_cpu;      /* and on the CPU (PNG, CMYK, what nvJPEG refuses) */
  int threads;
  int slots;
  double cpu_share;          /* GPU loaders: the share of each batch the
                                worker threads decode now (adaptive, or the
                                fixed gpu_cpu_share) */
  uint64_t late_allocs;      /* GPU loaders: device or pinned buffers nvJPEG
                                had to allocate after create, because a
                                batch needed more than the sizes set up at
                                create (each is kept for reuse) */
  double submit_seconds;     /* GPU loaders: summed over threads, time spent
                                queuing batches on the GPU (nvJPEG's calls
                                included); a large value per batch while
                                training means the GPU was busy elsewhere */
  /* remote datasets (s3://, http(s)://; 0 for local ones) */
  uint64_t remote_bytes;     /* body bytes received */
  uint64_t remote_requests;  /* HTTP requests made (retries included) */
  uint64_t remote_retries;   /* requests retried after a fault */
  uint64_t remote_failures;  /* requests that failed for good */
  double remote_seconds;     /* summed over requests: submission to end */
  uint64_t remote_part_bytes; /* bytes the parts in memory hold now */
  uint64_t remote_part_peak; /* and at most so far */
  uint64_t remote_cache_bytes; /* bytes read from local copies (cache_dir) */
  int remote_streaming;      /* 1 while the sample table is the first epoch's
                                stream of foreign shards (stream_first_epoch):
                                positions, not yet the shards' index */
} stk_stats;

STK_API int stk_loader_stats(const stk_loader *l, stk_stats *out);

/* Skipped files of the current epoch (the epoch of the last batch handed
 * out), in the order they were met: i in [0, stk_loader_skipped_count()).
 * The list starts again with each epoch, so that it does not grow over a
 * long run; stats.skipped keeps the total. */
STK_API uint64_t stk_loader_skipped_count(const stk_loader *l);
STK_API int stk_loader_skipped(const stk_loader *l, uint64_t i,
                               const char **path, const char **reason);

/* ---- single-image helpers (used by `stoker check` and tests) ------------ */
/* Decodes a whole file to 8-bit RGB to check that it is valid, and refuses
 * it (STK_ELIMIT) where a loader of the same options would: the limits of
 * `opt` (NULL = defaults), and the decode memory (max_decode_bytes) that
 * its pipeline's decodes of this image take (eval: its one geometry;
 * train: the most any crop can take). Returns STK_OK or an error, with the
 * reason in msg[0..msglen). Dimensions go to *w, *h when not NULL. */
STK_API int stk_check_file(const char *path, const stk_options *opt,
                           int *w, int *h, char *msg, size_t msglen);

/* The largest image, in pixels, that a loader of `opt` (NULL = defaults)
 * decodes whole in any format: max_pixels, or fewer where max_decode_bytes
 * holds fewer (3 bytes a pixel and a MiB for the libraries: 133,868,202
 * with the defaults; a format's own buffers, such as a progressive JPEG's
 * coefficients, lower it further; a JPEG the train pipeline shrinks while
 * decoding may be larger). 0 = no bound (or opt of another struct_size). */
STK_API uint64_t stk_pixel_ceiling(const stk_options *opt);

/* ---- packing: pre-decoded caches and tar shards ----------------------- */
typedef enum { STK_PACK_CACHE = 0, STK_PACK_TAR = 1 } stk_pack_format;
typedef enum { STK_CACHE_RAW = 0, STK_CACHE_JPEG = 1 } stk_cache_encoding;

typedef struct stk_pack_options {
  size_t struct_size;        /* set by stk_pack_options_init() */
  /* the source: exactly one of root / list_file, as in stk_options */
  const char *root;
  const char *list_file;
  const char *list_base;
  const char *output;        /* cache: the file to write; tar: the folder */
  stk_pack_format format;    /* STK_PACK_CACHE */
  /* cache */
  stk_cache_encoding encoding; /* STK_CACHE_RAW */
  int max_side;              /* images whose longer side exceeds this are
                                resized (Pillow's antialiased bilinear) so
                                that it equals it. 512; 0 = keep the size */
  int quality;               /* STK_CACHE_JPEG: encoder quality. 90 */
  /* tar */
  uint64_t shard_bytes;      /* a shard is closed once it holds this many
                                bytes. 1 GiB */
  int threads;               /* 0 = online CPUs */
  uint64_t max_pixels;       /* as stk_options. 178956970 */
  uint64_t max_file_bytes;   /* as stk_options. 256 MiB */
  /* Called from the calling thread as files are done (may be NULL). */
  void (*progress)(void *user, int64_t done, int64_t total);
  /* Called for every file left out, with the reason (may be NULL). */
  void (*bad_file)(void *user, const char *path, const char *reason);
  void *user;

  /* fields added in 0.4: keep them last */
  int check;                 /* tar: decode every image in full, as a cache
                                pack does, so that a truncated file is left
                                out. 0 = read each file's header only */
  float read_timeout;        /* seconds a file read may take before the file
                                is left out ("read timed out"); a list that
                                is a FIFO or pipe is read whole within it.
                                300, the loader's; 0 = none */
  /* Raw cache: called once from the calling thread before anything is
   * written, with the estimated size of the output, the bytes free where it
   * goes (UINT64_MAX when unknown), and how many files' headers the
   * estimate read of how many. When the estimate exceeds the free bytes
   * the pack then fails. May be NULL. */
  void (*estimate)(void *user, uint64_t bytes, uint64_t avail, int64_t sampled, int64_t files);
  /* Called from the calling thread between files (every 16 written), may
   * be NULL: nonzero stops the pack, which then writes nothing under the
   * output's name, removes its temporary output and returns STK_ECANCELED
   * (what a Ctrl-C should do in a program that keeps running). */
  int (*cancel)(void *user);
  /* Cache: the CUDA device that decodes (nvJPEG, the hardware JPEG engines
   * where the GPU has them) and resizes (the same arithmetic as the CPU
   * pack) before the pixels come back to be written. -1 = the CPU. Needs
   * max_side in 1..8192. The file format is the same; the pixels are what
   * nvJPEG decodes (docs/storage.md says how close to the CPU pack's). */
  int device;
  int plain_chroma;          /* device: the engines' plain chroma upsampling,
                                up to 2.3x faster, but 0.1-1.8% of values
                                more than 1 level (up to 40) from the CPU
                                pack's. 0: interpolated, as libjpeg-turbo, no
                                value more than 1 level off */
  /* field added in 0.6: keep it last */
  uint64_t max_decode_bytes; /* as stk_options: the memory the CPU
                                producers' whole decodes take together; one
                                larger than all of it waits for the others
                                and runs alone (a cache keeps it at
                                max_side, which every loader takes). 384
                                MiB; 0 = none */
} stk_pack_options;

typedef struct stk_pack_result {
  int64_t packed;            /* samples written */
  int64_t failed;            /* files left out (each reported to bad_file) */
  uint64_t bytes;            /* bytes written */
  int shards;                /* tar: shard files written */
  int64_t device_packed;     /* device >= 0: samples whose JPEG the GPU
                                decoded (the others were decoded on the
                                CPU, as without a device, and resized on the
                                GPU, or on the CPU when too large for it) */
  /* device >= 0: the rates measured, files per second (the device's over
   * the time it ran, the CPU producers' over their busy time, times their
   * threads), and whether the device threads stopped claiming because the
   * CPU producers alone were faster (the CPU then packed the rest) */
  double device_rate, cpu_rate;
  int device_stopped;
} stk_pack_result;

STK_API void stk_pack_options_init_sized(stk_pack_options *o, size_t size);
STK_API void stk_pack_options_init(stk_pack_options *o);
#define stk_pack_options_init(o) stk_pack_options_init_sized((o), sizeof *(o))

/* Packs the source into a cache file or tar shards. Writes to a temporary
 * name beside the output and renames it at the end, so an interrupted pack
 * leaves no half-written output. Files that fail to read or decode are left
 * out and reported; the pack fails only when none is left. */
STK_API int stk_pack(const stk_pack_options *o, int header_version, stk_pack_result *res,
                     char *err, size_t errlen);
#define STK_PACK(o, res, err, errlen) stk_pack((o), STK_VERSION, (res), (err), (errlen))

/* The temporary name stk_pack() writes `output` under in this process
 * until it renames it (OUTPUT.tmp-PID: a file for a cache, a folder for
 * tar shards), for a front end that removes it when it is interrupted
 * (the signal handler of `stoker pack`). Writes it into buf[0..n):
 * STK_OK, or STK_EINVAL when it does not fit. */
STK_API int stk_pack_temp_path(const char *output, char *buf, size_t n);

/* ---- the source rule ------------------------------------------------- */
/* The rule on a source that every front end applies (stk_loader_create(),
 * stk_pack(), stk_check(), the command line, the Python layer): exactly one
 * of root and list_file is set. STK_OK, or STK_EINVAL with "set exactly
 * one of root and list_file" in err[0..errlen) (err may be NULL). */
STK_API int stk_source_check(const char *root, const char *list_file, char *err, size_t errlen);

/* ---- checking a whole source --------------------------------------------- */
typedef struct stk_check_result {
  int64_t files;             /* samples checked */
  int64_t failed;            /* samples that failed, each reported to `bad` */
  const char *kind;          /* the source's kind, as stk_loader_source_kind()
                                (static storage) */
  char note[256];            /* a warning about the source, as
                                stk_loader_note(); "" if none */
} stk_check_result;

/* Decodes every sample of the source of `opt` in full, with its limits and
 * read_timeout, on opt->threads threads (0 = online CPUs); a cache's
 * checksums are verified too. A sample is refused where a loader of the
 * same options would refuse it (stk_check_file); the threads share one
 * decode budget (max_decode_bytes), as a loader's do. Of the other options
 * those that open a source (list_base, index, index_dir, allow_stale_cache)
 * and those of the pipeline's geometry (pipeline, size, resize_size,
 * scale, ratio, dct_scaling, interpolation) matter. Once all
 * are checked, calls bad(user, index, path, code, reason) from the calling
 * thread for each sample that failed, in sample order (`bad` may be NULL;
 * the strings are valid during the call). Returns STK_OK when the source
 * could be read, whatever failed in it, or the error that kept it from
 * being opened, with a message in err[0..errlen). The options and their
 * strings are the caller's and must stay valid during the call. */
STK_API int stk_check(const stk_options *opt, stk_check_result *res,
                      void (*bad)(void *user, int64_t index, const char *path, int code,
                                  const char *reason),
                      void *user, char *err, size_t errlen);

/* ---- the options tables ------------------------------------------------ */
/* Every field of stk_options and of stk_pack_options, with its range, its
 * flag on the command line, its Python keyword and a line of help, as the
 * library checks them: a front end builds its flags and --help from here
 * instead of repeating them. */
typedef enum { STK_OPTIONS_LOADER = 0, STK_OPTIONS_PACK = 1 } stk_option_table;

typedef struct stk_option_desc {
  const char *name;          /* the field: "batch_size" */
  const char *type;          /* "int", "bool", "enum", "uint64", "float" (a
                                float or an array of `count`) or "str" */
  int count;                 /* elements: 1, or the length of a float array */
  double min, max;           /* inclusive range of each element; +-inf for
                                none (uint64: 0 and 2**64 are unchecked) */
  const char *choices;       /* enum: the names of 0, 1, ... as
                                "train|eval"; NULL for the other types */
  const char *flag;          /* the command line's flag ("--batch"), or NULL */
  const char *keyword;       /* the Python keyword, or NULL */
  const char *doc;           /* one line for --help */
  const char *only;          /* pack: "cache" or "tar" when the option
                                applies to that format only; else NULL */
  char default_text[64];     /* the default as a flag would take it: "224",
                                "0.08,1", "train", "on"/"off" (bool); "" for
                                a path */
} stk_option_desc;

/* Options in table t (0 when t is unknown). */
STK_API int stk_option_count(stk_option_table t);
/* Fills *out with option i of table t, 0 <= i < stk_option_count(t); its
 * strings are static. STK_OK, or STK_EINVAL when i is out of range. */
STK_API int stk_option_info(stk_option_table t, int i, stk_option_desc *out);
/* The index of the option of table t whose flag is `flag`, or -1. */
STK_API int stk_option_find_flag(stk_option_table t, const char *flag);

/* Sets the option whose flag is `flag` from its text `value`, range
 * included: int an integer; bool 0/1/true/false/yes/no/on/off (NULL = on,
 * a switch); enum one of its choices; uint64 an integer with an optional
 * K/M/G/T suffix (powers of 1024); float `count` numbers separated by
 * commas; str the text itself, which is not copied: it must outlive the
 * options. STK_OK, or STK_EINVAL with a message naming the field in err
 * (also for a flag that is in no row). */
STK_API int stk_options_parse_flag(stk_options *o, const char *flag, const char *value,
                                   char *err, size_t errlen);
STK_API int stk_pack_options_parse_flag(stk_pack_options *o, const char *flag,
                                        const char *value, char *err, size_t errlen);

/* ---- synthetic data ---------------------------------------------------- */
/* Writes `images` deterministic, photo-like JPEG files (about 500x375,
 * about 110 KB each) spread round-robin over `classes` class folders
 * (1 <= classes <= images) as DIR/nCCCC/img_IIIIIIII.JPEG, creating DIR
 * and its parents when missing. The same arguments give byte-identical
 * files. progress(user, done, total) is called from the calling thread
 * after each image (may be NULL). STK_OK, or an error with a message in
 * err[0..errlen). */
STK_API int stk_synth(const char *dir, int64_t images, int classes, uint64_t seed,
                      void (*progress)(void *user, int64_t done, int64_t total), void *user,
                      char *err, size_t errlen);

/* ---- build information -------------------------------------------------- */
STK_API int stk_version(void);               /* STK_VERSION of the library */
STK_API const char *stk_version_string(void);
STK_API const char *stk_simd_level(void);    /* e.g. "avx2" */
/* Human-readable lines: formats, SIMD, GPU status. Static storage. */
STK_API const char *stk_build_info(void);
/* Where the most recently opened s3:// client of this process took its AWS
 * credentials ("environment (AWS_ACCESS_KEY_ID)", "instance metadata (role
 * R at URL), temporary: ...", "no AWS credentials found (tried: ...)"),
 * never a secret, into out. 1 when an s3:// client has opened, else 0. */
STK_API int stk_remote_credentials(char *out, size_t cap);
/* Where the Hugging Face Hub's token would come from for an hf:// client
 * opened now ("HF_TOKEN", "HUGGING_FACE_HUB_TOKEN", the login token file)
 * and the origins it goes to, or why there is none; never the token, into
 * out. 1 when there is a token, else 0. */
STK_API int stk_remote_hub_token(char *out, size_t cap);

#ifdef __cplusplus
}
#endif
#endif /* STOKER_H */

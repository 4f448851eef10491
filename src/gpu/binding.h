/*
 * binding.h: the CUDA driver API and nvJPEG, as much of them as stoker uses,
 * reached through dlopen at run time: the library has no link-time
 * dependency on either, so one build runs on machines with and without a
 * GPU. The types mirror cuda.h and nvjpeg.h (their values are the ABI).
 */
#ifndef STK_GPU_BINDING_H
#define STK_GPU_BINDING_H

#include <stddef.h>

/* ---- the CUDA driver API, as much as is used -------------------------- */
typedef int CUresult;
typedef int CUdevice;
typedef unsigned long long CUdeviceptr;
typedef struct CUctx_st *CUcontext;
typedef struct CUmod_st *CUmodule;
typedef struct CUfunc_st *CUfunction;
typedef struct CUstream_st *CUstream;
typedef struct CUevent_st *CUevent;

#define CUDA_SUCCESS 0
#define CUDA_ERROR_NO_DEVICE 100
#define CUDA_ERROR_NOT_READY 600
#define CU_DEVICE_ATTRIBUTE_MULTIPROCESSOR_COUNT 16
#define CU_DEVICE_ATTRIBUTE_CC_MAJOR 75
#define CU_DEVICE_ATTRIBUTE_CC_MINOR 76
#define CU_DEVICE_ATTRIBUTE_MAX_SHARED_MEMORY_PER_BLOCK_OPTIN 97
#define CU_FUNC_ATTRIBUTE_SHARED_SIZE_BYTES 1
#define CU_FUNC_ATTRIBUTE_MAX_DYNAMIC_SHARED_SIZE_BYTES 8
#define CU_STREAM_NON_BLOCKING 1
#define CU_EVENT_DISABLE_TIMING 2

typedef struct {
  CUresult (*Init)(unsigned);
  CUresult (*DriverGetVersion)(int *);
  CUresult (*DeviceGetCount)(int *);
  CUresult (*DeviceGet)(CUdevice *, int);
  CUresult (*DeviceGetName)(char *, int, CUdevice);
  CUresult (*DeviceGetAttribute)(int *, int, CUdevice);
  CUresult (*DeviceTotalMem)(size_t *, CUdevice);
  CUresult (*DevicePrimaryCtxRetain)(CUcontext *, CUdevice);
  CUresult (*DevicePrimaryCtxRelease)(CUdevice);
  CUresult (*CtxPushCurrent)(CUcontext);
  CUresult (*CtxPopCurrent)(CUcontext *);
  CUresult (*CtxGetCurrent)(CUcontext *);
  CUresult (*MemGetInfo)(size_t *, size_t *);
  CUresult (*MemAlloc)(CUdeviceptr *, size_t);
  CUresult (*MemFree)(CUdeviceptr);
  CUresult (*MemHostAlloc)(void **, size_t, unsigned);
  CUresult (*MemFreeHost)(void *);
  CUresult (*MemcpyHtoD)(CUdeviceptr, const void *, size_t);
  CUresult (*MemcpyDtoH)(void *, CUdeviceptr, size_t);
  CUresult (*MemcpyHtoDAsync)(CUdeviceptr, const void *, size_t, CUstream);
  CUresult (*MemcpyDtoHAsync)(void *, CUdeviceptr, size_t, CUstream);
  CUresult (*MemcpyDtoDAsync)(CUdeviceptr, CUdeviceptr, size_t, CUstream);
  CUresult (*MemsetD8Async)(CUdeviceptr, unsigned char, size_t, CUstream);
  CUresult (*StreamCreate)(CUstream *, unsigned);
  CUresult (*StreamCreateWithPriority)(CUstream *, unsigned, int);
  CUresult (*CtxGetStreamPriorityRange)(int *, int *);
  CUresult (*StreamDestroy)(CUstream);
  CUresult (*StreamSynchronize)(CUstream);
  CUresult (*StreamWaitEvent)(CUstream, CUevent, unsigned);
  CUresult (*EventCreate)(CUevent *, unsigned);
  CUresult (*EventDestroy)(CUevent);
  CUresult (*EventRecord)(CUevent, CUstream);
  CUresult (*EventSynchronize)(CUevent);
  CUresult (*EventElapsedTime)(float *, CUevent, CUevent);
  CUresult (*ModuleLoadData)(CUmodule *, const void *);
  CUresult (*ModuleUnload)(CUmodule);
  CUresult (*ModuleGetFunction)(CUfunction *, CUmodule, const char *);
  CUresult (*LaunchKernel)(CUfunction, unsigned, unsigned, unsigned, unsigned, unsigned, unsigned,
                           unsigned, CUstream, void **, void **);
  CUresult (*FuncGetAttribute)(int *, int, CUfunction);
  CUresult (*FuncSetAttribute)(CUfunction, int, int);
  CUresult (*GetErrorName)(CUresult, const char **);
  CUresult (*GetErrorString)(CUresult, const char **);
} cuda_api;

/* ---- nvJPEG, as much as is used ----------------------------------------- */
typedef int nvjpegStatus_t;
typedef struct nvjpegHandle *nvjpegHandle_t;
typedef struct nvjpegJpegState *nvjpegJpegState_t;
typedef struct nvjpegJpegStream *nvjpegJpegStream_t;
typedef struct nvjpegDecodeParams *nvjpegDecodeParams_t;
typedef struct nvjpegJpegDecoder *nvjpegJpegDecoder_t;
typedef struct nvjpegBufferPinned *nvjpegBufferPinned_t;
typedef struct nvjpegBufferDevice *nvjpegBufferDevice_t;
typedef struct {
  unsigned char *channel[4];
  size_t pitch[4];
} nvjpegImage_t;

#define NVJPEG_STATUS_SUCCESS 0
#define NVJPEG_BACKEND_DEFAULT 0
#define NVJPEG_BACKEND_HYBRID 1
#define NVJPEG_BACKEND_HARDWARE 3
#define NVJPEG_OUTPUT_RGBI 5
#define NVJPEG_CSS_444 0
#define NVJPEG_FLAGS_HW_DECODE_NO_PIPELINE 1
#define NVJPEG_FLAGS_UPSAMPLING_WITH_INTERPOLATION 32
#define NVJPEG_PROP_MAJOR 0
#define NVJPEG_PROP_MINOR 1
#define NVJPEG_PROP_PATCH 2

typedef struct {
  nvjpegStatus_t (*GetProperty)(int, int *);
  nvjpegStatus_t (*CreateEx)(int, void *, void *, unsigned, nvjpegHandle_t *);
  nvjpegStatus_t (*Destroy)(nvjpegHandle_t);
  nvjpegStatus_t (*JpegStateCreate)(nvjpegHandle_t, nvjpegJpegState_t *);
  nvjpegStatus_t (*JpegStateDestroy)(nvjpegJpegState_t);
  nvjpegStatus_t (*DecodeBatchedInitialize)(nvjpegHandle_t, nvjpegJpegState_t, int, int, int);
  nvjpegStatus_t (*DecodeBatched)(nvjpegHandle_t, nvjpegJpegState_t, const unsigned char *const *,
                                  const size_t *, nvjpegImage_t *, CUstream);
  nvjpegStatus_t (*DecodeBatchedEx)(nvjpegHandle_t, nvjpegJpegState_t, const unsigned char *const *,
                                    const size_t *, nvjpegImage_t *, nvjpegDecodeParams_t *,
                                    CUstream);
  nvjpegStatus_t (*DecodeBatchedSupportedEx)(nvjpegHandle_t, nvjpegJpegStream_t,
                                             nvjpegDecodeParams_t, int *);
  nvjpegStatus_t (*JpegStreamCreate)(nvjpegHandle_t, nvjpegJpegStream_t *);
  nvjpegStatus_t (*JpegStreamDestroy)(nvjpegJpegStream_t);
  nvjpegStatus_t (*JpegStreamParse)(nvjpegHandle_t, const unsigned char *, size_t, int, int,
                                    nvjpegJpegStream_t);
  nvjpegStatus_t (*JpegStreamParseHeader)(nvjpegHandle_t, const unsigned char *, size_t,
                                          nvjpegJpegStream_t);
  nvjpegStatus_t (*JpegStreamGetFrameDimensions)(nvjpegJpegStream_t, unsigned *, unsigned *);
  nvjpegStatus_t (*JpegStreamGetComponentsNum)(nvjpegJpegStream_t, unsigned *);
  nvjpegStatus_t (*JpegStreamGetChromaSubsampling)(nvjpegJpegStream_t, int *); /* optional */
  nvjpegStatus_t (*DecodeParamsCreate)(nvjpegHandle_t, nvjpegDecodeParams_t *);
  nvjpegStatus_t (*DecodeParamsDestroy)(nvjpegDecodeParams_t);
  nvjpegStatus_t (*DecodeParamsSetOutputFormat)(nvjpegDecodeParams_t, int);
  nvjpegStatus_t (*DecodeParamsSetROI)(nvjpegDecodeParams_t, int, int, int, int);
  nvjpegStatus_t (*DecoderCreate)(nvjpegHandle_t, int, nvjpegJpegDecoder_t *);
  nvjpegStatus_t (*DecoderDestroy)(nvjpegJpegDecoder_t);
  nvjpegStatus_t (*DecoderStateCreate)(nvjpegHandle_t, nvjpegJpegDecoder_t, nvjpegJpegState_t *);
  nvjpegStatus_t (*DecoderJpegSupported)(nvjpegJpegDecoder_t, nvjpegJpegStream_t,
                                         nvjpegDecodeParams_t, int *);
  nvjpegStatus_t (*BufferPinnedCreate)(nvjpegHandle_t, void *, nvjpegBufferPinned_t *);
  nvjpegStatus_t (*BufferPinnedDestroy)(nvjpegBufferPinned_t);
  nvjpegStatus_t (*BufferDeviceCreate)(nvjpegHandle_t, void *, nvjpegBufferDevice_t *);
  nvjpegStatus_t (*BufferDeviceDestroy)(nvjpegBufferDevice_t);
  nvjpegStatus_t (*StateAttachPinnedBuffer)(nvjpegJpegState_t, nvjpegBufferPinned_t);
  nvjpegStatus_t (*StateAttachDeviceBuffer)(nvjpegJpegState_t, nvjpegBufferDevice_t);
  nvjpegStatus_t (*DecodeJpeg)(nvjpegHandle_t, nvjpegJpegDecoder_t, nvjpegJpegState_t,
                               nvjpegJpegStream_t, nvjpegImage_t *, nvjpegDecodeParams_t, CUstream);
  /* optional */
  nvjpegStatus_t (*DecodeBatchedPreAllocate)(nvjpegHandle_t, nvjpegJpegState_t, int, int, int, int,
                                             int);
  nvjpegStatus_t (*GetHardwareDecoderInfo)(nvjpegHandle_t, unsigned *, unsigned *);
  nvjpegStatus_t (*DecodeJpegHost)(nvjpegHandle_t, nvjpegJpegDecoder_t, nvjpegJpegState_t,
                                   nvjpegDecodeParams_t, nvjpegJpegStream_t);
  nvjpegStatus_t (*DecodeJpegTransferToDevice)(nvjpegHandle_t, nvjpegJpegDecoder_t,
                                               nvjpegJpegState_t, nvjpegJpegStream_t, CUstream);
  nvjpegStatus_t (*DecodeJpegDevice)(nvjpegHandle_t, nvjpegJpegDecoder_t, nvjpegJpegState_t,
                                     nvjpegImage_t *, CUstream);
} nvjpeg_api;

/* Filled once per process by stk__gpu_load(); the libraries are never
 * closed (other users in the process, PyTorch, share them). */
extern cuda_api stk__cu;
extern nvjpeg_api stk__nj;
extern int stk__cu_ok, stk__nj_ok;            /* each API complete */
extern char stk__cu_why[256], stk__nj_why[512]; /* why not, when not */
extern char stk__nj_lib[1024];                 /* the path of the nvJPEG library opened */

void stk__gpu_load(void); /* thread-safe, idempotent */
const char *stk__cu_name(CUresult r);
const char *stk__cu_str(CUresult r);
const char *stk__nj_status(nvjpegStatus_t s);
/* Errors after which the context is unusable. */
int stk__cu_sticky(CUresult r);

#endif

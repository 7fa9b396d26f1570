#pragma once
// The small part of the CUDA driver ABI that libgpuslice-cuda and its fake libcuda need,
// declared here from the documented driver API so that nothing in gpuslice needs a CUDA
// toolkit to build. Only types, enum values and function-pointer types; no functions.
// Layouts follow the CUDA driver API reference (64-bit Linux, CUDA >= 11.2 ABI).

#include <cstddef>
#include <cstdint>

extern "C" {

typedef int CUresult;  // enum cudaError_enum; int-sized on every supported ABI
typedef unsigned long long CUdeviceptr;  // CUdeviceptr_v2
typedef int CUdevice;
typedef struct CUctx_st* CUcontext;
typedef struct CUstream_st* CUstream;
typedef struct CUmemPoolHandle_st* CUmemoryPool;
typedef struct CUarray_st* CUarray;
typedef struct CUmipmappedArray_st* CUmipmappedArray;
typedef struct CUgraph_st* CUgraph;
typedef struct CUgraphNode_st* CUgraphNode;
typedef unsigned long long CUmemGenericAllocationHandle;
typedef std::uint64_t cuuint64_t;

inline constexpr CUresult CUDA_SUCCESS = 0;
inline constexpr CUresult CUDA_ERROR_INVALID_VALUE = 1;
inline constexpr CUresult CUDA_ERROR_OUT_OF_MEMORY = 2;
inline constexpr CUresult CUDA_ERROR_NOT_FOUND = 500;

// cuGetProcAddress flags (CUdriverProcAddress_flags).
inline constexpr cuuint64_t CU_GET_PROC_ADDRESS_DEFAULT = 0;
inline constexpr cuuint64_t CU_GET_PROC_ADDRESS_LEGACY_STREAM = 1ULL << 0;
inline constexpr cuuint64_t CU_GET_PROC_ADDRESS_PER_THREAD_DEFAULT_STREAM = 1ULL << 1;

// CUdriverProcAddressQueryResult (CUDA 12.0+).
typedef int CUdriverProcAddressQueryResult;
inline constexpr int CU_GET_PROC_ADDRESS_SUCCESS = 0;
inline constexpr int CU_GET_PROC_ADDRESS_SYMBOL_NOT_FOUND = 1;
inline constexpr int CU_GET_PROC_ADDRESS_VERSION_NOT_SUFFICIENT = 2;

// CUarray_format values whose element size is known exactly; others are estimated.
inline constexpr int CU_AD_FORMAT_UNSIGNED_INT8 = 0x01;
inline constexpr int CU_AD_FORMAT_UNSIGNED_INT16 = 0x02;
inline constexpr int CU_AD_FORMAT_UNSIGNED_INT32 = 0x03;
inline constexpr int CU_AD_FORMAT_SIGNED_INT8 = 0x08;
inline constexpr int CU_AD_FORMAT_SIGNED_INT16 = 0x09;
inline constexpr int CU_AD_FORMAT_SIGNED_INT32 = 0x0a;
inline constexpr int CU_AD_FORMAT_HALF = 0x10;
inline constexpr int CU_AD_FORMAT_FLOAT = 0x20;

typedef struct {
  std::size_t Width;
  std::size_t Height;
  int Format;  // CUarray_format
  unsigned int NumChannels;
} CUDA_ARRAY_DESCRIPTOR;  // CUDA_ARRAY_DESCRIPTOR_v2

typedef struct {
  std::size_t Width;
  std::size_t Height;
  std::size_t Depth;
  int Format;  // CUarray_format
  unsigned int NumChannels;
  unsigned int Flags;
} CUDA_ARRAY3D_DESCRIPTOR;  // CUDA_ARRAY3D_DESCRIPTOR_v2

// CUDA_ARRAY3D_DESCRIPTOR::Flags that make Depth a count of layers (or cubemap faces).
inline constexpr unsigned CUDA_ARRAY3D_LAYERED = 0x01;
inline constexpr unsigned CUDA_ARRAY3D_CUBEMAP = 0x04;

// CUmemLocationType
inline constexpr int CU_MEM_LOCATION_TYPE_DEVICE = 0x1;
inline constexpr int CU_MEM_LOCATION_TYPE_HOST = 0x2;

typedef struct {
  int type;  // CUmemLocationType
  int id;
} CUmemLocation;

typedef struct {
  int type;                  // CUmemAllocationType
  int requestedHandleTypes;  // CUmemAllocationHandleType
  CUmemLocation location;
  void* win32HandleMetaData;
  struct {
    unsigned char compressionType;
    unsigned char gpuDirectRDMACapable;
    unsigned short usage;
    unsigned char reserved[4];
  } allocFlags;
} CUmemAllocationProp;

// CUmemPool_attribute: the pool keeps up to this many freed bytes instead of releasing them at a
// synchronisation (value type cuuint64_t; default 0).
inline constexpr int CU_MEMPOOL_ATTR_RELEASE_THRESHOLD = 4;
// CUgraphNodeType of a memory allocation node.
inline constexpr int CU_GRAPH_NODE_TYPE_MEM_ALLOC = 10;

typedef struct {
  int allocType;    // CUmemAllocationType
  int handleTypes;  // CUmemAllocationHandleType
  CUmemLocation location;
  void* win32SecurityAttributes;
  std::size_t maxSize;
  unsigned short usage;
  unsigned char reserved[54];
} CUmemPoolProps;  // CUmemPoolProps_v1

typedef struct {
  CUmemPoolProps poolProps;
  const void* accessDescs;  // const CUmemAccessDesc*
  std::size_t accessDescCount;
  std::size_t bytesize;
  CUdeviceptr dptr;
} CUDA_MEM_ALLOC_NODE_PARAMS;  // _v1 and _v2 have one layout

// CUgraphNodeParams (cuGraphAddNode, CUDA 12.2+): only the allocation member is read, and only
// when `type` says so.
typedef struct {
  int type;  // CUgraphNodeType
  int reserved0[3];
  union {
    long long reserved1[29];
    CUDA_MEM_ALLOC_NODE_PARAMS alloc;
  };
  long long reserved2;
} CUgraphNodeParams;

// Checked against CUDA 13.0's cuda.h (sizeof/offsetof printed there).
static_assert(sizeof(CUmemPoolProps) == 88);
static_assert(offsetof(CUDA_MEM_ALLOC_NODE_PARAMS, bytesize) == 104);
static_assert(offsetof(CUgraphNodeParams, alloc) == 16 && sizeof(CUgraphNodeParams) == 256);

// Signatures of the driver entry points gpuslice intercepts or calls.
typedef CUresult (*PFN_cuMemAlloc_v2)(CUdeviceptr* dptr, std::size_t bytesize);
typedef CUresult (*PFN_cuMemAllocPitch_v2)(CUdeviceptr* dptr, std::size_t* pitch,
                                           std::size_t width_bytes, std::size_t height,
                                           unsigned int element_size_bytes);
typedef CUresult (*PFN_cuMemAllocManaged)(CUdeviceptr* dptr, std::size_t bytesize,
                                          unsigned int flags);
typedef CUresult (*PFN_cuMemAllocAsync)(CUdeviceptr* dptr, std::size_t bytesize, CUstream stream);
typedef CUresult (*PFN_cuMemAllocFromPoolAsync)(CUdeviceptr* dptr, std::size_t bytesize,
                                                CUmemoryPool pool, CUstream stream);
typedef CUresult (*PFN_cuMemFree_v2)(CUdeviceptr dptr);
typedef CUresult (*PFN_cuMemFreeAsync)(CUdeviceptr dptr, CUstream stream);
typedef CUresult (*PFN_cuMemCreate)(CUmemGenericAllocationHandle* handle, std::size_t size,
                                    const CUmemAllocationProp* prop, unsigned long long flags);
typedef CUresult (*PFN_cuMemRelease)(CUmemGenericAllocationHandle handle);
typedef CUresult (*PFN_cuArrayCreate_v2)(CUarray* handle, const CUDA_ARRAY_DESCRIPTOR* desc);
typedef CUresult (*PFN_cuArray3DCreate_v2)(CUarray* handle, const CUDA_ARRAY3D_DESCRIPTOR* desc);
typedef CUresult (*PFN_cuArrayDestroy)(CUarray handle);
typedef CUresult (*PFN_cuMipmappedArrayCreate)(CUmipmappedArray* handle,
                                               const CUDA_ARRAY3D_DESCRIPTOR* desc,
                                               unsigned int levels);
typedef CUresult (*PFN_cuMipmappedArrayDestroy)(CUmipmappedArray handle);
typedef CUresult (*PFN_cuMemGetInfo_v2)(std::size_t* free_bytes, std::size_t* total_bytes);
typedef CUresult (*PFN_cuDeviceTotalMem_v2)(std::size_t* bytes, CUdevice device);
typedef CUresult (*PFN_cuMemPoolSetAttribute)(CUmemoryPool pool, int attr, void* value);
typedef CUresult (*PFN_cuGraphAddMemAllocNode)(CUgraphNode* node, CUgraph graph,
                                               const CUgraphNode* deps, std::size_t num_deps,
                                               CUDA_MEM_ALLOC_NODE_PARAMS* params);
// CUDA 12.2 ABI (exported as "cuGraphAddNode").
typedef CUresult (*PFN_cuGraphAddNode)(CUgraphNode* node, CUgraph graph, const CUgraphNode* deps,
                                       std::size_t num_deps, CUgraphNodeParams* params);
// CUDA 12.3+ ABI with edge data (exported as "cuGraphAddNode_v2").
typedef CUresult (*PFN_cuGraphAddNode_v2)(CUgraphNode* node, CUgraph graph, const CUgraphNode* deps,
                                          const void* edge_data, std::size_t num_deps,
                                          CUgraphNodeParams* params);
typedef CUresult (*PFN_cuGraphDestroy)(CUgraph graph);
// CUDA 11.3-11.8 signature (exported as "cuGetProcAddress").
typedef CUresult (*PFN_cuGetProcAddress)(const char* symbol, void** pfn, int cuda_version,
                                         cuuint64_t flags);
// CUDA 12.0+ signature (exported as "cuGetProcAddress_v2"; cuda.h maps cuGetProcAddress to it).
typedef CUresult (*PFN_cuGetProcAddress_v2)(const char* symbol, void** pfn, int cuda_version,
                                            cuuint64_t flags,
                                            CUdriverProcAddressQueryResult* symbol_status);

}  // extern "C"

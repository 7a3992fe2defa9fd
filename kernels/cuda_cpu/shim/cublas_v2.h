// CPU execution mode (kernels/cuda_cpu): only the cuBLAS types kiln's headers name. No cuBLAS call
// can run in this mode; none is declared, so one in a CPU-mode source fails to compile.
#pragma once
typedef struct cublasContext* cublasHandle_t;
typedef enum { CUBLAS_STATUS_SUCCESS = 0 } cublasStatus_t;

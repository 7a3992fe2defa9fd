// CPU execution mode (kernels/cuda_cpu): only the cuDNN types kiln's headers name. No cuDNN call can
// run in this mode; none is declared, so one in a CPU-mode source fails to compile.
#pragma once
typedef struct cudnnContext* cudnnHandle_t;
typedef enum { CUDNN_STATUS_SUCCESS = 0 } cudnnStatus_t;

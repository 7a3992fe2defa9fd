// <kiln/kiln.h>: all of kiln's public API in one include: tensors and ops (<kiln/tensor.h>), modules
// (<kiln/nn.h>), optimizers (<kiln/optim.h>), tensor files (<kiln/io.h>), data sources (<kiln/data.h>),
// models (<kiln/models.h>), the training layer (<kiln/train.h>), memory (<kiln/memory.h>), a whole run
// (<kiln/run.h>) and the version (<kiln/version.h>).
// Intended usage: #include <kiln/kiln.h>, link kiln::kiln (find_package(kiln CONFIG REQUIRED)); see run.h.
// These headers and what they include are exactly what is installed (include/kiln/); nothing else of the
// source tree is (no kernels/, no tools/: the `layers` and `public headers` tests hold that).
#pragma once

#include "data.h"
#include "io.h"
#include "memory.h"
#include "models.h"
#include "nn.h"
#include "optim.h"
#include "run.h"
#include "tensor.h"
#include "train.h"
#include "version.h"

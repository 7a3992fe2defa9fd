// <kiln/data.h>: data sets and the sources a trainer reads batches from: arrays (IDX, .npy, in memory),
// image folders and CSV lists decoded by a threaded loader, images of mixed sizes in size buckets,
// segmentation masks; writing JPEGs.
// Intended usage:
//   kiln::ImageDataOptions o;  o.data = "FOLDER";  o.image.image_size = "64";
//   kiln::TrainData d = kiln::open_image_train_data(o, kiln::Device::cpu());   // d.train, d.val
//   d.train->start_epoch(0, 32, true);
//   for (kiln::SourceBatch b; d.train->next(&b);) { ... }   // b.x: (B, C, 64, 64) f32, b.y: (B) i64
// Declares nothing itself.
#pragma once

#include "data/array_dataset.h"
#include "data/array_source.h"
#include "data/batch_plan.h"
#include "data/bucketed_image_source.h"
#include "data/data_source.h"
#include "data/dataset.h"
#include "data/image_options.h"
#include "data/image_source.h"
#include "data/jpeg_encode.h"
#include "data/mask_array_source.h"
#include "tensor.h"

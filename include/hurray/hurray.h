/*
 * hurray/hurray.h - the whole public C API of libhurray.
 *
 *   hurray/common.h      status codes, HurrayError, versions, limits
 *   hurray/dtype.h       element types and their packing
 *   hurray/descriptor.h  the tensor descriptor: builder, accessors, codec,
 *                        validation
 *   hurray/buffer.h      HurrayBuffer, HurrayBufferList (C ABI v3) and
 *                        buffer placement validation
 */
#ifndef HURRAY_HURRAY_H
#define HURRAY_HURRAY_H

#include "hurray/common.h"
#include "hurray/dtype.h"
#include "hurray/descriptor.h"
#include "hurray/buffer.h"
#include "hurray/io.h"
#include "hurray/byte_source.h"
#include "hurray/quant.h"
#include "hurray/convert.h"

#endif /* HURRAY_HURRAY_H */

"""Memory-latency helpers for the streaming kernels: software prefetch and aligned rows.

On graphs larger than the cache, the per-edge kernels (structural clustering,
assignment) wait on random reads of per-vertex state, not on arithmetic. The out-of-
order core overlaps those reads only within its instruction window, which a long loop
body (all-k scoring) exceeds. So the kernels issue a prefetch for the endpoints of the
edge a fixed distance ahead in the stream; the hint never faults and never changes a
result, only when the cache line arrives.

On a graph much larger than the cache this more than doubles the kernels' rate, with
identical assignments; the distance and the packing of the state in rows
(:class:`asepr.pipeline.stages.struct_cluster.ClusterState`) were chosen by measurement
(``docs/results/implementation-choices/README.md``).

NumPy aligns large arrays to 16 bytes, so a 64-byte row of the packed assignment state
would straddle two cache lines; :func:`aligned_zeros` keeps each row on one.
"""

from __future__ import annotations

import numpy as np
from llvmlite import ir
from numba import types
from numba.core import cgutils
from numba.extending import intrinsic

__all__ = ["PREFETCH_DISTANCE", "aligned_zeros", "prefetch_write"]

#: How many edges ahead the kernels prefetch their endpoints' state.
PREFETCH_DISTANCE = 16

_CACHE_LINE = 64


@intrinsic
def prefetch_write(typingctx, array, index):
    """``prefetch_write(array, i)``: bring the cache line of ``array[i]`` (a row, for 2-D)
    toward the core, for a kernel about to modify it (both kernels update the rows they
    read). A hint only: it never faults and changes no result."""
    if not isinstance(array, types.Array) or not isinstance(index, types.Integer):
        return None
    sig = types.void(array, index)

    def codegen(context, builder, signature, args):
        array_type = signature.args[0]
        ary = context.make_array(array_type)(context, builder, args[0])
        strides = cgutils.unpack_tuple(builder, ary.strides, array_type.ndim)
        offset = builder.mul(context.cast(builder, args[1], signature.args[1], types.intp),
                             strides[0])
        address = builder.add(builder.ptrtoint(ary.data, ir.IntType(64)), offset)
        i8p = ir.IntType(8).as_pointer()
        i32 = ir.IntType(32)
        fnty = ir.FunctionType(ir.VoidType(), [i8p, i32, i32, i32])
        fn = cgutils.get_or_insert_function(builder.module, fnty, "llvm.prefetch.p0")
        # (address, rw = 1 write, locality 3 = keep in all cache levels, data cache)
        builder.call(fn, [builder.inttoptr(address, i8p), ir.Constant(i32, 1),
                          ir.Constant(i32, 3), ir.Constant(i32, 1)])
        return context.get_dummy_value()

    return sig, codegen


def aligned_zeros(shape: tuple[int, ...], dtype=np.int64) -> np.ndarray:
    """A C-contiguous zero array whose data starts on a 64-byte (cache line) boundary."""
    dtype = np.dtype(dtype)
    count = int(np.prod(shape, dtype=np.int64))
    pad = _CACHE_LINE // dtype.itemsize
    raw = np.zeros(count + pad, dtype=dtype)
    start = (-raw.ctypes.data % _CACHE_LINE) // dtype.itemsize
    return raw[start:start + count].reshape(shape)

"""Reference-count-free array views for the kernel loop.

numba counts a reference (an atomic add and its release) each time an array is passed
to an inlined function; inside a loop that does not simplify away, that is one pair
per array and edge. :func:`borrowed` returns a view of an array without a reference
count (a null meminfo: numba skips it), so the choice functions take arrays for free.
A borrowed view is valid only while its owner is alive: function arguments are (their
caller holds them), and an array the kernel allocates must stay referenced to the end,
which :func:`keep_alive` marks.
"""

from __future__ import annotations

from numba import types
from numba.core import cgutils
from numba.extending import intrinsic

__all__ = ["borrowed", "keep_alive"]


@intrinsic
def borrowed(typingctx, array):
    """``borrowed(a)``: ``a`` as a view without a reference count (same data, shape, type)."""
    if not isinstance(array, types.Array):
        return None

    def codegen(context, builder, signature, args):
        source = context.make_array(array)(context, builder, value=args[0])
        view = context.make_array(array)(context, builder)
        view.meminfo = cgutils.get_null_value(view.meminfo.type)
        view.parent = cgutils.get_null_value(view.parent.type)
        view.nitems = source.nitems
        view.itemsize = source.itemsize
        view.data = source.data
        view.shape = source.shape
        view.strides = source.strides
        return view._getvalue()

    return array(array), codegen


@intrinsic
def keep_alive(typingctx, array):
    """``keep_alive(a)``: a use of ``a`` that emits no code, so ``a`` lives until this point."""
    if not isinstance(array, types.Array):
        return None

    def codegen(context, builder, signature, args):
        return context.get_dummy_value()

    return types.void(array), codegen

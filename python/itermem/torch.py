"""PyTorch's pluggable allocator through itermem, without ``LD_PRELOAD``.

``itermem.torch.use()`` must run before torch allocates CUDA memory: torch cannot swap an
allocator that has served a block. The ``ITERMEM_*`` variables (README) apply as under
``itermem run``; ``mode`` and ``limit`` set ``ITERMEM_MODE`` and ``ITERMEM_LIMIT``.
"""

import os

from itermem import library_path

__all__ = ["use"]

_MODES = ("off", "record", "pool", "swap", "cnmem")


def use(mode=None, limit=None):
    """Route torch's CUDA allocations through ``itermem_malloc``/``itermem_free``.

    ``mode``: one of off, record, pool, swap, cnmem (default: ``ITERMEM_MODE``, else record);
    ``limit``: swap mode's device limit, bytes (``6G``, ``6000000``) or a percentage (``70%``).
    Returns torch's ``CUDAPluggableAllocator``. Raises ``RuntimeError`` saying why it cannot:
    PyTorch is not installed, or it has already allocated CUDA memory.
    """
    if mode is not None and mode not in _MODES:
        raise ValueError("itermem.torch.use: mode must be one of %s, not %r" % (", ".join(_MODES), mode))
    try:
        import torch
    except ImportError as error:
        raise RuntimeError("itermem.torch.use() needs PyTorch, which is not installed") from error
    # The library reads its configuration when torch loads it, below.
    if mode is not None:
        os.environ["ITERMEM_MODE"] = mode
    if limit is not None:
        os.environ["ITERMEM_LIMIT"] = str(limit)
    allocator = torch.cuda.memory.CUDAPluggableAllocator(library_path(), "itermem_malloc", "itermem_free")
    try:
        torch.cuda.memory.change_current_allocator(allocator)
    except RuntimeError as error:
        raise RuntimeError(
            "itermem.torch.use() must run before torch allocates CUDA memory "
            "(torch cannot change an allocator that is in use): %s" % error
        ) from error
    return allocator

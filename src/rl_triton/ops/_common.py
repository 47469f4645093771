"""Plumbing shared by the public functions."""

from __future__ import annotations

import torch


def needs_grad(*tensors: torch.Tensor | None) -> bool:
    """True when autograd will want gradients of any of ``tensors``.

    Reads the grad mode once and stops at the first tensor that requires grad: this runs on every
    call, so no generator and no ``any``.
    """
    if not torch.is_grad_enabled():
        return False
    for tensor in tensors:
        if tensor is not None and tensor.requires_grad:
            return True
    return False

"""What `SimTensor.__torch_dispatch__` needs to know about each operation, worked out once.

Most operations are run as they are on the CPU tensors behind simulated ones. The
tables below name those that need more: copies between devices, the few whose CUDA
kernels take a tensor on the CPU by design, indexing, in-place shape changes,
foreach operations over lists that span devices, those that would make a sparse
gradient (refused), and the kernels the CPU lacks (`learn_parallel.sim.kernels`).
Autocast's lists, applied in `SimTensor.__torch_function__`, are here too.
"""

from __future__ import annotations

from typing import Any

import torch

from learn_parallel.sim.kernels import ACCELERATOR_ONLY, RANDOM_WITHOUT_GENERATOR

_aten = torch.ops.aten
# In-place operations that change only a tensor's shape and strides.
_METADATA_IN_PLACE = {
    _aten.transpose_,
    _aten.t_,
    _aten.squeeze_,
    _aten.unsqueeze_,
    _aten.swapdims_,
    _aten.swapaxes_,
    _aten.as_strided_,
}
# Operations that move data between devices: their tensors may sit anywhere.
_TRANSFERS = {_aten.copy_.default, _aten._to_copy.default, _aten._copy_from.default}
# Operations whose CUDA kernels take (or give) one tensor on the CPU by design: the
# lengths or batch sizes of a packed sequence. Position of that argument / result.
_CPU_ARGUMENT = {
    _aten._pack_padded_sequence.default: 1,
    _aten._pad_packed_sequence.default: 1,
    _aten._pack_padded_sequence_backward.default: 2,
}
_CPU_RESULT = {_aten._pack_padded_sequence.default: 1}
# Indexing, reading and writing: CUDA takes index tensors and boolean masks on the
# CPU (argument 1, a list) as well as on the indexed tensor's device.
_INDEXING = {
    _aten.index.Tensor,
    _aten.index_put.default,
    _aten.index_put_.default,
    _aten._index_put_impl_.default,
    _aten._unsafe_index.Tensor,
    _aten._unsafe_index_put.default,
}

# Operations whose backward makes a sparse gradient when a flag asks for it. A sparse tensor
# cannot live on a simulated device, and an error raised inside backward would end the
# process: so the forward refuses, while the flag can still matter (grad on, weight trained).
_SPARSE_GRADIENT_FLAG = {
    _aten.embedding.default: ("sparse", "nn.Embedding"),
    _aten._embedding_bag.default: ("sparse", "nn.EmbeddingBag"),
    _aten.gather.default: ("sparse_grad", "torch.gather"),
}


def _refusing_sparse_gradient(func: Any) -> Any:
    flag, where = _SPARSE_GRADIENT_FLAG[func]
    position = [a.name for a in func._schema.arguments].index(flag)

    def refuse(args: tuple, kwargs: dict) -> None:
        asked = args[position] if position < len(args) else (kwargs or {}).get(flag, False)
        if asked and args[0].requires_grad and torch.is_grad_enabled():
            raise RuntimeError(
                f"{where} with {flag}=True on a simulated device: its backward would make a "
                f"sparse gradient, and simulated devices hold dense tensors only. Pass "
                f"{flag}=False (the gradient is then dense, with the same values), or run on GPUs."
            )

    return refuse


# Autocast on simulated devices: CPU autocast's lists, for the common operations.
_F = torch.nn.functional
_LOW = [torch.matmul, torch.mm, torch.bmm, torch.addmm, torch.baddbmm, torch.addbmm, _F.linear]
_LOW += [torch.Tensor.matmul, torch.Tensor.__matmul__, torch.Tensor.mm, torch.Tensor.bmm]
_LOW += [_F.conv1d, _F.conv2d, _F.conv3d, _F.conv_transpose1d, _F.conv_transpose2d]
_LOW += [_F.conv_transpose3d, _F.prelu, _F.scaled_dot_product_attention]
_FP32 = [_F.mse_loss, _F.cross_entropy, _F.nll_loss, _F.l1_loss, _F.smooth_l1_loss]
_FP32 += [_F.huber_loss, _F.kl_div, _F.binary_cross_entropy, _F.binary_cross_entropy_with_logits]
AUTOCAST_TO: dict[Any, Any] = {f: "low" for f in _LOW} | {f: torch.float32 for f in _FP32}


class Plan:
    """What `SimTensor.__torch_dispatch__` needs to know about one operation, worked out once."""

    __slots__ = (
        "func",
        "transfer",
        "cpu_argument",
        "cpu_result",
        "indexing",
        "foreach",
        "device",
        "generator",
        "draw",
        "kernel",
        "metadata_in_place",
        "view",
        "refuse",
    )

    def __init__(self, func: Any) -> None:
        names = {a.name for a in func._schema.arguments}
        self.func = func  # kept alive, so its id() stays its own
        self.transfer = func in _TRANSFERS
        self.cpu_argument = _CPU_ARGUMENT.get(func)
        self.cpu_result = _CPU_RESULT.get(func)
        self.indexing = func in _INDEXING
        self.foreach = func.__name__.startswith("_foreach_")
        self.device = "device" in names
        self.generator = "generator" in names
        self.draw = RANDOM_WITHOUT_GENERATOR.get(func.overloadpacket)
        self.kernel = ACCELERATOR_ONLY.get(func, func)
        self.metadata_in_place = func.overloadpacket in _METADATA_IN_PLACE
        # A view shares its input's storage, already counted: no memory tracking needed.
        returns = func._schema.returns
        self.view = bool(returns) and returns[0].alias_info is not None
        # Checks the arguments and raises before anything runs; None for nearly every op.
        self.refuse = _refusing_sparse_gradient(func) if func in _SPARSE_GRADIENT_FLAG else None


plans: dict[int, Plan] = {}


def new_plan(func: Any) -> Plan:
    """The plan of ``func``, worked out on its first call and kept for the next ones."""
    plan = plans[id(func)] = Plan(func)
    return plan


def foreach_per_device(func: Any, args: tuple, kwargs: dict, given: dict) -> Any:
    """A foreach operation over lists that span devices, run once per device (CUDA falls back
    to a per-tensor path there: the same results)."""
    lists = [i for i, a in enumerate(args) if type(a) in (list, tuple) and len(a) == len(args[0])]
    groups: dict[Any, list[int]] = {}
    for i, t in enumerate(args[0]):
        groups.setdefault(t.device, []).append(i)
    kwargs = {k: given.get(id(v), v) for k, v in kwargs.items()}  # wrapped again
    results: list[Any] = [None] * len(args[0])
    for picked in groups.values():
        part = [[a[i] for i in picked] if n in lists else a for n, a in enumerate(args)]
        out = func(*part, **kwargs)
        for i, r in zip(picked, out or ()):
            results[i] = r
    return results if func._schema.returns else None  # in-place ones return nothing

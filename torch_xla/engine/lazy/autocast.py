"""torch.autocast("xla"): PyTorch leaves a PrivateUse1 backend's autocast key
empty, so this registers a fallthrough for every op and a casting kernel for
each op of the policy, the one upstream's AutocastXLA key uses:

  LOWER    run in the autocast dtype (bfloat16 by default, float16 when asked):
           matmuls, convolutions, attention, relu/prelu, max_pool2d
  FP32     run in float32: softmax/log_softmax, the losses, norms, exp/log/pow
           and the other range-sensitive math, the linear-algebra solvers
  PROMOTE  run in the widest floating dtype of their inputs: cat, stack, index_copy

Only out-of-place overloads are wrapped (in-place and out= run as written).
float64 tensors are never cast. An FP32 op given an explicit `dtype=` keeps it.
"""
import torch

LOWER = ("mm", "bmm", "addmm", "addbmm", "baddbmm", "matmul", "linear", "conv1d", "conv2d", "conv3d",
         "conv_tbc", "conv_transpose1d", "conv_transpose2d", "conv_transpose3d", "prelu", "relu",
         "max_pool2d", "einsum", "scaled_dot_product_attention", "dot", "mv", "addmv", "addr", "outer",
         "chain_matmul", "linalg_vecdot")
FP32 = (
    # softmax family
    "_softmax", "softmax", "log_softmax", "logsumexp",
    # losses
    "binary_cross_entropy", "binary_cross_entropy_with_logits", "mse_loss", "l1_loss", "smooth_l1_loss",
    "huber_loss", "nll_loss", "nll_loss2d", "cross_entropy_loss", "cosine_embedding_loss",
    "hinge_embedding_loss", "margin_ranking_loss", "soft_margin_loss", "triplet_margin_loss",
    "multi_margin_loss", "multilabel_margin_loss", "multilabel_margin_loss_forward", "kl_div", "ctc_loss",
    "poisson_nll_loss",
    # norms
    "batch_norm", "layer_norm", "group_norm", "norm", "frobenius_norm", "nuclear_norm",
    "linalg_vector_norm", "renorm", "cosine_similarity", "dist", "cdist", "pdist",
    # exp/log/pow and other range-sensitive math
    "exp", "expm1", "log", "log10", "log2", "log1p", "pow", "reciprocal", "rsqrt", "acos", "asin",
    "cosh", "sinh", "tan", "erfinv", "softplus", "prod", "trace",
    # padding modes and linear algebra
    "reflection_pad1d", "reflection_pad2d", "replication_pad1d", "replication_pad2d", "replication_pad3d",
    "cholesky", "cholesky_inverse", "cholesky_solve", "inverse", "qr", "svd", "triangular_solve",
    "linalg_svd", "linalg_inv_ex")
PROMOTE = ("cat", "stack", "index_copy")

_libs = []
_KEY = torch._C.DispatchKey.AutocastPrivateUse1
_EXCLUDE = torch._C.DispatchKeySet(_KEY)
_LOW = (torch.float16, torch.bfloat16)


def _eligible(a):
    return (isinstance(a, torch.Tensor) and a.device.type == "xla" and a.is_floating_point()
            and a.dtype != torch.float64)


def _cast(a, dt, only=None):
    """Cast XLA floating tensors (not float64) in a (nested) argument to dt;
    `only`: cast only tensors of these dtypes."""
    if isinstance(a, torch.Tensor):
        if _eligible(a) and a.dtype != dt and (only is None or a.dtype in only):
            return a.to(dt)
        return a
    if isinstance(a, (list, tuple)):
        return type(a)(_cast(x, dt, only) for x in a)
    return a


def _widest(args, kwargs):
    found = []

    def visit(a):
        if isinstance(a, torch.Tensor):
            if _eligible(a):
                found.append(a.dtype)
        elif isinstance(a, (list, tuple)):
            for x in a:
                visit(x)
    visit(args)
    visit(tuple(kwargs.values()))
    dt = None
    for d in found:
        dt = d if dt is None else torch.promote_types(dt, d)
    return dt


def _lower_kernel(op):
    def kernel(*args, **kwargs):
        dt = torch.get_autocast_dtype("xla")
        with torch._C._ExcludeDispatchKeyGuard(_EXCLUDE):
            return op(*_cast(args, dt), **{k: _cast(v, dt) for k, v in kwargs.items()})
    return kernel


def _fp32_kernel(op, dtype_pos):
    def kernel(*args, **kwargs):
        explicit = kwargs.get("dtype") is not None or (
            dtype_pos is not None and len(args) > dtype_pos and args[dtype_pos] is not None)
        with torch._C._ExcludeDispatchKeyGuard(_EXCLUDE):
            if explicit:
                return op(*args, **kwargs)
            f = torch.float32
            return op(*_cast(args, f, _LOW), **{k: _cast(v, f, _LOW) for k, v in kwargs.items()})
    return kernel


def _promote_kernel(op):
    def kernel(*args, **kwargs):
        dt = _widest(args, kwargs)
        with torch._C._ExcludeDispatchKeyGuard(_EXCLUDE):
            if dt is None:
                return op(*args, **kwargs)
            return op(*_cast(args, dt), **{k: _cast(v, dt) for k, v in kwargs.items()})
    return kernel


def _overloads(name):
    packet = getattr(torch.ops.aten, name, None)
    if packet is None:
        return
    for ov in packet.overloads():
        op = getattr(packet, ov)
        if any(a.alias_info is not None and a.alias_info.is_write for a in op._schema.arguments):
            continue  # out= variants
        yield (name if ov == "default" else f"{name}.{ov}"), op


def _dtype_pos(op):
    for i, a in enumerate(op._schema.arguments):
        if a.name == "dtype" and not a.kwarg_only:
            return i
    return None


def policy(name):
    """'lower', 'fp32', 'promote' or None: what autocast does with aten op `name`."""
    return "lower" if name in LOWER else "fp32" if name in FP32 else "promote" if name in PROMOTE else None


def register():
    fall = torch.library.Library("_", "IMPL", "AutocastPrivateUse1")
    fall.fallback(torch.library.fallthrough_kernel)
    _libs.append(fall)
    lib = torch.library.Library("aten", "IMPL", "AutocastPrivateUse1")
    _libs.append(lib)
    for names, make in ((LOWER, lambda op: _lower_kernel(op)),
                        (FP32, lambda op: _fp32_kernel(op, _dtype_pos(op))),
                        (PROMOTE, lambda op: _promote_kernel(op))):
        for name in names:
            for full, op in _overloads(name):
                try:
                    lib.impl(full, make(op))
                except RuntimeError:
                    pass
    # upstream's XLA autocast computes in bfloat16 unless told otherwise
    try:
        torch.set_autocast_dtype("xla", torch.bfloat16)
    except (RuntimeError, TypeError):
        pass

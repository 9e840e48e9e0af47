"""Matrix products. Accumulation follows the output dtype (ctx)."""
import jax.numpy as jnp
from jax import lax

from .context import out_dtype
from .numerics import cast
from .registry import ctx, lower, vjp_of



def _prec(dt):
    # full float32 precision on GPU/TPU too: PyTorch's default for matmul parity
    return lax.Precision.HIGHEST if dt == jnp.float32 else None


def _mm(a, b, acc=None):
    """acc: the result's dtype (the unrounded accumulation), None: the output dtype."""
    dt = out_dtype()
    return jnp.matmul(a.astype(dt), b.astype(dt), precision=_prec(dt), preferred_element_type=acc)


def _acc(dt):
    """Half types: products and the bias sum in float32, rounded once (eager's
    opmath, and its fused bias)."""
    return jnp.dtype(jnp.float32) if dt in (jnp.bfloat16, jnp.float16) else None


@lower("mm", "bmm", "matmul", "dot", "mv", "vdot", "inner")
def _product(a, b):
    if not (a.ndim and b.ndim):
        return a * b
    # XLA:GPU reduces a small half-precision product (a dot it strength-reduces) in the
    # half type; eager's kernels accumulate in float32 and round once. Elsewhere the dot
    # stays in the half type (XLA:CPU and TPU accumulate wider; upstream's HLO has it so)
    acc = _acc(out_dtype()) if ctx.platform == "cuda" else None
    return _mm(a, b, acc) if acc is None else _mm(a, b, acc).astype(out_dtype())


def _is(v, c):
    """v is the Python number c (traced scalar operands never are)."""
    return isinstance(v, (int, float)) and v == c


def _scaled_sum(prod, bias, beta, alpha, dt, blas=False):
    """beta * bias + alpha * prod. `blas`: eager reaches a BLAS gemm, which skips
    the product when alpha == 0 (NaN and inf in the operands do not reach the
    result)."""
    if blas and _is(alpha, 0):
        out = jnp.zeros(prod.shape, dt)
    else:
        out = prod if _is(alpha, 1) else prod * jnp.asarray(alpha, dt)
    if _is(beta, 0):  # beta == 0 ignores bias (even NaN), as PyTorch does
        return out
    return out + (bias.astype(dt) if _is(beta, 1) else bias.astype(dt) * jnp.asarray(beta, dt))


def _blas(dt, complex_ok=True):
    """eager's float32 / float64 (and complex) products go through BLAS; its half
    types do not."""
    dt = jnp.dtype(dt)
    return dt in (jnp.float32, jnp.float64) or (complex_ok and jnp.issubdtype(dt, jnp.complexfloating))


@lower("addmm", "addmv", "addbmm")
def _addmm(bias, a, b, beta=1, alpha=1):
    dt = out_dtype()
    acc = _acc(dt)
    prod = _mm(a, b, acc)
    if prod.ndim == 3:
        prod = prod.sum(0)
    blas = _blas(dt, complex_ok=b.ndim > 1)   # eager's complex addmv has a loop of its own
    return _scaled_sum(prod, bias, beta, alpha, acc or dt, blas).astype(dt)


@lower("baddbmm")
def _baddbmm(bias, a, b, beta=1, alpha=1):
    dt = out_dtype()
    acc = _acc(dt)
    # eager multiplies small batches (rows * cols * contraction < 400) in a loop of
    # its own, larger ones through BLAS
    blas = _blas(dt) and a.shape[-2] * a.shape[-1] * b.shape[-1] >= 400
    return _scaled_sum(_mm(a, b, acc), bias, beta, alpha, acc or dt, blas).astype(dt)


@lower("addr")
def _addr(bias, a, b, beta=1, alpha=1):
    dt = out_dtype()
    prod = jnp.outer(a.astype(dt), b.astype(dt))
    if dt == jnp.bool_:
        out = prod if _is(alpha, 1) else prod & jnp.asarray(alpha, dt)
        return out if _is(beta, 0) else out | (bias.astype(dt) & jnp.asarray(beta, dt))
    return _scaled_sum(prod, bias, beta, alpha, dt)


@lower("outer", "ger")
def _outer(a, b):
    dt = out_dtype()
    return jnp.outer(a.astype(dt), b.astype(dt))


# -- linear algebra (jnp.linalg / jax.scipy.linalg / lax.linalg) ----------------

import jax  # noqa: E402
import numpy as np  # noqa: E402
from jax import lax as _lax  # noqa: E402



def _info(i=1):
    return jnp.zeros(ctx.entry.out_shape(i), ctx.entry.out_dtype(i))


def _mT(x):
    return jnp.swapaxes(x, -1, -2)


def _mH(x):
    return jnp.conj(_mT(x)) if jnp.iscomplexobj(x) else _mT(x)


@lower("linalg_inv_ex")
def _inv_ex(a, check_errors=False):
    return jnp.linalg.inv(a), _info()


@lower("linalg_cholesky_ex")
def _cholesky_ex(a, upper=False, check_errors=False):
    l = jnp.linalg.cholesky(a)
    return (_mH(l) if upper else l), _info()


@lower("cholesky")
def _cholesky(a, upper=False):
    l = jnp.linalg.cholesky(a)
    return _mH(l) if upper else l


@lower("linalg_solve_triangular")
def _solve_triangular(a, b, *, upper, left=True, unitriangular=False):
    dt = out_dtype()
    return _lax.linalg.triangular_solve(a.astype(dt), b.astype(dt), left_side=left, lower=not upper,
                                        unit_diagonal=unitriangular)


@lower("triangular_solve")
def _triangular_solve(b, a, upper=True, transpose=False, unitriangular=False):
    x = _lax.linalg.triangular_solve(a, b, left_side=True, lower=not upper, transpose_a=transpose,
                                     unit_diagonal=unitriangular)
    return x, a


@lower("cholesky_solve")
def _cholesky_solve(b, l, upper=False):
    lower_ = not upper
    y = _lax.linalg.triangular_solve(l, b, left_side=True, lower=lower_, transpose_a=not lower_,
                                     conjugate_a=not lower_ and jnp.iscomplexobj(l))
    return _lax.linalg.triangular_solve(l, y, left_side=True, lower=lower_, transpose_a=lower_,
                                        conjugate_a=lower_ and jnp.iscomplexobj(l))


@lower("cholesky_inverse")
def _cholesky_inverse(l, upper=False):
    eye = jnp.broadcast_to(jnp.eye(l.shape[-1], dtype=l.dtype), l.shape)
    return _cholesky_solve(eye, l, upper)


@lower("linalg_matrix_exp")
def _matrix_exp(a):
    # float32 Pade in XLA drifts ~1e-4 relative from eager's; float64 then one rounding matches
    if a.dtype == jnp.float32 and ctx.platform != "tpu" and jax.config.jax_enable_x64:
        return jax.scipy.linalg.expm(a.astype(jnp.float64)).astype(a.dtype)
    return jax.scipy.linalg.expm(a)


def _lu_diag_and_sign(a):
    """LU of a -> (lu, pivots, diagonal of U, sign of the row permutation)."""
    lu, piv, _ = _lax.linalg.lu(a)
    d = jnp.diagonal(lu, axis1=-2, axis2=-1)
    swaps = jnp.sum(piv != jnp.arange(a.shape[-1], dtype=piv.dtype), axis=-1)
    return lu, piv, d, jnp.where(swaps % 2 == 0, 1, -1).astype(d.dtype)


@lower("_linalg_det")
def _linalg_det(a):
    lu, piv, d, sign = _lu_diag_and_sign(a)
    return sign * jnp.prod(d, axis=-1), lu, (piv + 1).astype(ctx.entry.out_dtype(2))


@lower("_linalg_slogdet")
def _linalg_slogdet(a):
    lu, piv, d, perm_sign = _lu_diag_and_sign(a)
    if jnp.iscomplexobj(a):
        sign = perm_sign * jnp.prod(d / jnp.abs(d), axis=-1)
    else:
        sign = perm_sign * jnp.prod(jnp.sign(d), axis=-1)
    logabs = jnp.sum(jnp.log(jnp.abs(d)), axis=-1)
    return sign, logabs.astype(ctx.entry.out_dtype(1)), lu, (piv + 1).astype(ctx.entry.out_dtype(3))


@lower("linalg_lu_factor_ex")
def _lu_factor_ex(a, pivot=True, check_errors=False):
    lu, piv, _ = _lax.linalg.lu(a)
    return lu, (piv + 1).astype(ctx.entry.out_dtype(1)), _info(2)


@lower("linalg_lu")
def _linalg_lu(a, pivot=True):
    lu, _, perm = _lax.linalg.lu(a)
    m, n = a.shape[-2], a.shape[-1]
    k = min(m, n)
    l = jnp.tril(lu[..., :, :k], -1) + jnp.eye(m, k, dtype=a.dtype)
    u = jnp.triu(lu[..., :k, :])
    p = jax.nn.one_hot(perm, m, dtype=a.dtype)  # P^T rows
    return _mT(p), l, u


def _pnorm_last(diff, p):
    """p-norm over the last axis with zero gradient at 0 (PyTorch's convention)."""
    a = jnp.abs(diff)
    if p == 0:
        return jnp.sum((a != 0).astype(diff.dtype), axis=-1)
    if p == float("inf"):
        return jnp.max(a, axis=-1)
    if p == 1:
        return jnp.sum(a, axis=-1)
    s = jnp.sum(a ** p, axis=-1)
    zero = s == 0
    safe = jnp.where(zero, jnp.ones((), s.dtype), s)
    return jnp.where(zero, jnp.zeros((), s.dtype), safe ** (1.0 / p))


def _cdist(x1, x2, p):
    return _pnorm_last(x1[..., :, None, :] - x2[..., None, :, :], p)


@lower("_cdist_forward")
def _cdist_forward(x1, x2, p, compute_mode=None):
    return _cdist(x1, x2, p).astype(out_dtype())


@lower("_cdist_backward")
def _cdist_backward(grad, x1, x2, p, cdist):
    if p in (1.0, float("inf")):
        diff = x1[..., :, None, :] - x2[..., None, :, :]
        w = jnp.sign(diff)
        if p != 1.0:  # every coordinate that attains the max, no splitting
            w = w * cast(jnp.abs(diff) == cdist[..., None], diff.dtype)
        return jnp.sum(grad[..., None].astype(x1.dtype) * w, axis=-2)
    return vjp_of(lambda a: _cdist(a, x2, p), (x1,), grad)[0]


def _pdist(x, p):
    n = x.shape[0]
    i, j = np.triu_indices(n, 1)
    return _pnorm_last(x[i] - x[j], p)


@lower("_pdist_forward")
def _pdist_forward(x, p=2.0):
    return _pdist(x, p).astype(out_dtype())


@lower("_pdist_backward")
def _pdist_backward(grad, x, p, pdist):
    return vjp_of(lambda a: _pdist(a, p), (x,), grad)[0]


@lower("linalg_qr")
def _linalg_qr(a, mode="reduced"):
    if mode == "r":
        r = jnp.linalg.qr(a, mode="r")
        return jnp.zeros((0,), a.dtype), r
    q, r = jnp.linalg.qr(a, mode="complete" if mode == "complete" else "reduced")
    return q, r


@lower("_linalg_eigh")
def _linalg_eigh(a, UPLO="L", compute_v=True):
    w, v = jnp.linalg.eigh(a, UPLO=UPLO, symmetrize_input=False)
    if not compute_v:
        return w, jnp.zeros((0,), a.dtype)
    return w, v


@lower("_linalg_svd")
def _linalg_svd(a, full_matrices=False, compute_uv=True, driver=None):
    if not compute_uv:
        s = jnp.linalg.svd(a, compute_uv=False)
        return jnp.zeros((0,), a.dtype), s, jnp.zeros((0,), a.dtype)
    u, s, vh = jnp.linalg.svd(a, full_matrices=full_matrices)
    return u, s, vh


def _lu_solve_perm(lu, perm, b, left=True, adjoint=False):
    """Solve A X = B (left) or X A = B with A = P L U given as (lu, perm)."""
    if not left:
        # X A = B  <=>  A^H X^H = B^H
        return _mH(_lu_solve_perm(lu, perm, _mH(b), True, not adjoint))
    if not adjoint:
        pb = jnp.take_along_axis(b, jnp.broadcast_to(perm[..., :, None], perm.shape + (b.shape[-1],)), axis=-2) \
            if b.ndim == perm.ndim + 1 else b[perm]
        y = _lax.linalg.triangular_solve(lu, pb, left_side=True, lower=True, unit_diagonal=True)
        return _lax.linalg.triangular_solve(lu, y, left_side=True, lower=False)
    # A^H X = B: U^H L^H P^T X = B
    conj = jnp.iscomplexobj(lu)
    y = _lax.linalg.triangular_solve(lu, b, left_side=True, lower=False, transpose_a=True, conjugate_a=conj)
    z = _lax.linalg.triangular_solve(lu, y, left_side=True, lower=True, unit_diagonal=True, transpose_a=True,
                                     conjugate_a=conj)
    inv = jnp.argsort(perm, axis=-1)
    return jnp.take_along_axis(z, jnp.broadcast_to(inv[..., :, None], inv.shape + (z.shape[-1],)), axis=-2)


def _batch_to(x, shape):
    return jnp.broadcast_to(x, shape + x.shape[-2:]) if x.shape[:-2] != shape else x


@lower("_linalg_solve_ex")
def _linalg_solve_ex(a, b, left=True, check_errors=False):
    dt = out_dtype()
    a, b = a.astype(dt), b.astype(dt)
    lu, piv, perm = _lax.linalg.lu(a)
    vector = ctx.entry.out_shape(0) == tuple(b.shape) and b.ndim == a.ndim - 1 or b.ndim == 1
    bb = b[..., None] if vector else b
    batch = jnp.broadcast_shapes(a.shape[:-2], bb.shape[:-2])
    x = _lu_solve_perm(_batch_to(lu, batch), jnp.broadcast_to(perm, batch + perm.shape[-1:]), _batch_to(bb, batch), left)
    if vector:
        x = x[..., 0]
    return x.reshape(ctx.entry.out_shape(0)), lu, (piv + 1).astype(ctx.entry.out_dtype(2)), _info(3)


def _perm_from_pivots(pivots, m):
    return _lax.linalg.lu_pivots_to_permutation(pivots.astype(jnp.int32) - 1, m)


@lower("linalg_lu_solve")
def _linalg_lu_solve(lu, pivots, b, *, left=True, adjoint=False):
    m = lu.shape[-2]
    perm = _perm_from_pivots(pivots, m)
    batch = jnp.broadcast_shapes(lu.shape[:-2], b.shape[:-2])
    return _lu_solve_perm(_batch_to(lu, batch), jnp.broadcast_to(perm, batch + perm.shape[-1:]), _batch_to(b, batch),
                          left, adjoint)


@lower("lu_unpack")
def _lu_unpack(lu, pivots, unpack_data=True, unpack_pivots=True):
    m, n = lu.shape[-2], lu.shape[-1]
    k = min(m, n)
    if unpack_pivots:
        perm = _perm_from_pivots(pivots, m)
        p = _mT(jax.nn.one_hot(perm, m, dtype=lu.dtype))
    else:
        p = jnp.zeros(ctx.entry.out_shape(0), lu.dtype)
    if unpack_data:
        l = jnp.tril(lu[..., :, :k], -1) + jnp.eye(m, k, dtype=lu.dtype)
        u = jnp.triu(lu[..., :k, :])
    else:
        l = jnp.zeros(ctx.entry.out_shape(1), lu.dtype)
        u = jnp.zeros(ctx.entry.out_shape(2), lu.dtype)
    return p, l, u


@lower("linalg_pinv.atol_rtol_tensor", "linalg_pinv.atol_rtol_float")
def _linalg_pinv(a, *, atol=None, rtol=None, hermitian=False):
    dt = out_dtype()
    a = a.astype(dt)
    m, n = a.shape[-2], a.shape[-1]
    if hermitian:
        w, v = jnp.linalg.eigh(a, UPLO="L", symmetrize_input=False)
        s, sabs = w, jnp.abs(w)
    else:
        u, s, vh = jnp.linalg.svd(a, full_matrices=False)
        sabs = s
    rdt = sabs.dtype
    smax = jnp.max(sabs, axis=-1, keepdims=True) if sabs.shape[-1] else jnp.zeros(sabs.shape[:-1] + (1,), rdt)
    if rtol is None:
        rtol = (jnp.finfo(rdt).eps * max(m, n)) if atol is None or _is(atol, 0) else 0.0
    atol = jnp.zeros((), rdt) if atol is None else jnp.asarray(atol, rdt)
    rtol = jnp.asarray(rtol, rdt)
    if atol.ndim:
        atol = atol[..., None]
    if rtol.ndim:
        rtol = rtol[..., None]
    tol = jnp.maximum(atol, rtol * smax)
    keep = sabs > tol
    sinv = jnp.where(keep, 1.0 / jnp.where(keep, s, 1), 0).astype(s.dtype)
    if hermitian:
        return (v * sinv[..., None, :].astype(v.dtype)) @ _mH(v)
    return (_mH(vh) * sinv[..., None, :].astype(vh.dtype)) @ _mH(u)

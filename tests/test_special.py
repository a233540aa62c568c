"""torch.special in tract (t2n/mappings/special*.py): torch eager vs tract on hand-picked
edge values (0, +-tiny, branch boundaries of the Cephes approximations, overflow thresholds
of torch's float kernels, +-inf, NaN), in f32 and f64. Each group is one export whose
outputs are named after the cases (see ``opcases.py``)."""

import pytest
import torch

from opcases import assert_cases
from t2n.errors import T2NError
from t2n.testing import assert_exports

S = torch.special
INF, NAN = float("inf"), float("nan")
DTYPES = {"f32": torch.float32, "f64": torch.float64}

# branch points: erfcx 2 (series / continued fraction), log_ndtr -1, I 8, K 2, J/Y 5,
# Ai +-2.09 / 103.892, exp overflow in f32 above 88.72
EDGE = torch.tensor([-120.0, -30.0, -9.4, -8.47, -5.0, -2.09, -2.0, -1.5, -1.0, -0.5, -1e-6,
                     0.0, 1e-6, 0.3, 1.0, 1.99, 2.0, 2.09, 4.9, 5.0, 5.1, 8.0, 8.1, 20.0,
                     88.5, 90.0, 104.0, INF, -INF, NAN])
PROB = torch.tensor([0.0, 1e-30, 1e-10, 0.01, 0.13, 0.14, 0.5, 0.86, 0.9, 0.99, 1 - 1e-7,
                     1.0, 1.5, -0.1, NAN])

UNARY = {
    "erf": {"erfcx": S.erfcx, "ndtr": S.ndtr, "log_ndtr": S.log_ndtr, "entr": S.entr},
    "bessel_i": {"i0e": S.i0e, "i1": S.i1, "i1e": S.i1e,
                 "modified_bessel_i0": S.modified_bessel_i0,
                 "modified_bessel_i1": S.modified_bessel_i1},
    "bessel_k": {"modified_bessel_k0": S.modified_bessel_k0,
                 "modified_bessel_k1": S.modified_bessel_k1,
                 "scaled_modified_bessel_k0": S.scaled_modified_bessel_k0,
                 "scaled_modified_bessel_k1": S.scaled_modified_bessel_k1},
    "bessel_jy": {"bessel_j0": S.bessel_j0, "bessel_j1": S.bessel_j1,
                  "bessel_y0": S.bessel_y0, "bessel_y1": S.bessel_y1,
                  "spherical_bessel_j0": S.spherical_bessel_j0, "airy_ai": S.airy_ai},
}


@pytest.mark.parametrize("dtype", DTYPES.values(), ids=DTYPES.keys())
@pytest.mark.parametrize("group", UNARY)
def test_unary_edge_values(group, dtype):
    assert_cases(UNARY[group], (EDGE.to(dtype),))


@pytest.mark.parametrize("dtype", DTYPES.values(), ids=DTYPES.keys())
def test_ndtri(dtype):
    assert_cases({"ndtri": S.ndtri}, (PROB.to(dtype),))


def test_integer_inputs_become_float():
    x = torch.tensor([[-3, -1, 0], [1, 2, 9]])
    assert_cases({"ndtr int": S.ndtr, "i1e int": S.i1e, "bessel_j0 int": S.bessel_j0,
                  "polygamma(2) int": lambda t: torch.polygamma(2, t + 10)}, (x,))


# polygamma: negative non-integers exercise the reflection; 0 is a pole
POLY_X = torch.tensor([-8.47, -5.5, -2.3, -1.2, -0.5, -1e-3, 0.0, 1e-4, 0.3, 1.0, 1.9, 2.0,
                       3.7, 8.4, 30.0, 1e4, INF, NAN])


@pytest.mark.parametrize("dtype", DTYPES.values(), ids=DTYPES.keys())
def test_polygamma(dtype):
    cases = {f"polygamma({n})": (lambda t, n=n: torch.polygamma(n, t)) for n in range(6)}
    cases["special.polygamma(3)"] = lambda t: S.polygamma(3, t)
    assert_cases(cases, (POLY_X.to(dtype),))


@pytest.mark.parametrize("dtype", DTYPES.values(), ids=DTYPES.keys())
def test_zeta(dtype):
    # (x, q): x = 1 pole, x < 1 NaN, q <= 0 integer pole, negative q with integer x
    # (reflection) and non-integer x (NaN), q tiny, large x
    s = torch.tensor([1.0, 0.5, 1.5, 2, 3, 4.5, 7, 10, 30, 2, 3, 2, 3, 5, NAN, 2, 60, 2])
    q = torch.tensor([1.0, 1, 0.3, -2.5, -2.5, -0.5, 1e-3, 3, 0.2, 0, -3, 5, -7.3, -0.25, 1,
                      INF, 0.9, 1e5])
    assert_cases({"zeta": S.zeta,
                  "zeta broadcast": lambda a, b: S.zeta(a.reshape(-1, 1) + 1.0, b[:4]),
                  "zeta scalar x": lambda a, b: S.zeta(3.0, b)},
                 (s.to(dtype), q.to(dtype)))


CHEB = ["chebyshev_polynomial_t", "chebyshev_polynomial_u", "chebyshev_polynomial_v",
        "chebyshev_polynomial_w", "shifted_chebyshev_polynomial_t",
        "shifted_chebyshev_polynomial_u", "shifted_chebyshev_polynomial_v",
        "shifted_chebyshev_polynomial_w"]
# every x against every n: |x| = 1 exactly, |x| < 1 and > 1, inf, NaN; negative, fractional,
# small (torch's recurrence) and large (overflow -> inf, then NaN) degrees, NaN/inf degree
CHEB_X = torch.tensor([-9.0, -2.5, -1.0, -0.999, -0.7, -0.2, 0.0, 0.3, 0.5, 0.999, 1.0,
                       1.0001, 3.0, 8.4, 50.0, INF, -INF, NAN])
CHEB_N = torch.tensor([-3.0, -1.0, -0.5, 0, 0.7, 1, 1.9, 2, 3, 5, 6, 7, 8, 9, 12, 30, 100,
                       NAN, INF])


@pytest.mark.parametrize("dtype", DTYPES.values(), ids=DTYPES.keys())
def test_chebyshev_runtime_degree(dtype):
    x = CHEB_X.reshape(-1, 1).expand(-1, len(CHEB_N)).contiguous()
    n = CHEB_N.reshape(1, -1).expand(len(CHEB_X), -1).contiguous()
    # the grid pairs every x with every n, special values included: compared on it alone
    # (fresh sets reshuffle those values; see the session note for what they showed)
    assert_cases({k: getattr(S, k) for k in CHEB}, (x.to(dtype), n.to(dtype)),
                 fresh_inputs=False)


def test_chebyshev_broadcast_and_scalar_degree():
    x = torch.linspace(-2, 2, 12).reshape(2, 1, 6)
    n = torch.tensor([[0.0], [3.0], [7.0], [11.0]])
    assert_cases({"t broadcast": S.chebyshev_polynomial_t,
                  "u degree 5": lambda a, b: S.chebyshev_polynomial_u(a, 5),
                  "w int degree": lambda a, b: S.chebyshev_polynomial_w(a, b.long())},
                 (x, n))


RECURRENCE = ["hermite_polynomial_h", "hermite_polynomial_he", "laguerre_polynomial_l",
              "legendre_polynomial_p"]
REC_X = torch.tensor([-9.0, -2.5, -1.0, -0.7, -0.2, 0.0, 0.3, 1.0, 3.0, 8.4, INF, -INF, NAN])
REC_N = torch.tensor([-3.0, -0.5, 0, 0.7, 1, 2, 3, 5, 9, 30, 64, NAN])


class _ConstDegree(torch.nn.Module):
    def __init__(self, fn, n):
        super().__init__()
        self.fn = fn
        self.register_buffer("n", n)

    def forward(self, x):
        return self.fn(x, self.n)


@pytest.mark.parametrize("dtype", DTYPES.values(), ids=DTYPES.keys())
@pytest.mark.parametrize("name", RECURRENCE)
def test_recurrence_polynomials_constant_degree(name, dtype):
    fn = getattr(S, name)
    x = REC_X.reshape(-1, 1).expand(-1, len(REC_N)).contiguous().to(dtype)
    assert_exports(_ConstDegree(fn, REC_N.to(dtype)), (x,), fresh_inputs=False)  # the grid
    assert_cases({f"{name} n=7": lambda t: fn(t, 7), f"{name} n=0": lambda t: fn(t, 0)},
                 (REC_X.to(dtype),), fresh_inputs=False,
                 constant_outputs=[f"c1_{name}_n_0_out0"])  # degree 0: 1 whatever x


@pytest.mark.parametrize("name", RECURRENCE)
def test_recurrence_polynomials_runtime_degree_refused(name):
    fn = getattr(S, name)
    with pytest.raises(T2NError, match="n: the degree is a run-time tensor"):
        assert_cases({name: fn}, (REC_X, REC_N[:1].expand(len(REC_X)).contiguous()))


def test_recurrence_polynomial_degree_too_large_refused():
    with pytest.raises(T2NError, match="degree 100 is above 64"):
        assert_exports(_ConstDegree(S.legendre_polynomial_p, torch.tensor([100.0])), (REC_X,))


# igamma/igammac: every region (series, small-x series, continued fraction, Temme's
# expansion, torch's narrower asymptotic band above a = 200) and the domain edges
_IG_A = [0.0, 1e-6, 0.1, 0.5, 1.0, 2.5, 3.9, 7.3, 19.9, 20.5, 25.0, 60.0, 199.0, 200.0,
         250.0, 1e3, 1e5, -1.0, INF, NAN]
_IG_X = [0.0, 1e-8, 0.2, 0.5, 0.6, 1.0, 1.05, 1.1, 1.2, 2.0, 3.99, 4.0, 6.0, 30.0, 1e3, -1.0,
         INF, NAN]
_IG_RATIO = [1e-3, 0.3, 0.39, 0.41, 0.7, 0.98, 1.0, 1.02, 1.31, 1.99, 2.01, 10.0]
_IG_PAIRS = [(a, x) for a in _IG_A for x in _IG_X] + \
    [(a, a * r) for a in _IG_A[1:17] for r in _IG_RATIO]
IG_A = torch.tensor([p[0] for p in _IG_PAIRS], dtype=torch.float64)
IG_X = torch.tensor([p[1] for p in _IG_PAIRS], dtype=torch.float64)


@pytest.mark.parametrize("dtype", DTYPES.values(), ids=DTYPES.keys())
def test_incomplete_gamma(dtype):
    # (broadcasting and empty inputs are covered by the OpInfo sweep's samples)
    assert_cases({"igamma": torch.igamma, "igammac": torch.igammac},
                 (IG_A.to(dtype), IG_X.to(dtype)))


def _nextafter_inputs(dtype):
    fi = torch.finfo(dtype)
    sub = fi.tiny * fi.eps / 2  # smallest subnormal
    xs = [0.0, -0.0, 1.0, -1.0, 2.0, 0.5, 3.0, -8.47, 1e-3, fi.tiny, -fi.tiny, sub, -sub,
          2 * sub, 2 * fi.tiny, fi.max, -fi.max, INF, -INF, NAN, 1024.0, 1e30, -1e-30]
    ys = [INF, -INF, 0.0, None, NAN, 2.0]  # None: y = x
    x = torch.tensor([a for a in xs for _ in ys], dtype=dtype)
    y = torch.tensor([a if b is None else b for a in xs for b in ys], dtype=dtype)
    return x, y


@pytest.mark.parametrize("dtype", DTYPES.values(), ids=DTYPES.keys())
def test_nextafter_bit_exact(dtype):
    # zero tolerance: one ulp off anywhere (also among subnormals) fails; the sign bit
    # checks -0.0
    assert_cases({"nextafter": torch.nextafter,
                  "signbit": lambda x, y: torch.signbit(torch.nextafter(x, y))},
                 _nextafter_inputs(dtype), rtol=0.0, atol=0.0)

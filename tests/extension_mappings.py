"""The mappings of ``extension_ops``'s custom ops, as a user writes them: one function per
op schema, with the builder's public surface (``g.op``, ``g.constant``)."""

import numpy as np

import t2n


@t2n.mapping("t2n_test::scaled_tanh")
def scaled_tanh(g, x, scale):
    return g.op("mul", g.op("tanh", x), g.constant(np.array(scale, dtype=np.float32)))


@t2n.mapping("t2n_test::row_norm")
def row_norm(g, x, eps):
    squares = g.op("sum_reduce", g.op("mul", x, x), axes=[x.rank - 1],
                   out_shape=list(x.shape[:-1]) + [1])
    return g.op("sqrt", g.op("add", squares, g.constant(np.array(eps, dtype=np.float32))))

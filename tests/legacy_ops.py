"""torch.cholesky and torch.qr (aten::cholesky, aten::qr), for the cases that cover them.

Both were deprecated in torch 1.9; torch 2.14 removed them: the Python functions raise, and
the aten schemas are gone, so neither a trace nor a TorchScript archive made with 2.14 can
hold these ops. On older torch (where saved models still carry them) the cases call the aten
op itself, so t2n's mapping of ``aten::cholesky``/``aten::qr`` stays tested; on 2.14+ they
call the documented replacement, the only form a 2.14 model can have.
``test_legacy_ops_exist_exactly_before_2_14`` (tests/test_linalg_small.py) pins which branch
each torch version takes, so the fallback can never hide a missing op on older torch.
"""

import torch

REMOVED = torch.__version__ >= "2.14"


def cholesky(a, upper=False):
    if REMOVED:
        return torch.linalg.cholesky(a, upper=upper)
    return torch.ops.aten.cholesky(a, upper)


def qr(a, some=True):
    if REMOVED:
        return torch.linalg.qr(a, mode="reduced" if some else "complete")
    return torch.ops.aten.qr(a, some)

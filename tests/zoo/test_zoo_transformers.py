"""The transformers half of the model zoo: each architecture of ``transformers`` 5.x in
``transformers_models.MODELS`` is built from a small config (random weights re-drawn so
every block matters), called as users call it (keyword inputs, ``ModelOutput`` with its
caches), exported as it is (no wrapper) and checked in tract at rtol 1e-3 / atol 1e-4.
Models with ``dynamic`` axes are exported once and checked at other sizes too.

One test per model; the test id names it (``test_zoo_transformers[mixtral]``).
"""

import warnings

import pytest

from transformers_models import MODELS

import transformers  # noqa: F401  (a test dependency: missing means a broken set-up)

pytestmark = pytest.mark.slow


@pytest.mark.parametrize("entry", MODELS, ids=[m.name for m in MODELS])
def test_zoo_transformers(entry):
    from t2n.testing import assert_exports

    model = entry.build()
    args = entry.inputs(*entry.size)
    kwargs = {}
    if entry.dynamic:
        kwargs["dynamic_axes"] = {k: v for k, v in entry.dynamic.items() if k in args}
        kwargs["more_args"] = [entry.inputs(*s) for s in entry.more_sizes]
    with warnings.catch_warnings():
        # transformers' own tracer warnings (mask shortcuts read as Python bools) and
        # deprecation notices are not what this test checks
        warnings.simplefilter("ignore")
        result = assert_exports(model, args, rtol=entry.rtol, atol=entry.atol,
                                capture=entry.capture, **kwargs)
    assert result.outputs[0].name in ("last_hidden_state", "logits", "predicted_depth"), \
        result.outputs[0]
    for name, axes in kwargs.get("dynamic_axes", {}).items():  # the archive is dynamic
        info = next(i for i in result.inputs if i.name == name)
        assert all(not isinstance(info.shape[a], int) for a in axes), info

"""t2n: export PyTorch models to NNEF archives that the tract inference engine runs.

    import t2n
    result = t2n.export(model, (x,), "model.nnef.tar", check=True)
    print(result.report())

Heavy modules (the engine, tract) load on first use, so ``import t2n`` costs little more
than ``import torch``.
"""

from __future__ import annotations

# the one place the version is written besides pyproject.toml (tests/test_cli.py pins the
# two equal); `t2n --version` prints it
__version__ = "0.8.1"

_LAZY = {
    "export": ("t2n.api", "export"),
    "ExportResult": ("t2n.api", "ExportResult"),
    "check_archive": ("t2n.api", "check_archive"),
    "T2NError": ("t2n.errors", "T2NError"),
    "UsageError": ("t2n.errors", "UsageError"),
    "OutputPathError": ("t2n.errors", "OutputPathError"),
    "ModelLoadError": ("t2n.errors", "ModelLoadError"),
    "TraceError": ("t2n.errors", "TraceError"),
    "ConversionError": ("t2n.errors", "ConversionError"),
    "UnsupportedOperatorsError": ("t2n.errors", "UnsupportedOperatorsError"),
    "CheckFailedError": ("t2n.errors", "CheckFailedError"),
    "TractError": ("t2n.errors", "TractError"),
    "supported_ops": ("t2n.walk.registry", "supported_ops"),
    "mapping": ("t2n.extensions", "mapping"),
}

__all__ = sorted(_LAZY) + ["__version__"]


def __getattr__(name):
    if name in _LAZY:
        import importlib

        mod, attr = _LAZY[name]
        value = getattr(importlib.import_module(mod), attr)
        globals()[name] = value
        return value
    raise AttributeError(f"module 't2n' has no attribute {name!r}")

"""One module per op family; importing this package registers every mapping.

Each module holds functions decorated with ``@aten("name", ...)`` from :mod:`t2n.walk.registry`.
A mapping reads like the aten schema it implements: ``fn(g, self, dim, index)``.
"""

import importlib
import pkgutil

for _m in sorted(m.name for m in pkgutil.iter_modules(__path__) if m.name != "helpers"):
    if not _m.startswith("_"):
        importlib.import_module(f"{__name__}.{_m}")

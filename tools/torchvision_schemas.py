"""Make ``import torchvision`` (hence timm, and transformers with torchvision installed)
work in a development venv whose torchvision wheel does not match its torch.

The package registry's torchvision wheel is built against CUDA torch: with the CPU torch of
t2n's venv its C++ extension (``torchvision/_C.so``) does not load, and ``import
torchvision`` then fails with ``operator torchvision::nms does not exist`` (its Python
side registers fake kernels for ops the extension would have declared). The model classes
are pure Python, so declaring the two operator schemas is enough to import them.

``python tools/torchvision_schemas.py install`` (run by ``make install``) copies this file
into the interpreter's site-packages as ``t2n_dev_torchvision_schemas.py`` with a ``.pth``
line importing it at start-up. That import only adds a finder to ``sys.meta_path``: nothing
(not even torch) is imported until the first ``import torchvision``. Then, before
torchvision's own code runs, the finder loads torchvision's extension; only if that fails
and the schemas are missing does it declare them. A matching torch/torchvision pair is left
alone, and declaring is skipped when someone (tests/conftest.py) already did it.

Never part of the t2n package: t2n does not touch another library's operator namespace.
"""

from __future__ import annotations

import sys

SCHEMAS = ("nms(Tensor dets, Tensor scores, float iou_threshold) -> Tensor",
           "qnms(Tensor dets, Tensor scores, float iou_threshold) -> Tensor")
MODULE = "t2n_dev_torchvision_schemas"
_libraries: list = []  # the registrations stay alive as long as the interpreter


def _missing() -> list[str]:
    import torch

    out = []
    for schema in SCHEMAS:
        name = schema.split("(", 1)[0]
        try:
            torch._C._get_schema(f"torchvision::{name}", "")
        except RuntimeError:
            out.append(schema)
    return out


def _extension_loads(locations) -> bool | None:
    """Whether torchvision's own C++ extension loads with this torch (it declares the ops);
    None when there is none to try."""
    import glob
    import os

    import torch

    for folder in locations or ():
        for path in sorted(glob.glob(os.path.join(folder, "_C*.so"))
                           + glob.glob(os.path.join(folder, "_C*.pyd"))):
            try:
                torch.ops.load_library(path)
                return True
            except (OSError, RuntimeError):
                return False
    return None


def declare_if_missing(locations=None) -> list[str]:
    """Declare the torchvision schemas that neither torchvision's extension nor anyone else
    declared; returns the ones it declared."""
    missing = _missing()
    if not missing or _extension_loads(locations) is not False:
        return []  # declared, or declared by the extension, or nothing known to be broken
    missing = _missing()
    if missing:
        import torch

        lib = torch.library.Library("torchvision", "FRAGMENT")
        for schema in missing:
            lib.define(schema)
        _libraries.append(lib)
    return missing


class _BeforeTorchvision:
    """A ``sys.meta_path`` finder that acts once, on the first ``import torchvision``, and
    then lets the normal finders import it."""

    def find_spec(self, name, path=None, target=None):
        if name != "torchvision":
            return None
        sys.meta_path[:] = [f for f in sys.meta_path if f is not self]
        import importlib.machinery

        spec = importlib.machinery.PathFinder.find_spec(name, path)
        try:
            declare_if_missing(spec.submodule_search_locations if spec else None)
        except Exception:  # never break an import over this: torchvision reports its own
            pass
        return None


def activate() -> None:
    """Called by the ``.pth`` line at interpreter start-up: adds the finder, imports nothing."""
    if not any(isinstance(f, _BeforeTorchvision) for f in sys.meta_path):
        sys.meta_path.insert(0, _BeforeTorchvision())


def install(site_dir: str) -> None:
    """Write this module and its ``.pth`` line into ``site_dir`` (a site-packages folder)."""
    import os
    import shutil

    shutil.copyfile(os.path.abspath(__file__), os.path.join(site_dir, MODULE + ".py"))
    with open(os.path.join(site_dir, MODULE + ".pth"), "w") as f:
        f.write(f"import {MODULE}; {MODULE}.activate()\n")


if __name__ == "__main__":
    import sysconfig

    if sys.argv[1:] != ["install"]:
        sys.exit(f"usage: {sys.argv[0]} install")
    target = sysconfig.get_paths()["purelib"]
    install(target)
    print(f"{MODULE}: installed in {target}")

"""The development venv's start-up hook (tools/torchvision_schemas.py, installed by
``make install``): ``import torchvision``, timm and transformers work from a plain shell,
the hook declares the schemas only when torchvision's extension does not load, and stays out
of the way of a declaration made before it (tests/conftest.py).

Whether the installed torchvision's extension loads depends on the pair in the venv (not with
a CUDA-built torchvision on CPU torch 2.13; yes with the matching torch 2.14.1 / torchvision
0.29.1), so the broken-extension scenarios run on a stand-in torchvision package whose
``_C.so`` is not a library and whose ``__init__`` registers fake kernels for the two ops, as
torchvision's Python side does: they mean the same on every pair."""

import os
import subprocess
import sys
import sysconfig


ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
SITE = sysconfig.get_paths()["purelib"]  # this venv's site-packages


def _fresh_interpreter(tmp_path, code: str, first: str | None = None) -> str:
    """Run ``code`` in an interpreter that sees only a temp site dir holding the installed
    hook, then this venv's site-packages (``python -S``: the venv itself is not changed);
    ``first``, a folder searched before them all."""
    hook_site = tmp_path / "site"
    hook_site.mkdir()
    subprocess.run([sys.executable, "-c", "import sys; sys.path.insert(0, sys.argv[1]); "
                    "import torchvision_schemas as t; t.install(sys.argv[2])",
                    os.path.join(ROOT, "tools"), str(hook_site)], check=True, timeout=60)
    assert sorted(os.listdir(hook_site)) == ["t2n_dev_torchvision_schemas.pth",
                                             "t2n_dev_torchvision_schemas.py"]
    prelude = (f"import site, sys; site.addsitedir({str(hook_site)!r}); "
               f"site.addsitedir({SITE!r})\n"
               "assert 'torch' not in sys.modules, 'the hook imported torch at start-up'\n")
    if first is not None:
        prelude += f"sys.path.insert(0, {first!r})\n"
    p = subprocess.run([sys.executable, "-S", "-c", prelude + code], capture_output=True,
                       text=True, timeout=600, cwd=str(tmp_path))
    assert p.returncode == 0, p.stderr[-3000:]
    return p.stdout


def test_model_libraries_import_from_a_plain_interpreter(tmp_path):
    """With the venv's own torchvision: the hook declares the schemas exactly when the
    extension did not load (torchvision's own record of it), and leaves a working one alone."""
    out = _fresh_interpreter(tmp_path, "import timm, torchvision\n"
                                       "from transformers import LlamaConfig\n"
                                       "import torch, t2n_dev_torchvision_schemas as h\n"
                                       "torch._C._get_schema('torchvision::nms', '')\n"
                                       "from torchvision.extension import _has_ops\n"
                                       "print(_has_ops(), len(h._libraries))\n"
                                       "print('ok')\n")
    *_, counts, last = out.strip().splitlines()
    assert last == "ok"
    assert counts in ("True 0", "False 1"), counts


SCHEMAS = ("nms(Tensor dets, Tensor scores, float iou_threshold) -> Tensor",
           "qnms(Tensor dets, Tensor scores, float iou_threshold) -> Tensor")


def _torchvision_whose_extension_does_not_load(tmp_path) -> str:
    """A stand-in ``torchvision`` package: ``_C.so`` fails to load, and the import registers
    fake kernels for ``torchvision::nms``/``qnms``, which fails when they are not declared
    (the ``operator torchvision::nms does not exist`` of a mismatched pair)."""
    folder = tmp_path / "standin"
    package = folder / "torchvision"
    package.mkdir(parents=True)
    (package / "_C.so").write_bytes(b"not a shared library\n")
    (package / "__init__.py").write_text(
        "import torch\n"
        "for _op in ('nms', 'qnms'):\n"
        "    torch.library.register_fake(f'torchvision::{_op}')(\n"
        "        lambda dets, scores, iou_threshold: dets.new_empty(0, dtype=torch.long))\n"
        "STANDIN = True\n")
    return str(folder)


def test_a_broken_extension_gets_the_schemas_declared(tmp_path):
    out = _fresh_interpreter(tmp_path, "import torchvision, t2n_dev_torchvision_schemas as h\n"
                                       "assert torchvision.STANDIN\n"
                                       "print(len(h._libraries))\n",
                             first=_torchvision_whose_extension_does_not_load(tmp_path))
    assert out.strip().splitlines()[-1] == "1"


def test_a_declaration_made_first_is_kept(tmp_path):
    """tests/conftest.py declares the schemas before the first import when the extension
    does not load: the hook then declares nothing (declaring twice would fail)."""
    out = _fresh_interpreter(tmp_path, "import torch\n"
                                       "lib = torch.library.Library('torchvision', 'DEF')\n"
                                       f"lib.define({SCHEMAS[0]!r})\n"
                                       f"lib.define({SCHEMAS[1]!r})\n"
                                       "import torchvision, t2n_dev_torchvision_schemas as h\n"
                                       "assert torchvision.STANDIN\n"
                                       "print(len(h._libraries))\n",
                             first=_torchvision_whose_extension_does_not_load(tmp_path))
    assert out.strip().splitlines()[-1] == "0"

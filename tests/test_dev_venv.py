"""The development venv's start-up hook (tools/torchvision_schemas.py, installed by
``make install``): ``import torchvision``, timm and transformers work from a plain shell,
and the hook stays out of the way of a declaration made before it (tests/conftest.py)."""

import os
import subprocess
import sys
import sysconfig


ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
SITE = sysconfig.get_paths()["purelib"]  # this venv's site-packages


def _fresh_interpreter(tmp_path, code: str) -> str:
    """Run ``code`` in an interpreter that sees only a temp site dir holding the installed
    hook, then this venv's site-packages (``python -S``: the venv itself is not changed)."""
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
    p = subprocess.run([sys.executable, "-S", "-c", prelude + code], capture_output=True,
                       text=True, timeout=600, cwd=str(tmp_path))
    assert p.returncode == 0, p.stderr[-3000:]
    return p.stdout


def test_model_libraries_import_from_a_plain_interpreter(tmp_path):
    out = _fresh_interpreter(tmp_path, "import timm, torchvision\n"
                                       "from transformers import LlamaConfig\n"
                                       "import torch\n"
                                       "torch._C._get_schema('torchvision::nms', '')\n"
                                       "print('ok')\n")
    assert out.strip().endswith("ok")


def test_a_declaration_made_first_is_kept(tmp_path):
    """tests/conftest.py declares the schemas before the first import: the hook then
    declares nothing (declaring twice would fail)."""
    out = _fresh_interpreter(tmp_path, "import torch\n"
                                       "lib = torch.library.Library('torchvision', 'DEF')\n"
                                       "lib.define('nms(Tensor dets, Tensor scores, "
                                       "float iou_threshold) -> Tensor')\n"
                                       "lib.define('qnms(Tensor dets, Tensor scores, "
                                       "float iou_threshold) -> Tensor')\n"
                                       "import torchvision, t2n_dev_torchvision_schemas as h\n"
                                       "print(len(h._libraries))\n")
    assert out.strip().splitlines()[-1] == "0"

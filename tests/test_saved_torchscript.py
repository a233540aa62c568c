"""TorchScript files from torch.jit.save (traced or scripted) export and check like modules.

Such files carry no tensor types (a saved trace loses them, a scripted module never had them);
t2n used to fail with an internal "dtype None" error on them (t2n.capture.script_types types them).
"""

import pytest
import torch

from t2n.cli import cli
from click.testing import CliRunner


class _LinearGelu(torch.nn.Module):
    def __init__(self):
        super().__init__()
        self.lin = torch.nn.Linear(8, 6)
        self.act = torch.nn.GELU()

    def forward(self, x):
        return self.act(self.lin(x)).to(torch.float64).sum(-1, keepdim=True) > 0.1, \
            self.act(self.lin(x))


def _conv_tanh():
    m = torch.nn.Sequential(torch.nn.Conv1d(3, 4, 3), torch.nn.Tanh()).eval()
    return torch.jit.trace(m, torch.randn(1, 3, 16))


CASES = {
    "traced conv1d+tanh": (_conv_tanh, ["-i", "x:1x3x16:f32"]),
    "traced conv1d+tanh, dynamic length": (_conv_tanh, ["-i", "x:1x3x16:f32",
                                                        "--dynamic", "x:2=S"]),
    "scripted linear+gelu, dynamic batch": (lambda: torch.jit.script(_LinearGelu().eval()),
                                            ["-i", "x:2x8:f32", "--dynamic", "x:0=B"]),
}


@pytest.mark.parametrize("case", list(CASES))
def test_saved_torchscript_exports_and_checks(tmp_path, case):
    make, args = CASES[case]
    path = tmp_path / "model.pt"
    torch.jit.save(make(), str(path))
    r = CliRunner().invoke(cli, ["export", str(path), "-o", str(tmp_path / "m.nnef.tgz"),
                                 "--check", *args])
    assert r.exit_code == 0, f"{case}: {r.output}"
    assert "check in tract: PASSED" in r.output, f"{case}: {r.output}"

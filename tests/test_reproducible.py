"""Exports are byte-reproducible and leave the user's model exactly as it was."""

import getpass
import gzip
import io
import os
import socket
import tarfile

import pytest
import torch

import t2n


class Net(torch.nn.Module):
    """Conv + BN (running stats), dropout, a shared weight and a buffer."""

    def __init__(self):
        super().__init__()
        self.conv = torch.nn.Conv2d(3, 4, 3, padding=1)
        self.bn = torch.nn.BatchNorm2d(4)
        self.drop = torch.nn.Dropout(0.5)
        self.fc = torch.nn.Linear(4, 4)
        self.fc2 = torch.nn.Linear(4, 4)
        self.fc2.weight = self.fc.weight  # tied
        self.register_buffer("scale", torch.tensor([2.0, 1.0, 0.5, 3.0]))

    def forward(self, x):
        y = self.drop(torch.relu(self.bn(self.conv(x))))
        y = y.mean(dim=(2, 3))
        return self.fc2(self.fc(y)) * self.scale


def make_net():
    torch.manual_seed(1)
    net = Net()
    with torch.no_grad():
        net.bn.running_mean.uniform_(-0.5, 0.5)
        net.bn.running_var.uniform_(0.5, 2.0)
    return net


X = torch.randn(2, 3, 6, 6, generator=torch.Generator().manual_seed(0))


@pytest.mark.parametrize("suffix", [".nnef.tgz", ".nnef.tar"])
def test_same_model_twice_gives_identical_bytes(tmp_path, suffix):
    a_dir, b_dir = tmp_path / "first", tmp_path / "somewhere" / "else"
    a_dir.mkdir()
    b_dir.mkdir(parents=True)
    a = t2n.export(make_net().eval(), (X,), a_dir / f"m{suffix}")
    b = t2n.export(make_net().eval(), (X,), b_dir / f"other{suffix}")
    data_a = open(a.path, "rb").read()
    assert data_a == open(b.path, "rb").read()
    # and the same module object exported again
    net = make_net().eval()
    c = t2n.export(net, (X,), a_dir / f"c{suffix}")
    d = t2n.export(net, (X,), a_dir / f"d{suffix}")
    assert open(c.path, "rb").read() == open(d.path, "rb").read() == data_a


@pytest.mark.parametrize("capture", ["trace", "export"])
def test_archive_holds_no_host_user_path_or_time(tmp_path, capture):
    # optimize=False: the tied weight is then one tensor (folding `* scale` into fc2 would
    # make fc2's weight a tensor of its own); named by its first state_dict name under both
    r = t2n.export(make_net().eval(), (X,), tmp_path / "m.nnef.tgz", optimize=False,
                   capture=capture)
    raw = open(r.path, "rb").read()
    # gzip header: no file name flag, mtime 0
    assert raw[:2] == b"\x1f\x8b"
    assert raw[3] & 0x08 == 0, "gzip header carries a file name"
    assert raw[4:8] == b"\0\0\0\0", "gzip header carries a time stamp"
    tar_bytes = gzip.decompress(raw)
    with tarfile.open(fileobj=io.BytesIO(tar_bytes)) as t:
        members = t.getmembers()
        names = [m.name for m in members]
        assert names[0] == "graph.nnef" and names[1:] == sorted(names[1:])
        for m in members:
            assert (m.mtime, m.uid, m.gid, m.uname, m.gname) == (0, 0, 0, "", ""), m.name
            assert m.mode == 0o644 and m.isfile() and "/" not in m.name
        graph = t.extractfile("graph.nnef").read().decode()
    assert "fc.weight" in graph and "fc2.weight" not in graph  # tied weight written once
    for secret in {socket.gethostname(), getpass.getuser(), str(tmp_path),
                   os.path.basename(str(tmp_path))}:
        assert secret.encode() not in tar_bytes, secret


def _snapshot(model):
    return {
        "params": {k: (p, p.detach().clone(), p.requires_grad, p.grad)
                   for k, p in model.named_parameters()},
        "buffers": {k: (b, b.clone()) for k, b in model.named_buffers()},
        "training": {k: m.training for k, m in model.named_modules()},
        "hooks": {k: (dict(m._forward_hooks), dict(m._forward_pre_hooks),
                      dict(m._backward_hooks)) for k, m in model.named_modules()},
        "state_keys": list(model.state_dict()),
    }


def _assert_same(before, model):
    after = _snapshot(model)
    assert after["state_keys"] == before["state_keys"]
    assert after["training"] == before["training"]
    assert after["hooks"] == before["hooks"]
    for k, (p, value, grad_flag, grad) in before["params"].items():
        q, now, now_flag, now_grad = after["params"][k]
        assert q is p, f"parameter {k} replaced"
        assert torch.equal(now, value), f"parameter {k} changed"
        assert now_flag == grad_flag and now_grad is grad, f"parameter {k} grad state changed"
    for k, (b, value) in before["buffers"].items():
        assert after["buffers"][k][0] is b, f"buffer {k} replaced"
        assert torch.equal(after["buffers"][k][1], value), f"buffer {k} changed"


@pytest.mark.parametrize("mode", ["train", "eval"])
def test_users_model_is_not_modified(tmp_path, mode):
    net = make_net().train(mode == "train")
    net.fc.weight.requires_grad_(False)
    calls = []
    net.conv.register_forward_hook(lambda m, i, o: calls.append("hook"))
    net.register_forward_pre_hook(lambda m, i: None)
    before = _snapshot(net)
    t2n.export(net, (X,), tmp_path / "m.nnef.tgz", check=True)
    _assert_same(before, net)
    assert calls, "the user's hooks stay active (they ran during the trace)"
    # BN statistics untouched even in train mode: the export traced in eval mode
    assert int(net.bn.num_batches_tracked) == 0


def test_failed_export_leaves_the_model_as_it_was(tmp_path):
    import cli_models

    net = cli_models.make_two_unsupported().train()
    before = _snapshot(net)
    with pytest.raises(t2n.UnsupportedOperatorsError):
        t2n.export(net, (torch.randn(2, 3),), tmp_path / "m.tgz")
    _assert_same(before, net)
    assert os.listdir(tmp_path) == []


@pytest.mark.parametrize("capture", ["trace", "export"])
def test_each_submodule_keeps_its_own_mode(tmp_path, capture):
    """A model in eval mode with one submodule in train mode: exported in eval mode (the
    check passes with dropout off), then every submodule has its own flag back (a plain
    ``model.train(was_training)`` would have put the dropout in eval mode)."""
    net = make_net().eval()
    net.drop.train()
    before = _snapshot(net)
    t2n.export(net, (X,), tmp_path / "m.nnef.tgz", check=True, capture=capture)
    _assert_same(before, net)
    assert net.drop.training and not net.training


def _exported_program_module():
    """``torch.export.export(...).module()``, as torchao's pt2e quantization returns it: a
    GraphModule whose train() and eval() raise NotImplementedError."""
    gm = torch.export.export(make_net().eval(), (X,)).module()
    with pytest.raises(NotImplementedError):
        gm.eval()
    return gm


@pytest.mark.parametrize("capture", ["trace", "export"])
def test_exported_program_module_is_exported_in_its_own_mode(tmp_path, capture):
    gm = _exported_program_module()
    before = _snapshot(gm)
    t2n.export(gm, (X,), tmp_path / "m.nnef.tgz", check=True, capture=capture)
    _assert_same(before, gm)
    with pytest.raises(NotImplementedError):
        gm.train()


class _Wrapper(torch.nn.Module):
    """A user's module around an exported program, with a dropout of its own."""

    def __init__(self, inner):
        super().__init__()
        self.inner = inner
        self.drop = torch.nn.Dropout(0.5)

    def forward(self, x):
        return self.drop(self.inner(x))


@pytest.mark.parametrize("capture", ["trace", "export"])
def test_module_around_an_exported_program_is_switched_around_it(tmp_path, capture):
    """The parts that allow it go to eval mode (the dropout: the check passes), the exported
    program keeps its mode, and every flag is restored."""
    net = _Wrapper(_exported_program_module())  # in train mode
    with pytest.raises(NotImplementedError):
        net.eval()  # half-way: the wrapper's flag moved before the inner module refused
    net.training = True
    before = _snapshot(net)
    t2n.export(net, (X,), tmp_path / "m.nnef.tgz", check=True, capture=capture)
    _assert_same(before, net)

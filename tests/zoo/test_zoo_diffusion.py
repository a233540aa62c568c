"""Diffusion blocks from ``diffusers``, built from small configs (random weights re-drawn so
every block matters, no download) and checked in tract at rtol 1e-3 / atol 1e-4: the
Stable Diffusion denoiser (a cross-attention UNet called with a timestep and text
states), its VAE's encoder and decoder, and a DiT transformer (class-conditioned, adaptive
layer norm). One test per model; the VAE decoder also with a dynamic batch.
"""

import warnings

import pytest
import torch
from torch import nn

import diffusers  # noqa: F401  (a test dependency: missing means a broken set-up)
from t2n.testing import assert_exports
from transformers_models import redraw

pytestmark = pytest.mark.slow


class Call(nn.Module):
    """The model called as a pipeline calls it, its output's tensor taken."""

    def __init__(self, model, fn):
        super().__init__()
        self.model = model
        self.fn = fn

    def forward(self, *args):
        return self.fn(self.model, *args)


def _vae():
    return diffusers.AutoencoderKL(
        in_channels=3, out_channels=3, down_block_types=("DownEncoderBlock2D",) * 2,
        up_block_types=("UpDecoderBlock2D",) * 2, block_out_channels=(16, 32),
        layers_per_block=1, latent_channels=4, norm_num_groups=8, sample_size=32)


def unet():
    m = diffusers.UNet2DConditionModel(
        sample_size=16, in_channels=4, out_channels=4, layers_per_block=1,
        block_out_channels=(32, 64), down_block_types=("CrossAttnDownBlock2D", "DownBlock2D"),
        up_block_types=("UpBlock2D", "CrossAttnUpBlock2D"), cross_attention_dim=32,
        attention_head_dim=8, norm_num_groups=8)
    return (Call(m, lambda m, x, t, c: m(x, t, encoder_hidden_states=c).sample),
            lambda b, g: (torch.randn(b, 4, 16, 16, generator=g), torch.tensor([10.0]),
                          torch.randn(b, 5, 32, generator=g)))


def vae_encoder():
    return (Call(_vae(), lambda m, x: m.encode(x).latent_dist.mean),
            lambda b, g: (torch.randn(b, 3, 32, 32, generator=g),))


def vae_decoder():
    return (Call(_vae(), lambda m, z: m.decode(z).sample),
            lambda b, g: (torch.randn(b, 4, 8, 8, generator=g),))


def dit():
    m = diffusers.DiTTransformer2DModel(
        num_attention_heads=2, attention_head_dim=8, in_channels=4, out_channels=8,
        num_layers=2, sample_size=8, patch_size=2, num_embeds_ada_norm=10, norm_num_groups=8)
    return (Call(m, lambda m, x, t, y: m(x, timestep=t, class_labels=y).sample),
            lambda b, g: (torch.randn(b, 4, 8, 8, generator=g), torch.tensor([3] * b),
                          torch.tensor([1] * b)))


MODELS = {"unet2d_condition": (unet, False), "vae_encoder": (vae_encoder, False),
          "vae_decoder": (vae_decoder, True), "dit": (dit, False)}


@pytest.mark.parametrize("name", list(MODELS))
def test_zoo_diffusion(name):
    build, dynamic_batch = MODELS[name]
    torch.manual_seed(0)
    model, inputs = build()
    redraw(model)
    args = inputs(1, torch.Generator().manual_seed(0))
    kwargs = {}
    if dynamic_batch:
        kwargs = dict(input_names=["latents"], dynamic_axes={"latents": {0: "B"}},
                      more_args=[inputs(3, torch.Generator().manual_seed(1))])
    if dynamic_batch:
        # diffusers' upsampler calls .contiguous() on batches of 64 and more (a branch on B
        # in its Python): torch.export refuses the unbounded batch, the trace records the
        # example's branch, which computes the same values at every batch
        kwargs["capture"] = "trace"
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")  # diffusers' deprecation and tracer notices
        assert_exports(model, args, rtol=1e-3, atol=1e-4, **kwargs)


def test_vae_decoder_batch_range_under_torch_export():
    """torch.export takes the decoder's dynamic batch within the range its branch allows."""
    torch.manual_seed(0)
    model, inputs = vae_decoder()
    redraw(model)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        r = assert_exports(model, inputs(2, torch.Generator().manual_seed(0)), rtol=1e-3,
                           atol=1e-4, input_names=["latents"], capture="export",
                           dynamic_axes={"latents": {0: ("B", 2, 63)}},
                           more_args=[inputs(3, torch.Generator().manual_seed(1))])
    assert str(r.inputs[0].shape[0]) == "B"

"""``t2n llm`` for vision-language models: the text decoder as the usual step archive, and
the image encoder (vision tower + connector) as a second archive of the same call.

SmolVLM (and Idefics3, its parent: the same modules) turn each image tile ``[C, H, W]``
into ``T`` rows of the decoder's hidden size (a SigLIP-like vision transformer, then the
connector's pixel shuffle and projection), and the decoder reads those rows in place of
the ``T`` placeholder tokens (``image_token_id``) the processor writes into the prompt.

* The image encoder archive: ``pixel_values [N, C, H, W] -> image_features [N*T, E]``
  (``N`` images or tiles, a tract symbol; ``H, W`` the configured ``image_size``: the
  processor's tiles, whose pixel shuffle and position buckets are fixed by that size). It
  is :class:`ImageEncoder`: the model's own ``vision_model`` and ``connector``, without
  ``get_image_features``' batching (which drops all-zero padding images by boolean
  indexing and splits by a count read in Python: data a trace would freeze).
* The decoder step takes ``input_ids [1, S]``, ``image_features [M, E]`` (``M >= 0``) and
  the usual states. It embeds the ids with the model's embedding and puts row ``j`` of the
  features in place of the ``j``-th image token of the step (:func:`place_image_features`)
  before the decoder runs on ``inputs_embeds``: what ``masked_scatter`` does in
  transformers, written as a gather and a ``where`` because the number of image tokens is
  data. The prompt's step gets the encoder's output (``M = N*T``), every decoding step an
  empty ``[0, E]``: image tokens beyond the ``M`` rows (a generated image token) embed as
  text tokens, which is what transformers does once ``generate`` stops passing pixels.

Feeding features rather than ``inputs_embeds`` keeps the embedding table inside the
archive (a runtime needs no weights of its own) and keeps text-only steps one input away
from the plain ``t2n llm`` archive.
"""

from __future__ import annotations

import os
from dataclasses import dataclass

import torch

from t2n.errors import UsageError

ENCODER_INPUT, ENCODER_OUTPUT, FEATURES = "pixel_values", "image_features", "image_features"
# families whose model holds model.vision_model and model.connector as SmolVLM's
SUPPORTED = ("SmolVLMForConditionalGeneration", "Idefics3ForConditionalGeneration")
CHECK_IMAGES = 2  # images in the check's default prompt (N > 1: the symbol is exercised)


class ImageEncoder(torch.nn.Module):
    """``pixel_values [N, C, H, W] -> image_features [N*T, E]``: the vision tower over
    every patch (no padding mask), then the connector, rows of all images in order."""

    def __init__(self, model):
        super().__init__()
        self.model = model

    def forward(self, pixel_values):
        inner = self.model.model
        hidden = inner.vision_model(pixel_values=pixel_values, return_dict=True)
        features = inner.connector(hidden.last_hidden_state)
        return features.reshape(-1, features.shape[-1])


def place_image_features(embeds, ids, features, image_token_id: int):
    """``embeds [1, S, E]`` with the ``j``-th image token's row replaced by
    ``features[j]`` for ``j < M``; other image tokens keep their embedding (``M = 0``:
    a text step)."""
    is_image = ids == image_token_id
    order = torch.cumsum(is_image.to(torch.long), dim=1)  # 1..k along the image tokens
    # the first M image tokens (order <= M, written so that the comparison is with a
    # constant: aten::le against a size has no symbolic shape function in PyTorch)
    use = is_image & ((order - features.shape[0]) <= 0)
    # row 0 is read by the other positions only, which the where below discards
    rows = torch.cat([features.new_zeros(1, features.shape[1]), features], 0)
    picked = rows[torch.where(use, order, torch.zeros_like(order))]
    return torch.where(use.unsqueeze(-1), picked.to(embeds.dtype), embeds)


def image_text_step(base):
    """The step class of a vision-language decoder, over ``base`` (``CausalLMStep``)."""

    class ImageTextStep(base):
        """``(input_ids, image_features, *past) -> (logits, *present)``."""

        def __init__(self, model, *args, image_token_id: int, **kw):
            super().__init__(model, *args, **kw)
            self.image_token_id = image_token_id

        def forward(self, input_ids, image_features, *past):
            embeds = self.model.get_input_embeddings()(input_ids)
            embeds = place_image_features(embeds, input_ids, image_features,
                                          self.image_token_id)
            return self.run({"inputs_embeds": embeds}, input_ids, past)

    return ImageTextStep


@dataclass
class VisionPlan:
    """What the export of a vision-language model needs to know of it."""

    image_token_id: int
    channels: int
    image_size: tuple  # (H, W)
    tokens_per_image: int  # T
    hidden: int  # E, the decoder's hidden size

    # ------------------------------------------------------------ the decoder step
    def decoder_io(self, args, ins: list, dyn: dict, generator):
        """The step's example, names and dynamic axes with ``image_features`` after the
        ids: an example of 2 image tokens among the 3 ids (so the gather is traced with
        real rows), ``M >= 0`` rows."""
        ids = args[0].clone()
        ids[ids == self.image_token_id] = 0
        ids[0, 0] = ids[0, 2] = self.image_token_id
        features = torch.randn(2, self.hidden, generator=generator)
        dyn = dict(dyn, **{FEATURES: {0: ("M", 0)}})
        return (ids, features, *args[1:]), [ins[0], FEATURES, *ins[1:]], dyn

    def properties(self, props: dict) -> dict:
        props = dict(props)
        names = list(props["t2n.llm.inputs"])
        props["t2n.llm.inputs"] = [names[0], FEATURES, *names[1:]]
        props.update({"t2n.llm.image_token_id": self.image_token_id,
                      "t2n.llm.image_features_dim": self.hidden,
                      "t2n.llm.image_tokens_per_image": self.tokens_per_image})
        return props

    # ------------------------------------------------------------ the image encoder
    def encoder_properties(self, weights: str) -> dict:
        return {"t2n.vision.format": 1, "t2n.vision.inputs": [ENCODER_INPUT],
                "t2n.vision.outputs": [ENCODER_OUTPUT], "t2n.vision.channels": self.channels,
                "t2n.vision.image_size": list(self.image_size),
                "t2n.vision.tokens_per_image": self.tokens_per_image,
                "t2n.vision.image_token_id": self.image_token_id,
                "t2n.vision.features_dim": self.hidden, "t2n.vision.weights": weights}

    def encoder_example(self, n: int = 3):
        g = torch.Generator().manual_seed(1)
        return torch.rand(n, self.channels, *self.image_size, generator=g) * 2 - 1

    def export_encoder(self, model, path: str, weights: str, quiet: bool, progress):
        from t2n.api import export

        return export(ImageEncoder(model), (self.encoder_example(),), path,
                      input_names=[ENCODER_INPUT], output_names=[ENCODER_OUTPUT],
                      dynamic_axes={ENCODER_INPUT: {0: "N"}},
                      properties=self.encoder_properties(weights), quiet=quiet,
                      progress=progress, weights=weights,
                      capture="trace")  # as the decoder step: what t2n llm is tested with

    # ------------------------------------------------------------ the check
    def default_prompt(self, text: list[int]) -> list[int]:
        """Text ids around ``CHECK_IMAGES`` images' placeholder tokens."""
        text = [t for t in text if t != self.image_token_id] or [0]
        return text[:3] + [self.image_token_id] * (CHECK_IMAGES * self.tokens_per_image) \
            + text[3:]

    def images_for(self, prompt: list[int]):
        """The check's images: as many as the prompt's placeholder tokens ask for (seeded
        values in [-1, 1], the range of the processor's normalised pixels)."""
        k = sum(t == self.image_token_id for t in prompt)
        if k % self.tokens_per_image:
            raise UsageError(f"the prompt holds {k} image tokens ({self.image_token_id}); "
                             f"each image takes {self.tokens_per_image}")
        n = k // self.tokens_per_image
        return self.encoder_example(n) if n else None

    def with_rounded_encoder(self, rounded, encoder_rounded):
        """The rounded decoder's model with the rounded encoder's vision tower and
        connector: the model whose weights the two archives store."""
        src, dst = encoder_rounded.model.model, rounded.model
        dst.vision_model, dst.connector = src.vision_model, src.connector
        return rounded


def vision_plan(model) -> VisionPlan | None:
    """None for a text-only model; the plan of a supported vision-language model; an
    error naming the class of another one (its image encoder would be left out)."""
    cfg = model.config
    vcfg = getattr(cfg, "vision_config", None)
    if vcfg is None:
        return None
    name = type(model).__name__
    inner = getattr(model, "model", None)
    if name not in SUPPORTED or not hasattr(inner, "vision_model") \
            or not hasattr(inner, "connector"):
        raise UsageError(f"{name} has an image encoder (config.vision_config) that t2n llm "
                         f"does not export; it exports {', '.join(SUPPORTED)}")
    size = vcfg.image_size
    size = tuple(size) if isinstance(size, (list, tuple)) else (size, size)
    patch = vcfg.patch_size
    patches = (size[0] // patch) * (size[1] // patch)
    hidden = model.get_input_embeddings().embedding_dim
    return VisionPlan(int(cfg.image_token_id), int(vcfg.num_channels), size,
                      patches // cfg.scale_factor ** 2, int(hidden))


def encoder_path(path) -> str:
    """The image encoder's archive beside the decoder's: ``vlm.nnef.tar`` ->
    ``vlm.vision.nnef.tar`` (``.tgz``, ``.tar.gz``, a folder likewise)."""
    path = os.fspath(path)
    slash = path.endswith(("/", os.sep))
    head, base = os.path.split(path.rstrip("/" + os.sep))
    for suffix in (".nnef.tar.gz", ".nnef.tgz", ".nnef.tar", ".tar.gz", ".tgz", ".tar",
                   ".nnef", ""):
        if base.endswith(suffix) and len(base) > len(suffix):
            stem = base[:len(base) - len(suffix)]
            return os.path.join(head, f"{stem}.vision{suffix}") + ("/" if slash else "")
    return os.path.join(head, base + ".vision")

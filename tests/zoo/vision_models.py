"""The vision half of the model zoo: constructors (random weights, no download) and inputs.

Each entry builds one architecture as users get it from torchvision 0.28 or timm 1.0.31,
narrowed where the full width would only cost CI time (fewer blocks per stage, smaller
embedding widths, 64x64 images or the smallest size the model accepts), never changed in
kind: the blocks, attention variants, padding modes and heads are the library's own.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Callable

import torch


@dataclass
class ZooModel:
    name: str
    family: str
    build: Callable[[], torch.nn.Module]
    shape: tuple  # example input, batch first
    dynamic_batch: tuple = ()  # other batch sizes to run with a dynamic batch axis
    timeout: float = 600
    notes: str = ""
    extra: dict = field(default_factory=dict)


def _tv():
    import torchvision

    return torchvision.models


def _timm(name, **kw):
    kw.setdefault("num_classes", 10)

    def build():
        import timm

        return timm.create_model(name, pretrained=False, **kw)

    return build


# ------------------------------------------------------------------ torchvision builders
def tv_resnet18():
    return _tv().resnet18(num_classes=10)


def tv_resnet_bottleneck():  # resnet50's block, one per stage
    from torchvision.models.resnet import Bottleneck, ResNet

    return ResNet(Bottleneck, [1, 1, 1, 1], num_classes=10)


def tv_resnext():  # resnext50_32x4d's grouped bottleneck
    from torchvision.models.resnet import Bottleneck, ResNet

    return ResNet(Bottleneck, [1, 1, 1, 1], groups=32, width_per_group=4, num_classes=10)


def tv_wide_resnet():  # wide_resnet50_2: bottleneck twice as wide
    from torchvision.models.resnet import Bottleneck, ResNet

    return ResNet(Bottleneck, [1, 1, 1, 1], width_per_group=128, num_classes=10)


def tv_mobilenet_v2():
    return _tv().mobilenet_v2(num_classes=10, width_mult=0.5)


def tv_mobilenet_v3_small():
    return _tv().mobilenet_v3_small(num_classes=10)


def tv_efficientnet_v2():  # fused-MBConv stages of efficientnet_v2_s, one block each
    from torchvision.models.efficientnet import (EfficientNet, FusedMBConvConfig,
                                                 MBConvConfig)

    setting = [FusedMBConvConfig(1, 3, 1, 24, 24, 1), FusedMBConvConfig(4, 3, 2, 24, 48, 1),
               MBConvConfig(4, 3, 2, 48, 64, 1), MBConvConfig(6, 3, 1, 64, 96, 1)]
    return EfficientNet(setting, dropout=0.2, last_channel=256, num_classes=10)


def tv_regnet_y():  # squeeze-excitation variant
    return _tv().regnet_y_400mf(num_classes=10)


def tv_convnext():
    from torchvision.models.convnext import CNBlockConfig, ConvNeXt

    cfg = [CNBlockConfig(32, 64, 1), CNBlockConfig(64, 128, 1), CNBlockConfig(128, None, 1)]
    return ConvNeXt(cfg, num_classes=10)


def tv_densenet():
    from torchvision.models.densenet import DenseNet

    return DenseNet(growth_rate=16, block_config=(2, 2, 2, 2), num_init_features=32,
                    num_classes=10)


def tv_inception_v3():
    return _tv().inception_v3(num_classes=10, aux_logits=False, init_weights=False)


def tv_squeezenet1_0():
    return _tv().squeezenet1_0(num_classes=10)


def tv_shufflenet_v2():
    return _tv().shufflenet_v2_x0_5(num_classes=10)


def tv_mnasnet():
    return _tv().mnasnet0_5(num_classes=10)


def tv_vgg_small():  # vgg11_bn's layer pattern at a quarter of the width, small classifier
    from torchvision.models.vgg import VGG, make_layers

    m = VGG(make_layers([16, "M", 32, "M", 64, 64, "M", 128, 128, "M", 128, 128, "M"],
                        batch_norm=True), num_classes=10)
    m.classifier = torch.nn.Sequential(
        torch.nn.Linear(128 * 7 * 7, 64), torch.nn.ReLU(True), torch.nn.Dropout(),
        torch.nn.Linear(64, 64), torch.nn.ReLU(True), torch.nn.Dropout(),
        torch.nn.Linear(64, 10))
    return m


def tv_vit():
    from torchvision.models.vision_transformer import VisionTransformer

    return VisionTransformer(image_size=64, patch_size=16, num_layers=2, num_heads=4,
                             hidden_dim=64, mlp_dim=128, num_classes=10)


def tv_swin():
    from torchvision.models.swin_transformer import SwinTransformer

    return SwinTransformer(patch_size=[4, 4], embed_dim=32, depths=[2, 2], num_heads=[2, 4],
                           window_size=[4, 4], num_classes=10)


def tv_swin_v2():
    from torchvision.models.swin_transformer import (PatchMergingV2, SwinTransformer,
                                                     SwinTransformerBlockV2)

    return SwinTransformer(patch_size=[4, 4], embed_dim=32, depths=[2, 2], num_heads=[2, 4],
                           window_size=[4, 4], num_classes=10, block=SwinTransformerBlockV2,
                           downsample_layer=PatchMergingV2)


def tv_maxvit():
    from torchvision.models.maxvit import MaxVit

    return MaxVit(input_size=(64, 64), stem_channels=16, partition_size=4,
                  block_channels=[32, 64], block_layers=[1, 1], head_dim=16,
                  stochastic_depth_prob=0.0, num_classes=10)


def tv_fcn():  # FCN head on a ResNet-18 trunk
    from torchvision.models._utils import IntermediateLayerGetter
    from torchvision.models.segmentation.fcn import FCN, FCNHead

    from torchvision.models.resnet import BasicBlock, ResNet

    trunk = IntermediateLayerGetter(ResNet(BasicBlock, [1, 1, 1, 1]), {"layer4": "out"})
    return FCN(trunk, FCNHead(512, 5))


def tv_deeplabv3():  # DeepLabV3 (ASPP) on a dilated ResNet-18 trunk
    from torchvision.models._utils import IntermediateLayerGetter
    from torchvision.models.resnet import BasicBlock, ResNet
    from torchvision.models.segmentation.deeplabv3 import DeepLabHead, DeepLabV3

    class DilatedBasic(BasicBlock):  # torchvision's BasicBlock refuses dilation
        def __init__(self, inplanes, planes, stride=1, downsample=None, groups=1,
                     base_width=64, dilation=1, norm_layer=None):
            super().__init__(inplanes, planes, stride, downsample, groups, base_width, 1,
                             norm_layer)
            for conv in (self.conv1, self.conv2):
                conv.dilation, conv.padding = (dilation, dilation), (dilation, dilation)

    net = ResNet(DilatedBasic, [1, 1, 1, 1], replace_stride_with_dilation=[False, True, True])
    return DeepLabV3(IntermediateLayerGetter(net, {"layer4": "out"}), DeepLabHead(512, 5))


def tv_lraspp():
    from torchvision.models.segmentation import lraspp_mobilenet_v3_large

    return lraspp_mobilenet_v3_large(weights=None, weights_backbone=None, num_classes=5)


class DetectionHeads(torch.nn.Module):
    """A torchvision detector up to its head outputs (class logits and box regressions per
    anchor, FCOS's centerness too): what deployments export, decoding boxes and running NMS
    outside the network. It runs what the detector's own forward runs between its image
    transform and its post-processing: backbone (with FPN), then head."""

    def __init__(self, detector):
        super().__init__()
        self.backbone, self.head = detector.backbone, detector.head

    def forward(self, images):
        features = self.backbone(images)
        if isinstance(features, torch.Tensor):
            features = {"0": features}
        return self.head(list(features.values()))


def _resnet18_fpn(out_channels=64):
    """ResNet-18 (one block per stage) with an FPN over C3-C5 and P6/P7 from P5, as
    torchvision's RetinaNet v2 and FCOS build it on ResNet-50."""
    from torchvision.models.detection.backbone_utils import BackboneWithFPN
    from torchvision.models.resnet import BasicBlock, ResNet
    from torchvision.ops.feature_pyramid_network import LastLevelP6P7

    return BackboneWithFPN(ResNet(BasicBlock, [1, 1, 1, 1]),
                           {"layer2": "0", "layer3": "1", "layer4": "2"}, [128, 256, 512],
                           out_channels, extra_blocks=LastLevelP6P7(out_channels, out_channels))


def tv_retinanet():
    from torchvision.models.detection.retinanet import RetinaNet

    return DetectionHeads(RetinaNet(_resnet18_fpn(), num_classes=5))


def tv_fcos():
    """FCOS's GroupNorm head (32 groups) with centerness, at 128 channels (4 per group; the
    real model has 8): with 2 channels per group, a group of the 1x1 P7 holds 2 values whose
    variance amplifies float32 rounding, in torch as in tract (both 4e-4 from float64 on
    some inputs at 64 channels; 1e-5 at 128)."""
    from torchvision.models.detection.fcos import FCOS

    return DetectionHeads(FCOS(_resnet18_fpn(128), num_classes=5))


class RegionProposals(torch.nn.Module):
    """Faster R-CNN's first stage up to its head outputs: backbone with FPN, then the RPN
    head's objectness and box deltas per anchor and level (proposal decoding, NMS and the
    RoI stage stay outside)."""

    def __init__(self, detector):
        super().__init__()
        self.backbone, self.head = detector.backbone, detector.rpn.head

    def forward(self, images):
        return self.head(list(self.backbone(images).values()))


def tv_fasterrcnn_rpn():  # FPN over C2-C5 and a max-pooled P6, as fasterrcnn_resnet50_fpn
    from torchvision.models.detection.backbone_utils import BackboneWithFPN
    from torchvision.models.detection.faster_rcnn import FasterRCNN
    from torchvision.models.resnet import BasicBlock, ResNet

    fpn = BackboneWithFPN(ResNet(BasicBlock, [1, 1, 1, 1]),
                          {f"layer{k}": str(k - 1) for k in range(1, 5)}, [64, 128, 256, 512],
                          64)
    return RegionProposals(FasterRCNN(fpn, num_classes=5))


def tv_ssdlite():  # MobileNetV3-large extractor, depthwise-separable SSDLite head
    from torchvision.models.detection import ssdlite320_mobilenet_v3_large

    return DetectionHeads(ssdlite320_mobilenet_v3_large(weights=None, weights_backbone=None,
                                                        num_classes=5))


def _video(conv_makers, stem):
    from torchvision.models.video import resnet as vr

    return vr.VideoResNet(vr.BasicBlock, [getattr(vr, c) for c in conv_makers], [1, 1, 1, 1],
                          getattr(vr, stem), num_classes=10)


def tv_r3d_18():
    return _video(["Conv3DSimple"] * 4, "BasicStem")


def tv_mc3_18():
    return _video(["Conv3DSimple"] + ["Conv3DNoTemporal"] * 3, "BasicStem")


def tv_r2plus1d_18():
    return _video(["Conv2Plus1D"] * 4, "R2Plus1dStem")


def timm_convmixer():  # convmixer_768_32's block (depthwise 9x9, GELU, BN) at width 64
    from timm.models.convmixer import ConvMixer

    return ConvMixer(dim=64, depth=4, kernel_size=9, patch_size=7, num_classes=10)


IMG = (1, 3, 64, 64)
MODELS = [
    ZooModel("tv_resnet18", "ResNet", tv_resnet18, IMG),
    ZooModel("tv_resnet50_block", "ResNet", tv_resnet_bottleneck, IMG),
    ZooModel("tv_resnext50_32x4d_block", "ResNeXt", tv_resnext, IMG),
    ZooModel("tv_wide_resnet50_2_block", "WideResNet", tv_wide_resnet, IMG),
    ZooModel("tv_mobilenet_v2", "MobileNet", tv_mobilenet_v2, IMG),
    ZooModel("tv_mobilenet_v3_small", "MobileNet", tv_mobilenet_v3_small, IMG),
    ZooModel("tv_efficientnet_v2", "EfficientNet", tv_efficientnet_v2, IMG),
    ZooModel("tv_regnet_y_400mf", "RegNet", tv_regnet_y, IMG),
    ZooModel("tv_convnext", "ConvNeXt", tv_convnext, IMG, dynamic_batch=(1, 3)),
    ZooModel("tv_densenet", "DenseNet", tv_densenet, IMG),
    ZooModel("tv_inception_v3", "Inception", tv_inception_v3, (1, 3, 75, 75)),
    ZooModel("tv_squeezenet1_0", "SqueezeNet", tv_squeezenet1_0, IMG),
    ZooModel("tv_shufflenet_v2_x0_5", "ShuffleNet", tv_shufflenet_v2, IMG),
    ZooModel("tv_mnasnet0_5", "MNASNet", tv_mnasnet, IMG),
    ZooModel("tv_vgg11_bn_small", "VGG", tv_vgg_small, IMG),
    ZooModel("tv_vit", "ViT", tv_vit, IMG, dynamic_batch=(1, 3)),
    ZooModel("tv_swin", "Swin", tv_swin, IMG, dynamic_batch=(1, 3)),
    ZooModel("tv_swin_v2", "Swin", tv_swin_v2, IMG),
    ZooModel("tv_maxvit", "MaxViT", tv_maxvit, IMG),
    ZooModel("tv_fcn_resnet18", "Segmentation", tv_fcn, IMG),
    ZooModel("tv_deeplabv3_resnet18", "Segmentation", tv_deeplabv3, IMG),
    ZooModel("tv_lraspp_mobilenet_v3_large", "Segmentation", tv_lraspp, IMG),
    ZooModel("tv_retinanet_resnet18_fpn", "Detection", tv_retinanet, IMG),
    ZooModel("tv_fcos_resnet18_fpn", "Detection", tv_fcos, IMG),
    ZooModel("tv_fasterrcnn_rpn_resnet18_fpn", "Detection", tv_fasterrcnn_rpn, IMG),
    ZooModel("tv_ssdlite_mobilenet_v3_large", "Detection", tv_ssdlite, (1, 3, 128, 128)),
    ZooModel("tv_r3d_18_block", "Video", tv_r3d_18, (1, 3, 4, 32, 32)),
    ZooModel("tv_mc3_18_block", "Video", tv_mc3_18, (1, 3, 4, 32, 32)),
    ZooModel("tv_r2plus1d_18_block", "Video", tv_r2plus1d_18, (1, 3, 4, 32, 32),
             dynamic_batch=(1, 3)),
    # ------------------------------------------------------------------ timm
    ZooModel("timm_seresnext26d_32x4d", "ResNeXt", _timm("seresnext26d_32x4d",
                                                                  layers=(1, 1, 1, 1)), IMG),
    ZooModel("timm_mobilenetv3_small_050", "MobileNet", _timm("mobilenetv3_small_050"), IMG),
    ZooModel("timm_mobilenetv4_conv_small", "MobileNet", _timm("mobilenetv4_conv_small"), IMG),
    ZooModel("timm_tf_efficientnet_b0", "EfficientNet", _timm("tf_efficientnet_b0"), IMG),
    ZooModel("timm_convnext_atto", "ConvNeXt", _timm("convnext_atto"), IMG),
    ZooModel("timm_convnextv2_atto", "ConvNeXt", _timm("convnextv2_atto"), IMG),
    ZooModel("timm_vit_tiny", "ViT", _timm("vit_tiny_patch16_224", img_size=64, depth=4), IMG,
             dynamic_batch=(1, 3)),
    ZooModel("timm_deit_tiny_distilled", "ViT",
             _timm("deit_tiny_distilled_patch16_224", img_size=64, depth=4), IMG,
             dynamic_batch=(1, 3)),
    ZooModel("timm_swin_tiny", "Swin", _timm("swin_tiny_patch4_window7_224", img_size=64,
                                             window_size=4, depths=(2, 2), num_heads=(2, 4),
                                             embed_dim=32), IMG),
    ZooModel("timm_maxvit_pico_rw", "MaxViT", _timm("maxvit_pico_rw_256", img_size=64,
                                                   depths=(1, 1, 1, 1)), IMG,
             dynamic_batch=(1, 3)),
    ZooModel("timm_cait_xxs24", "CaiT", _timm("cait_xxs24_224", img_size=64, depth=4), IMG),
    ZooModel("timm_xcit_nano_12_p16", "XCiT", _timm("xcit_nano_12_p16_224", img_size=64,
                                                    depth=4), IMG),
    ZooModel("timm_poolformer_s12", "MetaFormer", _timm("poolformer_s12"), IMG),
    ZooModel("timm_convmixer", "ConvMixer", timm_convmixer, IMG),
    ZooModel("timm_volo_d1", "VOLO", _timm("volo_d1_224", img_size=64), IMG),
    # ------------------------------------------------------------------ timm: more families
    ZooModel("timm_coatnet_pico_rw", "MaxViT", _timm("coatnet_pico_rw_224", img_size=64,
                                                     depths=(1, 1, 1, 1)), IMG),
    ZooModel("timm_levit_128s", "LeViT", _timm("levit_128s", img_size=64), IMG),
    ZooModel("timm_mobilevit_xxs", "MobileViT", _timm("mobilevit_xxs"), IMG),
    ZooModel("timm_pvt_v2_b0", "PVT", _timm("pvt_v2_b0"), IMG),
    ZooModel("timm_davit_tiny", "DaViT", _timm("davit_tiny", depths=(1, 1, 1, 1),
                                               embed_dims=(32, 64, 96, 128),
                                               num_heads=(1, 2, 3, 4)), IMG),
    ZooModel("timm_beit", "BEiT", _timm("beit_base_patch16_224", img_size=64, depth=2,
                                        embed_dim=64, num_heads=2), IMG),
    ZooModel("timm_eva02_tiny", "EVA", _timm("eva02_tiny_patch14_224", img_size=56, depth=2),
             (1, 3, 56, 56)),
    ZooModel("timm_edgenext_xx_small", "EdgeNeXt", _timm("edgenext_xx_small"), IMG),
]

"""Small real-architecture models for end-to-end tests (issue 9, item 6): seeded random weights, nothing
downloaded. Each takes one float tensor and returns one tensor, so `vision.export` writes them.

- ``vit-tiny``: torchvision ``VisionTransformer`` (ViT-B/16's structure at 32x32, patch 8, 2 layers):
  ``nn.MultiheadAttention`` (aten.unflatten, select), class token, GELU MLP.
- ``whisper-encoder-tiny``: transformers ``WhisperEncoder`` (conv1d + GELU stem, sinusoidal positions,
  pre-LN transformer layers) on 16 mel bins x 64 frames.
- ``unet-tiny``: a two-level UNet, one decoder step through ``ConvTranspose2d`` and one through bilinear
  ``F.interpolate``, skip connections by concatenation.
- ``mobilenet-v3-small``: torchvision MobileNetV3-small (hardswish, squeeze-excitation) at 64x64.
"""

from __future__ import annotations

from collections.abc import Callable

import torch
import torch.nn.functional as F
from torch import nn


def _vit() -> nn.Module:
    import torchvision

    m = torchvision.models.VisionTransformer(
        image_size=32, patch_size=8, num_layers=2, num_heads=4, hidden_dim=64, mlp_dim=128, num_classes=10
    )
    # torchvision zero-initializes the head and the class token: random values make both matter
    with torch.no_grad():
        nn.init.normal_(m.heads.head.weight, std=0.2)
        nn.init.normal_(m.heads.head.bias, std=0.2)
        nn.init.normal_(m.class_token, std=0.2)
    return m


class WhisperEncoderOnly(nn.Module):
    """transformers' Whisper encoder returning its last hidden state as a tensor."""

    def __init__(self) -> None:
        super().__init__()
        from transformers import WhisperConfig
        from transformers.models.whisper.modeling_whisper import WhisperEncoder

        cfg = WhisperConfig(
            num_mel_bins=16,
            d_model=64,
            encoder_layers=2,
            encoder_attention_heads=4,
            encoder_ffn_dim=128,
            max_source_positions=32,
        )
        self.encoder = WhisperEncoder(cfg)
        with torch.no_grad():  # post_init leaves the final LayerNorm at the identity
            nn.init.normal_(self.encoder.layer_norm.weight, mean=1.0, std=0.2)
            nn.init.normal_(self.encoder.layer_norm.bias, std=0.2)

    def forward(self, input_features: torch.Tensor) -> torch.Tensor:
        return self.encoder(input_features).last_hidden_state


def _block(cin: int, cout: int) -> nn.Sequential:
    return nn.Sequential(
        nn.Conv2d(cin, cout, 3, padding=1, bias=False),
        nn.BatchNorm2d(cout),
        nn.ReLU(inplace=True),
        nn.Conv2d(cout, cout, 3, padding=1, bias=False),
        nn.BatchNorm2d(cout),
        nn.ReLU(inplace=True),
    )


class UNetTiny(nn.Module):
    """Encoder 3->16->32->64 with max pooling; decoder: transposed conv, then bilinear upsampling."""

    def __init__(self, classes: int = 2) -> None:
        super().__init__()
        self.enc1 = _block(3, 16)
        self.enc2 = _block(16, 32)
        self.mid = _block(32, 64)
        self.up2 = nn.ConvTranspose2d(64, 32, 2, stride=2)
        self.dec2 = _block(64, 32)
        self.reduce1 = nn.Conv2d(32, 16, 1)
        self.dec1 = _block(32, 16)
        self.head = nn.Conv2d(16, classes, 1)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        e1 = self.enc1(x)
        e2 = self.enc2(F.max_pool2d(e1, 2))
        m = self.mid(F.max_pool2d(e2, 2))
        d2 = self.dec2(torch.cat([self.up2(m), e2], dim=1))
        u1 = F.interpolate(self.reduce1(d2), scale_factor=2, mode="bilinear", align_corners=False)
        d1 = self.dec1(torch.cat([u1, e1], dim=1))
        return self.head(d1)


def _mobilenet_v3_small() -> nn.Module:
    import torchvision

    return torchvision.models.mobilenet_v3_small(weights=None)


# name -> (constructor, input shape without batch)
MODELS: dict[str, tuple[Callable[[], nn.Module], tuple[int, ...]]] = {
    "vit-tiny": (_vit, (3, 32, 32)),
    "whisper-encoder-tiny": (WhisperEncoderOnly, (16, 64)),
    "unet-tiny": (UNetTiny, (3, 32, 32)),
    "mobilenet-v3-small": (_mobilenet_v3_small, (3, 64, 64)),
}

# Models whose IR torch_ir's own executor runs wrongly, so the export's executor cross-check cannot apply.
EXECUTOR_MISRUNS = {
    "whisper-encoder-tiny": "torch_ir 0.2.3's IRExecutor stops at SDPA's defaulted dropout_p and drops the "
    "kwarg-only scale=1.0 (HF pre-scales the query), so it scales twice; the IR carries scale=1.0",
}

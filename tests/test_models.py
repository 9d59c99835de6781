"""The networks: the reference ResNet-18's exact size, and shapes on CIFAR and digits inputs."""

import pytest
import torch

from experiments.errors import UserError
from experiments.training.models import ResNet18, TinyCNN, build_model


def bn_running_stat_count(model: torch.nn.Module) -> int:
    return sum(
        m.running_mean.numel() + m.running_var.numel()
        for m in model.modules()
        if isinstance(m, torch.nn.BatchNorm2d)
    )


def test_resnet18_matches_reference_size():
    # The closed forms for bytes per round and PowerSGD's ratios (algorithms.md section 10)
    # are stated for exactly this network.
    model = ResNet18(num_classes=10, in_channels=3, width=64)
    assert sum(p.numel() for p in model.parameters()) == 11_173_962
    assert bn_running_stat_count(model) == 9_600


@pytest.mark.parametrize("shape", [(2, 3, 32, 32), (2, 1, 8, 8)])
def test_resnet18_forward_shapes(shape):
    torch.manual_seed(0)
    model = ResNet18(num_classes=7, in_channels=shape[1], width=4)
    out = model(torch.randn(shape))
    assert out.shape == (2, 7)
    assert torch.isfinite(out).all()


def test_resnet18_adaptive_pool_equals_fixed_4x4_pool_on_cifar():
    torch.manual_seed(0)
    model = ResNet18(width=4).eval()
    x = torch.randn(2, 3, 32, 32)
    features = model.layer4(
        model.layer3(model.layer2(model.layer1(torch.relu(model.bn1(model.conv1(x))))))
    )
    assert features.shape[-2:] == (4, 4)
    expected = model.linear(torch.nn.functional.avg_pool2d(features, 4).flatten(1))
    torch.testing.assert_close(model(x), expected)


@pytest.mark.parametrize("size", [8, 32])
def test_tiny_cnn_forward_and_bn_buffers(size):
    model = TinyCNN(in_channels=3, num_classes=5, width=4)
    assert model(torch.randn(3, 3, size, size)).shape == (3, 5)
    assert bn_running_stat_count(model) > 0


def test_build_model_dispatch_and_errors():
    model = build_model({"name": "resnet18", "width": 8}, in_channels=1, num_classes=10)
    assert isinstance(model, ResNet18)
    assert model.conv1.in_channels == 1 and model.conv1.out_channels == 8
    assert isinstance(build_model({"name": "tiny_cnn", "width": 2}, 1, 10), TinyCNN)
    with pytest.raises(UserError, match="vgg"):
        build_model({"name": "vgg", "width": 8}, 3, 10)
    with pytest.raises(UserError, match="width"):
        build_model({"name": "tiny_cnn", "width": 0}, 3, 10)

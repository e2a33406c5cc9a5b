"""torchvision's ImageNet ResNets (minidl.models.resnet18 ... resnet152): state_dict keys and shapes by
torchvision's documented layout, PyTorch parity of logits, loss and every gradient at 64 and 224 pixels."""

import numpy as np
import pytest

import minidl
import minidl.models as models
import minidl.nn.functional as F
from minidl import nn

STAGES = {18: [2, 2, 2, 2], 34: [3, 4, 6, 3], 50: [3, 4, 6, 3], 101: [3, 4, 23, 3], 152: [3, 8, 36, 3]}
BUILDERS = {18: models.resnet18, 34: models.resnet34, 50: models.resnet50, 101: models.resnet101, 152: models.resnet152}


def torchvision_state_shapes(depth: int, num_classes: int = 1000) -> dict[str, tuple[int, ...]]:
    """torchvision's resnet{depth} state_dict, key -> shape, from its layout: conv1 7x7 (64), bn1, layer1..4 of
    planes 64 * 2**s, blocks conv{i}/bn{i} (BasicBlock: two 3x3; Bottleneck: 1x1, 3x3, 1x1 to 4x planes), the
    first block of a stage whose shape changes has downsample.0 (1x1 conv) and downsample.1 (norm), then fc."""
    shapes: dict[str, tuple[int, ...]] = {}

    def conv_bn(conv: str, bn: str, c_out: int, c_in: int, k: int) -> None:
        shapes[f"{conv}.weight"] = (c_out, c_in, k, k)
        for buf in ("weight", "bias", "running_mean", "running_var"):
            shapes[f"{bn}.{buf}"] = (c_out,)
        shapes[f"{bn}.num_batches_tracked"] = ()

    bottleneck = depth >= 50
    expansion = 4 if bottleneck else 1
    conv_bn("conv1", "bn1", 64, 3, 7)
    c_in = 64
    for s, n in enumerate(STAGES[depth]):
        planes = 64 * 2**s
        for k in range(n):
            p = f"layer{s + 1}.{k}"
            convs = (
                [(planes, c_in, 1), (planes, planes, 3), (4 * planes, planes, 1)]
                if bottleneck
                else [
                    (planes, c_in, 3),
                    (planes, planes, 3),
                ]
            )
            for i, (o, c, kk) in enumerate(convs, 1):
                conv_bn(f"{p}.conv{i}", f"{p}.bn{i}", o, c, kk)
            if k == 0 and (s > 0 or c_in != planes * expansion):
                conv_bn(f"{p}.downsample.0", f"{p}.downsample.1", planes * expansion, c_in, 1)
            c_in = planes * expansion
    shapes["fc.weight"], shapes["fc.bias"] = (num_classes, c_in), (num_classes,)
    return shapes


@pytest.mark.parametrize("depth", sorted(STAGES))
def test_state_dict_is_torchvisions(depth):
    sd = BUILDERS[depth]().state_dict()
    expected = torchvision_state_shapes(depth)
    assert list(sd) == list(expected)  # the same keys, in torchvision's order
    assert {k: tuple(v.shape) for k, v in sd.items()} == expected


def test_structure_strides_and_sizes():
    m = models.resnet50(num_classes=7)
    assert sum(p.size for p in m.parameters()) == 23_522_375  # 25,557,032 with 1000 classes, less fc's 993 x 2049
    assert m.conv1.stride == (2, 2) and m.conv1.padding == (3, 3) and m.maxpool.kernel_size == (3, 3)
    first = m.layer2[0]  # v1.5: the stride on the 3x3, not on the first 1x1
    assert first.conv1.stride == (1, 1) and first.conv2.stride == (2, 2) and first.downsample[0].stride == (2, 2)
    assert m.layer1[0].downsample is not None and m.layer1[1].downsample is None  # 64 -> 256 channels
    assert models.resnet18().layer1[0].downsample is None  # BasicBlock: 64 -> 64, the identity
    r18 = models.resnet18(num_classes=3)
    for size in (32, 33, 64, 97):  # any input from 32 pixels up: 32 reaches 1x1 at layer4
        x = np.random.default_rng(size).standard_normal((2, 3, size, size)).astype(np.float32)
        assert r18(minidl.tensor(x)).shape == (2, 3)
    assert models.resnet18(in_channels=1, num_classes=2)(minidl.ones(2, 1, 32, 32)).shape == (2, 2)
    with pytest.raises(ValueError, match="depth must be one of"):
        nn.resnet_imagenet(20)


def test_init_as_torchvision():
    minidl.manual_seed(0)
    m = models.resnet50(zero_init_residual=True)
    w = m.layer3[0].conv2.weight.data  # He-normal with fan_out = 256 * 3 * 3
    assert abs(w.std() - np.sqrt(2 / (256 * 9))) < 0.03 * np.sqrt(2 / (256 * 9))
    assert all(np.all(b.bn3.weight.data == 0) and np.all(b.bn2.weight.data == 1) for b in m.layer2)
    r18 = models.resnet18(zero_init_residual=True)
    assert np.all(r18.layer4[1].bn2.weight.data == 0) and np.all(r18.layer4[1].bn1.weight.data == 1)
    assert np.all(models.resnet50().layer2[0].bn3.weight.data == 1)


def _parity(depth: int, size: int, rng, dtype=np.float32, grads: bool = True) -> None:
    """Same weights, same batch of 2: logits, loss and (``grads``) every parameter gradient as PyTorch's."""
    torch = pytest.importorskip("torch")
    from torch_reference import TorchImageNetResNet, assert_close, load_into_torch

    tight = dtype == np.float64
    rtol, atol = (1e-8, 1e-9) if tight else (1e-3, 1e-4)  # float32: the layer tests' tolerances
    minidl.set_default_dtype(dtype)
    torch.set_default_dtype(torch.float64 if tight else torch.float32)
    try:
        minidl.manual_seed(depth)
        ours, theirs = BUILDERS[depth](num_classes=10), TorchImageNetResNet(depth, num_classes=10)
        load_into_torch(theirs, ours)
        x = rng.standard_normal((2, 3, size, size)).astype(dtype)
        y = np.array([3, 7])
        logits = ours(minidl.tensor(x))
        loss = F.cross_entropy(logits, y)
        t_logits = theirs(torch.from_numpy(x))
        t_loss = torch.nn.functional.cross_entropy(t_logits, torch.from_numpy(y))
        assert_close(logits.data, t_logits.detach().numpy(), rtol, atol, "logits")
        assert_close(np.asarray(loss.data), t_loss.detach().numpy(), rtol, atol, "loss")
        if not grads:
            return
        loss.backward()
        t_loss.backward()
        tp = dict(theirs.named_parameters())
        assert [n for n, _ in ours.named_parameters()] == list(tp)
        for name, p in ours.named_parameters():  # train mode: batch statistics
            assert_close(p.grad, tp[name].grad.numpy(), rtol, atol, f"grad of {name}")
    finally:
        minidl.set_default_dtype(np.float32)
        torch.set_default_dtype(torch.float32)


@pytest.mark.parametrize("depth", [18, 34])
def test_parity_with_torch_64(depth, rng):
    _parity(depth, 64, rng)


# ResNet-50's gradients at initialization with batch 2 are ill-conditioned in float32: PyTorch's own float32
# gradients of layer3/layer4 differ from its float64 ones by up to 15% of their largest entry (minidl's by as
# much), while the float64 gradients of the two agree to 1e-10. So float32 is held on logits and loss, and the
# gradients in float64, where a wrong gradient cannot hide in rounding.
@pytest.mark.parametrize("size", [64, 224])
def test_resnet50_parity_with_torch_float32(size, rng):
    _parity(50, size, rng, grads=False)


def test_resnet50_parity_with_torch_float64_224(rng):
    _parity(50, 224, rng, np.float64)


def test_train_cnn_flags_pick_the_imagenet_presets(capsys):
    from minidl.train import cli
    from minidl.train.cnn import CNNTask

    def resolved(*argv: str):
        return cli.resolve(CNNTask, cli.build_parser(CNNTask).parse_args(list(argv)))

    preset, cfg = resolved("--model", "resnet50", "--image", "64")
    assert preset == "imagenet" and (cfg.model, cfg.image, cfg.batch_size) == ("resnet50", 64, 32)
    preset, cfg = resolved("--model", "resnet18", "--quick")
    assert preset == "imagenet-quick" and cfg.model == "resnet18" and cfg.images == "tiny"
    assert resolved("--quick")[0] == "quick" and resolved()[1].model == "resnet"  # the CIFAR ResNets as they were
    with pytest.raises(SystemExit):
        resolved("--model", "resnet50", "--image", "31")
    assert "--image: must be at least 32 pixels, got 31" in capsys.readouterr().err

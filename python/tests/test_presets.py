"""torchvision's weight presets and the v2 tensor conversions as pipeline=.

``ResNet50_Weights.IMAGENET1K_V2.transforms()`` returns torchvision's
ImageClassification preset (resize 232, crop 224, ImageNet mean/std,
bilinear): the eval pipeline. It is accepted as pipeline= and gives the
preset's own pixels on JPEGs (both sides decode with libjpeg-turbo). ``ToImage()`` +
``ToDtype(float32, scale=True)`` stand where ``ToTensor()`` does.
"""
import os

import pytest

torch = pytest.importorskip("torch")
torchvision = pytest.importorskip("torchvision")
np = pytest.importorskip("numpy")
Image = pytest.importorskip("PIL.Image")

import stoker  # noqa: E402
from stoker import transforms as T  # noqa: E402

from conftest import photo, save_jpeg  # noqa: E402

try:
    from torchvision.transforms._presets import ImageClassification
except ImportError:  # pragma: no cover: torchvision < 0.13
    ImageClassification = None

need_presets = pytest.mark.skipif(ImageClassification is None,
                                  reason="this torchvision has no weight presets")


@pytest.fixture(scope="module")
def png_folder(tmp_path_factory):
    root = tmp_path_factory.mktemp("presets")
    sizes = [(61, 47), (40, 64), (50, 50), (33, 70)]
    for i, (w, h) in enumerate(sizes):
        d = root / f"c{i % 2}"
        d.mkdir(exist_ok=True)
        save_jpeg(str(d / f"{i}.jpg"), photo(w, h, 50 + i), quality=95)
    return str(root)


def reference(root, transform):
    paths = sorted(os.path.join(dp, f) for dp, _, fs in os.walk(root) for f in fs)
    paths.sort(key=lambda p: (os.path.basename(os.path.dirname(p)), os.path.basename(p)))
    return torch.stack([transform(Image.open(p).convert("RGB")) for p in paths])


def batch(root, pipeline):
    with stoker.ImageLoader(root, batch_size=4, pipeline=pipeline, shuffle=False,
                            threads=2) as ld:
        images, _ = next(iter(ld))
        return images.clone()


@need_presets
def test_resnet50_v2_preset_is_the_eval_pipeline():
    from torchvision.models import ResNet50_Weights

    preset = ResNet50_Weights.IMAGENET1K_V2.transforms()
    opts = T.pipeline_options(preset)
    assert opts == {"pipeline": "eval", "resize_size": 232, "size": 224,
                    "interpolation": "bilinear", "mean": T.IMAGENET_MEAN,
                    "std": T.IMAGENET_STD}
    # the same as the explicit list, also inside a list
    assert T.pipeline_options([preset]) == opts
    explicit = T.pipeline_options([T.Resize(232), T.CenterCrop(224), T.ToTensor(),
                                   T.Normalize(T.IMAGENET_MEAN, T.IMAGENET_STD)])
    assert explicit == opts


@need_presets
@pytest.mark.parametrize("interp", ["bilinear", "bicubic"])
def test_preset_pixels_equal_torchvision(png_folder, interp):
    from torchvision.transforms import InterpolationMode

    mode = InterpolationMode.BICUBIC if interp == "bicubic" else InterpolationMode.BILINEAR
    preset = ImageClassification(crop_size=24, resize_size=28, mean=(0.5, 0.4, 0.3),
                                 std=(0.2, 0.25, 0.3), interpolation=mode)
    got = batch(png_folder, preset)
    want = reference(png_folder, preset)
    assert got.shape == want.shape == (4, 3, 24, 24)
    assert torch.allclose(got, want, atol=1e-5), (got - want).abs().max()


@need_presets
def test_preset_refusals():
    from torchvision.transforms import InterpolationMode

    p = ImageClassification(crop_size=24, interpolation=InterpolationMode.NEAREST)
    with pytest.raises(ValueError, match="ImageClassification: interpolation"):
        T.pipeline_options(p)


def v2_or_ours():
    try:
        from torchvision.transforms import v2
        return v2.ToImage(), v2.ToDtype(torch.float32, scale=True)
    except (ImportError, TypeError):
        return T.ToImage(), T.ToDtype(torch.float32, scale=True)


def test_to_image_to_dtype_in_eval_and_train(png_folder):
    to_image, to_dtype = v2_or_ours()
    norm = T.Normalize(T.IMAGENET_MEAN, T.IMAGENET_STD)
    ev = T.pipeline_options([T.Resize(28), T.CenterCrop(24), to_image, to_dtype, norm])
    assert ev == T.pipeline_options([T.Resize(28), T.CenterCrop(24), T.ToTensor(), norm])
    tr = T.pipeline_options([T.RandomResizedCrop(24), T.RandomHorizontalFlip(), to_image,
                             to_dtype, norm])
    assert tr == T.pipeline_options([T.RandomResizedCrop(24), T.RandomHorizontalFlip(),
                                     T.ToTensor(), norm])
    a = batch(png_folder, [T.Resize(28), T.CenterCrop(24), to_image, to_dtype, norm])
    b = batch(png_folder, [T.Resize(28), T.CenterCrop(24), T.ToTensor(), norm])
    assert torch.equal(a, b)

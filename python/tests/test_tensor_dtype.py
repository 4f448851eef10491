"""The element type the transforms end in, with torchvision's own classes.

``PILToTensor()`` (and v2's ``ToImage()``) make a uint8 tensor in 0..255:
a pipeline that ends there yields uint8, as torchvision does, never float.
``ConvertImageDtype(torch.float)`` / ``ToDtype(torch.float32, scale=True)``
after it give ToTensor's [0, 1] floats. torchvision's reference presets
(references/classification/presets.py) are accepted as written: the
ClassificationPresetTrain/Eval objects, whose .transforms is a Compose.
"""
import os

import pytest

torch = pytest.importorskip("torch")
torchvision = pytest.importorskip("torchvision")
np = pytest.importorskip("numpy")
Image = pytest.importorskip("PIL.Image")

import stoker  # noqa: E402
from stoker import transforms as ST  # noqa: E402
from stoker.transforms import pipeline_options  # noqa: E402
from torchvision import transforms as T  # noqa: E402

from conftest import photo, save_jpeg  # noqa: E402

try:
    from torchvision.transforms import v2
except ImportError:  # torchvision < 0.15
    v2 = None

need_v2 = pytest.mark.skipif(v2 is None or not hasattr(v2, "ToPureTensor"),
                             reason="this torchvision has no transforms.v2 with ToPureTensor")

MEAN, STD = (0.485, 0.456, 0.406), (0.229, 0.224, 0.225)


def transforms_module(use_v2):
    return v2 if use_v2 else T


class ClassificationPresetTrain:
    """references/classification/presets.py's training preset, as recipes
    write and use it: an object whose .transforms is a Compose (of
    torchvision.transforms, or of .v2 with use_v2=True), called on each
    image. Passed as it is, as pipeline= or as an ImageFolder's transform."""

    def __init__(self, *, crop_size, mean=MEAN, std=STD, interpolation=None, hflip_prob=0.5,
                 auto_augment_policy=None, ra_magnitude=9, augmix_severity=3,
                 random_erase_prob=0.0, backend="pil", use_v2=False):
        M = transforms_module(use_v2)
        interpolation = interpolation or M.InterpolationMode.BILINEAR
        t = []
        if backend == "tensor":
            t.append(M.PILToTensor())
        elif backend == "tv_tensor":
            t.append(M.ToImage())
        t.append(M.RandomResizedCrop(crop_size, interpolation=interpolation, antialias=True))
        if hflip_prob > 0:
            t.append(M.RandomHorizontalFlip(hflip_prob))
        if auto_augment_policy == "ta_wide":
            t.append(M.TrivialAugmentWide(interpolation=interpolation))
        elif auto_augment_policy == "ra":
            t.append(M.RandAugment(interpolation=interpolation, magnitude=ra_magnitude))
        elif auto_augment_policy == "augmix":
            t.append(M.AugMix(interpolation=interpolation, severity=augmix_severity))
        elif auto_augment_policy is not None:
            t.append(M.AutoAugment(policy=M.AutoAugmentPolicy(auto_augment_policy),
                                   interpolation=interpolation))
        if backend == "pil":
            t.append(M.PILToTensor())
        t += [M.ToDtype(torch.float, scale=True) if use_v2 else M.ConvertImageDtype(torch.float),
              M.Normalize(mean=mean, std=std)]
        if random_erase_prob > 0:
            t.append(M.RandomErasing(p=random_erase_prob))
        if use_v2:
            t.append(M.ToPureTensor())
        self.transforms = M.Compose(t)

    def __call__(self, img):
        return self.transforms(img)


class ClassificationPresetEval:
    """references/classification/presets.py's evaluation preset (an object
    whose .transforms is a Compose)."""

    def __init__(self, *, crop_size, resize_size=256, mean=MEAN, std=STD, interpolation=None,
                 backend="pil", use_v2=False):
        M = transforms_module(use_v2)
        interpolation = interpolation or M.InterpolationMode.BILINEAR
        t = []
        if backend == "tensor":
            t.append(M.PILToTensor())
        elif backend == "tv_tensor":
            t.append(M.ToImage())
        t += [M.Resize(resize_size, interpolation=interpolation, antialias=True),
              M.CenterCrop(crop_size)]
        if backend == "pil":
            t.append(M.PILToTensor())
        t += [M.ToDtype(torch.float, scale=True) if use_v2 else M.ConvertImageDtype(torch.float),
              M.Normalize(mean=mean, std=std)]
        if use_v2:
            t.append(M.ToPureTensor())
        self.transforms = M.Compose(t)

    def __call__(self, img):
        return self.transforms(img)


@pytest.fixture(scope="module")
def folder(tmp_path_factory):
    root = tmp_path_factory.mktemp("dtype")
    for i, (w, h) in enumerate([(61, 47), (40, 64), (50, 50), (33, 70)]):
        save_jpeg(str(root / f"c{i % 2}" / f"{i}.jpg"), photo(w, h, 70 + i), quality=95)
    return str(root)


def reference(root, transform):
    paths = sorted(os.path.join(dp, f) for dp, _, fs in os.walk(root) for f in fs)
    paths.sort(key=lambda p: (os.path.basename(os.path.dirname(p)), os.path.basename(p)))
    return torch.stack([transform(Image.open(p).convert("RGB")) for p in paths])


def first_batch(root, pipeline, **kw):
    with stoker.ImageLoader(root, batch_size=4, pipeline=pipeline, shuffle=False, threads=2,
                            **kw) as ld:
        images, _ = next(iter(ld))
        return images.clone()


# ---- uint8 pipelines yield uint8 -----------------------------------------------------


def test_pil_to_tensor_eval_yields_torchvisions_uint8(folder):
    tf = T.Compose([T.Resize(28), T.CenterCrop(24), T.PILToTensor()])
    got = first_batch(folder, tf)
    want = reference(folder, tf)
    assert want.dtype == torch.uint8
    assert got.dtype == torch.uint8 and got.shape == want.shape == (4, 3, 24, 24)
    assert torch.equal(got, want)


def test_convert_image_dtype_uint8_yields_uint8(folder):
    tf = T.Compose([T.Resize(28), T.CenterCrop(24), T.ToTensor(),
                    T.ConvertImageDtype(torch.uint8)])
    got = first_batch(folder, tf)
    want = reference(folder, tf)
    assert got.dtype == want.dtype == torch.uint8
    assert torch.equal(got, want)


def test_train_pil_to_tensor_yields_uint8(folder):
    tf = T.Compose([T.RandomResizedCrop(24), T.RandomHorizontalFlip(), T.PILToTensor()])
    got = first_batch(folder, tf)
    assert got.dtype == torch.uint8
    assert int(got.max()) > 1  # 0..255 values, not [0, 1] floats cast


def test_uint8_pipeline_with_a_float_dtype_is_refused(folder):
    tf = T.Compose([T.Resize(28), T.CenterCrop(24), T.PILToTensor()])
    with pytest.raises(ValueError, match=r"ConvertImageDtype\(torch.float\)"):
        stoker.ImageLoader(folder, batch_size=4, pipeline=tf, dtype="float32")
    # the same type given twice is fine
    assert first_batch(folder, tf, dtype=torch.uint8).dtype == torch.uint8
    # ToTensor is float: dtype= still picks its precision, as before
    tf = [T.Resize(28), T.CenterCrop(24), T.ToTensor(), T.Normalize(MEAN, STD)]
    assert first_batch(folder, tf).dtype == torch.float32
    assert first_batch(folder, tf, dtype="float16").dtype == torch.float16


def test_normalize_on_uint8_is_refused():
    with pytest.raises(ValueError, match="Normalize on a uint8 tensor"):
        pipeline_options([T.Resize(28), T.CenterCrop(24), T.PILToTensor(),
                          T.Normalize(MEAN, STD)])


# ---- torchvision's reference presets, v1 -------------------------------------------


def test_v1_eval_preset_equals_torchvision(folder):
    tf = ClassificationPresetEval(crop_size=24, resize_size=28)
    opts = pipeline_options(tf)
    assert opts == pipeline_options([ST.Resize(28), ST.CenterCrop(24), ST.ToTensor(),
                                     ST.Normalize(MEAN, STD)])
    got = first_batch(folder, tf)
    want = reference(folder, tf)
    assert got.dtype == want.dtype == torch.float32
    assert torch.allclose(got, want, atol=1e-5), (got - want).abs().max()


@pytest.mark.parametrize("policy", [None, "ta_wide", "ra", "imagenet"])
def test_v1_train_preset_is_accepted(folder, policy):
    tf = ClassificationPresetTrain(crop_size=24, auto_augment_policy=policy,
                                   random_erase_prob=0.25)
    opts = pipeline_options(tf)
    assert opts["pipeline"] == "train" and opts["mean"] == MEAN and opts["erase_prob"] == 0.25
    assert "dtype" not in opts
    assert first_batch(folder, tf).dtype == torch.float32


def test_presets_as_objects_in_an_imagefolder_and_as_pipeline(folder):
    """The preset objects as recipes pass them: as an ImageFolder's transform
    (the dataset given as root) and as pipeline=, eval with the preset's own
    pixels; the train preset's options are those of its Compose."""
    from torchvision.datasets import ImageFolder

    ev = ClassificationPresetEval(crop_size=24, resize_size=28, mean=(0.5, 0.4, 0.3))
    want = reference(folder, ev)
    for source, kw in ((ImageFolder(folder, transform=ev), {}), (folder, {"pipeline": ev})):
        with stoker.ImageLoader(source, batch_size=4, shuffle=False, threads=2, **kw) as ld:
            got = next(iter(ld))[0].clone()
        assert torch.allclose(got, want, atol=1e-5), (got - want).abs().max()
    tr = ClassificationPresetTrain(crop_size=24, auto_augment_policy="ta_wide",
                                   random_erase_prob=0.1)
    assert pipeline_options(tr) == pipeline_options(tr.transforms)
    with stoker.ImageLoader(ImageFolder(folder, transform=tr), batch_size=2, threads=2,
                            seed=0) as ld:
        assert ld.pipeline == "train" and ld.size == 24
        assert next(iter(ld))[0].shape == (2, 3, 24, 24)
    # a preset inside a Compose, or a list: flattened, as applying them in turn does
    assert pipeline_options(T.Compose([ev])) == pipeline_options(ev)
    assert pipeline_options([tr]) == pipeline_options(tr)


def test_a_pipeline_that_is_no_list_is_named():
    class NotAPreset:
        transforms = "resize then crop"

    with pytest.raises(ValueError, match="not a list of transforms"):
        pipeline_options(T.Resize(28))
    with pytest.raises(ValueError, match="not a list of transforms"):
        pipeline_options(NotAPreset())


def test_v1_tensor_backend_preset_is_accepted():
    a = pipeline_options(ClassificationPresetTrain(crop_size=24, backend="tensor"))
    assert a == pipeline_options(ClassificationPresetTrain(crop_size=24))
    b = pipeline_options(ClassificationPresetEval(crop_size=24, resize_size=28,
                                                  backend="tensor"))
    assert b == pipeline_options(ClassificationPresetEval(crop_size=24, resize_size=28))


def test_color_jitter_with_factors_off():
    # torchvision stores None for a factor that is 0 (here hue)
    cj = T.ColorJitter(0.4, 0.4, 0.4)
    assert cj.hue is None
    opts = pipeline_options([T.RandomResizedCrop(24), T.RandomHorizontalFlip(), cj,
                             T.ToTensor()])
    assert opts["color_jitter"] == (0.4, 0.4, 0.4, 0.0)
    opts = pipeline_options([T.RandomResizedCrop(24), T.ColorJitter(brightness=0.2)])
    assert opts["color_jitter"] == (0.2, 0.0, 0.0, 0.0)


# ---- v2 --------------------------------------------------------------------------------


@need_v2
@pytest.mark.parametrize("backend", ["pil", "tensor", "tv_tensor"])
def test_v2_presets_are_accepted(folder, backend):
    tr = pipeline_options(ClassificationPresetTrain(
        crop_size=24, use_v2=True, backend=backend, auto_augment_policy="ta_wide",
        random_erase_prob=0.1))
    assert tr == pipeline_options(ClassificationPresetTrain(
        crop_size=24, auto_augment_policy="ta_wide", random_erase_prob=0.1))
    ev = ClassificationPresetEval(crop_size=24, resize_size=28, use_v2=True, backend=backend)
    assert pipeline_options(ev) == pipeline_options(
        ClassificationPresetEval(crop_size=24, resize_size=28))
    if backend == "pil":
        got = first_batch(folder, ev)
        want = reference(folder, ev)
        assert got.dtype == want.dtype == torch.float32
        assert torch.allclose(got, want, atol=1e-5), (got - want).abs().max()


@need_v2
def test_v2_uint8_pipelines_yield_uint8(folder):
    for tail in ([v2.ToImage()], [v2.PILToTensor()], [v2.ToImage(), v2.ToPureTensor()],
                 [v2.ToImage(), v2.ToDtype(torch.float32, scale=True),
                  v2.ToDtype(torch.uint8, scale=True)]):
        tf = v2.Compose([v2.Resize(28), v2.CenterCrop(24)] + tail)
        got = first_batch(folder, tf)
        want = reference(folder, tf)
        assert got.dtype == want.dtype == torch.uint8, tail
        assert torch.equal(got, want.as_subclass(torch.Tensor)), tail


@need_v2
def test_v2_to_dtype_without_scale_is_refused():
    with pytest.raises(ValueError, match="scale=True"):
        pipeline_options([v2.Resize(28), v2.CenterCrop(24), v2.ToImage(),
                          v2.ToDtype(torch.float32)])


def test_stoker_classes_port_the_same_way(folder):
    tf = [ST.Resize(28), ST.CenterCrop(24), ST.PILToTensor()]
    assert pipeline_options(tf)["dtype"] == "uint8"
    tf = [ST.Resize(28), ST.CenterCrop(24), ST.PILToTensor(),
          ST.ConvertImageDtype(torch.float), ST.Normalize(MEAN, STD), ST.ToPureTensor()]
    assert "dtype" not in pipeline_options(tf)

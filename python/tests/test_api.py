"""Construction, options, shapes, labels and error reporting of stoker.ImageLoader."""
import os

import pytest

torch = pytest.importorskip("torch")
datasets = pytest.importorskip("torchvision.datasets")
tvT = pytest.importorskip("torchvision.transforms")

import stoker  # noqa: E402
from stoker import transforms as T  # noqa: E402

from conftest import make_folder, photo, save_jpeg  # noqa: E402


def loader(root, **kw):
    kw.setdefault("batch_size", 4)
    kw.setdefault("size", 16)
    kw.setdefault("threads", 2)
    return stoker.ImageLoader(root, **kw)


# ---- construction errors ----------------------------------------------------------


@pytest.mark.parametrize("kw, match", [
    (dict(batch_size=0), "batch_size"),
    (dict(threads=-1), "threads"),
    (dict(prefetch=0), "prefetch"),
    (dict(size=0), "size"),
    (dict(pipeline="fancy"), "pipeline"),
    (dict(dtype="int32"), "dtype"),
    (dict(dtype=torch.float64), "dtype"),
    (dict(on_error="ignore"), "on_error"),
    (dict(rank=2, world_size=2), "rank"),
    (dict(world_size=0), "world_size"),
    (dict(device="tpu"), "device"),
    (dict(seed=-1), "seed"),
    (dict(batch_size=2.5), "batch_size"),
    (dict(size=8193), "size"),          # the options table's ranges
    (dict(threads=1025), "threads"),
    (dict(prefetch=65), "prefetch"),
    (dict(index=3), "index"),
    (dict(shuffle_buffer=-5), "shuffle_buffer"),
])
def test_bad_arguments_raise_value_error(small_folder, kw, match):
    with pytest.raises(ValueError, match=match):
        loader(small_folder, **kw)


def test_source_arguments(small_folder, tmp_path):
    with pytest.raises(ValueError, match="exactly one"):
        stoker.ImageLoader()
    with pytest.raises(ValueError, match="exactly one"):
        stoker.ImageLoader(small_folder, list_file=os.path.join(small_folder, "x.txt"))
    with pytest.raises(FileNotFoundError):
        stoker.ImageLoader(str(tmp_path / "missing"))
    with pytest.raises(FileNotFoundError):
        stoker.ImageLoader(list_file=str(tmp_path / "missing.txt"))


def test_empty_class_folder_is_refused_like_imagefolder(tmp_path):
    make_folder(tmp_path, classes=2, per_class=2)
    os.makedirs(tmp_path / "zzz_empty")
    with pytest.raises(FileNotFoundError, match="zzz_empty"):
        loader(str(tmp_path))
    with pytest.raises(FileNotFoundError):
        datasets.ImageFolder(str(tmp_path))


@pytest.mark.skipif(torch.cuda.is_available(), reason="a CUDA device is present")
def test_cuda_device_is_a_clear_runtime_error(small_folder):
    for dev in ("cuda", "cuda:1", torch.device("cuda", 0)):
        with pytest.raises(RuntimeError, match="GPU|device"):
            loader(small_folder, device=dev)


@pytest.mark.parametrize("name,value", [("STOKER_GPU_ENGINE_STATES", "x"),
                                        ("STOKER_GPU_ENGINE_STATES", "65"),
                                        ("STOKER_GPU_ENGINE_STATES", "4 "),
                                        ("STOKER_GPU_LANES", "0"),
                                        ("STOKER_GPU_LANES", "9"),
                                        ("STOKER_GPU_ENGINE_ORDER", "random")])
def test_bad_gpu_engine_variable_is_named(small_folder, monkeypatch, name, value):
    # checked before the device is opened: the same error with or without a GPU
    monkeypatch.setenv(name, value)
    with pytest.raises(ValueError, match=name):
        loader(small_folder, device="cuda")


# ---- transforms --------------------------------------------------------------------


def test_transform_lists_map_to_the_pipelines():
    from stoker.transforms import pipeline_options

    m, s = (0.5, 0.4, 0.3), (0.2, 0.2, 0.2)
    train = pipeline_options(T.Compose([T.RandomResizedCrop(96, scale=(0.3, 0.9), ratio=(0.5, 2.0)),
                                        T.RandomHorizontalFlip(0.25), T.ToTensor(),
                                        T.Normalize(m, s)]))
    assert train == dict(pipeline="train", size=96, scale=(0.3, 0.9), ratio=(0.5, 2.0),
                         flip_prob=0.25, mean=m, std=s, interpolation="bilinear")
    assert pipeline_options([T.RandomResizedCrop(64)])["flip_prob"] == 0.0
    ev = pipeline_options([T.Resize(146), T.CenterCrop(128), T.ToTensor()])
    assert ev == dict(pipeline="eval", resize_size=146, size=128, interpolation="bilinear")
    bicubic = pipeline_options([T.RandomResizedCrop(64, interpolation=T.InterpolationMode.BICUBIC)])
    assert bicubic["interpolation"] == "bicubic"
    # torchvision's own objects map the same way.
    tv = tvT.Compose([tvT.RandomResizedCrop(96, scale=(0.3, 0.9), ratio=(0.5, 2.0)),
                      tvT.RandomHorizontalFlip(0.25), tvT.ToTensor(), tvT.Normalize(m, s)])
    assert pipeline_options(tv) == train
    assert pipeline_options([tvT.Resize(146), tvT.CenterCrop(128)]) == ev
    # PILToTensor makes a uint8 tensor: the loader yields uint8, as torchvision
    assert pipeline_options([tvT.Resize(146), tvT.CenterCrop(128), tvT.PILToTensor()]) == \
        dict(ev, dtype="uint8")


@pytest.mark.parametrize("spec, match", [
    ([T.RandomHorizontalFlip(), T.RandomResizedCrop(64)], "first transform"),
    ([T.RandomResizedCrop(64), T.ToTensor(), T.RandomHorizontalFlip()], "order"),
    ([T.RandomResizedCrop((64, 48))], "non-square"),
    ([T.RandomResizedCrop(64, interpolation=T.InterpolationMode.NEAREST)], "interpolation"),
    ([T.Resize((256, 256)), T.CenterCrop(224)], "shorter side"),
    ([T.Resize(256)], "CenterCrop"),
    ([T.Resize(256, max_size=300), T.CenterCrop(224)], "max_size"),
    ([T.Resize(256), T.CenterCrop(224), tvT.ColorJitter(0.4)], "ColorJitter"),
    ([tvT.ColorJitter(0.4)], "ColorJitter"),
    ([], "empty"),
])
def test_unsupported_transforms_are_named(spec, match):
    from stoker.transforms import pipeline_options

    with pytest.raises(ValueError, match=match):
        pipeline_options(spec)


def test_transforms_pipeline_and_size_conflicts(small_folder):
    with pytest.raises(ValueError, match="contradicts"):
        loader(small_folder, pipeline=[T.Resize(20), T.CenterCrop(16)], size=32)
    with pytest.raises(ValueError, match="uint8"):
        loader(small_folder, pipeline=[T.Resize(20), T.CenterCrop(16), T.Normalize(0.5, 0.5)],
               dtype="uint8")
    with pytest.raises(ValueError, match="resize_size"):  # Resize smaller than the crop
        loader(small_folder, pipeline=[T.Resize(12), T.CenterCrop(16)], size=None)


def test_without_normalize_values_are_tensor_scaled(small_folder):
    ld = loader(small_folder, pipeline=[T.Resize(20), T.CenterCrop(16), T.ToTensor()], size=None)
    images, _ = next(iter(ld))
    raw = loader(small_folder, pipeline=[T.Resize(20), T.CenterCrop(16)], dtype=torch.uint8,
                 size=None)
    raw_images, _ = next(iter(raw))
    assert images.min() >= 0 and images.max() <= 1
    assert torch.allclose(images, raw_images.float() / 255, atol=1e-6)


# ---- iteration: shapes, dtypes, layout ----------------------------------------------


@pytest.mark.parametrize("dtype", [torch.float32, torch.float16, torch.bfloat16, torch.uint8,
                                   "float16"])
@pytest.mark.parametrize("channels_last", [False, True])
@pytest.mark.parametrize("pipeline", ["train", "eval"])
def test_shapes_dtypes_layout(small_folder, dtype, channels_last, pipeline):
    ld = loader(small_folder, batch_size=5, size=24, dtype=dtype, channels_last=channels_last,
                pipeline=pipeline)
    want = {"float16": torch.float16}.get(dtype, dtype)
    n = 0
    for images, labels in ld:
        assert images.shape[1:] == (3, 24, 24) and 1 <= images.shape[0] <= 5
        assert images.dtype == want and images.device.type == "cpu"
        assert labels.dtype == torch.int64 and labels.shape == (images.shape[0],)
        if channels_last:
            assert images.is_contiguous(memory_format=torch.channels_last)
        else:
            assert images.is_contiguous()
        assert torch.isfinite(images.float()).all()
        n += images.shape[0]
    assert n == 17


def test_channels_last_holds_the_same_values(small_folder):
    a = loader(small_folder, pipeline="eval", channels_last=False)
    b = loader(small_folder, pipeline="eval", channels_last=True)
    for (x, _), (y, _) in zip(a, b):
        assert torch.equal(x, y)


def test_len_batches_and_drop_last(small_folder):
    assert len(loader(small_folder, batch_size=4)) == 5  # ceil(17 / 4)
    ld = loader(small_folder, batch_size=4, drop_last=True)
    assert len(ld) == 4
    sizes = [x.shape[0] for x, _ in ld]
    assert sizes == [4, 4, 4, 4]
    sizes = [x.shape[0] for x, _ in loader(small_folder, batch_size=4)]
    assert sizes == [4, 4, 4, 4, 1]


def test_classes_samples_and_labels_match_imagefolder(small_folder):
    ref = datasets.ImageFolder(small_folder)
    ld = loader(small_folder, batch_size=3, shuffle=True)
    assert ld.classes == ref.classes
    assert ld.class_to_idx == ref.class_to_idx
    assert ld.samples == ref.samples
    seen = []
    for b in ld.iter_batches():
        assert b.labels.tolist() == [ref.samples[i][1] for i in b.indices]
        seen += b.indices
    assert sorted(seen) == list(range(len(ref)))


def test_list_file(small_folder, tmp_path):
    ref = datasets.ImageFolder(small_folder)
    lst = tmp_path / "train.txt"
    with open(lst, "w") as f:
        f.write("# path label\n")
        for path, label in ref.samples:
            f.write(f"{os.path.relpath(path, small_folder)} {label}\n")
    ld = stoker.ImageLoader(list_file=str(lst), list_base=small_folder, batch_size=4, size=16,
                            pipeline="eval")
    assert ld.source_kind == "list" and loader(small_folder).source_kind == "folder"
    assert [lab for _, lab in ld.samples] == [lab for _, lab in ref.samples]
    assert len(ld.classes) == len(ref.classes)
    by_folder = loader(small_folder, pipeline="eval", shuffle=False)
    for (x, y), (x2, y2) in zip(ld, by_folder):
        assert torch.equal(x, x2) and torch.equal(y, y2)


def test_stats(small_folder):
    ld = loader(small_folder, threads=3)
    for _ in ld:
        pass
    st = ld.stats()
    for key in ("images", "seconds", "images_per_s", "skipped", "skipped_files", "read_seconds",
                "decode_seconds", "augment_seconds", "wait_seconds", "host_bytes", "threads"):
        assert key in st
    assert st["images"] == 17 and st["skipped"] == 0 and st["skipped_files"] == []
    assert st["threads"] == 3 and st["host_bytes"] > 0 and st["seconds"] > 0


def test_threads_none_uses_every_cpu(small_folder, monkeypatch):
    monkeypatch.delenv("LOCAL_WORLD_SIZE", raising=False)
    want = len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else os.cpu_count()
    assert loader(small_folder, threads=None).stats()["threads"] == want


@pytest.mark.parametrize("local", ["2", "1000", "junk"])
def test_threads_none_shares_the_cores_among_local_ranks(small_folder, monkeypatch, local):
    monkeypatch.setenv("LOCAL_WORLD_SIZE", local)
    cpus = len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else os.cpu_count()
    want = max(1, cpus // int(local)) if local.isdigit() else cpus
    assert loader(small_folder, threads=None).stats()["threads"] == want


# ---- bad files -----------------------------------------------------------------------


@pytest.fixture()
def broken_folder(tmp_path):
    root = make_folder(tmp_path, classes=2, per_class=6)
    good = open(os.path.join(root, "class00", "img000.jpg"), "rb").read()
    with open(os.path.join(root, "class00", "img002_truncated.jpg"), "wb") as f:
        f.write(good[: len(good) // 3])
    with open(os.path.join(root, "class01", "img004_garbage.jpg"), "wb") as f:
        f.write(b"this is not a JPEG file at all" * 10)
    return root


def test_broken_file_raises_decode_error_naming_it(broken_folder):
    ld = loader(broken_folder, batch_size=2, pipeline="eval", on_error="raise")
    with pytest.raises(stoker.DecodeError) as info:
        for _ in ld:
            pass
    assert isinstance(info.value, OSError)
    assert "img002_truncated.jpg" in str(info.value) or "img004_garbage.jpg" in str(info.value)
    # The iteration may go on after the failed batch.
    it = iter(ld)
    good, failed = 0, 0
    while True:
        try:
            x, _ = next(it)
            good += x.shape[0]
        except stoker.DecodeError:
            failed += 1
        except StopIteration:
            break
    assert failed == 2 and good == 14 - 2 * 2  # each bad file costs its batch of 2


def test_skip_policy_counts_and_lists(broken_folder):
    ld = loader(broken_folder, batch_size=4, on_error="skip", pipeline="eval",
                max_skipped_fraction=1)
    ref = datasets.ImageFolder(broken_folder)
    bad = {i for i, (p, _) in enumerate(ref.samples) if "_" in os.path.basename(p)}
    assert len(bad) == 2
    seen = []
    for b in ld.iter_batches():
        seen += b.indices
        assert b.labels.tolist() == [ref.samples[i][1] for i in b.indices]
    assert sorted(seen) == sorted(set(range(len(ref))) - bad)
    st = ld.stats()
    # At least 2: once an epoch ends the loader prepares the next one, and
    # the failures met there count as well.
    assert st["skipped"] >= 2
    names = [os.path.basename(p) for p, _ in st["skipped_files"]]
    assert names[:2] == ["img002_truncated.jpg", "img004_garbage.jpg"]
    assert set(names) == {"img002_truncated.jpg", "img004_garbage.jpg"}
    assert all(reason for _, reason in st["skipped_files"])


def test_check_file(broken_folder):
    assert stoker.check_file(os.path.join(broken_folder, "class00", "img000.jpg")) == (48, 36)
    with pytest.raises(stoker.DecodeError, match="img004_garbage.jpg"):
        stoker.check_file(os.path.join(broken_folder, "class01", "img004_garbage.jpg"))


# ---- closing ------------------------------------------------------------------------------


def test_with_closes(small_folder):
    with loader(small_folder) as ld:
        images, _ = next(iter(ld))
        assert not ld.closed
    assert ld.closed
    assert images.shape[0] == 4  # a batch outlives the loader's closing
    with pytest.raises(ValueError, match="closed"):
        iter(ld)
    with pytest.raises(ValueError, match="closed"):
        len(ld)
    ld.close()  # closing twice is fine


def test_unicode_and_space_paths(tmp_path):
    root = tmp_path / "dåta set"
    save_jpeg(str(root / "ñandú" / "a b.jpg"), photo(20, 20, 1))
    save_jpeg(str(root / "zebra" / "c.jpg"), photo(20, 20, 2))
    ld = loader(str(root), batch_size=2)
    ref = datasets.ImageFolder(str(root))
    assert ld.classes == ref.classes == ["zebra", "ñandú"]  # code point order
    assert ld.samples == ref.samples
    assert sum(x.shape[0] for x, _ in ld) == 2


def test_pin_memory_is_checked_and_harmless_without_cuda(small_folder):
    with pytest.raises(TypeError, match="pin_memory"):
        loader(small_folder, pin_memory="yes")
    with loader(small_folder, pin_memory=True) as ld:
        n = sum(x.shape[0] for x, _ in ld)
    assert n == 17


# ---- porting from DataLoader, torchrun ------------------------------------------------


def test_world_size_without_process_group_raises(small_folder, monkeypatch):
    """Under torchrun (WORLD_SIZE > 1) before init_process_group the shard is unknown:
    refused as DistributedSampler refuses, instead of every rank reading everything."""
    import torch.distributed as dist

    assert not (dist.is_available() and dist.is_initialized())
    monkeypatch.setenv("WORLD_SIZE", "2")
    monkeypatch.setenv("RANK", "1")
    for kw in ({}, dict(rank=1), dict(world_size=2)):
        with pytest.raises(RuntimeError, match=r"WORLD_SIZE=2.*init_process_group.*rank="):
            loader(small_folder, **kw)
    whole = len(loader(small_folder, world_size=1))  # asked for: the whole dataset
    assert whole == 5 and len(loader(small_folder, rank=1, world_size=2)) == 3
    monkeypatch.setenv("WORLD_SIZE", "1")
    assert len(loader(small_folder)) == whole


def test_dataloader_names_get_a_hint(small_folder):
    with pytest.raises(TypeError, match="num_workers.*threads="):
        stoker.ImageLoader(small_folder, batch_size=4, num_workers=4)
    with pytest.raises(TypeError, match="sampler.*set_epoch"):
        stoker.ImageLoader(small_folder, sampler=None)
    with pytest.raises(TypeError, match="bogus"):
        stoker.ImageLoader(small_folder, bogus=1)


def test_threads_zero_uses_every_cpu(small_folder, monkeypatch):
    monkeypatch.setenv("LOCAL_WORLD_SIZE", "2")  # shares None's threads, not 0's
    want = len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else os.cpu_count()
    assert loader(small_folder, threads=0).stats()["threads"] == want


def test_imagefolder_object_as_root(small_folder):
    tf = tvT.Compose([tvT.Resize(18), tvT.CenterCrop(16), tvT.ToTensor()])
    ld = loader(datasets.ImageFolder(small_folder, tf))
    ref = loader(small_folder, pipeline=[T.Resize(18), T.CenterCrop(16), T.ToTensor()])
    assert ld.pipeline == "eval" and ld.samples == ref.samples
    for (x, y), (x2, y2) in zip(ld, ref):
        assert torch.equal(x, x2) and torch.equal(y, y2)
    # without a transform: pipeline= as for a path (default "train")
    plain = datasets.ImageFolder(small_folder)
    assert loader(plain).pipeline == "train" and loader(plain, pipeline="eval").pipeline == "eval"
    assert loader(plain).samples == plain.samples


def test_imagefolder_object_that_cannot_be_followed_is_refused(small_folder):
    with pytest.raises(ValueError, match="ImageFolder's transform.*ColorJitter"):
        loader(datasets.ImageFolder(small_folder, tvT.Compose([tvT.ColorJitter(0.4)])))
    tf = [tvT.Resize(18), tvT.CenterCrop(16)]
    with pytest.raises(ValueError, match="once"):
        loader(datasets.ImageFolder(small_folder, tf), pipeline="eval")
    assert loader(datasets.ImageFolder(small_folder, tf), pipeline=tf).pipeline == "eval"
    with pytest.raises(ValueError, match="target_transform"):
        loader(datasets.ImageFolder(small_folder, target_transform=lambda y: y + 1))

    class TwoClasses(datasets.ImageFolder):
        def find_classes(self, directory):
            return ["class00", "class01"], {"class00": 0, "class01": 1}

    with pytest.raises(ValueError, match="classes"):
        loader(TwoClasses(small_folder))


def test_without_torch_a_clear_import_error(small_folder):
    code = ("import sys; sys.modules['torch'] = None\n"
            "import stoker\n"
            "try:\n"
            "    stoker.ImageLoader(sys.argv[1])\n"
            "except ModuleNotFoundError as e:\n"
            "    print(type(e).__name__, e.name, e)\n")
    import subprocess
    import sys

    env = dict(os.environ)  # the stoker this test imports
    pkg = os.path.dirname(os.path.dirname(stoker.__file__))
    env["PYTHONPATH"] = os.pathsep.join(p for p in (pkg, env.get("PYTHONPATH")) if p)
    r = subprocess.run([sys.executable, "-c", code, small_folder], capture_output=True,
                       text=True, timeout=60, env=env)
    assert r.returncode == 0, r.stderr
    assert r.stdout.startswith("ModuleNotFoundError torch ")
    assert "needs PyTorch" in r.stdout and "pip install torch" in r.stdout


def test_init_is_documented():
    import inspect

    doc = stoker.ImageLoader.__init__.__doc__
    assert doc and "num_workers" in doc and "pipeline" in doc and "threads" in doc
    params = inspect.signature(stoker.ImageLoader).parameters
    assert list(params)[:2] == ["root", "batch_size"] and "kwargs" not in params

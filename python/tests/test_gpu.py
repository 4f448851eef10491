"""device="cuda": runs on a machine with an NVIDIA GPU, skips cleanly elsewhere."""
import math
import os

import pytest

torch = pytest.importorskip("torch")
import stoker  # noqa: E402

from conftest import make_folder  # noqa: E402

pytestmark = pytest.mark.skipif(not torch.cuda.is_available(), reason="no CUDA device")

MEAN = (0.485, 0.456, 0.406)
STD = (0.229, 0.224, 0.225)


@pytest.fixture(scope="module")
def photos(tmp_path_factory):
    root = tmp_path_factory.mktemp("gpu-photos")
    make_folder(str(root), classes=3, per_class=12,
                sizes=((500, 375), (375, 500), (333, 500), (640, 480)), seed=5)
    return str(root)


def _levels(x):
    m = torch.tensor(MEAN).view(1, 3, 1, 1)
    s = torch.tensor(STD).view(1, 3, 1, 1)
    return (x.float().cpu() * s + m) * 255


def test_batches_on_the_device(photos):
    with stoker.ImageLoader(photos, batch_size=8, device="cuda", threads=4) as ld:
        n = 0
        for x, y in ld:
            assert x.is_cuda and y.is_cuda
            assert x.shape[1:] == (3, 224, 224) and x.dtype == torch.float32
            assert y.dtype == torch.int64
            assert torch.isfinite(x).all()
            n += x.shape[0]
        assert n == 36
        st = ld.stats()
        assert st["device_bytes"] > 0


def test_eval_matches_cpu(photos):
    """The GPU eval pipeline against the CPU one, on the same samples: >= 40 dB."""
    kw = dict(batch_size=12, pipeline="eval", threads=4)
    g = stoker.ImageLoader(photos, device="cuda", **kw)
    c = stoker.ImageLoader(photos, device="cpu", **kw)
    psnr = []
    for (xg, yg), (xc, yc) in zip(g, c):
        assert torch.equal(yg.cpu(), yc)
        a, b = _levels(xg), _levels(xc)
        for i in range(a.shape[0]):
            mse = float(((a[i] - b[i]) ** 2).mean())
            psnr.append(100.0 if mse < 1e-9 else 10 * math.log10(255 ** 2 / mse))
    assert len(psnr) == 36
    mean = sum(psnr) / len(psnr)
    print(f"eval GPU vs CPU: mean PSNR {mean:.2f} dB, min {min(psnr):.2f} dB")
    assert mean >= 40.0


def test_held_batches_are_not_overwritten(photos):
    with stoker.ImageLoader(photos, batch_size=4, device="cuda", threads=4, prefetch=2) as ld:
        it = iter(ld)
        x0, y0 = next(it)
        keep = x0.clone()
        torch.cuda.synchronize()
        for _ in range(3):
            next(it)
        torch.cuda.synchronize()
        assert torch.equal(x0, keep)


def test_bf16_channels_last(photos):
    with stoker.ImageLoader(photos, batch_size=6, device="cuda", dtype=torch.bfloat16,
                            channels_last=True, threads=4) as ld:
        x, y = next(iter(ld))
        assert x.dtype == torch.bfloat16
        assert x.is_contiguous(memory_format=torch.channels_last)


def test_device_memory_cap(photos):
    with pytest.raises(MemoryError, match="max_device_bytes"):
        stoker.ImageLoader(photos, batch_size=64, device="cuda", max_device_bytes=1 << 20)


@pytest.fixture(scope="module")
def mixed(tmp_path_factory):
    """Baseline JPEGs plus what the hardware engines cannot take: PNG,
    progressive and CMYK JPEGs."""
    from PIL import Image

    from conftest import photo

    root = str(tmp_path_factory.mktemp("gpu-mixed"))
    make_folder(root, classes=2, per_class=10, sizes=((500, 375), (375, 500), (640, 480)), seed=9)
    Image.fromarray(photo(400, 300, 77)).save(f"{root}/class00/p.png")
    Image.fromarray(photo(320, 480, 78)).save(f"{root}/class01/prog.jpg", quality=90,
                                              progressive=True)
    Image.fromarray(photo(300, 300, 79)).convert("CMYK").save(f"{root}/class01/cmyk.jpg",
                                                               quality=90)
    return root


def _pairs(root, share, **kw):
    g = stoker.ImageLoader(root, device="cuda", gpu_cpu_share=share, **kw)
    c = stoker.ImageLoader(root, device="cpu", **kw)
    with g, c:
        for (xg, yg), (xc, yc) in zip(g, c):
            yield xg.cpu(), yg.cpu(), xc, yc
        stats = g.stats()
    yield stats


@pytest.mark.parametrize("pipeline,dtype,channels_last", [
    ("train", "float32", False), ("eval", "float32", False), ("train", "uint8", True),
    ("eval", "bfloat16", True)])
def test_cpu_share_one_is_the_cpu_loader(mixed, pipeline, dtype, channels_last):
    """gpu_cpu_share=1: the workers finish every image, the GPU only stores
    it: bit-identical to the CPU loader (same crops, flips, decoder)."""
    kw = dict(batch_size=8, pipeline=pipeline, threads=4, dtype=dtype,
              channels_last=channels_last, seed=3)
    *pairs, st = list(_pairs(mixed, 1.0, **kw))
    assert sum(p[0].shape[0] for p in pairs) == 23
    for xg, yg, xc, yc in pairs:
        assert torch.equal(yg, yc)
        assert torch.equal(xg, xc)
    # the next epoch's first batch is made ahead too: at least the 23 images
    assert st["decoded_cpu"] >= 23 and st["decoded_hw"] == 0 and st["decoded_cuda"] == 0
    assert st["cpu_share"] == 1.0


def test_engine_refused_files_go_to_the_workers(mixed):
    """At share 0 only PNG, progressive and CMYK files are decoded on the
    CPU; they come out exactly as on the CPU loader."""
    kw = dict(batch_size=23, pipeline="eval", threads=4, shuffle=False)
    *pairs, st = list(_pairs(mixed, 0.0, **kw))
    ((xg, yg, xc, yc),) = pairs
    with stoker.ImageLoader(mixed, **kw) as ld:
        paths = [p for p, _ in ld.samples]
    odd = [i for i, p in enumerate(paths) if p.endswith(("p.png", "prog.jpg", "cmyk.jpg"))]
    assert len(odd) == 3
    for i in odd:
        assert torch.equal(xg[i], xc[i]), paths[i]
    if st["decoded_hw"] or st["decoded_cuda"]:
        # 3 of every 23 images, also in the next epoch's batch made ahead
        done = st["decoded_hw"] + st["decoded_cuda"] + st["decoded_cpu"]
        assert done % 23 == 0 and st["decoded_cpu"] * 23 == 3 * done
    assert st["cpu_share"] == 0.0


def test_adaptive_share_delivers_every_image(photos):
    with stoker.ImageLoader(photos, batch_size=4, device="cuda", threads=4, seed=1, prefetch=2) as ld:
        for epoch in range(3):
            ld.set_epoch(epoch)
            seen = sorted(int(i) for b in ld.iter_batches() for i in b.indices)
            assert seen == list(range(36))
        st = ld.stats()
        assert 0.0 <= st["cpu_share"] <= 1.0
        # every image of the 3 epochs, plus at most the prefetch depth of the
        # 4th epoch's first batches, which start ahead of it
        decoded = st["decoded_hw"] + st["decoded_cuda"] + st["decoded_cpu"]
        assert 3 * 36 <= decoded <= 3 * 36 + 2 * 4
        assert st["submit_seconds"] > 0


def test_cpu_share_is_checked(photos):
    for bad in (-0.5, 1.5, float("nan"), True, "half"):
        with pytest.raises(ValueError, match="gpu_cpu_share"):
            stoker.ImageLoader(photos, device="cuda", gpu_cpu_share=bad)


def test_pin_memory_cpu_batches(photos):
    """pin_memory=True: CPU batches in page-locked memory, so that a
    non_blocking copy to the GPU is asynchronous; the values are the same."""
    kw = dict(batch_size=8, threads=2, seed=2)
    with stoker.ImageLoader(photos, pin_memory=True, **kw) as p, \
         stoker.ImageLoader(photos, **kw) as q:
        n = 0
        for (xp, yp), (xq, yq) in zip(p, q):
            assert xp.is_pinned() and not xq.is_pinned()
            assert torch.equal(xp.cuda(non_blocking=True).cpu(), xq)
            assert torch.equal(yp, yq)
            n += xp.shape[0]
        assert n == 36


def _cache_images(path):
    """{index: (w, h, label, pixels)} of a raw cache (src/sources/cache_format.h)."""
    import struct
    data = open(path, "rb").read()
    n = struct.unpack_from("<Q", data, 24)[0]
    meta_off = struct.unpack_from("<Q", data, 64)[0]
    out = []
    for i in range(n):
        off, ln, w, h, label = struct.unpack_from("<QQIIi", data, meta_off + 40 * i)
        assert ln == w * h * 3
        out.append((w, h, label, data[off:off + ln]))
    return out


def test_pack_on_the_device_matches_the_cpu_pack(tmp_path):
    """stoker.pack(device=): the same samples, sizes and labels as the CPU pack,
    the same files left out, the JPEGs decoded on the GPU; pixels within the
    bound docs/storage.md gives (nvJPEG's decode is not libjpeg-turbo's)."""
    np = pytest.importorskip("numpy")
    from PIL import Image

    src = make_folder(str(tmp_path / "src"), classes=2, per_class=6,
                      sizes=((500, 375), (375, 500), (900, 300), (120, 90)), seed=9)
    Image.fromarray(np.full((70, 50, 3), 90, np.uint8)).save(os.path.join(src, "class00", "p.png"))
    with open(os.path.join(src, "class01", "bad.jpg"), "wb") as f:
        f.write(b"\xff\xd8\xff\xe0 not a jpeg")
    cpu = stoker.pack(src, tmp_path / "cpu.stkc", max_side=384, threads=2)
    gpu = stoker.pack(src, tmp_path / "gpu.stkc", max_side=384, threads=2, device="cuda")
    assert (gpu.packed, gpu.failed) == (cpu.packed, cpu.failed) == (13, 1)
    assert [p for p, _ in gpu.left_out] == [p for p, _ in cpu.left_out]
    assert gpu.device_packed == 12  # the JPEGs; the PNG is decoded on the CPU
    a, b = _cache_images(tmp_path / "cpu.stkc"), _cache_images(tmp_path / "gpu.stkc")
    assert [x[:3] for x in a] == [x[:3] for x in b]
    assert max(max(w, h) for w, h, _, _ in b) == 384
    far = total = 0
    for (w, h, _, pa), (_, _, _, pb) in zip(a, b):
        d = np.abs(np.frombuffer(pa, np.uint8).astype(int) - np.frombuffer(pb, np.uint8))
        far += int((d > 1).sum())
        total += d.size
    print(f"device pack: {far} of {total} values more than 1 level from the CPU pack")
    assert far <= 0.001 * total
    # the cache reads back through the loader
    with stoker.ImageLoader(str(tmp_path / "gpu.stkc"), batch_size=13, pipeline="eval",
                            size=64, device="cuda") as ld:
        assert sum(len(y) for _, y in ld) == 13


def test_cache_first_use_packs_on_the_loaders_gpu(tmp_path, capfd):
    src = make_folder(str(tmp_path / "src"), classes=2, per_class=4, sizes=((320, 240),), seed=3)
    cache = str(tmp_path / "c.stkc")
    with stoker.ImageLoader(src, cache=cache, batch_size=4, device="cuda", threads=2) as ld:
        assert ld.source_kind == "cache" and sum(len(y) for _, y in ld) == 8
    assert "on cuda:" in capfd.readouterr().err


def test_cache_first_use_at_full_size_packs_on_the_cpu(tmp_path, capfd):
    """A full-size cache (cache_max_side=0) cannot be packed on the GPU,
    whose output the bound sizes: a GPU loader packs it on the CPU."""
    src = make_folder(str(tmp_path / "src"), classes=2, per_class=2, sizes=((64, 48),), seed=4)
    cache = str(tmp_path / "c.stkc")
    with stoker.ImageLoader(src, cache=cache, cache_max_side=0, batch_size=4, device="cuda",
                            threads=2, size=32) as ld:
        assert sum(len(y) for _, y in ld) == 4
    assert "on the CPU" in capfd.readouterr().err

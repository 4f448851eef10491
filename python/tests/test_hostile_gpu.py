"""The hostile-file matrix of tests/test_hostile.c through the Python package:
on the CPU path everywhere, on the GPU path (device="cuda", the GPU decoding
every file it can take) where there is a CUDA device; skips cleanly without.

The matrix comes from `test_hostile --write DIR` (the C test, built by
`make`), so both languages read the very same bytes. Its manifest gives each
file's kind: valid (must decode), broken (must fail, naming the file), or
damaged (flipped bits in the entropy-coded data: libjpeg recovers from some,
as Pillow does; on the CPU the outcome is the C test's, on the GPU nvJPEG
may judge such a file either way, but it must do so consistently).
"""
import math
import os
import subprocess

import pytest

torch = pytest.importorskip("torch")
import stoker  # noqa: E402

HERE = os.path.dirname(os.path.abspath(__file__))
REPO = os.path.dirname(os.path.dirname(HERE))
WRITER = os.environ.get("STK_HOSTILE_BIN", os.path.join(REPO, "build", "tests", "test_hostile"))

CUDA = pytest.param("cuda", marks=pytest.mark.skipif(not torch.cuda.is_available(),
                                                      reason="no CUDA device"))
DEVICES = ["cpu", CUDA]


@pytest.fixture(scope="module")
def matrix(tmp_path_factory):
    if not os.access(WRITER, os.X_OK):
        pytest.skip(f"{WRITER} is not built (make)")
    root = str(tmp_path_factory.mktemp("hostile") / "m")
    r = subprocess.run([WRITER, "--write", root], capture_output=True, text=True, timeout=600)
    assert r.returncode == 0, r.stdout + r.stderr
    kinds = {}
    with open(os.path.join(root, "manifest.tsv")) as f:
        for line in f:
            rel, kind, w, h = line.rstrip("\n").split("\t")
            kinds[rel] = kind
    os.remove(os.path.join(root, "manifest.tsv"))  # not an image: outside the classes anyway
    assert sum(k == "valid" for k in kinds.values()) >= 24
    assert sum(k == "broken" for k in kinds.values()) >= 15
    return root, kinds


def _rel(path, kinds):
    for rel in kinds:
        if path == rel or path.endswith("/" + rel):
            return rel
    raise AssertionError(f"{path} is no matrix file")


def _bad(kind, device):
    """True: must fail; False: must decode; None: either (damaged, on the GPU)."""
    if kind == "valid":
        return False
    if kind == "broken":
        return True
    if device == "cpu":
        return kind == "damaged-bad"
    return None


def _kw(device):
    kw = dict(threads=2, size=32, max_consecutive_failures=0)
    if device == "cuda":
        kw.update(device="cuda", gpu_cpu_share=0.0)  # the GPU takes every file it can
    return kw


@pytest.mark.parametrize("device", DEVICES)
def test_raise_names_each_bad_file(matrix, device):
    """Batches of one, in order: each bad file fails its batch with an error
    naming it and giving a reason; every valid file decodes."""
    root, kinds = matrix
    with stoker.ImageLoader(root, batch_size=1, pipeline="eval", shuffle=False,
                            **_kw(device)) as ld:
        rels = [_rel(p, kinds) for p, _ in ld.samples]
        it = iter(ld.iter_batches())
        outcome = {}
        for i, rel in enumerate(rels):
            try:
                b = next(it)
            except stoker.DecodeError as e:
                msg = str(e)
                assert rel in msg, (rel, msg)
                assert len(msg.split(rel, 1)[1].strip(": ")) > 0, f"no reason: {msg}"
                outcome[rel] = True
                continue
            assert b.indices == [i]
            x = b.images
            assert x.shape == (1, 3, 32, 32)
            assert torch.isfinite(x.float()).all()
            outcome[rel] = False
        with pytest.raises(StopIteration):
            next(it)
    for rel in rels:
        want = _bad(kinds[rel], device)
        if want is not None:
            assert outcome[rel] == want, f"{rel} ({kinds[rel]}): failed={outcome[rel]}"


@pytest.mark.parametrize("device", DEVICES)
def test_skip_yields_every_other_sample_once(matrix, device):
    root, kinds = matrix
    with stoker.ImageLoader(root, batch_size=4, on_error="skip", seed=3, max_skipped_fraction=1,
                            **_kw(device)) as ld:
        rels = [_rel(p, kinds) for p, _ in ld.samples]
        listed = set()
        seen = [0] * len(rels)
        for b in ld.iter_batches():
            assert torch.isfinite(b.images.float()).all()
            for i in b.indices:
                seen[i] += 1
            # read after every batch: once the epoch ends, the next one starts
            listed |= {_rel(p, kinds) for p, _ in ld.stats()["skipped_files"]}
        st = ld.stats()
    assert st["skipped"] >= len(listed)
    for i, rel in enumerate(rels):
        want = _bad(kinds[rel], device)
        if want is None:  # the GPU decided: once if accepted, listed if not
            assert seen[i] + (rel in listed) == 1, rel
        else:
            assert seen[i] == (0 if want else 1), f"{rel} ({kinds[rel]}) seen {seen[i]} times"
            assert (rel in listed) == want, f"{rel} ({kinds[rel]}) listed: {rel in listed}"


@pytest.mark.parametrize("device", [CUDA])
def test_gpu_output_matches_cpu(matrix, device):
    """Valid files on the GPU path come out as on the CPU path, to within the
    two decoders' rounding (the bound is loose: it catches wrong pixels, not
    rounding)."""
    root, kinds = matrix
    kw = dict(batch_size=1, pipeline="eval", shuffle=False, threads=2, size=64)
    g = stoker.ImageLoader(root, device="cuda", gpu_cpu_share=0.0, on_error="skip",
                          max_skipped_fraction=1, **kw)
    c = stoker.ImageLoader(root, device="cpu", on_error="skip", max_skipped_fraction=1, **kw)
    with g, c:
        rels = [_rel(p, kinds) for p, _ in c.samples]
        cpu = {b.indices[0]: b.images.clone() for b in c.iter_batches()}
        gpu = {b.indices[0]: b.images.cpu() for b in g.iter_batches()}
    psnr = []
    for i, rel in enumerate(rels):
        if kinds[rel] != "valid":
            continue
        assert i in cpu and i in gpu, rel
        d = float(((gpu[i].float() - cpu[i].float()) * 0.226 * 255).pow(2).mean())
        p = 100.0 if d < 1e-9 else 10 * math.log10(255 ** 2 / d)
        assert p >= 25.0, f"{rel}: GPU vs CPU {p:.1f} dB"
        psnr.append(p)
    assert sum(psnr) / len(psnr) >= 35.0

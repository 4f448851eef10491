"""stoker.pack(), caches and tar shards through ImageLoader, the new source
options, and the options table the extension exposes."""
import os
import warnings

import pytest

torch = pytest.importorskip("torch")

import stoker  # noqa: E402
from stoker import _stoker  # noqa: E402

from conftest import make_folder  # noqa: E402


def loader(root, **kw):
    kw.setdefault("batch_size", 4)
    kw.setdefault("size", 16)
    kw.setdefault("threads", 2)
    kw.setdefault("pipeline", "eval")
    return stoker.ImageLoader(root, **kw)


def epoch(ld):
    """(images, labels, indices) of one pass, concatenated."""
    xs, ys, idx = [], [], []
    for b in ld.iter_batches():
        xs.append(b.images.clone())
        ys += b.labels.tolist()
        idx += b.indices
    return torch.cat(xs), ys, idx


@pytest.fixture()
def folder(tmp_path):
    return make_folder(tmp_path / "src", classes=3, per_class=4)


# ---- pack ------------------------------------------------------------------------


def test_cache_round_trip_matches_the_folder(folder, tmp_path):
    out = tmp_path / "data.stkc"
    calls = []
    r = stoker.pack(folder, out, threads=2, progress=lambda d, t: calls.append((d, t)))
    assert isinstance(r, stoker.PackResult)
    assert (r.packed, r.failed, r.left_out, r.shards) == (12, 0, [], 0)
    assert r.bytes == os.path.getsize(out) > 0
    assert calls and calls[-1] == (12, 12)
    a, b = loader(folder, shuffle=False), loader(str(out), shuffle=False)
    assert b.source_kind == "cache" and a.source_kind == "folder"
    assert len(b) == len(a) and b.num_samples == a.num_samples == 12
    assert b.classes == a.classes
    assert [lab for _, lab in b.samples] == [lab for _, lab in a.samples]
    xa, ya, ia = epoch(a)
    xb, yb, ib = epoch(b)
    assert ya == yb and ia == ib
    # raw pixels below max_side: the eval pipeline sees exactly the folder's pixels
    assert torch.equal(xa, xb)


def test_jpeg_cache_and_train_pipeline(folder, tmp_path):
    out = tmp_path / "small.stkc"
    r = stoker.pack(folder, str(out), encoding="jpeg", max_side=24, quality=80, threads=1)
    assert r.packed == 12
    ld = loader(str(out), pipeline="train", shuffle=True, seed=3)
    x, y, idx = epoch(ld)
    assert x.shape == (12, 3, 16, 16) and sorted(idx) == list(range(12))
    ref = loader(folder)
    assert y == [ref.samples[i][1] for i in idx]


def test_tar_round_trip(folder, tmp_path):
    out = tmp_path / "shards"
    r = stoker.pack(folder, out, format="tar", shard_bytes=4096, threads=2)
    assert r.packed == 12 and r.failed == 0
    tars = sorted(f for f in os.listdir(out) if f.endswith(".tar"))
    assert r.shards == len(tars) >= 2  # 4 KB shards of ~1 KB+ images
    ref = loader(folder)
    for buf in (None, 1, 5):
        ld = loader(str(out), shuffle=True, shuffle_buffer=buf)
        assert ld.source_kind == "tar"
        assert len(ld) == len(ref) and ld.num_samples == 12
        _, y, idx = epoch(ld)
        assert sorted(idx) == list(range(12))
        assert sorted(y) == sorted(lab for _, lab in ref.samples)


def test_tar_check_decodes_what_it_packs(folder, tmp_path):
    """Without check a tar pack reads headers only (a PNG whose image data is
    damaged past its header is packed); with check=True it is decoded and left
    out, as a cache pack would."""
    import io

    import numpy as np
    from PIL import Image

    buf = io.BytesIO()
    Image.fromarray(np.random.default_rng(0).integers(0, 256, (40, 50, 3), np.uint8)).save(buf, "PNG")
    data = bytearray(buf.getvalue())
    data[data.find(b"IDAT") + 40] ^= 0xFF  # the compressed stream, not the header
    with open(os.path.join(folder, "class01", "zz_damaged.png"), "wb") as f:
        f.write(bytes(data))
    r = stoker.pack(folder, tmp_path / "plain", format="tar")
    assert r.packed == 13 and r.failed == 0
    r = stoker.pack(folder, tmp_path / "checked", format="tar", check=True, read_timeout=30)
    assert r.packed == 12 and r.failed == 1
    assert r.left_out[0][0].endswith("zz_damaged.png")
    with pytest.raises(ValueError, match="format='tar'"):
        stoker.pack(folder, tmp_path / "c.stkc", check=True)
    with pytest.raises(ValueError, match="read_timeout"):
        stoker.pack(folder, tmp_path / "c.stkc", read_timeout=-1)


def test_bad_files_are_left_out_and_listed(folder, tmp_path):
    with open(os.path.join(folder, "class01", "zz_broken.jpg"), "wb") as f:
        f.write(b"not an image at all" * 20)
    r = stoker.pack(folder, tmp_path / "c.stkc")
    assert r.packed == 12 and r.failed == 1
    (path, reason), = r.left_out
    assert path.endswith("zz_broken.jpg") and reason
    assert loader(str(tmp_path / "c.stkc")).num_samples == 12


def test_list_file_source(folder, tmp_path):
    ref = loader(folder)
    lst = tmp_path / "l.txt"
    lst.write_text("".join(f"{os.path.relpath(p, folder)} {lab}\n" for p, lab in ref.samples))
    r = stoker.pack(None, tmp_path / "l.stkc", list_file=lst, list_base=folder)
    assert r.packed == 12
    assert [lab for _, lab in loader(str(tmp_path / "l.stkc")).samples] == \
        [lab for _, lab in ref.samples]


@pytest.mark.parametrize("kw, exc, match", [
    (dict(format="zip"), ValueError, "format"),
    (dict(encoding="png"), ValueError, "encoding"),
    (dict(quality=0), ValueError, "quality"),
    (dict(quality=101), ValueError, "quality"),
    (dict(max_side=-1), ValueError, "max_side"),
    (dict(threads=-1), ValueError, "threads"),
    (dict(shard_bytes=0), ValueError, "shard_bytes"),
    (dict(format="tar", encoding="jpeg"), ValueError, "format='cache' only"),
    (dict(progress="yes"), TypeError, "progress"),
    (dict(list_file="x.txt"), ValueError, "exactly one"),
    (dict(max_side=65501), ValueError, "max_side must be in 0..65500"),  # the library's bound
])
def test_bad_pack_arguments(folder, tmp_path, kw, exc, match):
    with pytest.raises(exc, match=match):
        stoker.pack(folder, tmp_path / "o.stkc", **kw)
    assert not os.path.exists(tmp_path / "o.stkc")


def test_pack_failures_carry_the_library_message(folder, tmp_path):
    with pytest.raises(FileNotFoundError):
        stoker.pack(tmp_path / "missing", tmp_path / "o.stkc")
    bad_out = tmp_path / "no" / "such" / "dir" / "o.stkc"
    with pytest.raises(OSError, match="no/such/dir"):
        stoker.pack(folder, bad_out)
    with pytest.raises(TypeError):
        _stoker.pack(folder, str(tmp_path / "o.stkc"), bogus=1)


def test_progress_exception_propagates(tmp_path):
    """An exception from the progress callable stops the pack at the next
    files and is raised; nothing is left under the output's name."""
    src = make_folder(tmp_path / "src", classes=4, per_class=40)
    calls = []

    def boom(done, total):
        calls.append(done)
        raise KeyError("stop")

    out = tmp_path / "o.stkc"
    with pytest.raises(KeyError, match="stop"):
        stoker.pack(src, out, threads=2, progress=boom)
    assert calls == [64]  # once, after 64 of 160 files: the pack went no further
    assert not os.path.exists(out)


class _Stop(Exception):
    pass


@pytest.mark.slow
@pytest.mark.parametrize("fmt", ["cache", "tar"])
def test_ctrl_c_stops_a_pack_and_leaves_nothing(tmp_path, fmt):
    """A signal during stoker.pack on the main thread (Ctrl-C's SIGINT; here
    with a handler that raises _Stop, so that a late signal cannot end the
    test session as a KeyboardInterrupt would): the handler's exception
    between files, long before the pack would end, and neither the output
    nor its temporary file is left (the library removes what it wrote)."""
    import signal
    import threading
    import time

    src = make_folder(tmp_path / "src", classes=4, per_class=60, sizes=((320, 240), (240, 320)))
    out = tmp_path / ("o.stkc" if fmt == "cache" else "shards")
    kw = dict(threads=1, format=fmt, check=fmt == "tar")
    t0 = time.perf_counter()
    stoker.pack(src, tmp_path / ("whole.stkc" if fmt == "cache" else "whole"), **kw)
    whole = time.perf_counter() - t0

    armed = [True]

    def handler(signum, frame):
        if armed[0]:
            raise _Stop()

    old = signal.signal(signal.SIGINT, handler)
    timer = threading.Timer(whole / 5, os.kill, (os.getpid(), signal.SIGINT))
    try:
        timer.start()
        t0 = time.perf_counter()
        with pytest.raises(_Stop):
            stoker.pack(src, out, **kw)
        took = time.perf_counter() - t0
    finally:
        armed[0] = False
        timer.cancel()
        timer.join()
        signal.signal(signal.SIGINT, old)
    assert took < whole * 0.8, (whole, took)
    assert not os.path.exists(out)
    assert not [p for p in os.listdir(tmp_path) if ".tmp-" in p]


# ---- stale caches --------------------------------------------------------------------


def test_stale_cache_is_refused_or_used_with_a_warning(folder, tmp_path):
    out = str(tmp_path / "s.stkc")
    stoker.pack(folder, out)
    src = os.path.join(folder, "class00", "img000.jpg")
    with open(src, "rb") as f, open(os.path.join(folder, "class00", "added.jpg"), "wb") as g:
        g.write(f.read())
    with pytest.raises(stoker.StaleCacheError, match="stale") as info:
        loader(out)
    assert isinstance(info.value, OSError) and info.value.code == _stoker.ESTALE
    with pytest.warns(UserWarning, match="stale"):
        ld = loader(out, allow_stale_cache=True)
    assert "stale" in ld.note and ld.num_samples == 12
    with warnings.catch_warnings():
        warnings.simplefilter("error")  # a fresh source warns nothing
        assert loader(folder).note == ""


# ---- source options ------------------------------------------------------------------


def test_folder_index_options(folder, tmp_path):
    # folders changed within the last moments are not indexed (their listing
    # may still change within the same mtime tick): age them first
    old = os.path.getmtime(folder) - 60
    for d, _, _ in os.walk(folder):
        os.utime(d, (old, old))
    idx = tmp_path / "idx"
    a = loader(folder, index=1, index_dir=idx)
    assert os.path.isdir(idx) and os.listdir(idx), "index=1 writes an index file"
    b = loader(folder, index=True, index_dir=str(idx))  # read back from the index
    assert b.samples == a.samples == loader(folder, index=0).samples


@pytest.mark.parametrize("kw, match", [
    (dict(index=2), "index"),
    (dict(index=-2), "index"),
    (dict(index="auto"), "index"),
    (dict(shuffle_buffer=-1), "shuffle_buffer"),
    (dict(shuffle_buffer=1.5), "shuffle_buffer"),
])
def test_bad_source_options(folder, kw, match):
    with pytest.raises(ValueError, match=match):
        loader(folder, **kw)


def test_missing_root_is_file_not_found(tmp_path):
    with pytest.raises(FileNotFoundError):
        loader(str(tmp_path / "nothing.stkc"))
    not_a_source = tmp_path / "plain.txt"
    not_a_source.write_text("hello")
    with pytest.raises(Exception, match="plain.txt"):
        loader(str(not_a_source))


# ---- the options table -----------------------------------------------------------------


def test_options_table_describes_every_option():
    rows = _stoker.options()
    by = {r["name"]: r for r in rows}
    assert stoker.OPTIONS == by
    for name in ("root", "size", "batch_size", "dtype", "index", "index_dir", "shuffle_buffer",
                 "allow_stale_cache", "gpu_cpu_share", "max_pixels"):
        assert name in by
    assert set(by["dtype"]["choices"]) == {"float32", "float16", "bfloat16", "uint8"}
    assert by["dtype"]["default"] == "float32" and by["pipeline"]["default"] == "train"
    assert by["size"]["default"] == 224 and (by["size"]["min"], by["size"]["max"]) == (1, 8192)
    assert by["batch_size"]["default"] == 256 and by["prefetch"]["default"] == 2
    assert by["max_pixels"]["default"] == 178956970
    assert by["max_file_bytes"]["default"] == 256 << 20
    assert by["scale"]["default"] == pytest.approx((0.08, 1.0))
    assert by["mean"]["default"] == pytest.approx((0.485, 0.456, 0.406))
    assert by["index"]["default"] == -1 and by["allow_stale_cache"]["default"] is False
    assert by["root"]["default"] is None and by["root"]["type"] == "str"
    assert by["shuffle_buffer"]["cli"] == "--shuffle-buffer"
    for r in rows:
        assert r["doc"] and r["keyword"] == r["name"]
        assert r["type"] in ("int", "bool", "enum", "uint64", "float", "str")


def _ranged_ints():
    return [r for r in _stoker.options() if r["type"] in ("int", "bool", "enum")]


@pytest.mark.parametrize("row", _ranged_ints(), ids=lambda r: r["name"])
def test_extension_enforces_every_integer_range(folder, row):
    name = row["name"]
    base = {k: v for k, v in dict(root=folder, size=16, batch_size=4, threads=1,
                                  world_size=4).items() if k != name}
    if row["type"] == "int":
        for bad in (row["min"] - 1, row["max"] + 1):
            with pytest.raises(ValueError, match=name):
                _stoker.Loader(**base, **{name: bad})
        with pytest.raises(ValueError, match=name):
            _stoker.Loader(**base, **{name: "3"})
    elif row["type"] == "enum":
        with pytest.raises(ValueError, match=name):
            _stoker.Loader(**base, **{name: "no-such-" + name})
        for choice in row["choices"]:  # every name is accepted
            _stoker.Loader(**base, **{name: choice}).close()


def test_extension_keywords_are_checked(folder):
    with pytest.raises(TypeError, match="bogus"):
        _stoker.Loader(root=folder, bogus=1)
    with pytest.raises(TypeError, match="keyword"):
        _stoker.Loader(folder)
    with pytest.raises(ValueError, match="flip_prob"):
        _stoker.Loader(root=folder, flip_prob=1.5)
    with pytest.raises(ValueError, match="scale"):
        _stoker.Loader(root=folder, scale=(0.5,))
    with pytest.raises(ValueError, match="resize_size must be 0 or at least size"):
        _stoker.Loader(root=folder, size=32, resize_size=16, pipeline="eval")
    ld = _stoker.Loader(root=folder, size=16, batch_size=5, threads=1, index=0,
                        shuffle_buffer=3, allow_stale_cache=True, seed=2**64 - 1)
    assert ld.counts()["len"] == 3 and ld.source_kind() == "folder" and ld.note() == ""
    ld.close()


def test_pack_result_by_name_key_and_position(folder, tmp_path):
    r = stoker.pack(folder, tmp_path / "r.stkc")
    assert r["packed"] == r.packed == r[0] == 12
    assert dict(r) == r._asdict() and dict(r)["left_out"] == []
    with pytest.raises(KeyError):
        r["nope"]


def test_pack_keywords_come_from_the_library(folder, tmp_path):
    # the extension's pack() takes the pack table's keywords and ranges
    with pytest.raises(ValueError, match="max_side must be in 0..65500"):
        _stoker.pack(folder, str(tmp_path / "o.stkc"), max_side=65501)
    with pytest.raises(ValueError, match="shard_bytes must be at least 1"):
        _stoker.pack(folder, str(tmp_path / "o"), format="tar", shard_bytes=0)
    with pytest.raises(ValueError, match="exactly one of root and list_file"):
        _stoker.pack(None, str(tmp_path / "o.stkc"))
    with pytest.raises(TypeError, match="multiple values"):
        _stoker.pack(folder, str(tmp_path / "o.stkc"), source=folder)
    assert not os.path.exists(tmp_path / "o.stkc")


# ---- pack on a device --------------------------------------------------------------


def test_device_pack_arguments_are_checked_before_any_gpu(folder, tmp_path):
    """What a device pack refuses whatever the machine: tar shards (nothing is
    decoded) and an unbounded max_side (it sizes the GPU's output)."""
    with pytest.raises(ValueError, match="device applies to format='cache'"):
        stoker.pack(folder, tmp_path / "shards", format="tar", device="cuda:0")
    with pytest.raises(ValueError, match="max_side in 1..8192"):
        stoker.pack(folder, tmp_path / "a.stkc", max_side=0, device=0)
    with pytest.raises(ValueError, match="device must be"):
        stoker.pack(folder, tmp_path / "a.stkc", device="tpu")
    with pytest.raises(ValueError, match="plain_chroma applies to a pack on a device"):
        stoker.pack(folder, tmp_path / "a.stkc", plain_chroma=True)
    assert os.listdir(tmp_path) == ["src"]
    # "cpu" is the CPU pack, as device=None
    r = stoker.pack(folder, tmp_path / "c.stkc", device="cpu", threads=2)
    assert (r.packed, r.device_packed) == (12, 0)


@pytest.mark.skipif(torch.cuda.is_available(), reason="this machine has a GPU")
def test_device_pack_without_a_gpu_says_so_and_writes_nothing(folder, tmp_path):
    with pytest.raises(RuntimeError, match="cannot pack on device 0"):
        stoker.pack(folder, tmp_path / "a.stkc", device="cuda:0")
    assert os.listdir(tmp_path) == ["src"]


# ---- pipe lists and the file size limit ------------------------------------------


def _list_text(folder):
    ref = loader(folder)
    return "".join(f"{p} {lab}\n" for p, lab in ref.samples), [lab for _, lab in ref.samples]


@pytest.mark.parametrize("how", ["proc fd", "dev fd"])
def test_pack_reads_a_pipe_list(folder, tmp_path, how):
    """A list that is a pipe (/proc/self/fd/N, /dev/fd/N, as `--list <(...)`
    gives) packs as a file list does; it used to fail with "No such file or
    directory" from realpath(). Such a cache records no source to check."""
    import threading

    text, labels = _list_text(folder)
    r, w = os.pipe()
    t = threading.Thread(target=lambda: (os.write(w, text.encode()), os.close(w)))
    t.start()
    try:
        path = f"/proc/self/fd/{r}" if how == "proc fd" else f"/dev/fd/{r}"
        res = stoker.pack(None, tmp_path / "p.stkc", list_file=path)
    finally:
        t.join()
        os.close(r)
    assert res.packed == 12
    with warnings.catch_warnings():
        warnings.simplefilter("error")  # no note about a missing source either
        assert [lab for _, lab in loader(str(tmp_path / "p.stkc")).samples] == labels


@pytest.mark.parametrize("how", ["process substitution", "/dev/stdin"])
def test_cli_pack_reads_a_pipe_list(folder, tmp_path, how):
    import shlex
    import subprocess
    import sys

    import stoker.cli

    if stoker.cli.binary() is None:
        pytest.skip("no stoker executable in this installation")
    text, _ = _list_text(folder)
    lst = tmp_path / "l.txt"
    lst.write_text(text)
    out = tmp_path / "p.stkc"
    cli = f"{shlex.quote(sys.executable)} -m stoker pack"
    if how == "/dev/stdin":
        cmd = f"cat {lst} | {cli} --list /dev/stdin {out} --cache"
    else:
        cmd = f"{cli} --list <(cat {lst}) {out} --cache"
    p = subprocess.run(["bash", "-c", cmd], capture_output=True, text=True, timeout=120)
    assert p.returncode == 0, p.stderr
    assert "packed 12 samples" in p.stdout


@pytest.mark.parametrize("fmt", ["cache", "tar"])
@pytest.mark.parametrize("how", ["cli", "python"])
def test_pack_over_the_file_size_limit_fails_clearly(folder, tmp_path, fmt, how):
    """RLIMIT_FSIZE (ulimit -f) below the output's size: pack fails with a
    message naming the limit and leaves no temporary file; SIGXFSZ used to
    kill `stoker pack` and leave its .tmp file behind. (Python ignores
    SIGXFSZ itself; a shell leaves it at its default, as here.)"""
    import subprocess
    import sys

    import stoker.cli

    if how == "cli" and stoker.cli.binary() is None:
        pytest.skip("no stoker executable in this installation")
    out = tmp_path / ("o.stkc" if fmt == "cache" else "shards")
    code = ("import resource, signal, sys, stoker, stoker.cli\n"
            "resource.setrlimit(resource.RLIMIT_FSIZE, (20000, 20000))\n"
            "if sys.argv[1] == 'cli':\n"
            "    signal.signal(signal.SIGXFSZ, signal.SIG_DFL)\n"
            "    stoker.cli.main(['pack', sys.argv[2], sys.argv[3], '--' + sys.argv[4]])\n"
            "try:\n"
            "    stoker.pack(sys.argv[2], sys.argv[3], format=sys.argv[4])\n"
            "except OSError as e:\n"
            "    print('stoker pack:', e, file=sys.stderr)\n"
            "    sys.exit(1)\n")
    p = subprocess.run([sys.executable, "-c", code, how, folder, str(out), fmt],
                       capture_output=True, text=True, timeout=120)
    assert p.returncode == 1, (p.returncode, p.stderr)
    assert "file size limit" in p.stderr, p.stderr
    assert "input/output error" not in p.stderr, p.stderr
    assert not os.path.exists(out)
    assert not [q for q in os.listdir(tmp_path) if ".tmp-" in q]

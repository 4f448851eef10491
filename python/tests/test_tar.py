"""WebDataset tar shards both ways, with the real `webdataset` package: what
`stoker pack --tar` writes reads in webdataset as the same keys, labels and
bytes, and what webdataset's ShardWriter writes reads in stoker with the
right labels and the same pixels as the files it was made from."""
import glob
import io
import os
import shutil
import subprocess
import sys
import warnings

import pytest

torch = pytest.importorskip("torch")

import stoker  # noqa: E402

from conftest import make_folder, photo, save_jpeg  # noqa: E402

HERE = os.path.dirname(os.path.abspath(__file__))
REPO = os.path.dirname(os.path.dirname(HERE))
# Debian's pip refuses to install into the system interpreter, so webdataset
# (pure Python; numpy and yaml come from Debian) goes into a folder of the
# build tree when it is not installed.
PYDEPS = os.path.join(REPO, "build", "pydeps")


@pytest.fixture(scope="module")
def wds():
    try:
        import webdataset
        return webdataset
    except ImportError:
        pass
    if not os.path.isdir(os.path.join(PYDEPS, "webdataset")):
        try:
            subprocess.run([sys.executable, "-m", "pip", "install", "-q", "--no-deps",
                            "--target", PYDEPS, "webdataset", "braceexpand"],
                           check=True, capture_output=True, timeout=300)
        except (OSError, subprocess.SubprocessError):
            pass
    if PYDEPS not in sys.path:
        sys.path.append(PYDEPS)
    try:
        import webdataset
    except ImportError as e:
        pytest.skip(f"the webdataset package cannot be imported ({e}) nor installed into {PYDEPS}")
    return webdataset


def stoker_cli():
    """The stoker command of this build: $STOKER_CLI, or build/stoker."""
    for c in (os.environ.get("STOKER_CLI"), os.path.join(REPO, "build", "stoker"),
              shutil.which("stoker")):
        if c and os.access(c, os.X_OK):
            return c
    return None


def jpeg_bytes(arr, quality=90):
    from PIL import Image

    b = io.BytesIO()
    Image.fromarray(arr).save(b, format="JPEG", quality=quality)
    return b.getvalue()


def png_bytes(arr):
    from PIL import Image

    b = io.BytesIO()
    Image.fromarray(arr).save(b, format="PNG")
    return b.getvalue()


def epoch(loader):
    images, labels, indices = [], [], []
    for b in loader.iter_batches():
        images.append(b.images)
        labels += b.labels.tolist()
        indices += list(b.indices)
    return torch.cat(images), labels, indices


def test_stoker_reads_webdataset_shards(tmp_path, wds):
    """ShardWriter's shards (ustar, with .json fields beside) read with their
    labels, in shard order, with the pixels of the same files read from a list."""
    shards = tmp_path / "shards"
    files = tmp_path / "files"
    shards.mkdir()
    files.mkdir()
    expected = []
    lines = []
    with wds.ShardWriter(str(shards / "shard-%06d.tar"), maxcount=4, verbose=0) as sink:
        for i in range(11):
            arr = photo(40 + i, 30, 100 + i)
            data, ext = (png_bytes(arr), "png") if i == 5 else (jpeg_bytes(arr), "jpg")
            label = (i * 7) % 4
            key = f"group{i % 2}/sample{i:04d}"
            sink.write({"__key__": key, ext: data, "cls": label, "json": {"i": i}})
            path = files / f"{i:04d}.{ext}"
            path.write_bytes(data)
            lines.append(f"{path} {label}")
            expected.append((key, ext, label))
    assert len(glob.glob(str(shards / "*.tar"))) == 3

    kw = dict(batch_size=4, size=24, threads=2, pipeline="eval", shuffle=False)
    ld = stoker.ImageLoader(str(shards), **kw)
    assert ld.num_samples == 11
    assert ld.source_kind == "tar"
    samples = ld.samples
    for (path, label), (key, ext, want) in zip(samples, expected):
        assert path.endswith(f".tar:{key}.{ext}"), path
        assert label == want
    imgs, labels, _ = epoch(ld)
    assert labels == [e[2] for e in expected]
    assert ld.classes == ["0", "1", "2", "3"]  # no classes.txt: the label numbers

    listfile = tmp_path / "list.txt"
    listfile.write_text("\n".join(lines) + "\n")
    ref = stoker.ImageLoader(list_file=str(listfile), **kw)
    ref_imgs, ref_labels, _ = epoch(ref)
    assert ref_labels == labels
    assert torch.equal(imgs, ref_imgs)

    # train and shuffled, over two ranks: every sample once, equal lengths
    seen = []
    lens = set()
    for rank in range(2):
        ld = stoker.ImageLoader(str(shards), batch_size=3, size=16, threads=2, pipeline="train",
                                rank=rank, world_size=2, seed=3, shard_drop_last=True)
        lens.add(len(ld))
        _, _, idx = epoch(ld)
        seen += idx
    assert len(lens) == 1
    assert len(seen) == len(set(seen)) == 10  # 11 // 2 * 2


def test_webdataset_reads_stoker_shards(tmp_path, wds):
    cli = stoker_cli()
    if cli is None:
        pytest.skip("no stoker command found (set STOKER_CLI or build build/stoker)")
    help_ = subprocess.run([cli, "pack", "--help"], capture_output=True, text=True)
    if help_.returncode != 0 or "--tar" not in help_.stdout + help_.stderr:
        pytest.skip(f"{cli} has no `pack --tar`")
    root = make_folder(tmp_path / "folder", classes=3, per_class=4)
    save_jpeg(os.path.join(root, "class01", "x.y.z.jpg"), photo(30, 30, 77))  # dots in a name
    out = tmp_path / "shards"
    r = subprocess.run([cli, "pack", root, str(out), "--tar", "--shard-size", "3000"],
                       capture_output=True, text=True)
    assert r.returncode == 0, r.stderr
    tars = sorted(glob.glob(str(out / "*.tar")))
    assert len(tars) > 1

    # the files as ImageFolder has them: sorted classes, then sorted names
    classes = sorted(os.listdir(root))
    want = []
    for c, name in enumerate(classes):
        for f in sorted(os.listdir(os.path.join(root, name))):
            with open(os.path.join(root, name, f), "rb") as fh:
                want.append((c, fh.read()))

    ds = wds.WebDataset(tars, shardshuffle=False)
    got = [(s["__key__"], int(s["cls"]), s["jpg"]) for s in ds]
    assert [(lab, data) for _, lab, data in got] == want
    keys = [k for k, _, _ in got]
    assert len(set(keys)) == len(keys) and keys == sorted(keys)
    assert all("." not in k for k in keys)
    with open(out / "classes.txt") as f:
        assert f.read().splitlines() == classes

    # and stoker reads its own shards with the folder's class names
    ld = stoker.ImageLoader(str(out), batch_size=4, size=16, threads=2, pipeline="eval")
    assert ld.classes == classes
    assert [lab for _, lab in ld.samples] == [c for c, _ in want]


def test_left_out_members_are_noted(tmp_path, wds):
    """A sample without .cls and one with a bad .cls are left out, and the
    loader warns with the count; they are not lost silently: each is a sample
    whose read fails (raise raises, skip counts and lists it);
    shuffle_buffer reaches the tar source."""
    shards = tmp_path / "shards"
    shards.mkdir()
    data = jpeg_bytes(photo(32, 24, 5))
    with wds.TarWriter(str(shards / "a.tar")) as sink:
        for i in range(6):
            sink.write({"__key__": f"k{i}", "jpg": data, "cls": i % 2})
        sink.write({"__key__": "nolabel", "jpg": data})
        sink.write({"__key__": "badlabel", "jpg": data, "cls": "cat"})
    with pytest.warns(UserWarning, match="2 tar members left out: 1 without a .cls, 1 with a bad"):
        ld = stoker.ImageLoader(str(shards), batch_size=2, size=16, threads=2)
    assert ld.num_samples == 8
    assert "nolabel.jpg" in ld.note
    with pytest.raises(stoker.DecodeError, match="left out when the shard was opened: (no .cls|its .cls)"):
        for _ in ld:
            pass
    ld.close()
    orders = []
    for buf in (1, 1, 1000):
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")  # the note, checked above
            ld = stoker.ImageLoader(str(shards), batch_size=2, size=16, threads=2, seed=1,
                                    shuffle_buffer=buf, on_error="skip", max_skipped_fraction=1)
        orders.append(epoch(ld)[2])
        assert sorted(p.rsplit(":", 1)[1] for p, _ in ld.stats()["skipped_files"]) == ["badlabel.jpg",
                                                                        "nolabel.jpg"]
    assert orders[0] == orders[1] == list(range(6))  # one shard, no buffer: tar order
    assert sorted(orders[2]) == list(range(6))


@pytest.mark.parametrize("fmt", ["gnu", "pax", "ustar"])
def test_tarfile_formats(tmp_path, fmt, wds):
    """Long and non-ASCII member names in Python's tarfile formats (GNU long
    names, pax path records, the ustar prefix) give the same samples."""
    import tarfile

    tf_format = {"gnu": tarfile.GNU_FORMAT, "pax": tarfile.PAX_FORMAT,
                 "ustar": tarfile.USTAR_FORMAT}[fmt]
    shards = tmp_path / "shards"
    shards.mkdir()
    data = jpeg_bytes(photo(24, 20, 9))
    keys = [("d" * 60 + "/" + "e" * 70 + f"/s{i}") for i in range(3)]  # > 100 bytes
    if fmt != "ustar":
        keys.append("ünïcode/ключ")
    with tarfile.open(shards / "x.tar", "w", format=tf_format) as tf:
        for i, key in enumerate(keys):
            for ext, payload in (("jpg", data), ("cls", str(i).encode())):
                info = tarfile.TarInfo(f"{key}.{ext}")
                info.size = len(payload)
                tf.addfile(info, io.BytesIO(payload))
    ld = stoker.ImageLoader(str(shards), batch_size=2, size=16, threads=2, pipeline="eval")
    assert ld.note == ""
    assert [(p.split(".tar:", 1)[1], lab) for p, lab in ld.samples] == \
        [(f"{k}.jpg", i) for i, k in enumerate(keys)]
    assert epoch(ld)[1] == list(range(len(keys)))


def _damaged_shard(folder, how):
    """A shard of 20 samples (the issue's probe), damaged by `how`: cut in
    the middle, a header overwritten with garbage, or a region overwritten
    with zeros. Returns the member where the damage is named."""
    import tarfile

    folder.mkdir()
    path = folder / "shard-000000.tar"
    data = jpeg_bytes(photo(32, 24, 5))
    offsets = {}
    with tarfile.open(str(path), "w", format=tarfile.USTAR_FORMAT) as tf:
        for i in range(20):
            for ext, payload in (("jpg", data), ("cls", str(i % 3).encode())):
                ti = tarfile.TarInfo(f"k{i:02d}.{ext}")
                ti.size = len(payload)
                offsets[ti.name] = tf.fileobj.tell()
                tf.addfile(ti, io.BytesIO(payload))
    raw = bytearray(path.read_bytes())
    at = offsets["k15.jpg"]
    if how == "truncated":
        raw = raw[:at + 512 + 100]
        member = "shard-000000.tar:k15.jpg"
    elif how == "bad header":
        raw[at:at + 512] = bytes((i * 37 + 11) % 256 for i in range(512))
        member = f"shard-000000.tar:offset {at}"
    else:
        raw[at:offsets["k17.jpg"]] = bytes(offsets["k17.jpg"] - at)
        member = f"shard-000000.tar:offset {at}"
    path.write_bytes(bytes(raw))
    return member


@pytest.mark.parametrize("how", ["truncated", "bad header", "zero-filled"])
def test_damaged_shard_is_an_error(tmp_path, how):
    """A truncated or damaged shard: under raise the epoch raises naming the
    shard and the member; under skip the damage is counted and listed like a
    bad image; `stoker check` exits 1. It used to drop the last 5 of 20
    samples with at most a note (none at all for zeros)."""
    shards = tmp_path / "shards"
    member = _damaged_shard(shards, how)
    kw = dict(batch_size=1, size=16, threads=2, pipeline="eval", shuffle=False)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")  # the note says it too
        ld = stoker.ImageLoader(str(shards), on_error="raise", **kw)
    assert ld.num_samples == 16  # 15 members and the damage
    got = 0
    with pytest.raises(stoker.DecodeError) as e:
        for _ in ld:
            got += 1
    assert member + ": " in str(e.value), str(e.value)
    assert got == 15
    ld.close()
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        ld = stoker.ImageLoader(str(shards), on_error="skip", max_skipped_fraction=1, **kw)
    assert sum(len(y) for _, y in ld) == 15
    st = ld.stats()
    assert st["skipped"] == 1
    [(path, reason)] = st["skipped_files"]
    assert path.endswith(member) and reason, (path, reason)
    ld.close()
    cli = stoker_cli()
    if cli:
        r = subprocess.run([cli, "check", str(shards)], capture_output=True, text=True, timeout=120)
        assert r.returncode == 1, (r.returncode, r.stdout, r.stderr)
        assert member in r.stdout

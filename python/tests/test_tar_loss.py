"""Shards lose nothing silently: a damaged shard counts the samples it lost
against max_skipped_fraction, a shard overwritten with zeros is an error, and
image members left out at open (a bad .cls, a link) fail their samples and
`stoker check`."""
import io
import os
import subprocess
import tarfile

import pytest

torch = pytest.importorskip("torch")
stoker = pytest.importorskip("stoker")

from conftest import photo  # noqa: E402
from test_tar import jpeg_bytes, stoker_cli  # noqa: E402

OPTS = dict(batch_size=10, size=16, threads=2, pipeline="eval")


def write_shards(d, n_shards, per_shard):
    """n_shards shards of per_shard samples; returns the offset just past the
    first member's data in each shard (where a cut loses the rest)."""
    os.makedirs(d, exist_ok=True)
    data = jpeg_bytes(photo(24, 16, 3))
    cuts = []
    for s in range(n_shards):
        with tarfile.open(os.path.join(d, f"shard-{s:06d}.tar"), "w",
                          format=tarfile.USTAR_FORMAT) as tf:
            for i in range(per_shard):
                for ext, payload in (("cls", str(i % 3).encode()), ("jpg", data)):
                    ti = tarfile.TarInfo(f"s{s}k{i:03d}.{ext}")
                    ti.size = len(payload)
                    tf.addfile(ti, io.BytesIO(payload))
        # header + .cls block + header + the JPEG's blocks: the first sample whole
        cuts.append(512 + 512 + 512 + (len(data) + 511) // 512 * 512)
    return cuts


def test_cut_shards_count_what_they_lost(tmp_path):
    """20 shards of 50, 15 of them cut after their first sample: 735 samples are
    lost, far past max_skipped_fraction=0.1; the epoch must end with an error,
    not deliver 265 of 1,000 with a warning."""
    d = str(tmp_path / "shards")
    cuts = write_shards(d, 20, 50)
    for s in range(15):
        with open(os.path.join(d, f"shard-{s:06d}.tar"), "r+b") as f:
            f.truncate(cuts[s])
    with pytest.warns(UserWarning, match="15 shards truncated"):
        ld = stoker.ImageLoader(d, on_error="skip", **OPTS)
    delivered = 0
    with pytest.raises(stoker.DecodeError, match="max_skipped_fraction"):
        for _, y in ld:
            delivered += len(y)
    assert delivered < 300
    ld.close()


def test_zero_filled_shard_is_an_error(tmp_path):
    d = str(tmp_path / "shards")
    write_shards(d, 3, 20)
    p = os.path.join(d, "shard-000001.tar")
    size = os.path.getsize(p)
    with open(p, "wb") as f:
        f.write(bytes(size))
    with pytest.warns(UserWarning, match="zero"):
        ld = stoker.ImageLoader(d, **OPTS)
    with pytest.raises(stoker.DecodeError, match="zero bytes"):
        for _ in ld:
            pass
    ld.close()
    with pytest.warns(UserWarning):
        ld = stoker.ImageLoader(d, on_error="skip", max_skipped_fraction=1, **OPTS)
    n = sum(len(y) for _, y in ld)
    skipped = ld.stats()["skipped_files"]
    ld.close()
    assert n == 40
    assert [p.endswith("shard-000001.tar:offset 0") for p, _ in skipped] == [True]
    cli = stoker_cli()
    if cli:
        r = subprocess.run([cli, "check", d], capture_output=True, text=True, timeout=120)
        assert r.returncode == 1, r.stdout + r.stderr
        assert "zero bytes" in r.stdout + r.stderr


def test_members_left_out_fail_check(tmp_path):
    d = str(tmp_path / "shards")
    os.makedirs(d)
    data = jpeg_bytes(photo(24, 16, 4))
    with tarfile.open(os.path.join(d, "a.tar"), "w", format=tarfile.USTAR_FORMAT) as tf:
        for i, cls in enumerate([b"0", b"1", b"cat"]):
            for ext, payload in (("cls", cls), ("jpg", data)):
                ti = tarfile.TarInfo(f"k{i}.{ext}")
                ti.size = len(payload)
                tf.addfile(ti, io.BytesIO(payload))
        link = tarfile.TarInfo("k9.jpg")
        link.type = tarfile.SYMTYPE
        link.linkname = "k0.jpg"
        tf.addfile(link)
    with pytest.warns(UserWarning, match="left out"):
        ld = stoker.ImageLoader(d, on_error="skip", max_skipped_fraction=1, **OPTS)
    n = sum(len(y) for _, y in ld)
    names = sorted(p.rsplit(":", 1)[1] for p, _ in ld.stats()["skipped_files"])
    ld.close()
    assert n == 2
    assert names == ["k2.jpg", "k9.jpg"]
    cli = stoker_cli()
    if cli:
        r = subprocess.run([cli, "check", d], capture_output=True, text=True, timeout=120)
        assert r.returncode == 1, r.stdout + r.stderr
        assert "k9.jpg" in r.stdout + r.stderr and "a link" in r.stdout + r.stderr


def test_empty_archive_shard_counts_its_samples(tmp_path):
    """A shard replaced by a valid empty tar (10240 zero bytes, no member)
    lost its 30 samples without a word; it is noted, its stand-in fails,
    and stats()["skipped"] counts the samples lost, not 1."""
    d = str(tmp_path / "shards")
    write_shards(d, 4, 30)
    with tarfile.open(os.path.join(d, "shard-000002.tar"), "w", format=tarfile.USTAR_FORMAT):
        pass
    with pytest.warns(UserWarning, match="1 empty shard"):
        ld = stoker.ImageLoader(d, **OPTS)
    with pytest.raises(stoker.DecodeError, match="empty tar archive"):
        for _ in ld:
            pass
    ld.close()
    with pytest.warns(UserWarning):
        ld = stoker.ImageLoader(d, on_error="skip", max_skipped_fraction=1, **OPTS)
    n = sum(len(y) for _, y in ld)
    st = ld.stats()
    ld.close()
    assert n == 90
    assert st["skipped"] == 30, st["skipped"]
    [(path, why)] = st["skipped_files"]
    assert path.endswith("shard-000002.tar:offset 0") and "about 30 samples lost" in why, (path, why)
    cli = stoker_cli()
    if cli:
        r = subprocess.run([cli, "check", d], capture_output=True, text=True, timeout=120)
        assert r.returncode == 1, r.stdout + r.stderr
        assert "empty tar archive" in r.stdout + r.stderr


def test_cut_shard_skips_count_the_samples_lost(tmp_path):
    """stats()["skipped"] counted a shard cut after its first sample as 1."""
    d = str(tmp_path / "shards")
    cuts = write_shards(d, 4, 30)
    with open(os.path.join(d, "shard-000001.tar"), "r+b") as f:
        f.truncate(cuts[1])
    with pytest.warns(UserWarning, match="1 shard truncated"):
        ld = stoker.ImageLoader(d, on_error="skip", max_skipped_fraction=1, **OPTS)
    n = sum(len(y) for _, y in ld)
    st = ld.stats()
    ld.close()
    assert n == 91
    assert st["skipped"] == 29, st["skipped"]


@pytest.mark.parametrize("drop_last", [False, True])
def test_ranks_yield_len_batches_whatever_is_skipped(tmp_path, drop_last):
    """Two ranks; a shard deleted after both opened. The rank that held it
    yielded 30 batches where len() said 32 and the other rank yielded 32: under
    torchrun both then wait in the collective for ever. Every rank now yields
    len() batches, its holes filled with repeats of its epoch's samples."""
    d = str(tmp_path / "shards")
    write_shards(d, 8, 16)  # 128 samples: 64 a rank, 8 shards of 16
    kw = dict(OPTS, batch_size=4, on_error="skip", max_skipped_fraction=1, shuffle=True, seed=3,
              drop_last=drop_last)
    lds = [stoker.ImageLoader(d, rank=r, world_size=2, **kw) for r in (0, 1)]
    os.remove(os.path.join(d, "shard-000005.tar"))
    counts, sizes, lost = [], [], 0
    for ld in lds:
        gone = {i for i, (p, _) in enumerate(ld.samples) if "shard-000005.tar:" in p}
        got = [list(b.indices) for b in ld.iter_batches()]
        counts.append(len(got))
        sizes.append([len(b) for b in got])
        # (the batches read ahead before the deletion have some of its samples)
        read = len({i for b in got for i in b} & gone)
        lost += ld.stats()["skipped"] + read
    assert counts == [len(lds[0]), len(lds[1])] == [16, 16], (counts, sizes)
    assert all(n == 4 for s in sizes for n in s), sizes
    assert lost == 16
    for ld in lds:
        ld.close()

"""ImageLoader(root, cache=PATH): packed on first use, read from then on."""
import os
import shutil
import warnings

import pytest
import torch

from conftest import make_folder, save_jpeg, photo

import stoker


def _all(loader):
    return [(x.clone(), y.clone()) for x, y in loader]


def test_packs_on_first_use_then_reads_the_cache(tmp_path, capfd):
    root = make_folder(tmp_path / "data")
    cache = str(tmp_path / "c.stkc")
    kw = dict(threads=2, seed=3, shuffle=True, size=24)
    first = stoker.ImageLoader(root, 4, cache=cache, **kw)
    assert first.source_kind == "cache" and os.path.exists(cache)
    assert "15/15 files" in capfd.readouterr().err  # the progress bar
    got = _all(first)
    first.close()
    stamp = os.stat(cache).st_mtime_ns
    again = stoker.ImageLoader(root, 4, cache=cache, **kw)
    assert os.stat(cache).st_mtime_ns == stamp  # not packed again
    assert "packing" not in capfd.readouterr().err
    # the same batches as a loader over a cache packed by hand
    other = str(tmp_path / "manual.stkc")
    stoker.pack(root, other)
    want = _all(stoker.ImageLoader(other, 4, **kw))
    for (a, la), (b, lb), (c, lc) in zip(got, _all(again), want):
        assert torch.equal(a, c) and torch.equal(b, c) and torch.equal(la, lc)
    assert len(got) == len(want) == 4


def test_a_cache_of_another_folder_is_refused(tmp_path):
    a = make_folder(tmp_path / "a", seed=1)
    b = make_folder(tmp_path / "b", seed=2)
    cache = str(tmp_path / "c.stkc")
    stoker.ImageLoader(a, 4, threads=1, cache=cache).close()
    with pytest.raises(ValueError, match="packed from another folder"):
        stoker.ImageLoader(b, 4, threads=1, cache=cache)


def test_a_cache_of_a_folder_inside_root_is_refused(tmp_path):
    """Packed from data/train, the cache is not data's: data's classes are
    train and val (its files' paths started with data/ all the same)."""
    train = make_folder(tmp_path / "data" / "train", seed=1)
    make_folder(tmp_path / "data" / "val", seed=2)
    cache = str(tmp_path / "c.stkc")
    stoker.ImageLoader(train, 4, threads=1, cache=cache).close()
    with pytest.raises(ValueError, match="packed from another folder"):
        stoker.ImageLoader(str(tmp_path / "data"), 4, threads=1, cache=cache)
    stoker.ImageLoader(train + os.sep, 4, threads=1, cache=cache).close()  # its own root


def test_torchrun_without_a_process_group_fails_before_packing(tmp_path, monkeypatch):
    """WORLD_SIZE=2 without init_process_group is refused (the loader would not
    know its shard): before the pack, not after packing the whole folder."""
    monkeypatch.setenv("WORLD_SIZE", "2")
    monkeypatch.setenv("LOCAL_RANK", "0")
    root = make_folder(tmp_path / "data")
    cache = str(tmp_path / "c.stkc")
    with pytest.raises(RuntimeError, match="process group"):
        stoker.ImageLoader(root, 4, threads=1, cache=cache)
    assert not os.path.exists(cache)


def test_a_changed_folder_makes_the_cache_stale(tmp_path):
    root = make_folder(tmp_path / "data")
    cache = str(tmp_path / "c.stkc")
    stoker.ImageLoader(root, 4, threads=1, cache=cache).close()
    save_jpeg(os.path.join(root, "class01", "new.jpg"), photo(30, 30, 99))
    with pytest.raises(stoker.StaleCacheError):
        stoker.ImageLoader(root, 4, threads=1, cache=cache)


def _with_bad_file(tmp_path):
    root = make_folder(tmp_path / "data")
    with open(os.path.join(root, "class02", "broken.jpg"), "wb") as f:
        f.write(b"\xff\xd8\xff\xe0 this is not a JPEG")
    return root


def test_bad_files_raise_and_leave_no_cache(tmp_path):
    root = _with_bad_file(tmp_path)
    cache = str(tmp_path / "c.stkc")
    with pytest.raises(stoker.DecodeError, match="broken.jpg"):
        stoker.ImageLoader(root, 4, threads=1, cache=cache)
    assert not os.path.exists(cache)  # a later run must not read a short cache silently


def test_bad_files_are_listed_under_skip(tmp_path):
    root = _with_bad_file(tmp_path)
    cache = str(tmp_path / "c.stkc")
    with warnings.catch_warnings(record=True) as w:
        warnings.simplefilter("always")
        ld = stoker.ImageLoader(root, 4, threads=1, cache=cache, on_error="skip")
    assert any("leaves out 1 of 16" in str(x.message) and "broken.jpg" in str(x.message)
               for x in w)
    assert ld.num_samples == 15


def test_too_many_bad_files_raise_under_skip(tmp_path):
    root = make_folder(tmp_path / "data", per_class=1)
    for i in range(2):
        with open(os.path.join(root, "class00", f"bad{i}.jpg"), "wb") as f:
            f.write(b"\xff\xd8 nothing")
    cache = str(tmp_path / "c.stkc")
    with pytest.raises(stoker.DecodeError, match="max_skipped_fraction"):
        stoker.ImageLoader(root, 4, threads=1, cache=cache, on_error="skip",
                           max_skipped_fraction=0.2)
    assert not os.path.exists(cache)


def test_cache_needs_an_image_folder(tmp_path):
    root = make_folder(tmp_path / "data")
    packed = str(tmp_path / "p.stkc")
    stoker.pack(root, packed)
    with pytest.raises(ValueError, match="must be an image folder"):
        stoker.ImageLoader(packed, 4, threads=1, cache=str(tmp_path / "c.stkc"))
    listing = tmp_path / "list.txt"
    listing.write_text(f"{os.path.join(root, 'class00', 'img000.jpg')} 0\n")
    with pytest.raises(ValueError, match="give root"):
        stoker.ImageLoader(list_file=str(listing), batch_size=4, cache=str(tmp_path / "c.stkc"))


def test_cache_max_side_reaches_the_pack(tmp_path):
    root = make_folder(tmp_path / "data", sizes=((64, 48),))
    small = str(tmp_path / "s.stkc")
    full = str(tmp_path / "f.stkc")
    stoker.ImageLoader(root, 4, threads=1, cache=small, cache_max_side=16).close()
    stoker.ImageLoader(root, 4, threads=1, cache=full, cache_max_side=0).close()
    # 16x12 against 64x48 RGB8 pixels per image
    assert os.path.getsize(full) - os.path.getsize(small) >= 15 * (64 * 48 - 16 * 12) * 3
    shutil.rmtree(root)


def test_an_interrupted_pack_keeps_no_cache(tmp_path, monkeypatch):
    """Ctrl-C during the first-use pack: the exception the progress bar raises
    does not stop the C pack, which then renames its finished output; that
    cache never went through the bad-file check (here on_error="raise" with a
    broken file), so a later run must not find it and read it silently."""
    import sys

    P = sys.modules["stoker.pack"]  # the module (stoker.pack is the function)

    def interrupted(done, total):
        raise KeyboardInterrupt

    monkeypatch.setattr(P, "_bar", interrupted)
    root = _with_bad_file(tmp_path)
    cache = str(tmp_path / "c.stkc")
    with pytest.raises(KeyboardInterrupt):
        stoker.ImageLoader(root, 4, threads=1, cache=cache)
    assert not os.path.exists(cache)
    monkeypatch.undo()
    with pytest.raises(stoker.DecodeError, match="broken.jpg"):
        stoker.ImageLoader(root, 4, threads=1, cache=cache)

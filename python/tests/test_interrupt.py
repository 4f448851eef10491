"""Ctrl-C, close() and files that are not regular files, as a training loop meets them.

A next() that waits for a slow batch is interrupted by SIGINT within a second (the
extension waits in slices and looks at signals in between), and close() returns within a
second even while the workers are busy with large images. A FIFO in a dataset is refused
at once with a clear reason instead of blocking the loader forever.
"""
import os
import signal
import threading
import time

import pytest

import stoker

from conftest import photo, save_jpeg


@pytest.fixture(scope="module")
def slow_list(tmp_path_factory):
    """A list naming one large JPEG 48 times: with one thread a batch takes seconds."""
    d = tmp_path_factory.mktemp("slow")
    big = os.path.join(str(d), "big.jpg")
    import numpy as np

    tile = photo(500, 400, 1)
    save_jpeg(big, np.tile(tile, (8, 8, 1)), quality=95)  # 4000 x 3200
    lst = os.path.join(str(d), "list.txt")
    with open(lst, "w") as f:
        for i in range(48):
            f.write(f"big.jpg {i % 2}\n")
    return lst


def test_ctrl_c_interrupts_a_waiting_next(slow_list):
    ld = stoker.ImageLoader(list_file=slow_list, batch_size=48, threads=1, pipeline="eval",
                            size=64, dct_scaling=False, prefetch=1)
    it = iter(ld)
    timer = threading.Timer(0.3, os.kill, (os.getpid(), signal.SIGINT))
    t0 = time.monotonic()
    timer.start()
    with pytest.raises(KeyboardInterrupt):
        next(it)
    latency = time.monotonic() - t0 - 0.3
    timer.join()
    print(f"Ctrl-C latency: {latency * 1e3:.0f} ms")
    assert latency < 1.0
    t0 = time.monotonic()
    ld.close()  # the worker is in the middle of a 13-megapixel decode
    dt = time.monotonic() - t0
    print(f"close() while decoding: {dt * 1e3:.0f} ms")
    assert dt < 1.0


def test_close_from_another_thread_ends_a_waiting_next(slow_list):
    ld = stoker.ImageLoader(list_file=slow_list, batch_size=48, threads=1, pipeline="eval",
                            size=64, dct_scaling=False, prefetch=1)
    errors = []

    def consume():
        try:
            next(iter(ld))
        except Exception as e:  # the loader was shut down under it
            errors.append(e)

    t = threading.Thread(target=consume)
    t.start()
    time.sleep(0.3)
    t0 = time.monotonic()
    ld.close()
    t.join(5)
    assert not t.is_alive()
    assert time.monotonic() - t0 < 1.5
    assert errors


@pytest.mark.parametrize("on_error", ["raise", "skip"])
def test_fifo_is_refused_not_waited_for(tmp_path, on_error):
    root = str(tmp_path)
    for i in range(6):
        save_jpeg(os.path.join(root, "c0", f"{i}.jpg"), photo(16, 12, i))
    os.mkfifo(os.path.join(root, "c0", "3.jpg.fifo.jpg"))
    ld = stoker.ImageLoader(root, batch_size=4, threads=2, on_error=on_error, pipeline="eval",
                            size=8, read_timeout=5)
    t0 = time.monotonic()
    got, errs = 0, []
    it = iter(ld)
    while True:
        try:
            images, _ = next(it)
            got += images.shape[0]
        except StopIteration:
            break
        except stoker.DecodeError as e:
            errs.append(str(e))
    assert time.monotonic() - t0 < 4
    if on_error == "skip":
        assert got == 6
        (path, reason), = ld.stats()["skipped_files"]
        assert path.endswith("3.jpg.fifo.jpg") and "not a regular file (a FIFO)" in reason
    else:
        assert got == 4 and len(errs) == 1  # the second batch holds the FIFO (sorted names)
        assert "3.jpg.fifo.jpg" in errs[0] and "not a regular file (a FIFO)" in errs[0]
    ld.close()


def test_read_timeout_option():
    assert stoker.OPTIONS["read_timeout"]["default"] == 300
    with pytest.raises(ValueError):
        stoker.ImageLoader(list_file=__file__, read_timeout=-1)

"""List files that are FIFOs or pipes, from Python, as the README promises for the CLI.

ImageLoader and stoker.pack used to refuse them with "no such list file" (an
os.path.isfile check). Each test writes the list from a thread, as a producer process
would; a writer that sends a few lines and then stalls must fail within read_timeout
with a message naming the list, never hang.
"""
import os
import threading
import time

import pytest

import stoker

from conftest import photo, save_jpeg

N = 6


@pytest.fixture(scope="module")
def lines(tmp_path_factory):
    d = tmp_path_factory.mktemp("fifo-imgs")
    out = []
    for i in range(N):
        p = os.path.join(str(d), f"img{i}.jpg")
        save_jpeg(p, photo(40 + i, 30, i))
        out.append(f"{p} {i % 2}\n")
    return out


def _writer(path_or_fd, lines, stall=0.0, delay=0.05):
    def run():
        time.sleep(delay)
        fd = os.open(path_or_fd, os.O_WRONLY) if isinstance(path_or_fd, str) else path_or_fd
        try:
            for k, line in enumerate(lines):
                os.write(fd, line.encode())
            if stall:
                time.sleep(stall)  # holds the FIFO open without writing more
        finally:
            os.close(fd)
    t = threading.Thread(target=run, daemon=True)
    t.start()
    return t


def test_fifo_list_file(lines, tmp_path):
    fifo = str(tmp_path / "list.fifo")
    os.mkfifo(fifo)
    t = _writer(fifo, lines)
    ld = stoker.ImageLoader(list_file=fifo, batch_size=2, threads=1, pipeline="eval", size=16,
                            shuffle=False, read_timeout=20)
    t.join(5)
    assert ld.num_samples == N
    assert [lab for _, lab in ld.samples] == [i % 2 for i in range(N)]
    assert sum(len(b[1]) for b in ld) == N
    ld.close()


def test_pipe_list_file(lines):
    r, w = os.pipe()
    t = _writer(w, lines)
    try:
        ld = stoker.ImageLoader(list_file=f"/dev/fd/{r}", batch_size=3, threads=1,
                                pipeline="eval", size=16, read_timeout=20)
        assert ld.num_samples == N
        ld.close()
    finally:
        t.join(5)
        os.close(r)


def test_stalled_fifo_writer_fails_within_read_timeout(lines, tmp_path):
    fifo = str(tmp_path / "stall.fifo")
    os.mkfifo(fifo)
    t = _writer(fifo, lines[:3], stall=4.0)
    t0 = time.monotonic()
    with pytest.raises(Exception, match=r"stall\.fifo.*not read to its end within 0\.5 s.*3 lines"):
        stoker.ImageLoader(list_file=fifo, batch_size=2, threads=1, pipeline="eval", size=16,
                           read_timeout=0.5)
    dt = time.monotonic() - t0
    assert 0.4 < dt < 3, dt
    t.join(6)


def test_pack_from_a_fifo_list(lines, tmp_path):
    fifo = str(tmp_path / "pack.fifo")
    os.mkfifo(fifo)
    t = _writer(fifo, lines)
    r = stoker.pack(None, tmp_path / "f.stkc", list_file=fifo)
    t.join(5)
    assert r.packed == N and r.failed == 0


def test_a_folder_is_no_list_file(tmp_path):
    with pytest.raises(IsADirectoryError, match="is a folder"):
        stoker.ImageLoader(list_file=str(tmp_path), batch_size=2)
    with pytest.raises(FileNotFoundError, match="no such list file"):
        stoker.ImageLoader(list_file=str(tmp_path / "missing.txt"), batch_size=2)

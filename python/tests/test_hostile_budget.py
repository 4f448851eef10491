"""Memory bombs, skip bounds and clear errors from Python (issue 21).

The bombs are the ones the issue describes: a 1.5 MB PNG whose zTXt chunk
inflates to 1 GB, the same as iCCP, and 250-byte progressive 13000x13000
JPEGs (4:4:4 and 4:2:0). A child interpreter reads all four with 2 threads
and reports its peak RSS, which must stay under 512 MB with the default
max_decode_bytes. STK_BOMB_NO_BUDGET=1 also prints the figure with
max_decode_bytes=0 (no budget: what every decode cost before).
"""
import os
import struct
import subprocess
import sys
import textwrap
import zlib

import pytest

import stoker


def _chunk(t, d):
    return struct.pack(">I", len(d)) + t + d + struct.pack(">I", zlib.crc32(t + d) & 0xFFFFFFFF)


def _png_bomb(kind, inflated):
    z = zlib.compressobj(9)
    block = bytes(1 << 20)
    data = b"".join(z.compress(block) for _ in range(inflated >> 20)) + z.flush()
    row = b"\0" + bytes(8 * 3)
    idat = zlib.compress(row * 8)
    ihdr = struct.pack(">IIBBBBB", 8, 8, 8, 2, 0, 0, 0)
    return (b"\x89PNG\r\n\x1a\n" + _chunk(b"IHDR", ihdr) + _chunk(kind, b"k\0\0" + data)
            + _chunk(b"IDAT", idat) + _chunk(b"IEND", b""))


def _jpeg_bomb(side, h_samp):
    q = bytearray(b"\xff\xd8")
    q += b"\xff\xdb\x00\x43\x00" + bytes([1] * 64)
    q += b"\xff\xc2\x00\x11\x08" + struct.pack(">HH", side, side) + b"\x03"
    q += bytes([1, h_samp << 4 | h_samp, 0, 2, 0x11, 0, 3, 0x11, 0])
    q += b"\xff\xc4\x00\x14\x00\x01" + bytes(15) + b"\x00"  # one code: DC diff 0
    q += b"\xff\xda\x00\x0c\x03\x01\x00\x02\x00\x03\x00\x00\x00\x00"
    q += b"\x00\x00\xff\xd9"
    return bytes(q)


@pytest.fixture(scope="module")
def bombs(tmp_path_factory):
    root = tmp_path_factory.mktemp("bombs")
    (root / "b").mkdir()
    (root / "b" / "ztxt.png").write_bytes(_png_bomb(b"zTXt", 1 << 30))
    (root / "b" / "iccp.png").write_bytes(_png_bomb(b"iCCP", 1 << 30))
    (root / "b" / "prog444.jpg").write_bytes(_jpeg_bomb(13000, 1))
    (root / "b" / "prog420.jpg").write_bytes(_jpeg_bomb(13000, 2))
    return root


# The child's own peak. VmHWM is this process's high-water mark: exec gave
# it a new address space. ru_maxrss would not do: Linux carries it across
# exec, so it reports the parent's (pytest's) peak when that is larger.
PEAK_FN = textwrap.dedent("""
    def peak_kb():
        with open("/proc/self/status") as f:
            return next(int(l.split()[1]) for l in f if l.startswith("VmHWM:"))
""")

CHILD = textwrap.dedent("""
    import json, sys, time
    import stoker


    PEAK_FN
    kw = json.loads(sys.argv[2])
    t0 = time.perf_counter()
    with stoker.ImageLoader(sys.argv[1], batch_size=2, threads=2, pipeline="eval", size=16,
                            on_error="skip", max_skipped_fraction=1, **kw) as ld:
        n = 0
        try:  # every file is a bomb: the epoch ends with an error after them
            n = sum(len(labels) for _, labels in ld)
        except stoker.DecodeError as e:
            assert "every file" in str(e), e
        skipped = ld.stats()["skipped_files"]
    print(json.dumps({"images": n, "skipped": skipped, "s": time.perf_counter() - t0,
                      "rss_kb": peak_kb()}))
""").replace("PEAK_FN", PEAK_FN)


def test_peak_is_the_childs_own():
    # A parent holding 600 MB runs a child that holds little: the child's
    # figure must not carry the parent's peak (it did with ru_maxrss).
    parent = textwrap.dedent("""
        import subprocess, sys
        held = bytearray(600 << 20)
        held[::4096] = b"x" * len(held[::4096])
        child = sys.argv[1] + "\\nprint(peak_kb())"
        print(subprocess.run([sys.executable, "-c", child], capture_output=True, text=True,
                             check=True).stdout)
    """)
    r = subprocess.run([sys.executable, "-c", parent, PEAK_FN], capture_output=True, text=True,
                       timeout=120, check=True)
    assert int(r.stdout.split()[0]) < 300 << 10, r.stdout


def _run_child(root, **kw):
    import json
    r = subprocess.run([sys.executable, "-c", CHILD, str(root), json.dumps(kw)],
                       capture_output=True, text=True, timeout=300)
    assert r.returncode == 0, r.stdout + r.stderr
    return json.loads(r.stdout.strip().splitlines()[-1])


@pytest.mark.slow
def test_bombs_stay_under_512_mb(bombs):
    assert os.path.getsize(bombs / "b" / "ztxt.png") < 2 << 20
    assert os.path.getsize(bombs / "b" / "prog444.jpg") < 300
    out = _run_child(bombs)
    print(f"\n2 threads, 4 bombs, default max_decode_bytes: peak RSS {out['rss_kb'] / 1024:.0f} MB, "
          f"{out['s']:.2f} s")
    assert out["images"] == 0 and len(out["skipped"]) == 4
    for path, reason in out["skipped"]:
        assert "max_decode_bytes" in reason, (path, reason)
    assert out["rss_kb"] < 512 * 1024
    if os.environ.get("STK_BOMB_NO_BUDGET"):
        out = _run_child(bombs, max_decode_bytes=0)
        print(f"the same with max_decode_bytes=0: peak RSS {out['rss_kb'] / 1024:.0f} MB, "
              f"{out['s']:.2f} s")


def test_check_file_refuses_fast(bombs):
    for name in ("ztxt.png", "iccp.png", "prog444.jpg", "prog420.jpg"):
        with pytest.raises(stoker.DecodeError, match="max_decode_bytes"):
            stoker.check_file(str(bombs / "b" / name))


def test_keywords_reach_the_loader(bombs, tmp_path):
    with pytest.raises(ValueError, match="max_skipped_fraction"):
        stoker.ImageLoader(bombs, max_skipped_fraction=1.5)
    with pytest.raises(ValueError, match="max_decode_bytes"):
        stoker.ImageLoader(bombs, max_decode_bytes=-1)
    # skip over four bad files of four: the fraction bound raises, naming the count
    with stoker.ImageLoader(bombs, batch_size=1, threads=1, on_error="skip",
                            max_consecutive_failures=0) as ld:
        with pytest.raises(stoker.DecodeError, match=r"1 of the 4 files.*max_skipped_fraction"):
            list(ld)


@pytest.mark.skipif(not hasattr(os, "fork") or not hasattr(os, "setuid"), reason="needs fork and setuid")
def test_unreadable_folder_is_permission_error():
    """A class folder the user cannot enter is a PermissionError naming it.

    Root enters any folder, so under root the check runs in a forked child
    that drops to nobody (65534) first. The child is this process, stoker
    already imported: it needs nothing from the checkout, the interpreter's
    or a virtualenv's folders (which a checkout in a private folder, as a
    fresh clone in `mktemp -d`, would hide from nobody), only the dataset."""
    import pathlib
    import select
    import shutil
    import signal
    import tempfile
    tmp_path = pathlib.Path(tempfile.mkdtemp())  # 0700: reachable for root only, until chmod
    (tmp_path / "c0").mkdir()
    (tmp_path / "c0" / "a.jpg").write_bytes(_jpeg_bomb(8, 1))
    os.chmod(tmp_path, 0o755)
    os.chmod(tmp_path / "c0", 0)
    rfd, wfd = os.pipe()
    pid = os.fork()
    if pid == 0:  # the child: report through the pipe, never return to pytest
        status = 1
        try:
            os.close(rfd)
            signal.alarm(60)
            if os.geteuid() == 0:
                os.setgroups([])
                os.setgid(65534)
                os.setuid(65534)
            os.environ["HOME"] = "/nonexistent"
            try:
                stoker.ImageLoader(str(tmp_path), threads=1)
                out = "no error"
            except PermissionError as e:
                out, status = f"PermissionError {e}", 0
            except BaseException as e:
                out = f"{type(e).__name__} {e}"
            os.write(wfd, out.encode()[:4000])
        finally:
            os._exit(status)
    os.close(wfd)
    try:
        ready, _, _ = select.select([rfd], [], [], 90)
        out = os.read(rfd, 4096).decode() if ready else "the child did not answer in 90 s"
        if not ready:
            os.kill(pid, signal.SIGKILL)
        _, wstatus = os.waitpid(pid, 0)
    finally:
        os.close(rfd)
        os.chmod(tmp_path / "c0", 0o755)
        shutil.rmtree(tmp_path)
    assert os.waitstatus_to_exitcode(wstatus) == 0, out
    assert out.startswith("PermissionError"), out
    assert "Permission denied" in out and "c0" in out, out

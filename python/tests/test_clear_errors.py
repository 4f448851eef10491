"""Options and conditions that used to give an unclear error, or none: each
now refused or reported up front, naming what is wrong."""
import os
import subprocess
import sys

import pytest

torch = pytest.importorskip("torch")
import stoker  # noqa: E402
import stoker.transforms  # noqa: E402

from conftest import make_folder  # noqa: E402


@pytest.fixture(scope="module")
def folder(tmp_path_factory):
    return make_folder(tmp_path_factory.mktemp("src"), classes=2, per_class=3, sizes=((64, 48),))


@pytest.mark.parametrize("device", ["cuda:-1", "cuda:-3", "cuda:x", "cuda:"])
def test_bad_cuda_index_is_refused(folder, device):
    """device="cuda:-1" used to run on the CPU without a word (-1 is the
    CPU's number in the C library)."""
    with pytest.raises(ValueError, match="device"):
        stoker.ImageLoader(folder, batch_size=2, size=16, device=device)


def test_index_dir_that_is_a_file_is_refused(folder, tmp_path):
    """index_dir naming a file used to be ignored without a word (no index
    was written or read)."""
    f = tmp_path / "not-a-folder"
    f.write_text("x")
    with pytest.raises(ValueError, match="index_dir .*not-a-folder.* is not a folder"):
        stoker.ImageLoader(folder, batch_size=2, size=16, index=1, index_dir=str(f))
    with pytest.raises(ValueError, match="index_dir .* is not a folder"):
        stoker.ImageLoader(folder, batch_size=2, size=16, index=1, index_dir=str(f / "sub"))
    # a folder that does not exist yet is made, as before
    with stoker.ImageLoader(folder, batch_size=2, size=16, index=1,
                            index_dir=str(tmp_path / "new")) as ld:
        next(iter(ld))


@pytest.mark.parametrize("ratio", [(1e30, 1e31), (1e-31, 1e-30), (1e6, 1e7)])
def test_degenerate_ratio_is_refused(folder, ratio):
    """ratio=(1e30, 1e31) used to fail every image's crop (a crop of height
    0), blaming each file in turn."""
    with pytest.raises(ValueError, match="ratio"):
        stoker.ImageLoader(folder, batch_size=2,
                           pipeline=[stoker.transforms.RandomResizedCrop(16, ratio=ratio)])
    # wide but sane ratios still work
    with stoker.ImageLoader(folder, batch_size=2,
                            pipeline=[stoker.transforms.RandomResizedCrop(16, ratio=(0.01, 100))]
                            ) as ld:
        next(iter(ld))


def test_full_disk_says_so(folder, tmp_path):
    """A pack onto a full disk says "No space left on device", not "(input/
    output error)", and leaves nothing behind. Needs a small tmpfs (root)."""
    import stoker.cli

    if stoker.cli.binary() is None:
        pytest.skip("no stoker executable in this installation")
    mnt = tmp_path / "small"
    mnt.mkdir()
    if os.geteuid() != 0 or subprocess.run(["mount", "-t", "tmpfs", "-o", "size=8k", "tmpfs",
                                            str(mnt)], capture_output=True).returncode != 0:
        pytest.skip("cannot mount a small tmpfs here")
    try:
        # JPEG: no size estimate up front, so the write itself meets the full disk
        p = subprocess.run([sys.executable, "-m", "stoker", "pack", folder, str(mnt / "o.stkc"),
                            "--cache", "--encoding", "jpeg", "--max-side", "0"],
                           capture_output=True, text=True, timeout=120)
        assert p.returncode == 1, p.stderr
        assert "No space left on device" in p.stderr, p.stderr
        assert "input/output error" not in p.stderr, p.stderr
        assert os.listdir(mnt) == []
    finally:
        subprocess.run(["umount", str(mnt)])


def test_list_file_with_a_byte_order_mark(tmp_path):
    """A list saved with a UTF-8 BOM: the first path is read without it (it
    used to fail as "cannot open: \\ufeffPATH", the mark invisible)."""
    from conftest import make_folder

    root = make_folder(tmp_path / "data", classes=2, per_class=2)
    import glob
    files = sorted(glob.glob(os.path.join(root, "*", "*.jpg")))
    lst = tmp_path / "bom.txt"
    lst.write_bytes(b"\xef\xbb\xbf" + "".join(f"{f} {i % 2}\n" for i, f in enumerate(files)).encode())
    with stoker.ImageLoader(list_file=str(lst), batch_size=2, size=16, threads=2,
                            pipeline="eval") as ld:
        assert ld.samples[0][0] == files[0]
        assert sum(len(y) for _, y in ld) == len(files)

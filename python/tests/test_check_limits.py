"""stoker.check_file applies the loader's limits for the options it is given
(the loader's keywords): a file is refused exactly where a loader of the
same options would refuse it. Before, check_file took no options and passed
files the loader then refused ("takes N MiB ... more than the loader's
decode memory"). Needs neither torch nor a GPU."""
import pytest

Image = pytest.importorskip("PIL.Image")
import stoker  # noqa: E402


@pytest.fixture(scope="module")
def files(tmp_path_factory):
    d = tmp_path_factory.mktemp("limits")
    # eval decodes 2400 x ~2100 rows of this JPEG at 1/1 (over 12 MiB);
    # train's crops are DCT-scaled (a few MiB)
    Image.new("RGB", (2400, 2400), (120, 130, 140)).save(d / "big.jpg", quality=80)
    # a PNG is decoded whole by both (14 MiB)
    Image.new("RGB", (2200, 2200), (1, 2, 3)).save(d / "big.png")
    Image.new("RGB", (300, 200), (9, 9, 9)).save(d / "small.jpg")
    return d


@pytest.mark.parametrize("pipeline,refused", [("eval", {"big.jpg", "big.png"}),
                                              ("train", {"big.png"})])
def test_check_file_refuses_what_the_loader_refuses(files, pipeline, refused):
    for name in ("big.jpg", "big.png", "small.jpg"):
        path = str(files / name)
        if name in refused:
            with pytest.raises(stoker.DecodeError, match="max_decode_bytes"):
                stoker.check_file(path, pipeline=pipeline, max_decode_bytes=12 << 20)
        else:
            w, h = stoker.check_file(path, pipeline=pipeline, max_decode_bytes=12 << 20)
            assert w > 0 and h > 0


def test_check_file_defaults_and_bad_keyword(files):
    assert stoker.check_file(str(files / "big.png")) == (2200, 2200)
    with pytest.raises(TypeError, match="bogus"):
        stoker.check_file(str(files / "small.jpg"), bogus=1)
    with pytest.raises(ValueError):
        stoker.check_file(str(files / "small.jpg"), pipeline="sideways")

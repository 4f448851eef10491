"""Remote datasets at scale: what opening and reading cost per rank, counted
by request (bench/remote_scale.py measures the same for docs/remote.md's
scale model). What one rank's open costs is paid once per rank: at 512 ranks
a request more per open is 512 more at the same moment on one prefix.
"""
import pytest

from test_remote import N, OPTS, dataset, proxy, s3env  # noqa: F401 - fixtures

torch = pytest.importorskip("torch")
stoker = pytest.importorskip("stoker")


def kinds(log):
    out = {"list": 0, "classes": 0, "index": 0, "head": 0, "tar": 0, "other": 0}
    for method, path, _, _ in log:
        p = path.split("?")[0]
        if method == "HEAD":
            out["head"] += 1
        elif "list-type" in path:
            out["list"] += 1
        elif p.endswith("classes.txt"):
            out["classes"] += 1
        elif p.endswith(".stkidx"):
            out["index"] += 1
        elif p.endswith(".tar"):
            out["tar"] += 1
        else:
            out["other"] += 1
    return out


@pytest.mark.parametrize("url", ["s3://stoker/ds/", "s3://stoker/ds"])
def test_open_asks_for_classes_txt_once(dataset, proxy, tmp_path, url):
    """classes.txt is asked for once, with the listing: a root with its
    trailing slash (the documented form) asked again after the listing,
    where the early request was meant to save that round trip."""
    with stoker.ImageLoader(url, pipeline="eval", index_dir=str(tmp_path / "i"), **OPTS) as ld:
        assert ld.num_samples == N
        k = kinds(list(proxy.log))
    assert k["classes"] == 1, proxy.log
    assert k["list"] >= 1 and k["other"] == 0, proxy.log

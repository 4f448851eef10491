"""Remote datasets: the defects and traps found by reading them as users do.

Each test failed before its fix: statistics that counted probes as failures,
retries that gave up before read_timeout, URLs whose secrets reached messages,
compressed shards skipped without a word, a stale index beside a shard, a
root without its trailing slash that mixed sibling prefixes, and ranks that
yielded different numbers of batches when a shard went missing.
"""
import os
import subprocess
import time

import pytest

from test_remote import (  # noqa: F401 - fixtures
    N, OPTS, assert_same, dataset, epoch, local_epoch, proxy, s3env)
from test_tar import stoker_cli

torch = pytest.importorskip("torch")
stoker = pytest.importorskip("stoker")


# ---- statistics: a probe's 404 is an answer, not a failure -----------------------------

def test_probes_that_404_are_not_failures(dataset, s3env, tmp_path):
    """No classes.txt and no index beside the shards: the probes for them 404
    by design, and remote_failures stays 0 (it counted 2 on every open)."""
    with stoker.ImageLoader("s3://stoker/ds/", pipeline="eval", index_dir=str(tmp_path / "i"),
                            **OPTS) as ld:
        epoch(ld)
        st = ld.stats()
    assert st["remote_failures"] == 0, st
    assert st["remote_requests"] > 0


# ---- retries last as long as read_timeout allows -----------------------------------------

def test_outage_longer_than_twelve_attempts_is_ridden_out(dataset, proxy, tmp_path):
    """13 answers of 503 in a row (about 30 s of backoff) on the listing: the
    open waits them out within read_timeout, where it gave up after 12
    attempts ("gave up after 12 attempts in 24.2 s")."""
    proxy.fail_next(13, path="list-type")
    t0 = time.monotonic()
    with stoker.ImageLoader("s3://stoker/ds/", pipeline="eval", read_timeout=120,
                            index_dir=str(tmp_path / "i"), **OPTS) as ld:
        assert ld.num_samples == N
        st = ld.stats()
    assert proxy.faults.get("status") == 13
    assert st["remote_retries"] >= 13
    assert time.monotonic() - t0 < 120


# ---- no secret of a URL in any message, statistic or report ------------------------------

SECRETS = ("hunter2pw", "SIGSECRET0123", "AKIDSECRET")


def secret_list(dataset, tmp_path):
    """A list of URLs with a user's password and a pre-signed URL's query,
    one of them missing (404)."""
    host = dataset["http"].url.replace("http://", "http://alice:hunter2pw@")
    q = "?X-Amz-Credential=AKIDSECRET&X-Amz-Signature=SIGSECRET0123"
    lines = [f"{host}/imgs/{p}{q} {lab}\n" for p, lab in dataset["lines"][:6]]
    lines.insert(2, f"{host}/imgs/missing.jpg{q} 1\n")
    p = tmp_path / "urls.txt"
    p.write_text("".join(lines))
    return str(p)


def assert_clean(text, what):
    for s in SECRETS:
        assert s not in text, f"{what}: {s} in {text!r}"


def test_list_url_secrets_never_shown(dataset, s3env, tmp_path):
    lst = secret_list(dataset, tmp_path)
    with stoker.ImageLoader(list_file=lst, pipeline="eval", **OPTS) as ld:
        with pytest.raises(stoker.DecodeError) as e:
            epoch(ld)
    assert "missing.jpg" in str(e.value) and "404" in str(e.value), str(e.value)
    assert_clean(str(e.value), "DecodeError")
    assert_clean(repr(e.value.args), "DecodeError args")
    with stoker.ImageLoader(list_file=lst, pipeline="eval", on_error="skip",
                            max_skipped_fraction=1, **OPTS) as ld:
        got = epoch(ld)
        st = ld.stats()
    assert sum(len(b[1]) for b in got) == 6
    assert len(st["skipped_files"]) == 1 and "missing.jpg" in st["skipped_files"][0][0]
    assert_clean(repr(st), "stats()")
    cli = stoker_cli()
    if cli:
        for extra in ([], ["--json"]):
            r = subprocess.run([cli, "check", "--list", lst, *extra], capture_output=True, text=True,
                               timeout=120)
            assert r.returncode == 1, r.stdout + r.stderr
            assert "missing.jpg" in r.stdout + r.stderr
            assert_clean(r.stdout + r.stderr, f"stoker check --list {extra}")


# ---- compressed shards are refused by name, never skipped without a word -------------------

def test_compressed_shard_is_refused_by_name(dataset, s3env, tmp_path):
    import gzip
    import shutil

    d = tmp_path / "mixed"
    shutil.copytree(dataset["shards"], d)
    src = d / "shard-000004.tar"
    with open(src, "rb") as f, gzip.open(str(src) + ".gz", "wb") as g:
        g.write(f.read())
    src.unlink()
    with pytest.raises(Exception, match=r"shard-000004\.tar\.gz is a compressed shard") as e:
        stoker.ImageLoader(str(d), **OPTS)
    assert "gunzip" in str(e.value)
    cli = stoker_cli()
    if cli:
        r = subprocess.run([cli, "check", str(d)], capture_output=True, text=True, timeout=120)
        assert r.returncode != 0, r.stdout + r.stderr
        assert "shard-000004.tar.gz is a compressed shard" in r.stdout + r.stderr
    s3env.put_tree(str(d), s3env.bucket, "mixed")
    with pytest.raises(Exception, match=r"s3://stoker/mixed/shard-000004\.tar\.gz is a compressed"):
        stoker.ImageLoader("s3://stoker/mixed/", **OPTS)
    with pytest.raises(Exception, match=r"shard-000004\.tar\.gz is a compressed"):
        stoker.ImageLoader("s3://stoker/mixed/shard-{000004..000005}.tar.gz", **OPTS)


# ---- a root without its trailing slash never mixes sibling prefixes ------------------------

def test_prefix_without_slash_is_the_folder_or_an_error(dataset, s3env, tmp_path):
    """s3://stoker/ds read ds/ and ds-other/ together (43 samples, the first
    shard twice); it is the folder ds/. s3://stoker/ds-o names no folder:
    an error that lists what it matched."""
    idx = str(tmp_path / "i")
    with stoker.ImageLoader("s3://stoker/ds", pipeline="eval", index_dir=idx, **OPTS) as ld:
        assert ld.num_samples == N
        assert all(p.startswith("s3://stoker/ds/shard-") for p, _ in ld.samples)
        got = epoch(ld)
        assert ld.stats()["remote_failures"] == 0
    assert_same(got, local_epoch(dataset, pipeline="eval"), "s3://stoker/ds")
    with pytest.raises(Exception, match=r"s3://stoker/ds-o is no folder") as e:
        stoker.ImageLoader("s3://stoker/ds-o", index_dir=idx, **OPTS)
    assert "s3://stoker/ds-other/shard-000000.tar" in str(e.value)


# ---- an index beside a shard is checked against the shard's ETag, not only its size --------

def relabel(data):
    """The shard's bytes with each .cls member's class moved on by one (of
    3): the same size, the same member headers, other labels."""
    import io
    import tarfile

    b = bytearray(data)
    with tarfile.open(fileobj=io.BytesIO(data)) as tf:
        for m in tf.getmembers():
            if m.name.endswith(".cls"):
                at = m.offset_data
                b[at:at + m.size] = str((int(b[at:at + m.size]) + 1) % 3).encode()
    return bytes(b)


def test_stale_index_beside_a_rewritten_shard_is_not_used(s3env, proxy, tmp_path):
    """A shard overwritten with one of the same size (other labels) beside
    the index stoker pack wrote for the old one: the index was used (its
    size matched), and the epoch had the old labels. The index records the
    shard's ETags; the listed ETag no longer matches, and the shard is read."""
    import hashlib
    import shutil

    from conftest import make_folder

    src = make_folder(tmp_path / "src", classes=3, per_class=6)
    out = tmp_path / "packed"
    stoker.pack(src, str(out), format="tar")
    shard = out / "shard-000000.tar"
    data = shard.read_bytes()
    raw = (out / "shard-000000.tar.stkidx").read_bytes()
    key = raw[16:raw.index(b"\0", 16)].decode().split("\n")
    assert key[:3] == ["beside", str(len(data)), hashlib.md5(data).hexdigest()], key
    s3env.put_tree(str(out), s3env.bucket, "stale")
    kw = dict(OPTS, pipeline="eval")
    # the index was read instead of the shard: the shard's own bytes are
    # refused while this loader opens (a scan would fail the open; the
    # read-ahead that starts at open fails, and no batch is read)
    proxy.fail_next(10**6, status=403, path="/stale/shard-000000.tar$")
    with stoker.ImageLoader("s3://stoker/stale/", index_dir=str(tmp_path / "i0"), **kw) as ld:
        old = [lab for _, lab in ld.samples]
    proxy.clear_faults()
    variant = relabel(data)
    assert len(variant) == len(data) and variant != data
    s3env.put(s3env.bucket, "stale/shard-000000.tar", variant)
    local = tmp_path / "variant"
    shutil.copytree(out, local)
    (local / "shard-000000.tar").write_bytes(variant)
    with stoker.ImageLoader(str(local), **kw) as ld:
        want_labels = [lab for _, lab in ld.samples]
        want = epoch(ld)
    assert want_labels != old
    with stoker.ImageLoader("s3://stoker/stale/", index_dir=str(tmp_path / "i1"), **kw) as ld:
        assert [lab for _, lab in ld.samples] == want_labels
        got = epoch(ld)
    assert_same(got, want, "the rewritten shard")


# ---- stoker bench reports the remote statistics; --json always ends in one JSON line -------

def test_bench_reports_remote_statistics(dataset, s3env, tmp_path):
    import json

    cli = stoker_cli()
    if not cli:
        pytest.skip("no stoker command in this build")
    args = [cli, "bench", "s3://stoker/ds/", "--size", "32", "--batch", "4", "--threads", "2",
            "--index-dir", str(tmp_path / "i")]
    r = subprocess.run(args, capture_output=True, text=True, timeout=300)
    assert r.returncode == 0, r.stdout + r.stderr
    assert "remote: " in r.stdout and " requests (0 retried, 0 failed)" in r.stdout, r.stdout
    r = subprocess.run(args + ["--json"], capture_output=True, text=True, timeout=300)
    assert r.returncode == 0, r.stdout + r.stderr
    out = json.loads(r.stdout.strip().splitlines()[-1])
    assert out["ok"] and out["images"] == N
    assert out["remote_requests"] > 0 and out["remote_bytes"] > 0 and out["remote_failures"] == 0
    for cmd in ("bench", "check"):
        r = subprocess.run([cli, cmd, "s3://stoker/nothing-here/", "--json"], capture_output=True,
                           text=True, timeout=300)
        assert r.returncode != 0
        last = json.loads(r.stdout.strip().splitlines()[-1])
        assert last["ok"] is False and "s3://stoker/nothing-here/" in last["error"], r.stdout


def test_pack_report_shows_no_url_secret(tmp_path):
    """stoker pack of a list naming a URL (which it cannot pack) listed it
    with its password and signature."""
    cli = stoker_cli()
    if not cli:
        pytest.skip("no stoker command in this build")
    lst = tmp_path / "u.txt"
    lst.write_text("https://alice:hunter2pw@127.0.0.1:9/x.jpg?X-Amz-Signature=SIGSECRET0123 0\n")
    for extra in ([], ["--json"]):
        r = subprocess.run([cli, "pack", "--list", str(lst), str(tmp_path / f"out{len(extra)}"),
                            "--tar", *extra], capture_output=True, text=True, timeout=120)
        assert "127.0.0.1:9/x.jpg" in r.stdout + r.stderr, r.stdout + r.stderr
        assert_clean(r.stdout + r.stderr, f"stoker pack {extra}")

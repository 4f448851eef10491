"""Remote datasets: tar shards and list files read over S3 and HTTP.

The servers are real and local (servers.py): SeaweedFS with credentials, a
threaded HTTP file server, and a fault proxy in front of either. The same
shards are also read from local disk, and every remote epoch must equal the
local one byte for byte (images, labels, indices) for the same arguments.

The API these tests assume (the remote client must match it):

- `ImageLoader("s3://BUCKET/PREFIX/")`: every `.tar` under the prefix, in
  sorted key order, as a folder of shards is read; `s3://BUCKET/shard-{000000..000004}.tar`
  and `http://HOST:PORT/PATH/shard-{000000..000004}.tar`: a brace range of
  shards; `list_file=` a local file of `URL label` lines.
- S3 configuration from the environment: `AWS_ENDPOINT_URL` (or
  `S3_ENDPOINT_URL`), `AWS_ACCESS_KEY_ID`, `AWS_SECRET_ACCESS_KEY`,
  `AWS_REGION`, `AWS_PROFILE` with `~/.aws/credentials`; path-style URLs for
  a custom endpoint; unsigned requests when there are no credentials.
- `loader.source_kind` is "tar" for shards and "list" for a list file;
  `loader.samples[i][0]` is `SHARD_URL:MEMBER` for shards, the URL for a list.
- `stats()` has `remote_bytes`, `remote_requests` (every HTTP request sent,
  listing and retries included) and `remote_retries`; 0 for local data.
- Failures: `OSError` (stoker.DecodeError is one) whose message names the
  URL and the HTTP status; for 403 it hints at the AWS_* credentials; the
  secret key appears in no message, stat or file. Throttling (503), resets
  and bodies cut short are retried; `read_timeout` bounds a stalled body;
  `close()` returns within 1 s during a transfer.
"""
import glob
import io
import json
import os
import subprocess
import sys
import tarfile
import threading
import time

import pytest

import servers
from conftest import PKG_ROOT, photo
from servers import FaultProxy, HTTPFileServer, S3Server

torch = pytest.importorskip("torch")
stoker = pytest.importorskip("stoker")

SHARD_SIZES = (7, 3, 11, 6, 9)  # uneven, 36 in all: divisible by 2 and 4, not by 5
N = sum(SHARD_SIZES)
N_SHARDS = len(SHARD_SIZES)
SIZES = ((48, 36), (36, 48), (40, 40), (50, 30))
CLASSES = 4
# the exact open (every shard indexed before the first batch): these tests
# compare the epochs with local disk from epoch 0 on; test_remote_stream.py
# tests the streamed first epoch
OPTS = dict(batch_size=4, size=32, threads=2, seed=0, stream_first_epoch=False)
BRACE = "shard-{000000..%06d}.tar" % (N_SHARDS - 1)


def jpeg_bytes(k):
    from PIL import Image

    w, h = SIZES[k % len(SIZES)]
    b = io.BytesIO()
    Image.fromarray(photo(w, h, 700 + k)).save(b, format="JPEG", quality=90)
    return b.getvalue()


def add_member(tf, name, data):
    ti = tarfile.TarInfo(name)
    ti.size = len(data)
    ti.mtime = 0
    tf.addfile(ti, io.BytesIO(data))


@pytest.fixture(scope="module")
def dataset(tmp_path_factory, s3_server):
    """Shards (local, on S3 in the private and the public bucket, over HTTP) and
    single images with list files; returns a dict of where everything is."""
    root = tmp_path_factory.mktemp("remote")
    shards = root / "www" / "ds"
    imgs = root / "www" / "imgs"
    shards.mkdir(parents=True)
    imgs.mkdir(parents=True)
    k = 0
    image_bytes = 0
    for s, n in enumerate(SHARD_SIZES):
        with tarfile.open(shards / f"shard-{s:06d}.tar", "w", format=tarfile.USTAR_FORMAT) as tf:
            for _ in range(n):
                data = jpeg_bytes(k)
                image_bytes += len(data)
                add_member(tf, f"{k:08d}_img.jpg", data)
                add_member(tf, f"{k:08d}_img.cls", str(k % CLASSES).encode())
                k += 1
    lines = []
    for i in range(17):
        (imgs / f"{i:02d}.jpg").write_bytes(jpeg_bytes(100 + i))
        lines.append((f"{i:02d}.jpg", (i * 7) % 5))
    local_list = root / "www" / "imgs.txt"
    local_list.write_text("".join(f"imgs/{p} {lab}\n" for p, lab in lines))
    s3_server.put_tree(str(shards), s3_server.bucket, "ds")
    s3_server.put_tree(str(shards), s3_server.public_bucket, "ds")
    s3_server.put_tree(str(imgs), s3_server.bucket, "imgs")
    # a key beside the prefix that must not be taken for a shard of it
    s3_server.put(s3_server.bucket, "ds-other/shard-000000.tar", (shards / "shard-000000.tar").read_bytes())
    s3_server.put(s3_server.bucket, "ds/README.txt", b"not a shard\n")
    http = HTTPFileServer(str(root / "www")).start()
    try:
        yield dict(root=root, shards=str(shards), list=str(local_list), lines=lines, http=http,
                   image_bytes=image_bytes)
    finally:
        http.stop()


@pytest.fixture()
def s3env(monkeypatch, s3_server, tmp_path):
    """The S3 variables of the server and nothing of this machine's own
    configuration; HOME and the cache in the test's folder."""
    for k in S3Server.CLEARED:
        monkeypatch.delenv(k, raising=False)
    for k, v in s3_server.env().items():
        monkeypatch.setenv(k, v)
    home = tmp_path / "home"
    home.mkdir()
    monkeypatch.setenv("HOME", str(home))
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path / "cache"))
    return s3_server


@pytest.fixture()
def proxy(s3_server, s3env, monkeypatch):
    """A fault proxy in front of S3, which the loader is pointed at."""
    p = FaultProxy(s3_server.port).start()
    monkeypatch.setenv("AWS_ENDPOINT_URL", p.url)
    yield p
    p.stop()


def epoch(loader):
    """One pass: [(images, labels, indices)], cloned."""
    return [(b.images.clone(), b.labels.clone(), list(b.indices)) for b in loader.iter_batches()]


def assert_same(a, b, what=""):
    assert len(a) == len(b), f"{what}: {len(a)} batches against {len(b)}"
    for i, ((xa, ya, ia), (xb, yb, ib)) in enumerate(zip(a, b)):
        assert ia == ib, f"{what}: batch {i}: indices {ia} against {ib}"
        assert torch.equal(ya, yb), f"{what}: batch {i}: labels"
        assert torch.equal(xa, xb), f"{what}: batch {i}: images differ"


def local_epoch(dataset, **kw):
    with stoker.ImageLoader(dataset["shards"], **{**OPTS, **kw}) as ld:
        return epoch(ld)


def members(loader):
    return [p.rsplit(":", 1)[1] for p, _ in loader.samples]


def timed(fn):
    t0 = time.monotonic()
    try:
        fn()
    except Exception as e:  # noqa: BLE001 - returned for the test to judge
        return e, time.monotonic() - t0
    return None, time.monotonic() - t0


def open_and_read(url, **kw):
    """Opens a loader and reads one epoch; the error comes at either step."""
    with stoker.ImageLoader(url, **{**OPTS, **kw}) as ld:
        epoch(ld)


# ---- the same epochs as from local disk ----------------------------------------------

@pytest.mark.parametrize("pipeline", ["eval", "train"])
def test_s3_prefix_equals_local(dataset, s3env, pipeline):
    want = local_epoch(dataset, pipeline=pipeline)
    with stoker.ImageLoader("s3://stoker/ds/", pipeline=pipeline, **OPTS) as ld:
        assert ld.source_kind == "tar"
        assert ld.num_samples == N and len(ld) == -(-N // OPTS["batch_size"])
        assert all(p.startswith("s3://stoker/ds/shard-") for p, _ in ld.samples)
        with stoker.ImageLoader(dataset["shards"], pipeline=pipeline, **OPTS) as local:
            assert members(ld) == members(local)
            assert [lab for _, lab in ld.samples] == [lab for _, lab in local.samples]
        got = epoch(ld)
        assert_same(got, want, f"s3 {pipeline} epoch 0")
        # the next epoch too (a new shuffle for train)
        got1 = epoch(ld)
    assert_same(got1, local_epoch_n(dataset, 1, pipeline=pipeline), f"s3 {pipeline} epoch 1")


def local_epoch_n(dataset, e, **kw):
    with stoker.ImageLoader(dataset["shards"], **{**OPTS, **kw}) as ld:
        ld.set_epoch(e)
        return epoch(ld)


@pytest.mark.parametrize("pipeline", ["eval", "train"])
def test_http_brace_range_equals_local(dataset, s3env, pipeline):
    url = f"{dataset['http'].url}/ds/{BRACE}"
    with stoker.ImageLoader(url, pipeline=pipeline, **OPTS) as ld:
        assert ld.source_kind == "tar" and ld.num_samples == N
        assert ld.samples[0][0].startswith(f"{dataset['http'].url}/ds/shard-000000.tar:")
        got = epoch(ld)
    assert_same(got, local_epoch(dataset, pipeline=pipeline), f"http {pipeline}")


def test_s3_brace_range_equals_local(dataset, s3env):
    with stoker.ImageLoader(f"s3://stoker/ds/{BRACE}", pipeline="train", **OPTS) as ld:
        got = epoch(ld)
    assert_same(got, local_epoch(dataset, pipeline="train"), "s3 brace range")


@pytest.mark.parametrize("scheme", ["http", "s3"])
@pytest.mark.parametrize("pipeline", ["eval", "train"])
def test_list_file_of_urls_equals_local(dataset, s3env, tmp_path, scheme, pipeline):
    base = f"{dataset['http'].url}/imgs/" if scheme == "http" else "s3://stoker/imgs/"
    remote_list = tmp_path / "urls.txt"
    remote_list.write_text("# images by URL\n" + "".join(f"{base}{p} {lab}\n" for p, lab in dataset["lines"]))
    with stoker.ImageLoader(list_file=dataset["list"], pipeline=pipeline, **OPTS) as ld:
        want = epoch(ld)
    with stoker.ImageLoader(list_file=str(remote_list), pipeline=pipeline, **OPTS) as ld:
        assert ld.source_kind == "list"
        assert ld.samples == [(base + p, lab) for p, lab in dataset["lines"]]
        got = epoch(ld)
    assert_same(got, want, f"{scheme} list {pipeline}")


def test_anonymous_read_of_public_bucket(dataset, s3env, monkeypatch):
    monkeypatch.delenv("AWS_ACCESS_KEY_ID")
    monkeypatch.delenv("AWS_SECRET_ACCESS_KEY")
    with stoker.ImageLoader("s3://public/ds/", pipeline="eval", **OPTS) as ld:
        got = epoch(ld)
    assert_same(got, local_epoch(dataset, pipeline="eval"), "anonymous")


def test_profile_from_aws_credentials_file(dataset, s3env, monkeypatch):
    monkeypatch.delenv("AWS_ACCESS_KEY_ID")
    monkeypatch.delenv("AWS_SECRET_ACCESS_KEY")
    monkeypatch.delenv("AWS_SHARED_CREDENTIALS_FILE")
    monkeypatch.delenv("AWS_CONFIG_FILE")
    aws = os.path.join(os.environ["HOME"], ".aws")
    os.makedirs(aws)
    with open(os.path.join(aws, "credentials"), "w") as f:
        f.write(f"[default]\naws_access_key_id = AKIAWRONGDEFAULT0000\naws_secret_access_key = nope\n\n"
                f"[stoker-test]\naws_access_key_id = {s3env.access_key}\n"
                f"aws_secret_access_key = {s3env.secret_key}\n")
    monkeypatch.setenv("AWS_PROFILE", "stoker-test")
    with stoker.ImageLoader("s3://stoker/ds/", pipeline="eval", **OPTS) as ld:
        got = epoch(ld)
    assert_same(got, local_epoch(dataset, pipeline="eval"), "profile")


def test_s3_endpoint_url_variable(dataset, s3env, monkeypatch):
    monkeypatch.delenv("AWS_ENDPOINT_URL")
    monkeypatch.setenv("S3_ENDPOINT_URL", s3env.endpoint)
    with stoker.ImageLoader("s3://stoker/ds/", pipeline="eval", **OPTS) as ld:
        assert ld.num_samples == N
        got = epoch(ld)
    assert_same(got, local_epoch(dataset, pipeline="eval"), "S3_ENDPOINT_URL")


# ---- ranks ----------------------------------------------------------------------------

@pytest.mark.parametrize("world_size", [2, 4, 5])
@pytest.mark.parametrize("url", ["s3://stoker/ds/", "http"])
def test_ranks_disjoint_cover_and_equal(dataset, s3env, world_size, url):
    if url == "http":
        url = f"{dataset['http'].url}/ds/{BRACE}"
    per_rank, lens = [], []
    for r in range(world_size):
        kw = dict(OPTS, pipeline="train", rank=r, world_size=world_size)
        with stoker.ImageLoader(url, **kw) as ld:
            lens.append(len(ld))
            got = epoch(ld)
        assert_same(got, local_epoch(dataset, pipeline="train", rank=r, world_size=world_size),
                    f"rank {r}/{world_size}")
        per_rank.append([i for _, _, idx in got for i in idx])
    per = -(-N // world_size)
    assert len(set(lens)) == 1 and lens[0] == -(-per // OPTS["batch_size"])
    assert all(len(x) == per for x in per_rank)
    every = [i for x in per_rank for i in x]
    assert set(every) == set(range(N))
    if per * world_size == N:
        assert sorted(every) == list(range(N))  # disjoint


def test_ranks_shard_drop_last(dataset, s3env):
    per_rank = []
    for r in range(5):
        with stoker.ImageLoader("s3://stoker/ds/", pipeline="eval", shuffle=True, shard_drop_last=True,
                                rank=r, world_size=5, **OPTS) as ld:
            per_rank.append([i for _, _, idx in epoch(ld) for i in idx])
    every = [i for x in per_rank for i in x]
    assert all(len(x) == N // 5 for x in per_rank)
    assert len(every) == len(set(every)) == (N // 5) * 5


# ---- resume ---------------------------------------------------------------------------

def test_resume_mid_epoch(dataset, s3env):
    kw = dict(OPTS, pipeline="train")
    with stoker.ImageLoader("s3://stoker/ds/", **kw) as ld:
        ld.set_epoch(1)
        full = epoch(ld)
    with stoker.ImageLoader("s3://stoker/ds/", **kw) as ld:
        ld.set_epoch(1)
        it = ld.iter_batches()
        head = [(b.images.clone(), b.labels.clone(), list(b.indices)) for _, b in zip(range(4), it)]
        state = ld.state_dict()
        del it
    assert state["epoch"] == 1 and state["batch"] == 4
    assert_same(head, full[:4], "before the cut")
    state = json.loads(json.dumps(state))  # plain data
    with stoker.ImageLoader("s3://stoker/ds/", **kw) as ld:
        ld.load_state_dict(state)
        ld.set_epoch(1)
        rest = epoch(ld)
    assert_same(rest, full[4:], "resumed")


# ---- stats ----------------------------------------------------------------------------

def test_stats_count_network(dataset, proxy):
    with stoker.ImageLoader("s3://stoker/ds/", pipeline="eval", **OPTS) as ld:
        got = epoch(ld)
        st = ld.stats()
    assert_same(got, local_epoch(dataset, pipeline="eval"), "through the proxy")
    assert st["remote_requests"] == proxy.requests > 0
    assert st["remote_retries"] == 0
    assert dataset["image_bytes"] <= st["remote_bytes"] <= proxy.body_bytes
    with stoker.ImageLoader(dataset["shards"], pipeline="eval", **OPTS) as ld:
        epoch(ld)
        st = ld.stats()
    assert st.get("remote_bytes", 0) == 0 and st.get("remote_requests", 0) == 0


# ---- faults -----------------------------------------------------------------------------

def run_through(proxy, dataset, url="s3://stoker/ds/", **kw):
    """An eval epoch through the proxy: (batches, stats, requests the proxy saw)."""
    proxy.reset_counts()
    with stoker.ImageLoader(url, **{**OPTS, "pipeline": "eval", **kw}) as ld:
        got = epoch(ld)
        st = ld.stats()
    return got, st, proxy.requests


def test_slowdown_is_retried(dataset, proxy):
    want = local_epoch(dataset, pipeline="eval")
    run_through(proxy, dataset)  # the shards' index is cached: the runs below read it
    got, st, clean = run_through(proxy, dataset)
    assert_same(got, want, "clean")
    proxy.fail_next(3)
    got, st, n = run_through(proxy, dataset)
    assert_same(got, want, "after 3 x 503")
    assert proxy.faults.get("status") == 3
    assert n >= clean + 3 and st["remote_retries"] >= 3


def test_slowdown_while_reading(dataset, proxy):
    """503s on the shards' bytes, after the listing. Armed before the open
    and for the shards alone: the loader starts reading at open, so a fault
    armed after it may find every byte already fetched."""
    want = local_epoch(dataset, pipeline="eval")
    proxy.reset_counts()
    proxy.fail_next(4, path="/ds/shard-")
    with stoker.ImageLoader("s3://stoker/ds/", pipeline="eval", **OPTS) as ld:
        got = epoch(ld)
        st = ld.stats()
    assert_same(got, want, "503 while reading")
    assert st["remote_retries"] >= proxy.faults.get("status", 0) >= 1


@pytest.mark.parametrize("fault", ["reset", "truncate"])
def test_broken_body_resumes(dataset, proxy, fault):
    want = local_epoch(dataset, pipeline="eval")
    _, _, clean = run_through(proxy, dataset)
    proxy.reset_counts()
    # armed before the open, for the shards' bytes (see test_slowdown_while_reading)
    getattr(proxy, f"{fault}_next")(2, after_bytes=700, path="/ds/shard-")
    with stoker.ImageLoader("s3://stoker/ds/", pipeline="eval", **OPTS) as ld:
        got = epoch(ld)
        st = ld.stats()
    assert_same(got, want, f"{fault} mid-body")
    assert proxy.faults.get(fault) == 2, proxy.log
    assert st["remote_retries"] >= 1


def no_secret_anywhere(secret, *where_files, extra=()):
    for text in extra:
        assert secret not in text
    for top in where_files:
        for p in glob.glob(os.path.join(top, "**"), recursive=True):
            if os.path.isfile(p) and not os.path.islink(p):
                with open(p, "rb") as f:
                    assert secret.encode() not in f.read(), f"the secret key is written in {p}"


def check_refusal(e, secs, status, url_part, secret):
    assert e is not None, "no error"
    assert isinstance(e, OSError), repr(e)
    msg = str(e)
    assert str(status) in msg and url_part in msg, msg
    assert secret not in msg and secret not in repr(e.args)
    assert secs < 10, f"took {secs:.1f} s: a {status} must not be retried"
    return msg


def test_wrong_secret_is_403_at_once(dataset, s3env, monkeypatch, tmp_path):
    wrong = "wrongSecret/Zq8+tT5yUuV6wW7xX8yY9zZ0aA1bB2c"
    monkeypatch.setenv("AWS_SECRET_ACCESS_KEY", wrong)
    e, secs = timed(lambda: open_and_read("s3://stoker/ds/", index_dir=str(tmp_path / "idx")))
    msg = check_refusal(e, secs, 403, "s3://stoker/ds", wrong)
    assert "AWS_" in msg, msg  # the hint: which credentials to check
    no_secret_anywhere(wrong, str(tmp_path))


def test_spoiled_signature_midway_is_403(dataset, proxy, tmp_path):
    """The listing is signed well, every read of the shards' bytes badly
    (armed before the open: the loader reads from the open on, so a fault
    armed after it may find every byte already fetched)."""
    secret = servers.SECRET_KEY
    texts = []

    def run():
        with stoker.ImageLoader("s3://stoker/ds/", pipeline="eval",
                                index_dir=str(tmp_path / "idx"), **OPTS) as ld:
            try:
                epoch(ld)
            finally:
                texts.extend([repr(ld.stats()), ld.note, repr(ld.samples)])

    proxy.spoil_auth_next(10000, path="/ds/shard-")
    e, secs = timed(run)
    msg = check_refusal(e, secs, 403, "s3://stoker/ds/shard-", secret)
    assert "AWS_" in msg, msg
    no_secret_anywhere(secret, str(tmp_path), extra=texts)


def test_missing_key_is_404_at_once(dataset, s3env, tmp_path):
    url = "s3://stoker/ds/shard-{000000..%06d}.tar" % N_SHARDS  # one past the last
    e, secs = timed(lambda: open_and_read(url))
    check_refusal(e, secs, 404, "s3://stoker/ds/shard-%06d.tar" % N_SHARDS, servers.SECRET_KEY)
    e, secs = timed(lambda: open_and_read(f"{dataset['http'].url}/ds/shard-{{000000..{N_SHARDS:06d}}}.tar"))
    check_refusal(e, secs, 404, f"{dataset['http'].url}/ds/shard-{N_SHARDS:06d}.tar", servers.SECRET_KEY)


def test_missing_bucket_or_empty_prefix(dataset, s3env):
    e, secs = timed(lambda: open_and_read("s3://no-such-bucket/ds/"))
    assert isinstance(e, OSError) and "no-such-bucket" in str(e) and secs < 10, repr(e)
    e, secs = timed(lambda: open_and_read("s3://stoker/nothing-here/"))
    assert isinstance(e, OSError) and "s3://stoker/nothing-here/" in str(e) and secs < 10, repr(e)


def test_stalled_body_fails_after_read_timeout(dataset, proxy):
    # armed before the open, for the shards' bytes (see test_slowdown_while_reading)
    def run():
        with stoker.ImageLoader("s3://stoker/ds/", pipeline="eval", read_timeout=1, **OPTS) as ld:
            epoch(ld)

    proxy.stall_next(10000, after_bytes=100, seconds=120, path="/ds/shard-")
    e, secs = timed(run)
    assert isinstance(e, OSError), repr(e)
    assert "timed out" in str(e) and "s3://stoker/ds/shard-" in str(e), str(e)
    # each try ends after read_timeout; with the client's retries and their waits, well within 60 s
    assert secs < 60, secs


def test_close_during_transfer_returns_within_1s(dataset, proxy):
    """The stall is armed before the open, for the shards' reads after the
    scan's one per shard: the loader reads ahead from the open on, so a fault
    armed after it may find every byte already fetched. remote_memory below
    one shard: the scan's bytes cannot serve the epoch, which fetches its
    own."""
    proxy.reset_counts()
    proxy.stall_next(10000, after_bytes=100, seconds=120, path="/ds/shard-", skip=N_SHARDS)
    ld = stoker.ImageLoader("s3://stoker/ds/", pipeline="eval", read_timeout=0,
                            remote_memory=4096, **OPTS)
    scans = [e for e in proxy.log if e[0] == "GET" and "/ds/shard-" in e[1]]
    assert len(scans) == N_SHARDS and proxy.faults.get("stall", 0) == 0, proxy.log
    done = threading.Event()

    def consume():
        try:
            for _ in ld.iter_batches():
                pass
        except Exception:  # noqa: BLE001 - closed under it: any error is fine here
            pass
        finally:
            done.set()

    t = threading.Thread(target=consume, daemon=True)
    t.start()
    servers.wait_for(lambda: proxy.stalled_now >= 1, 30, "a transfer in flight")
    t0 = time.monotonic()
    ld.close()
    secs = time.monotonic() - t0
    assert secs < 1.0, f"close() took {secs:.2f} s during a transfer"
    assert done.wait(10), "the consumer did not return after close()"


# ---- two nodes under torchrun -------------------------------------------------------------

WORKER = """
import json, sys
import torch.distributed as dist
import stoker

dist.init_process_group("gloo")
rank, world = dist.get_rank(), dist.get_world_size()
loader = stoker.ImageLoader(sys.argv[2], batch_size=4, pipeline="eval", shuffle=True, size=32,
                            threads=1, seed=0, stream_first_epoch=False)
out = {"rank": rank, "world_size": world, "len": len(loader), "epochs": []}
for e in range(2):
    loader.set_epoch(e)
    out["epochs"].append([[int(i) for i in b.indices] for b in loader.iter_batches()])
loader.close()
dist.barrier()
with open(f"{sys.argv[1]}.rank{rank}", "w") as f:
    json.dump(out, f)
dist.destroy_process_group()
"""


@pytest.mark.slow
def test_two_nodes_torchrun(dataset, s3env, tmp_path):
    worker = tmp_path / "worker.py"
    worker.write_text(WORKER)
    out = str(tmp_path / "out")
    port = servers.free_ports(1)[0]
    env = dict(os.environ)
    # the stoker this test imported (the in-tree build, or another on PYTHONPATH)
    here = os.path.dirname(os.path.dirname(os.path.abspath(stoker.__file__)))
    env["PYTHONPATH"] = os.pathsep.join(p for p in (here, PKG_ROOT, env.get("PYTHONPATH")) if p)
    for k in ("WORLD_SIZE", "RANK", "LOCAL_RANK", "LOCAL_WORLD_SIZE", "MASTER_ADDR", "MASTER_PORT",
              "GROUP_RANK", "ROLE_RANK", "TORCHELASTIC_RUN_ID"):
        env.pop(k, None)
    env["GLOO_SOCKET_IFNAME"] = "lo"
    extra = []
    if torch.__version__.startswith("1.") and sys.version_info >= (3, 11):
        extra = ["--redirects", "2", "--tee", "2"]  # as in test_ddp.py
    procs = []
    for node in (0, 1):
        cmd = [sys.executable, "-m", "torch.distributed.run", "--nnodes", "2", "--node_rank", str(node),
               "--nproc_per_node", "1", "--master_addr", "127.0.0.1", "--master_port", str(port),
               "--max_restarts", "0", *extra, str(worker), out, "s3://stoker/ds/"]
        procs.append(subprocess.Popen(cmd, cwd=str(tmp_path), env=env, stdout=subprocess.PIPE,
                                      stderr=subprocess.STDOUT, text=True))
    logs = []
    try:
        for p in procs:
            logs.append(p.communicate(timeout=300)[0])
    finally:
        for p in procs:
            if p.poll() is None:
                p.kill()
                p.wait(timeout=30)
    assert all(p.returncode == 0 for p in procs), "\n".join(x[-3000:] for x in logs)
    ranks = []
    for r in (0, 1):
        with open(f"{out}.rank{r}") as f:
            ranks.append(json.load(f))
    assert [x["world_size"] for x in ranks] == [2, 2]
    assert ranks[0]["len"] == ranks[1]["len"] == -(-(N // 2) // 4)
    for e in range(2):
        b0, b1 = ranks[0]["epochs"][e], ranks[1]["epochs"][e]
        assert len(b0) == len(b1) == ranks[0]["len"], f"epoch {e}: batch counts {len(b0)}, {len(b1)}"
        every = [i for b in b0 + b1 for i in b]
        assert sorted(every) == list(range(N)), f"epoch {e}: each sample once across the ranks"
    assert ranks[0]["epochs"][0] != ranks[0]["epochs"][1]  # a new shuffle each epoch


# ---- the index cache of remote shards ----------------------------------------------------

def open_stats(url, **kw):
    """The network's counters after one epoch, and the epoch."""
    with stoker.ImageLoader(url, pipeline="eval", prefetch=1, **{**OPTS, **kw}) as ld:
        got = epoch(ld)
        st = ld.stats()
    return st, got


def test_second_open_reads_the_index_not_the_shards(dataset, s3env, tmp_path):
    want = local_epoch(dataset, pipeline="eval")
    shard_bytes = sum(os.path.getsize(p) for p in glob.glob(os.path.join(dataset["shards"], "*.tar")))
    idx = str(tmp_path / "idx")
    # remote_memory below one shard: the scan's bytes cannot serve the epoch
    # (test_open_scan_bytes_serve_the_first_epoch), so the scan's cost shows
    tiny = 4096
    first, got = open_stats("s3://stoker/ds/", index_dir=idx, remote_memory=tiny)
    assert_same(got, want, "first open")
    # the first open scans every shard, and the epoch reads them again
    assert first["remote_bytes"] >= 2 * shard_bytes
    assert len(glob.glob(os.path.join(idx, "shard-*.stkidx"))) == N_SHARDS
    second, got = open_stats("s3://stoker/ds/", index_dir=idx, remote_memory=tiny)
    assert_same(got, want, "second open")
    # the second open reads the local index instead: the scan's bytes are not sent again
    assert second["remote_bytes"] <= first["remote_bytes"] - shard_bytes // 2, (first, second)


def test_index_of_a_changed_shard_is_not_used(dataset, s3env, tmp_path):
    """A shard rewritten under the same name has another ETag: it is scanned again,
    and the epoch has its new samples."""
    idx = str(tmp_path / "idx")
    s3env.put(s3env.bucket, "chg/shard-000000.tar", os.path.join(dataset["shards"], "shard-000000.tar"))
    st, got = open_stats("s3://stoker/chg/", index_dir=idx)
    assert sum(len(b[1]) for b in got) == SHARD_SIZES[0]
    s3env.put(s3env.bucket, "chg/shard-000000.tar", os.path.join(dataset["shards"], "shard-000002.tar"))
    st, got = open_stats("s3://stoker/chg/", index_dir=idx)
    assert sum(len(b[1]) for b in got) == SHARD_SIZES[2]
    assert len(glob.glob(os.path.join(idx, "shard-*.stkidx"))) == 2


def test_corrupt_index_is_scanned_again(dataset, s3env, tmp_path):
    want = local_epoch(dataset, pipeline="eval")
    idx = str(tmp_path / "idx")
    open_stats("s3://stoker/ds/", index_dir=idx)
    files = sorted(glob.glob(os.path.join(idx, "shard-*.stkidx")))
    with open(files[0], "r+b") as f:  # one flipped byte inside the body
        f.seek(40)
        b = f.read(1)
        f.seek(40)
        f.write(bytes([b[0] ^ 0xFF]))
    with open(files[1], "r+b") as f:  # one cut short
        f.truncate(30)
    st, got = open_stats("s3://stoker/ds/", index_dir=idx)
    assert_same(got, want, "with two damaged index files")


# ---- local copies of remote shards (cache_dir) --------------------------------------------

def shard_files(d):
    return sorted(glob.glob(os.path.join(d, "shard-*.tar")))


def wait_copies(d, timeout=30):
    """Until no copy is under way: a read waits only for its own bytes, so a
    shard's download can still be fetching its tail (end blocks, padding)
    when the epoch ends, and closing the loader discards a copy under way."""
    deadline = time.monotonic() + timeout
    while glob.glob(os.path.join(d, "*.partial")) and time.monotonic() < deadline:
        time.sleep(0.05)


def test_cache_dir_second_epoch_reads_local_copies(dataset, s3env, tmp_path):
    cd = str(tmp_path / "copies")
    want = [local_epoch(dataset, pipeline="train")]
    with stoker.ImageLoader(dataset["shards"], pipeline="train", **OPTS) as ld:
        ld.set_epoch(1)
        want.append(epoch(ld))
    with stoker.ImageLoader("s3://stoker/ds/", pipeline="train", cache_dir=cd, **OPTS) as ld:
        got = [epoch(ld)]
        wait_copies(cd)
        first = ld.stats()
        ld.set_epoch(1)
        got.append(epoch(ld))
        second = ld.stats()
    assert_same(got[0], want[0], "epoch 0 with cache_dir")
    assert_same(got[1], want[1], "epoch 1 from the copies")
    copies = shard_files(cd)
    assert len(copies) == N_SHARDS
    assert not glob.glob(os.path.join(cd, "*.partial"))
    local = sorted(open(p, "rb").read() for p in glob.glob(os.path.join(dataset["shards"], "*.tar")))
    assert sorted(open(p, "rb").read() for p in copies) == local
    # the second epoch came from local disk: no byte of it from the network
    assert second["remote_bytes"] == first["remote_bytes"]
    assert second["remote_cache_bytes"] > first["remote_cache_bytes"] > 0


def test_cache_dir_shared_by_two_loaders(dataset, s3env, tmp_path):
    """Two loaders (the ranks of a node) on one cache_dir at once: both epochs
    right, one complete copy per shard, nothing partial left."""
    cd = str(tmp_path / "copies")
    want = {r: local_epoch(dataset, pipeline="eval", rank=r, world_size=2) for r in (0, 1)}
    got, errors = {}, []

    def rank(r):
        try:
            with stoker.ImageLoader("s3://stoker/ds/", pipeline="eval", rank=r, world_size=2,
                                    cache_dir=cd, **OPTS) as ld:
                got[r] = epoch(ld)
                wait_copies(cd)
        except Exception as e:  # noqa: BLE001 - reported below
            errors.append(e)

    ts = [threading.Thread(target=rank, args=(r,)) for r in (0, 1)]
    for t in ts:
        t.start()
    for t in ts:
        t.join(120)
    assert not errors, errors
    for r in (0, 1):
        assert_same(got[r], want[r], f"rank {r}")
    assert len(shard_files(cd)) <= N_SHARDS
    assert not glob.glob(os.path.join(cd, "*.partial"))
    local = {open(p, "rb").read() for p in glob.glob(os.path.join(dataset["shards"], "*.tar"))}
    assert all(open(p, "rb").read() in local for p in shard_files(cd))


def test_cache_bytes_bounds_the_copies(dataset, s3env, tmp_path):
    cd = str(tmp_path / "copies")
    sizes = sorted(os.path.getsize(p) for p in glob.glob(os.path.join(dataset["shards"], "*.tar")))
    bound = sizes[-1] + sizes[-2]  # room for two shards at most
    with stoker.ImageLoader("s3://stoker/ds/", pipeline="eval", cache_dir=cd, cache_bytes=bound,
                            **OPTS) as ld:
        got = epoch(ld)
        wait_copies(cd)
    assert_same(got, local_epoch(dataset, pipeline="eval"), "with a small cache_bytes")
    assert sum(os.path.getsize(p) for p in shard_files(cd)) <= bound
    assert 1 <= len(shard_files(cd)) < N_SHARDS


# ---- the store of parts: requests and memory ------------------------------------------------

def test_epoch_reads_shards_in_parts_not_per_sample(dataset, s3env, tmp_path):
    """A shuffled epoch asks for each (small) shard once, as one part, not one
    GET per sample: with the index cached, the epoch's requests are the listing
    and a part per shard."""
    idx = str(tmp_path / "idx")
    kw = dict(OPTS, pipeline="train", index_dir=idx, prefetch=1)
    with stoker.ImageLoader("s3://stoker/ds/", **kw) as ld:
        epoch(ld)
    with stoker.ImageLoader("s3://stoker/ds/", **kw) as ld:
        got = epoch(ld)
        st = ld.stats()
    assert sum(len(b[1]) for b in got) == N
    # 1 listing + 1 part per shard; the next epoch's first batches may start early
    assert st["remote_requests"] <= 1 + 2 * N_SHARDS, st
    assert st["remote_requests"] < N // 2


def test_open_scan_bytes_serve_the_first_epoch(dataset, s3env, tmp_path):
    """Shards without an index are read whole at open (the exact open); while
    remote_memory has room, the bytes the scan read serve the first epoch's
    sample reads: each shard is fetched once, not twice."""
    total = sum(os.path.getsize(p) for p in glob.glob(os.path.join(dataset["shards"], "*.tar")))
    with stoker.ImageLoader("s3://stoker/ds/", pipeline="train", index_dir=str(tmp_path / "idx"),
                            **OPTS) as ld:
        opened = ld.stats()["remote_bytes"]
        got = epoch(ld)
        st = ld.stats()
    assert_same(got, local_epoch(dataset, pipeline="train"), "epoch 0 from the scan's bytes")
    assert opened >= total, (opened, total)  # the scan read every shard
    assert st["remote_bytes"] == opened, (st, opened)  # and the epoch fetched none again


def test_remote_memory_bounds_the_parts(dataset, s3env, tmp_path):
    """With remote_memory below one shard, the parts held stay within the bound
    plus what the started batches need, and the epoch is still exact."""
    shard_max = max(os.path.getsize(p) for p in glob.glob(os.path.join(dataset["shards"], "*.tar")))
    budget = 4096
    with stoker.ImageLoader("s3://stoker/ds/", pipeline="train", remote_memory=budget,
                            **OPTS) as ld:
        got = epoch(ld)
        st = ld.stats()
    assert_same(got, local_epoch(dataset, pipeline="train"), "with a tiny remote_memory")
    with stoker.ImageLoader("s3://stoker/ds/", pipeline="train", **OPTS) as ld:
        epoch(ld)
        roomy = ld.stats()
    # the default keeps every part of these small shards; the tiny bound lets
    # them go, and the shuffle buffer's late samples ask for their bytes again
    assert st["remote_requests"] > roomy["remote_requests"], (st, roomy)
    assert st["remote_part_peak"] < roomy["remote_part_peak"], (st, roomy)
    # the started batches (slots x batch) may each hold a part of a shard
    slots = st["slots"]
    assert st["remote_part_peak"] <= budget + slots * OPTS["batch_size"] * shard_max, st


# ---- writing to the store: stoker pack ... s3:// --tar -------------------------------------

def noise_folder(root, n=3, w=1600, h=1200):
    """An ImageFolder of incompressible PNGs (about 5.8 MB each): a shard of
    them is past the 16 MiB of one PUT."""
    import numpy as np
    from PIL import Image

    d = root / "noise" / "c0"
    d.mkdir(parents=True)
    rng = np.random.default_rng(7)
    for i in range(n):
        Image.fromarray(rng.integers(0, 256, (h, w, 3), dtype=np.uint8)).save(d / f"{i}.png")
    return str(root / "noise")


def test_pack_to_s3_multipart_equals_local(s3env, tmp_path):
    src = noise_folder(tmp_path)
    local = str(tmp_path / "local")
    stoker.pack(src, local, format="tar", shard_bytes=64 << 20)
    r = stoker.pack(src, "s3://stoker/packed/", format="tar", shard_bytes=64 << 20)
    assert r.packed == 3 and r.shards == 1
    names = sorted(os.listdir(local))
    assert s3env.list(s3env.bucket, "packed/") == [f"packed/{n}" for n in names]
    big = max(os.path.getsize(os.path.join(local, n)) for n in names)
    assert big > 16 << 20  # the shard went by multipart upload
    for n in names:
        assert s3env.get(s3env.bucket, f"packed/{n}") == open(os.path.join(local, n), "rb").read()
    assert not glob.glob(os.path.join(os.environ.get("TMPDIR", "/tmp"), "stoker-pack-*"))
    # the packed shards read back as the local ones, opened from the indexes
    # pack wrote beside them: the shards' bytes come over once (the epoch's
    # parts), not twice (a scan, then the parts)
    assert all(os.path.exists(os.path.join(local, n + ".stkidx")) for n in names
               if n.endswith(".tar"))
    kw = dict(OPTS, pipeline="eval")
    with stoker.ImageLoader("s3://stoker/packed/", **kw) as ld:
        got = epoch(ld)
        st = ld.stats()
    shard_bytes = sum(os.path.getsize(os.path.join(local, n)) for n in names if n.endswith(".tar"))
    assert st["remote_bytes"] < 1.5 * shard_bytes, (st["remote_bytes"], shard_bytes)
    with stoker.ImageLoader(local, **kw) as ld:
        assert_same(got, epoch(ld), "packed to s3")
    # a second pack into the same prefix is refused, as a folder that is not empty
    with pytest.raises(Exception, match="already holds"):
        stoker.pack(src, "s3://stoker/packed/", format="tar")


def test_failed_pack_to_s3_leaves_no_classes_txt(proxy, s3_server, tmp_path):
    """A pack whose upload fails (a refused PUT) raises naming the status, and
    leaves no classes.txt that would name the dataset complete."""
    src = noise_folder(tmp_path, n=2, w=400, h=300)
    proxy.spoil_auth_next(1, method="PUT")
    with pytest.raises(Exception, match="403"):
        stoker.pack(src, "s3://stoker/failed/", format="tar")
    assert not any(k.endswith("classes.txt") for k in s3_server.list(s3_server.bucket, "failed/"))


def multipart_uploads(srv, prefix):
    """The keys under prefix with a multipart upload begun and neither
    completed nor aborted (ListMultipartUploads)."""
    import xml.etree.ElementTree as ET

    st, _, body = srv.request("GET", f"/{srv.bucket}", query={"uploads": "", "prefix": prefix})
    assert st == 200, (st, body[:300])
    root = ET.fromstring(body)
    ns = root.tag.split("}")[0] + "}" if root.tag.startswith("{") else ""
    return [u.findtext(ns + "Key") for u in root.findall(ns + "Upload")]


def test_pack_to_s3_uploads_while_packing(s3env, tmp_path, monkeypatch):
    """The upload overlaps the pack: the first shard is on the store while the
    pack is still producing (the progress callback, on the pack's thread,
    waits for it), and the staging folder never holds more than the shard
    being written and two complete ones. The bytes are a local pack's."""
    src = noise_folder(tmp_path, n=320, w=200, h=150)  # about 90 KB each
    staging = tmp_path / "staging"
    staging.mkdir()
    monkeypatch.setenv("TMPDIR", str(staging))
    seen = {"found_at": None, "most_staged": 0, "calls": 0}

    def progress(done, total):
        seen["calls"] += 1
        staged = glob.glob(str(staging / "stoker-pack-*" / "*" / "shard-*.tar"))
        seen["most_staged"] = max(seen["most_staged"], len(staged))
        if seen["found_at"] is not None:
            return
        deadline = time.monotonic() + 30
        while time.monotonic() < deadline:
            if "early/shard-000000.tar" in s3env.list(s3env.bucket, "early/"):
                seen["found_at"] = (done, total)
                return
            time.sleep(0.05)

    shard = 1 << 20
    r = stoker.pack(src, "s3://stoker/early/", format="tar", shard_bytes=shard, progress=progress)
    assert r.shards >= 10, r.shards
    done, total = seen["found_at"]
    assert done < total, seen  # there before the last file was packed
    assert seen["most_staged"] <= 3, seen
    local = str(tmp_path / "local")
    stoker.pack(src, local, format="tar", shard_bytes=shard)
    names = sorted(os.listdir(local))
    assert s3env.list(s3env.bucket, "early/") == [f"early/{n}" for n in names]
    for n in names:
        assert s3env.get(s3env.bucket, f"early/{n}") == open(os.path.join(local, n), "rb").read()
    assert not os.listdir(staging)


def test_cancelled_pack_to_s3_aborts_its_uploads(s3env, tmp_path):
    """A pack cancelled while its shard's multipart upload is under way (an
    exception from progress) raises, aborts that upload and deletes the
    objects it had completed: the prefix is empty, as before the pack, and
    the same pack then runs."""
    src = noise_folder(tmp_path, n=6)  # about 35 MB: one shard, three parts

    def progress(done, total):
        if done == total:
            raise KeyboardInterrupt

    with pytest.raises(KeyboardInterrupt):
        stoker.pack(src, "s3://stoker/cancelled/", format="tar", shard_bytes=1 << 30,
                    progress=progress)
    assert s3env.list(s3env.bucket, "cancelled/") == []
    assert multipart_uploads(s3env, "cancelled/") == []
    r = stoker.pack(src, "s3://stoker/cancelled/", format="tar")
    assert r.packed == 6


def test_failed_part_names_the_object(proxy, s3_server, tmp_path):
    """A refused part fails the pack naming the object's URL (without the
    upload id or any secret), aborts the upload and leaves nothing."""
    src = noise_folder(tmp_path, n=4)  # one shard past 16 MiB: a multipart upload
    proxy.spoil_auth_next(1, method="PUT")
    with pytest.raises(Exception) as e:
        stoker.pack(src, "s3://stoker/refused/", format="tar")
    msg = str(e.value)
    assert "s3://stoker/refused/shard-000000.tar" in msg and "403" in msg, msg
    assert "uploadId" not in msg and s3_server.secret_key not in msg, msg
    assert s3_server.list(s3_server.bucket, "refused/") == []
    assert multipart_uploads(s3_server, "refused/") == []


def test_http_server_without_ranges(tmp_path):
    """A server that ignores Range (Python's own http.server answers 200 with
    the whole file): the bytes before the range asked for are dropped. A
    shard past one 8 MiB part is read at an offset that is not 0."""
    import functools
    import http.server

    src = noise_folder(tmp_path)
    local = tmp_path / "www" / "big"
    local.parent.mkdir()
    stoker.pack(src, str(local), format="tar", shard_bytes=64 << 20)
    for p in local.glob("*.stkidx"):  # the reader scans the shard itself
        p.unlink()
    assert os.path.getsize(local / "shard-000000.tar") > 8 << 20
    handler = functools.partial(http.server.SimpleHTTPRequestHandler,
                                directory=str(tmp_path / "www"))
    handler.func.log_message = lambda *a: None
    srv = http.server.ThreadingHTTPServer(("127.0.0.1", 0), handler)
    t = threading.Thread(target=srv.serve_forever, kwargs={"poll_interval": 0.1}, daemon=True)
    t.start()
    kw = dict(OPTS, pipeline="eval", index_dir=str(tmp_path / "idx"))
    try:
        url = f"http://127.0.0.1:{srv.server_address[1]}/big/shard-000000.tar"
        with stoker.ImageLoader(url, **kw) as ld:
            got = epoch(ld)
            assert ld.note == ""
        with stoker.ImageLoader(str(local), **kw) as ld:
            assert_same(got, epoch(ld), "from a server without ranges")
    finally:
        srv.shutdown()
        srv.server_close()

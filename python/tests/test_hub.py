"""The Hugging Face Hub and other HTTPS hosts: redirects, the bearer token, hf://.

Two real servers on this machine, each a distinct origin:

- a fake Hub at http://127.0.0.1:PORT_A, which follows the Hub's documented
  API: `GET /api/datasets/OWNER/NAME/tree/REVISION[/PATH]?recursive=true`
  answers JSON pages (`type`, `path`, `size`, `oid`, `lfs`) linked by
  `Link: <...>; rel="next"`; `GET|HEAD /datasets/OWNER/NAME/resolve/REVISION/PATH`
  answers 302 to the CDN with a pre-signed URL (`X-Amz-Signature` in the
  query), and `X-Linked-Size` / `X-Linked-Etag`, as the Hub does for LFS
  files; a gated repository answers 401 without the right token;
- a CDN at http://localhost:PORT_B (another host name, hence another
  origin), which serves byte ranges only with the signature in the query.

Both record every request's Authorization header. The tests assert that
redirects are followed, that the token reaches the Hub and never the CDN,
that the samples equal local disk's for the same arguments, and that neither
the token nor the signature appears in a message or a statistic.
"""
import hashlib
import http.server
import io
import json
import os
import socketserver
import tarfile
import threading
import urllib.parse

import pytest

from conftest import photo

torch = pytest.importorskip("torch")
stoker = pytest.importorskip("stoker")

SHARD_SIZES = (5, 3, 6, 4, 6)  # 24 samples
N = sum(SHARD_SIZES)
# epochs compared with local disk's from epoch 0 use the exact open (the
# streamed first epoch of shards without an index has its own test)
OPTS = dict(batch_size=4, size=32, threads=2, seed=0, stream_first_epoch=False)
OWNER, NAME = "someone", "photos"
TOKEN = "hf_stokerTestToken9f3KqZpW7vR2xYb4LmN8cD"
SIGNATURE = "stokerSignature0123456789abcdef0123456789abcdef"
PAGE = 2  # entries per tree page: the listing takes several pages


def jpeg_bytes(k):
    from PIL import Image

    b = io.BytesIO()
    Image.fromarray(photo(40 + k % 3 * 4, 36, 900 + k)).save(b, format="JPEG", quality=90)
    return b.getvalue()


def add_member(tf, name, data):
    ti = tarfile.TarInfo(name)
    ti.size = len(data)
    ti.mtime = 0
    tf.addfile(ti, io.BytesIO(data))


class _Server(socketserver.ThreadingMixIn, http.server.HTTPServer):
    daemon_threads = True
    allow_reuse_address = True

    def handle_error(self, request, client_address):
        pass  # a client that closed its keep-alive connection is no error here


class _Base(http.server.BaseHTTPRequestHandler):
    protocol_version = "HTTP/1.1"
    timeout = 30

    def log_message(self, *args):
        pass

    def do_GET(self):
        self._record()
        self.handle_request(head=False)

    def do_HEAD(self):
        self._record()
        self.handle_request(head=True)

    def _record(self):
        st = self.server.state
        with st["lock"]:
            st["log"].append((self.command, self.path, self.headers.get("Authorization")))

    def reply(self, status, body=b"", headers=None, head=False):
        self.send_response(status)
        for k, v in (headers or {}).items():
            self.send_header(k, v)
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        if not head:
            self.wfile.write(body)


class _Cdn(_Base):
    """The files of the repository by their path, ranges and all, only with
    the signature in the query (as a pre-signed S3 or CloudFront URL)."""

    def handle_request(self, head):
        st = self.server.state
        u = urllib.parse.urlsplit(self.path)
        q = urllib.parse.parse_qs(u.query)
        # the Hub signs with its current generation: one bumped makes the
        # targets it gave before expire
        if q.get("X-Amz-Signature") != [f"{SIGNATURE}{st['gen']}"] or self.command != "GET":
            # a pre-signed URL is signed for GET: a HEAD is refused
            return self.reply(403, b"<Error><Code>AccessDenied</Code></Error>", head=head)
        rel = urllib.parse.unquote(u.path)[len("/cdn/"):]
        data = st["files"].get(rel)
        if data is None or rel in st.get("expired", ()):
            return self.reply(403 if data is not None else 404, b"<Error/>", head=head)
        start, end, status = 0, len(data) - 1, 200
        rng = self.headers.get("Range")
        if rng:
            a, b = rng[len("bytes="):].split("-")
            start = int(a)
            end = min(int(b), len(data) - 1) if b else len(data) - 1
            status = 206
        hdrs = {"Content-Type": "application/octet-stream", "ETag": '"cdn-%d"' % len(data)}
        if status == 206:
            hdrs["Content-Range"] = f"bytes {start}-{end}/{len(data)}"
        self.reply(status, data[start:end + 1], hdrs, head)


class _Hub(_Base):
    """The Hub's tree API and resolve URLs, for one dataset repository."""

    def authorized(self):
        st = self.server.state
        return not st["gated"] or self.headers.get("Authorization") == f"Bearer {TOKEN}"

    def handle_request(self, head):
        st = self.server.state
        u = urllib.parse.urlsplit(self.path)
        parts = u.path.split("/")
        if not self.authorized():
            return self.reply(401, b'{"error": "Access to this dataset is restricted"}', head=head)
        if u.path.startswith("/old/"):  # a same-origin redirect first (a renamed repository)
            return self.reply(301, b"", {"Location": u.path[len("/old"):]}, head)
        repo = f"/{OWNER}/{NAME}/"
        if u.path.startswith(f"/api/datasets{repo}tree/"):
            rest = u.path[len(f"/api/datasets{repo}tree/"):]
            return self.tree(rest, urllib.parse.parse_qs(u.query), head)
        if u.path.startswith(f"/datasets{repo}resolve/"):
            rev, _, path = u.path[len(f"/datasets{repo}resolve/"):].partition("/")
            return self.resolve(urllib.parse.unquote(rev), urllib.parse.unquote(path), head)
        self.reply(404, b'{"error": "Repository not found"}', head=head)

    def tree(self, rest, query, head):
        st = self.server.state
        rev, _, path = rest.partition("/")
        rev, path = urllib.parse.unquote(rev), urllib.parse.unquote(path)
        with st["lock"]:
            st["revisions"].append(rev)
        if query.get("recursive") != ["true"]:
            return self.reply(400, b'{"error": "this test lists recursively"}', head=head)
        entries = []
        dirs = set()
        for p in sorted(st["files"]):
            if path and not p.startswith(path + "/"):
                continue
            d = p.rsplit("/", 1)[0] if "/" in p else ""
            if d and d not in dirs:
                dirs.add(d)
                entries.append({"type": "directory", "oid": "0" * 40, "size": 0, "path": d})
            data = st["files"][p]
            e = {"type": "file", "oid": hashlib.sha1(data).hexdigest(), "size": len(data),
                 "path": p, "xetHash": None}
            if p.endswith(".tar"):
                e["lfs"] = {"oid": hashlib.sha256(data).hexdigest(), "size": len(data),
                            "pointerSize": 134}
            entries.append(e)
        cursor = int(query.get("cursor", ["0"])[0])
        page = entries[cursor:cursor + PAGE]
        hdrs = {"Content-Type": "application/json"}
        if cursor + PAGE < len(entries):
            nq = urllib.parse.urlencode({"recursive": "true", "expand": "false",
                                         "cursor": cursor + PAGE})
            nxt = f"http://127.0.0.1:{self.server.server_address[1]}{urllib.parse.urlsplit(self.path).path}?{nq}"
            hdrs["Link"] = f'<{nxt}>; rel="next"'
        self.reply(200, json.dumps(page).encode(), hdrs, head)

    def resolve(self, rev, path, head):
        st = self.server.state
        with st["lock"]:
            st["revisions"].append(rev)
        data = st["files"].get(path)
        if data is None:
            return self.reply(404, b'{"error": "Entry not found"}', {"X-Error-Code": "EntryNotFound"},
                              head)
        if path in st.get("loops", ()):
            return self.reply(302, b"", {"Location": self.path}, head)
        sha = hashlib.sha256(data).hexdigest()
        cdn = (f"http://localhost:{st['cdn_port']}/cdn/{urllib.parse.quote(path)}"
               f"?X-Amz-Algorithm=AWS4-HMAC-SHA256&X-Amz-Expires=3600&X-Amz-Signature={SIGNATURE}{st['gen']}")
        self.reply(302, b"", {"Location": cdn, "X-Linked-Size": str(len(data)),
                              "X-Linked-Etag": f'"{sha}"', "ETag": f'"{sha}"'}, head)


def start(handler, state, host):
    srv = _Server((host, 0), handler)
    srv.state = state
    t = threading.Thread(target=srv.serve_forever, kwargs={"poll_interval": 0.1}, daemon=True)
    t.start()
    return srv


@pytest.fixture(scope="module")
def hub(tmp_path_factory):
    """The shards on local disk, and the fake Hub and CDN serving them."""
    root = tmp_path_factory.mktemp("hub")
    local = root / "ds"
    local.mkdir()
    files = {}
    k = 0
    for s, n in enumerate(SHARD_SIZES):
        p = local / f"shard-{s:06d}.tar"
        with tarfile.open(p, "w", format=tarfile.USTAR_FORMAT) as tf:
            for _ in range(n):
                add_member(tf, f"{k:08d}.jpg", jpeg_bytes(k))
                add_member(tf, f"{k:08d}.cls", str(k % 3).encode())
                k += 1
        files[f"ds/{p.name}"] = p.read_bytes()
    files["README.md"] = b"# photos\n"
    for i in range(6):  # single images, for a list file of hf:// URLs
        files[f"img/{i:02d}.jpg"] = jpeg_bytes(50 + i)
        (root / f"{i:02d}.jpg").write_bytes(files[f"img/{i:02d}.jpg"])
    files["other/shard-000000.tar"] = files["ds/shard-000000.tar"]  # not under ds/
    state = dict(lock=threading.Lock(), log=[], files=files, gated=False, revisions=[], gen=0)
    cdn = start(_Cdn, state, "127.0.0.1")
    state["cdn_port"] = cdn.server_address[1]
    hub_srv = start(_Hub, state, "127.0.0.1")
    state["hub_port"] = hub_srv.server_address[1]
    try:
        yield dict(local=str(local), root=root, state=state, endpoint=f"http://127.0.0.1:{state['hub_port']}")
    finally:
        for s in (hub_srv, cdn):
            s.shutdown()
            s.server_close()


@pytest.fixture()
def env(hub, monkeypatch, tmp_path):
    """HF_ENDPOINT at the fake Hub, HF_TOKEN set, nothing of this machine's."""
    for k in ("HF_TOKEN", "HUGGING_FACE_HUB_TOKEN", "HF_TOKEN_PATH", "HF_HUB_OFFLINE",
              "HF_HUB_DISABLE_IMPLICIT_TOKEN", "HF_HOME"):
        monkeypatch.delenv(k, raising=False)
    monkeypatch.setenv("HOME", str(tmp_path))
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path / "cache"))
    monkeypatch.setenv("HF_ENDPOINT", hub["endpoint"] + "/")  # a trailing '/' is dropped
    monkeypatch.setenv("HF_TOKEN", TOKEN)
    st = hub["state"]
    with st["lock"]:
        st["log"].clear()
        st["revisions"].clear()
        st["gated"] = False
        st["expired"] = set()
        st["loops"] = set()
        st["gen"] += 1
    return hub


def epoch(loader):
    return [(b.images.clone(), b.labels.clone(), list(b.indices)) for b in loader.iter_batches()]


def assert_same(a, b, what=""):
    assert len(a) == len(b), f"{what}: {len(a)} batches against {len(b)}"
    for i, ((xa, ya, ia), (xb, yb, ib)) in enumerate(zip(a, b)):
        assert ia == ib, f"{what}: batch {i}: indices"
        assert torch.equal(ya, yb), f"{what}: batch {i}: labels"
        assert torch.equal(xa, xb), f"{what}: batch {i}: images differ"


def local_epoch(hub, **kw):
    with stoker.ImageLoader(hub["local"], **{**OPTS, **kw}) as ld:
        return epoch(ld)


def requests_to(hub, port_key):
    """(method, path, Authorization) of the requests the server on that port saw."""
    st = hub["state"]
    with st["lock"]:
        log = list(st["log"])
    # both servers share the log: the CDN's paths start with /cdn/
    cdn = port_key == "cdn_port"
    return [r for r in log if r[1].startswith("/cdn/") == cdn]


def assert_token_only_at_hub(hub):
    at_hub, at_cdn = requests_to(hub, "hub_port"), requests_to(hub, "cdn_port")
    assert at_hub and at_cdn, "both servers should have been asked"
    assert all(a == f"Bearer {TOKEN}" for _, _, a in at_hub), at_hub
    assert all(a is None for _, _, a in at_cdn), "the token went past a cross-host redirect"


def assert_no_secret(*texts):
    for t in texts:
        s = str(t)
        assert TOKEN not in s and SIGNATURE not in s, s


# ---- hf:// names ------------------------------------------------------------------------

@pytest.mark.parametrize("pipeline", ["eval", "train"])
def test_hf_folder_equals_local(env, pipeline):
    """A folder listed by the tree API, page after page; every shard read
    through the Hub's redirect to the CDN; the token at the Hub only."""
    url = f"hf://datasets/{OWNER}/{NAME}/ds"
    with stoker.ImageLoader(url, pipeline=pipeline, **OPTS) as ld:
        assert ld.source_kind == "tar" and ld.num_samples == N
        assert ld.samples[0][0].startswith(f"{url}/shard-000000.tar:")
        got = epoch(ld)
        st = ld.stats()
        samples = list(ld.samples)
    assert_same(got, local_epoch(env, pipeline=pipeline), f"hf {pipeline}")
    assert_token_only_at_hub(env)
    tree = [p for _, p, _ in requests_to(env, "hub_port") if p.startswith("/api/")]
    assert len(tree) >= 3, f"the listing should take several pages: {tree}"
    assert any("cursor=" in p for p in tree)
    assert not any("other/" in s for s, _ in samples)
    assert st["remote_failures"] == 0
    assert_no_secret(st, samples)


def test_hf_streamed_first_epoch(env, tmp_path):
    """The default open (shards without an index stream their first epoch)
    reads every sample once through the redirects, the token at the Hub only."""
    opts = {**OPTS, "stream_first_epoch": True}
    with stoker.ImageLoader(f"hf://datasets/{OWNER}/{NAME}/ds", pipeline="eval",
                            index_dir=str(tmp_path / "idx"), **opts) as ld:
        labels = [int(y) for _, ys, _ in epoch(ld) for y in ys]
        st = ld.stats()
        estimate = ld.num_samples
    # len() is estimated from shard 0 (docs/remote.md): the epoch has that
    # many samples, each of the dataset's, none twice past what the
    # estimate holds over
    assert len(labels) == estimate and abs(estimate - N) <= 2
    from collections import Counter
    assert not Counter(labels) - Counter(k % 3 for k in range(N))
    assert st["remote_failures"] == 0
    assert_token_only_at_hub(env)
    assert_no_secret(st)


def test_hf_revision_and_brace_range(env):
    """@REVISION as HfFileSystem writes it (refs/pr/1 %-encoded) reaches the
    Hub decoded; a brace range is HEADed at the Hub, answered by
    X-Linked-Size without a HEAD at the CDN (which refuses it)."""
    url = f"hf://datasets/{OWNER}/{NAME}@refs%2Fpr%2F1/ds/shard-{{000000..000004}}.tar"
    with stoker.ImageLoader(url, pipeline="eval", **OPTS) as ld:
        got = epoch(ld)
    assert_same(got, local_epoch(env, pipeline="eval"), "hf brace range")
    assert set(env["state"]["revisions"]) == {"refs/pr/1"}
    assert not any(m == "HEAD" for m, _, _ in requests_to(env, "cdn_port"))
    assert_token_only_at_hub(env)


def test_hf_unencoded_pr_revision_and_trailing_slash(env):
    url = f"hf://datasets/{OWNER}/{NAME}@refs/pr/7/ds/"
    with stoker.ImageLoader(url, pipeline="eval", **OPTS) as ld:
        assert ld.num_samples == N
    assert set(env["state"]["revisions"]) == {"refs/pr/7"}


def test_resolve_url_over_https_names_redirects(env):
    """The Hub's resolve URL written out (as a user copies it from the web
    page) works as well, a same-origin redirect first (the token kept), then
    the cross-host one (the token dropped)."""
    base = f"{env['endpoint']}/old/datasets/{OWNER}/{NAME}/resolve/main/ds"
    with stoker.ImageLoader(base + "/shard-{000000..000004}.tar", pipeline="eval", **OPTS) as ld:
        got = epoch(ld)
    assert_same(got, local_epoch(env, pipeline="eval"), "https resolve URLs")
    hub_paths = [(p, a) for _, p, a in requests_to(env, "hub_port")]
    assert any(p.startswith("/old/") for p, _ in hub_paths)
    assert any(p.startswith("/datasets/") for p, _ in hub_paths)
    assert_token_only_at_hub(env)


def test_token_never_sent_to_other_hosts(env, monkeypatch):
    """With HF_ENDPOINT elsewhere, the same server is just an HTTPS host:
    the token goes to none of its requests."""
    monkeypatch.setenv("HF_ENDPOINT", "https://hub.invalid")
    base = f"{env['endpoint']}/datasets/{OWNER}/{NAME}/resolve/main/ds"
    with stoker.ImageLoader(base + "/shard-{000000..000004}.tar", pipeline="eval", **OPTS) as ld:
        assert ld.num_samples == N
        epoch(ld)
    assert all(a is None for _, _, a in env["state"]["log"])


def test_token_from_the_login_file(env, monkeypatch, tmp_path):
    monkeypatch.delenv("HF_TOKEN")
    home = tmp_path / "hfhome"
    home.mkdir()
    (home / "token").write_text(TOKEN + "\n")
    monkeypatch.setenv("HF_HOME", str(home))
    env["state"]["gated"] = True
    with stoker.ImageLoader(f"hf://datasets/{OWNER}/{NAME}/ds", pipeline="eval", **OPTS) as ld:
        assert ld.num_samples == N
    assert_token_only_at_hub(env)


def test_legacy_token_variable(env, monkeypatch):
    monkeypatch.delenv("HF_TOKEN")
    monkeypatch.setenv("HUGGING_FACE_HUB_TOKEN", TOKEN)
    env["state"]["gated"] = True
    with stoker.ImageLoader(f"hf://datasets/{OWNER}/{NAME}/ds", pipeline="eval", **OPTS) as ld:
        assert ld.num_samples == N


def test_gated_without_token_says_so(env, monkeypatch):
    monkeypatch.delenv("HF_TOKEN")
    env["state"]["gated"] = True
    with pytest.raises(OSError) as e:
        stoker.ImageLoader(f"hf://datasets/{OWNER}/{NAME}/ds", **OPTS)
    m = str(e.value)
    assert "401" in m and "HF_TOKEN" in m and "no token was sent" in m, m
    assert f"hf://datasets/{OWNER}/{NAME}/ds" in m, m


def test_wrong_token_is_refused_and_not_shown(env, monkeypatch):
    monkeypatch.setenv("HF_TOKEN", "hf_wrongTokenXYZ123")
    env["state"]["gated"] = True
    with pytest.raises(OSError) as e:
        stoker.ImageLoader(f"hf://datasets/{OWNER}/{NAME}/ds", **OPTS)
    m = str(e.value)
    assert "401" in m and "a token was sent, from HF_TOKEN" in m, m
    assert "hf_wrongTokenXYZ123" not in m


def test_refused_target_is_named_without_its_signature(env):
    """A pre-signed target that refuses (expired): the message names the
    target without its query; skipped, the statistic does too."""
    env["state"]["expired"] = {"ds/shard-000002.tar"}
    url = f"hf://datasets/{OWNER}/{NAME}/ds"
    with pytest.raises(OSError) as e:
        with stoker.ImageLoader(url, pipeline="eval", **OPTS) as ld:
            epoch(ld)
    m = str(e.value)
    assert "403" in m and f"localhost:{env['state']['cdn_port']}/cdn/ds/shard-000002.tar" in m, m
    assert_no_secret(m)
    assert "X-Amz" not in m


def test_redirect_loop_ends(env):
    env["state"]["loops"] = {"ds/shard-000001.tar"}
    with pytest.raises(OSError) as e:
        stoker.ImageLoader(f"hf://datasets/{OWNER}/{NAME}/ds/shard-000001.tar", **OPTS)
    assert "too many redirects" in str(e.value), str(e.value)


def test_missing_file_and_bad_names(env):
    with pytest.raises(OSError) as e:
        stoker.ImageLoader(f"hf://datasets/{OWNER}/{NAME}/ds/shard-000099.tar", **OPTS)
    assert "404" in str(e.value)
    with pytest.raises((OSError, ValueError)) as e:
        stoker.ImageLoader("hf://datasets/no-owner-here", **OPTS)
    assert "hf://datasets/OWNER/NAME" in str(e.value), str(e.value)


def test_offline_is_honoured(env, monkeypatch):
    monkeypatch.setenv("HF_HUB_OFFLINE", "1")
    with pytest.raises(OSError) as e:
        stoker.ImageLoader(f"hf://datasets/{OWNER}/{NAME}/ds/shard-000000.tar", **OPTS)
    assert "HF_HUB_OFFLINE" in str(e.value)


def test_redirect_targets_remembered_then_walked_again(env, tmp_path):
    """A list file of hf:// URLs, two epochs: the second goes straight to the
    targets the first was sent to (one request each, not two); once they
    expire (the Hub's signing generation bumped), each is refused once and
    the chain walked again, with no failure."""
    names = [f"{i:02d}.jpg" for i in range(6)]
    remote = tmp_path / "remote.txt"
    remote.write_text("".join(f"hf://datasets/{OWNER}/{NAME}/img/{n} {i % 2}\n"
                              for i, n in enumerate(names)))
    local = tmp_path / "local.txt"
    local.write_text("".join(f"{env['root'] / n} {i % 2}\n" for i, n in enumerate(names)))
    opts = {**OPTS, "batch_size": 2}
    with stoker.ImageLoader(list_file=str(local), pipeline="eval", **opts) as ld:
        want = epoch(ld)

    def resolves():
        return sum(1 for _, p, _ in requests_to(env, "hub_port") if "/resolve/" in p)

    with stoker.ImageLoader(list_file=str(remote), pipeline="eval", **opts) as ld:
        assert_same(epoch(ld), want, "epoch 0")
        assert resolves() == len(names)
        assert_same(epoch(ld), want, "epoch 1")
        assert resolves() == len(names), "the second epoch walked the redirects again"
        # (the loader may plan a read of the next epoch ahead: at least two each)
        assert len(requests_to(env, "cdn_port")) >= 2 * len(names)
        with env["state"]["lock"]:
            env["state"]["gen"] += 1
        assert_same(epoch(ld), want, "epoch 2, targets expired")
        # (reads of this epoch planned during the last one were already sent)
        assert len(names) < resolves() <= 2 * len(names) + 2
        st = ld.stats()
    assert st["remote_failures"] == 0, st
    assert_token_only_at_hub(env)
    assert_no_secret(st)


def test_info_says_where_the_token_came_from(env):
    """`stoker info hf://...` names the token's source and where it goes,
    never the token; and nothing of a signature."""
    import subprocess

    from test_tar import stoker_cli

    cli = stoker_cli()
    if not cli:
        pytest.skip("no stoker command built")
    out = subprocess.run([cli, "info", f"hf://datasets/{OWNER}/{NAME}/ds"], capture_output=True,
                         text=True, timeout=120, env=dict(os.environ))
    assert out.returncode == 0, out.stderr
    # (the count is the streamed open's estimate: shards without an index)
    assert f"source: tar hf://datasets/{OWNER}/{NAME}/ds, " in out.stdout, out.stdout
    want = f"token: from HF_TOKEN, sent to {env['endpoint']} and https://huggingface.co only"
    assert want in out.stdout, out.stdout
    assert_no_secret(out.stdout, out.stderr)


def test_hf_local_copies_and_indexes_hold_no_secret(env, tmp_path):
    """cache_dir (local copies of the shards, fetched through the redirects)
    and index_dir: the second epoch comes from the copies, which equal the
    shards byte for byte; no file of either holds the token or a signature."""
    import glob
    import time

    cd, idx = str(tmp_path / "copies"), str(tmp_path / "idx")
    with stoker.ImageLoader(env["local"], pipeline="eval", **OPTS) as ld:
        want = [epoch(ld)]
        ld.set_epoch(1)
        want.append(epoch(ld))
    with stoker.ImageLoader(f"hf://datasets/{OWNER}/{NAME}/ds", pipeline="eval", cache_dir=cd,
                            index_dir=idx, **OPTS) as ld:
        got = [epoch(ld)]
        deadline = time.monotonic() + 30
        while glob.glob(os.path.join(cd, "*.partial")) and time.monotonic() < deadline:
            time.sleep(0.05)
        first = ld.stats()
        ld.set_epoch(1)
        got.append(epoch(ld))
        second = ld.stats()
    assert_same(got[0], want[0], "epoch 0 with cache_dir")
    assert_same(got[1], want[1], "epoch 1 from the copies")
    copies = sorted(glob.glob(os.path.join(cd, "shard-*.tar")))
    local = sorted(glob.glob(os.path.join(env["local"], "*.tar")))
    assert sorted(open(p, "rb").read() for p in copies) == sorted(open(p, "rb").read() for p in local)
    assert second["remote_cache_bytes"] > first["remote_cache_bytes"] > 0
    files = [p for d in (cd, idx) for p in glob.glob(os.path.join(d, "**"), recursive=True)
             if os.path.isfile(p)]
    assert files
    for p in files:
        data = open(p, "rb").read()
        assert TOKEN.encode() not in data and SIGNATURE.encode() not in data, p
    assert_token_only_at_hub(env)

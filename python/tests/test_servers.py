"""The servers of the remote-data tests (servers.py) work as those tests assume.

S3 (SeaweedFS) checks signatures and serves ranges, the anonymous bucket is
readable without credentials, boto3 and curl agree with the stdlib signer,
the HTTP file server answers ranges as RFC 9110 has it, and each fault of the
proxy does what it says and is counted. Nothing here needs stoker's remote
client.
"""
import os
import shutil
import socket
import subprocess
import sys
import textwrap
import time
import http.client

import pytest

import servers
from servers import FaultProxy, HTTPFileServer, S3Server, http_request

CURL = shutil.which("curl") or "/usr/bin/curl"


@pytest.fixture(scope="module")
def s3(s3_server):
    s3_server.put(s3_server.bucket, "srv/blob.bin", BLOB)
    s3_server.put(s3_server.public_bucket, "srv/blob.bin", BLOB)
    return s3_server


BLOB = bytes(range(256)) * 40  # 10240 bytes, each position recognisable mod 256


@pytest.fixture()
def http_files(tmp_path):
    (tmp_path / "d").mkdir()
    (tmp_path / "d" / "blob.bin").write_bytes(BLOB)
    srv = HTTPFileServer(str(tmp_path)).start()
    yield srv
    srv.stop()


def raw_get(port, path, timeout=10):
    """Everything a GET's connection delivers until it ends: (bytes, how it ended)."""
    s = socket.create_connection(("127.0.0.1", port), timeout=timeout)
    s.sendall(f"GET {path} HTTP/1.1\r\nHost: 127.0.0.1:{port}\r\nConnection: close\r\n\r\n".encode())
    data, how = b"", "eof"
    try:
        while True:
            d = s.recv(65536)
            if not d:
                break
            data += d
    except ConnectionResetError:
        how = "reset"
    finally:
        s.close()
    return data, how


# ---- S3 ----------------------------------------------------------------------------

def test_s3_signatures_buckets_and_ranges(s3):
    ep = s3.endpoint
    assert ep.startswith("http://127.0.0.1:")
    st, h, body = s3.request("GET", "/stoker/srv/blob.bin")
    assert (st, body) == (200, BLOB)
    assert h.get("etag")
    # unsigned, or signed with a wrong secret or an unknown key: refused
    st, _, body = http_request("GET", ep + "/stoker/srv/blob.bin")
    assert st == 403, body
    st, _, body = s3.request("GET", "/stoker/srv/blob.bin", secret_key="wrong-secret")
    assert st == 403 and b"SignatureDoesNotMatch" in body
    st, _, body = s3.request("GET", "/stoker/srv/blob.bin", access_key="AKIAUNKNOWN000000000")
    assert st == 403, body
    st, _, body = s3.request("GET", "/stoker/srv/missing.bin")
    assert st == 404 and b"NoSuchKey" in body
    # ranges
    st, h, body = s3.request("GET", "/stoker/srv/blob.bin", headers={"Range": "bytes=300-309"})
    assert (st, body) == (206, BLOB[300:310])
    assert h["content-range"] == f"bytes 300-309/{len(BLOB)}"
    # the public bucket: anonymous read and list, no anonymous write
    st, _, body = http_request("GET", ep + "/public/srv/blob.bin")
    assert (st, body) == (200, BLOB)
    st, _, body = http_request("GET", ep + "/public?list-type=2&prefix=srv%2F")
    assert st == 200 and b"<Key>srv/blob.bin</Key>" in body
    st, _, _ = http_request("PUT", ep + "/public/srv/anon.bin", b"x")
    assert st == 403
    st, _, _ = http_request("GET", ep + "/stoker?list-type=2")
    assert st == 403
    assert s3.list("stoker", "srv/") == ["srv/blob.bin"]


def test_s3_put_tree_and_listing_pages(s3, tmp_path):
    for i in range(7):
        (tmp_path / "t" / f"d{i % 2}").mkdir(parents=True, exist_ok=True)
        (tmp_path / "t" / f"d{i % 2}" / f"f{i}.bin").write_bytes(bytes([i]) * (i + 1))
    keys = s3.put_tree(str(tmp_path / "t"), "stoker", "tree/")
    assert len(keys) == 7 and all(k.startswith("tree/d") for k in keys)
    assert sorted(s3.list("stoker", "tree/")) == sorted(keys)
    assert s3.get("stoker", "tree/d1/f3.bin") == bytes([3]) * 4


def test_s3_with_boto3(s3):
    py = servers.tools_python()
    if py is None or subprocess.run([py, "-c", "import boto3"], capture_output=True).returncode:
        if os.environ.get("CI"):
            pytest.fail("boto3 is missing from .venv-tools: scripts/install-deps.sh --python installs it")
        pytest.skip("boto3 is not installed (scripts/install-deps.sh --python)")
    code = textwrap.dedent("""
        import os, sys, boto3, botocore
        from botocore.config import Config
        s = boto3.client("s3", config=Config(s3={"addressing_style": "path"}, retries={"max_attempts": 1}))
        keys = [o["Key"] for o in s.list_objects_v2(Bucket="stoker", Prefix="srv/")["Contents"]]
        assert "srv/blob.bin" in keys, keys
        b = s.get_object(Bucket="stoker", Key="srv/blob.bin", Range="bytes=10-19")["Body"].read()
        assert b == bytes(range(10, 20)), b
        s.put_object(Bucket="stoker", Key="srv/boto.bin", Body=b"from boto3")
        bad = boto3.client("s3", aws_access_key_id=os.environ["AWS_ACCESS_KEY_ID"],
                           aws_secret_access_key="wrong", config=Config(retries={"max_attempts": 1}))
        try:
            bad.get_object(Bucket="stoker", Key="srv/blob.bin")
        except botocore.exceptions.ClientError as e:
            assert e.response["ResponseMetadata"]["HTTPStatusCode"] == 403, e.response
        else:
            sys.exit("a wrong secret was accepted")
        print("ok")
    """)
    env = {k: v for k, v in os.environ.items() if not k.startswith("AWS_")}
    env.update(s3.env())
    r = subprocess.run([py, "-c", code], env=env, capture_output=True, text=True, timeout=120)
    assert r.returncode == 0 and r.stdout.strip() == "ok", r.stdout + r.stderr
    assert s3.get("stoker", "srv/boto.bin") == b"from boto3"


def test_s3_with_curl(s3, tmp_path):
    if not os.access(CURL, os.X_OK):
        pytest.skip("no curl")
    f = tmp_path / "up.bin"
    f.write_bytes(b"via curl " * 100)
    auth = ["--aws-sigv4", "aws:amz:us-east-1:s3", "--user", f"{s3.access_key}:{s3.secret_key}"]
    url = s3.endpoint + "/stoker/srv/curl.bin"
    r = subprocess.run([CURL, "-sS", "-o", "/dev/null", "-w", "%{http_code}", *auth, "-T", str(f), url],
                       capture_output=True, text=True, timeout=60)
    if r.stdout.strip() in ("", "000") and "aws-sigv4" in r.stderr:
        pytest.skip(f"this curl has no --aws-sigv4: {r.stderr.strip()}")
    assert r.stdout.strip() == "200", r.stderr
    r = subprocess.run([CURL, "-sS", *auth, url], capture_output=True, timeout=60)
    assert r.stdout == f.read_bytes()
    r = subprocess.run([CURL, "-sS", "-o", "/dev/null", "-w", "%{http_code}", url],
                       capture_output=True, text=True, timeout=60)
    assert r.stdout.strip() == "403"


def test_s3_start_failure_is_bounded_and_clear(tmp_path):
    false = shutil.which("false") or "/bin/false"
    t0 = time.monotonic()
    with pytest.raises(RuntimeError, match="weed exited with status"):
        S3Server(weed=false, start_timeout=30).start()
    assert time.monotonic() - t0 < 30


def test_s3_without_binary_says_how_to_get_it():
    srv = S3Server()
    srv.weed = None
    with pytest.raises(servers.ServerUnavailable, match="install-deps.sh --python"):
        srv.start()


# ---- HTTP ----------------------------------------------------------------------------

def test_http_ranges_etag_and_keepalive(http_files):
    u = http_files.url + "/d/blob.bin"
    assert u.startswith("http://127.0.0.1:")
    st, h, body = http_request("GET", u)
    assert (st, body) == (200, BLOB)
    assert h["content-length"] == str(len(BLOB)) and h["etag"].startswith('"') and h["accept-ranges"] == "bytes"
    etag = h["etag"]
    for rng, want in (("bytes=10-19", (10, 19)), ("bytes=10240-", None), ("bytes=-5", (10235, 10239)),
                      ("bytes=10230-99999", (10230, 10239)), ("bytes=0-0", (0, 0))):
        st, h, body = http_request("GET", u, headers={"Range": rng})
        if want is None:
            assert st == 416 and h["content-range"] == f"bytes */{len(BLOB)}", rng
            continue
        a, b = want
        assert st == 206 and body == BLOB[a:b + 1], rng
        assert h["content-range"] == f"bytes {a}-{b}/{len(BLOB)}" and h["content-length"] == str(b - a + 1)
    st, h, body = http_request("GET", u, headers={"Range": "bytes=5-9", "If-Range": etag})
    assert (st, body) == (206, BLOB[5:10])
    st, h, body = http_request("GET", u, headers={"Range": "bytes=5-9", "If-Range": '"other"'})
    assert (st, body) == (200, BLOB)
    st, h, body = http_request("HEAD", u)
    assert st == 200 and body == b"" and h["content-length"] == str(len(BLOB))
    assert http_request("GET", http_files.url + "/d/missing.bin")[0] == 404
    assert http_request("GET", http_files.url + "/../etc/passwd")[0] == 404
    # several requests on one connection
    c = http.client.HTTPConnection("127.0.0.1", http_files.port, timeout=10)
    for a in (0, 100, 200):
        c.request("GET", "/d/blob.bin", headers={"Range": f"bytes={a}-{a + 9}"})
        r = c.getresponse()
        assert r.status == 206 and r.read() == BLOB[a:a + 10]
    c.close()
    assert http_files.requests >= 13


# ---- the fault proxy ---------------------------------------------------------------------

@pytest.fixture()
def proxy(http_files):
    p = FaultProxy(http_files.port).start()
    yield p
    p.stop()


def test_proxy_passes_through_and_counts(proxy, http_files):
    u = proxy.url + "/d/blob.bin"
    st, _, body = http_request("GET", u)
    assert (st, body) == (200, BLOB)
    st, h, body = http_request("GET", u, headers={"Range": "bytes=7-16"})
    assert (st, body) == (206, BLOB[7:17]) and h["content-range"] == f"bytes 7-16/{len(BLOB)}"
    c = http.client.HTTPConnection("127.0.0.1", proxy.port, timeout=10)
    for _ in range(3):  # kept alive through the proxy
        c.request("GET", "/d/blob.bin")
        r = c.getresponse()
        assert r.status == 200 and r.read() == BLOB
    c.close()
    assert proxy.requests == 5 and proxy.forwarded == 5 and proxy.count("GET") == 5
    assert proxy.body_bytes == 4 * len(BLOB) + 10


def test_proxy_latency(proxy):
    proxy.latency = 0.05
    t0 = time.monotonic()
    for _ in range(4):
        assert http_request("GET", proxy.url + "/d/blob.bin")[0] == 200
    assert time.monotonic() - t0 >= 0.2


def test_proxy_slowdown_then_through(proxy):
    proxy.fail_next(2)
    got = [http_request("GET", proxy.url + "/d/blob.bin") for _ in range(3)]
    assert [g[0] for g in got] == [503, 503, 200]
    assert b"<Code>SlowDown</Code>" in got[0][2] and got[2][2] == BLOB
    assert proxy.requests == 3 and proxy.forwarded == 1 and proxy.faults == {"status": 2}


def test_proxy_reset_truncate_stall(proxy):
    proxy.reset_next(1, after_bytes=1000)
    data, how = raw_get(proxy.port, "/d/blob.bin")
    head, body = data.split(b"\r\n\r\n", 1)
    assert how == "reset" and body == BLOB[:1000] and b"Content-Length: 10240" in head
    proxy.truncate_next(1, after_bytes=777)
    data, how = raw_get(proxy.port, "/d/blob.bin")
    assert how == "eof" and data.split(b"\r\n\r\n", 1)[1] == BLOB[:777]
    with pytest.raises(http.client.IncompleteRead):
        proxy.truncate_next(1, after_bytes=10)
        http_request("GET", proxy.url + "/d/blob.bin")
    proxy.stall_next(1, after_bytes=100, seconds=0.5)
    t0 = time.monotonic()
    st, _, body = http_request("GET", proxy.url + "/d/blob.bin")
    assert (st, body) == (200, BLOB)
    assert time.monotonic() - t0 >= 0.5
    assert proxy.faults == {"reset": 1, "truncate": 2, "stall": 1}
    # the next request is clean again
    assert http_request("GET", proxy.url + "/d/blob.bin")[2] == BLOB


def test_proxy_stall_ends_when_proxy_stops(http_files):
    p = FaultProxy(http_files.port).start()
    p.stall_next(1, after_bytes=10, seconds=600)
    s = socket.create_connection(("127.0.0.1", p.port), timeout=20)
    s.sendall(b"GET /d/blob.bin HTTP/1.1\r\nHost: x\r\n\r\n")
    servers.wait_for(lambda: p.stalled_now == 1, 10, "the stall")
    t0 = time.monotonic()
    p.stop()
    got = b""
    while True:
        d = s.recv(65536)
        if not d:
            break
        got += d
    s.close()
    assert time.monotonic() - t0 < 5
    assert got.split(b"\r\n\r\n", 1)[1] == BLOB[:10]


def test_proxy_stops_by_itself(http_files):
    p = FaultProxy(http_files.port, lifetime=1.0).start()
    assert http_request("GET", p.url + "/d/blob.bin")[0] == 200

    def refused():
        try:
            socket.create_connection(("127.0.0.1", p.port), timeout=1).close()
            return False
        except OSError:
            return True

    servers.wait_for(refused, 10, "the proxy's own stop")
    p.stop()


def test_proxy_in_front_of_s3(s3):
    p = FaultProxy(s3.port).start()
    try:
        st, _, body = s3.request("GET", "/stoker/srv/blob.bin", endpoint=p.url)
        assert (st, body) == (200, BLOB)  # signed for the proxy's address, verified upstream
        p.spoil_auth_next(1)
        st, _, body = s3.request("GET", "/stoker/srv/blob.bin", endpoint=p.url)
        assert st == 403 and b"SignatureDoesNotMatch" in body
        p.fail_next(1)
        st, _, body = s3.request("GET", "/stoker/srv/blob.bin", endpoint=p.url)
        assert st == 503 and b"SlowDown" in body
        st, _, body = s3.request("GET", "/stoker/srv/blob.bin", endpoint=p.url, headers={"Range": "bytes=1-2"})
        assert (st, body) == (206, BLOB[1:3])
        assert p.requests == 4 and p.forwarded == 3
    finally:
        p.stop()


if __name__ == "__main__":
    sys.exit(pytest.main([__file__, "-q"]))

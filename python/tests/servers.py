"""Real servers for the remote-data tests, started by the tests themselves.

Everything listens on 127.0.0.1 only, every wait has a timeout, and every
loop ends by itself (a server also stops on its own after `lifetime` s).

- `S3Server`: SeaweedFS (`weed mini`) in a temporary folder, on free ports,
  with one identity (`ACCESS_KEY`, `SECRET_KEY`) allowed everything, so that
  SigV4 signatures are checked and an anonymous or wrongly signed request is
  refused (403), a private bucket `stoker` and a bucket `public` that
  anonymous clients may read and list. `weed` is `$STOKER_WEED`, else the
  one in the repository's `.venv-tools/` (scripts/install-deps.sh --python
  puts it there), else `weed` on PATH.
- `HTTPFileServer`: a threaded HTTP/1.1 server of a folder's files, with
  single byte ranges (206 and Content-Range, 416 past the end), ETag,
  Last-Modified, Content-Length and HEAD.
- `FaultProxy`: an HTTP proxy in front of either, whose faults are set at run
  time: a latency per request, the next N requests answered with 503
  SlowDown, a connection reset after K bytes of a body, a body that stalls,
  a body cut short, an Authorization header spoiled (403). It counts the
  requests it saw.

Requests to S3 are signed here with SigV4 by the standard library alone
(`S3Server.request`), so the tests need neither boto3 nor curl to upload.
"""
import datetime
import hashlib
import hmac
import http.server
import json
import os
import select
import shutil
import signal
import socket
import socketserver
import struct
import subprocess
import tempfile
import threading
import time
import urllib.parse
import uuid
from email.utils import formatdate

HERE = os.path.dirname(os.path.abspath(__file__))
REPO = os.path.dirname(os.path.dirname(HERE))
TOOLS_VENV = os.environ.get("STOKER_TOOLS_VENV") or os.path.join(REPO, ".venv-tools")
HOST = "127.0.0.1"

ACCESS_KEY = "STOKERTESTACCESSKEY1"
# Distinctive, with the characters real secrets have ('/', '+'), so that a
# leak into a message or a file can be searched for.
SECRET_KEY = "stokerTestSecret/9f3Kq+ZpW7vR2xYb4LmN8cD"
REGION = "us-east-1"
BUCKET = "stoker"
PUBLIC_BUCKET = "public"


class ServerUnavailable(RuntimeError):
    """The server binary cannot be had on this machine (tests skip on it)."""


def find_weed():
    """The `weed` binary: $STOKER_WEED, .venv-tools/bin/weed, or on PATH; None if none."""
    env = os.environ.get("STOKER_WEED")
    if env:
        return env if os.access(env, os.X_OK) else None
    venv = os.path.join(TOOLS_VENV, "bin", "weed")
    if os.access(venv, os.X_OK):
        return venv
    return shutil.which("weed")


def tools_python():
    """The tools' virtualenv's python (boto3, webdataset), or None."""
    p = os.path.join(TOOLS_VENV, "bin", "python")
    return p if os.access(p, os.X_OK) else None


def free_ports(n):
    """n distinct free TCP ports on 127.0.0.1 (held together while chosen)."""
    socks = []
    try:
        for _ in range(n):
            s = socket.socket()
            s.bind((HOST, 0))
            socks.append(s)
        return [s.getsockname()[1] for s in socks]
    finally:
        for s in socks:
            s.close()


class GaveUp(RuntimeError):
    """Raised by a wait_for predicate: waiting longer cannot help."""


def wait_for(pred, timeout, what, interval=0.1):
    """Calls pred() until it returns a true value; TimeoutError naming `what` after timeout s.
    A GaveUp from pred ends the wait at once."""
    deadline = time.monotonic() + timeout
    last = None
    while True:
        try:
            v = pred()
            if v:
                return v
        except GaveUp:
            raise
        except Exception as e:  # noqa: BLE001 - the last error goes into the message
            last = e
        if time.monotonic() >= deadline:
            raise TimeoutError(f"{what}: not within {timeout} s" + (f" (last error: {last!r})" if last else ""))
        time.sleep(interval)


# ---- SigV4 ------------------------------------------------------------------------

def _quote(s, safe="-_.~"):
    return urllib.parse.quote(s, safe=safe)


def sigv4_headers(method, url, body=b"", access_key=ACCESS_KEY, secret_key=SECRET_KEY,
                  region=REGION, extra=None, now=None):
    """The headers of a SigV4-signed S3 request (path-style URL, query included)."""
    u = urllib.parse.urlsplit(url)
    now = now or datetime.datetime.now(datetime.timezone.utc)
    amz_date = now.strftime("%Y%m%dT%H%M%SZ")
    day = amz_date[:8]
    payload_hash = hashlib.sha256(body).hexdigest()
    headers = {"host": u.netloc, "x-amz-date": amz_date, "x-amz-content-sha256": payload_hash}
    for k, v in (extra or {}).items():
        headers[k.lower()] = v
    query = urllib.parse.parse_qsl(u.query, keep_blank_values=True)
    canon_query = "&".join(f"{_quote(k)}={_quote(v)}" for k, v in sorted(query))
    canon_path = _quote(urllib.parse.unquote(u.path or "/"), safe="/-_.~")
    names = sorted(headers)
    canon_headers = "".join(f"{k}:{str(headers[k]).strip()}\n" for k in names)
    signed = ";".join(names)
    canon = "\n".join([method, canon_path, canon_query, canon_headers, signed, payload_hash])
    scope = f"{day}/{region}/s3/aws4_request"
    to_sign = "\n".join(["AWS4-HMAC-SHA256", amz_date, scope, hashlib.sha256(canon.encode()).hexdigest()])

    def h(key, msg):
        return hmac.new(key, msg.encode(), hashlib.sha256).digest()

    k = h(h(h(h(("AWS4" + secret_key).encode(), day), region), "s3"), "aws4_request")
    sig = hmac.new(k, to_sign.encode(), hashlib.sha256).hexdigest()
    headers["authorization"] = (f"AWS4-HMAC-SHA256 Credential={access_key}/{scope}, "
                                f"SignedHeaders={signed}, Signature={sig}")
    return headers


def http_request(method, url, body=b"", headers=None, timeout=30):
    """(status, headers dict with lower-case names, body) of one request, without raising on 4xx/5xx."""
    import http.client

    u = urllib.parse.urlsplit(url)
    conn = http.client.HTTPConnection(u.hostname, u.port, timeout=timeout)
    try:
        path = u.path or "/"
        if u.query:
            path += "?" + u.query
        conn.request(method, path, body=body or None, headers=headers or {})
        r = conn.getresponse()
        data = r.read()
        return r.status, {k.lower(): v for k, v in r.getheaders()}, data
    finally:
        conn.close()


# ---- S3: SeaweedFS ------------------------------------------------------------------

class S3Server:
    """SeaweedFS's `weed mini` on 127.0.0.1, with credentials and two buckets.

    start() returns once a signed upload to the bucket and an anonymous list of
    the public bucket both answer, within `start_timeout` s (else RuntimeError
    with the end of the server's log). stop() ends the process group.
    """

    def __init__(self, weed=None, start_timeout=90.0, lifetime=3600.0):
        self.weed = weed or find_weed()
        self.start_timeout = start_timeout
        self.lifetime = lifetime
        self.access_key = ACCESS_KEY
        self.secret_key = SECRET_KEY
        self.region = REGION
        self.bucket = BUCKET
        self.public_bucket = PUBLIC_BUCKET
        self.proc = None
        self.dir = None
        self.port = None
        self._log = None
        self._timer = None

    @property
    def endpoint(self):
        return f"http://{HOST}:{self.port}"

    def env(self, endpoint=None, access_key=None, secret_key=None):
        """The environment a client needs: endpoint, keys, region; no profile, no
        shared files, no instance metadata (so nothing outside the test is read)."""
        return {
            "AWS_ENDPOINT_URL": endpoint or self.endpoint,
            "AWS_ACCESS_KEY_ID": access_key or self.access_key,
            "AWS_SECRET_ACCESS_KEY": secret_key or self.secret_key,
            "AWS_REGION": self.region,
            "AWS_EC2_METADATA_DISABLED": "true",
            "AWS_SHARED_CREDENTIALS_FILE": os.path.join(self.dir, "no-credentials"),
            "AWS_CONFIG_FILE": os.path.join(self.dir, "no-config"),
        }

    # Variables the S3 tests clear so that the machine's own configuration is not read.
    CLEARED = ("AWS_ENDPOINT_URL", "S3_ENDPOINT_URL", "AWS_ACCESS_KEY_ID", "AWS_SECRET_ACCESS_KEY",
               "AWS_SESSION_TOKEN", "AWS_REGION", "AWS_DEFAULT_REGION", "AWS_PROFILE",
               "AWS_DEFAULT_PROFILE", "AWS_SHARED_CREDENTIALS_FILE", "AWS_CONFIG_FILE")

    def start(self):
        if not self.weed:
            raise ServerUnavailable("no weed binary (SeaweedFS): run scripts/install-deps.sh --python, "
                                    "or set STOKER_WEED")
        self.dir = tempfile.mkdtemp(prefix="stoker-s3-")
        data = os.path.join(self.dir, "data")
        os.mkdir(data)
        config = {"identities": [
            {"name": "tester", "credentials": [{"accessKey": self.access_key, "secretKey": self.secret_key}],
             "actions": ["Admin", "Read", "Write", "List", "Tagging"]},
            {"name": "anonymous", "actions": [f"Read:{self.public_bucket}", f"List:{self.public_bucket}"]},
        ]}
        cfg = os.path.join(self.dir, "s3.json")
        with open(cfg, "w") as f:
            json.dump(config, f)
        (master, master_g, volume, volume_g, filer, filer_g, s3, s3_g, admin, admin_g) = free_ports(10)
        self.port = s3
        args = [
            self.weed, "mini", f"-dir={data}", f"-ip={HOST}", f"-ip.bind={HOST}",
            f"-master.port={master}", f"-master.port.grpc={master_g}", "-master.telemetry=false",
            f"-volume.port={volume}", f"-volume.port.grpc={volume_g}",
            f"-filer.port={filer}", f"-filer.port.grpc={filer_g}",
            f"-filer.localSocket={os.path.join(self.dir, 'filer.sock')}",
            f"-s3.port={s3}", f"-s3.port.grpc={s3_g}", f"-s3.config={cfg}",
            f"-s3.localSocket={os.path.join(self.dir, 's3.sock')}",
            "-s3.port.iceberg=0", "-s3.port.lance=0",
            "-webdav=false", "-admin.ui=false", f"-admin.port={admin}", f"-admin.port.grpc={admin_g}",
            f"-bucket={self.bucket},{self.public_bucket}",
        ]
        self._log = open(os.path.join(self.dir, "weed.log"), "wb")
        env = {k: v for k, v in os.environ.items() if not k.startswith(("AWS_", "S3_"))}
        self.proc = subprocess.Popen(args, cwd=self.dir, stdin=subprocess.DEVNULL, stdout=self._log,
                                     stderr=subprocess.STDOUT, env=env, start_new_session=True)
        try:
            self._wait_ready()
        except BaseException:
            self.stop()
            raise
        self._timer = threading.Timer(self.lifetime, self.stop)
        self._timer.daemon = True
        self._timer.start()
        return self

    def log_tail(self, n=4000):
        try:
            with open(os.path.join(self.dir, "weed.log"), "rb") as f:
                return f.read()[-n:].decode("utf-8", "replace")
        except OSError:
            return ""

    def _wait_ready(self):
        probe = f"/{self.bucket}/.ready-{uuid.uuid4().hex}"

        def ready():
            if self.proc.poll() is not None:
                raise GaveUp(f"weed exited with status {self.proc.returncode}")
            st, _, _ = self.request("PUT", probe, b"ready", timeout=5)
            if st != 200:
                return False
            st2, _, _ = http_request("GET", f"{self.endpoint}/{self.public_bucket}?list-type=2", timeout=5)
            return st2 == 200

        try:
            wait_for(ready, self.start_timeout, f"SeaweedFS S3 on {self.endpoint}", interval=0.25)
        except (TimeoutError, RuntimeError) as e:
            raise RuntimeError(f"{e}; its log ends with:\n{self.log_tail()}") from None
        self.request("DELETE", probe, timeout=10)

    def stop(self):
        if self._timer:
            self._timer.cancel()
        p = self.proc
        if p is not None and p.poll() is None:
            try:
                os.killpg(p.pid, signal.SIGTERM)
            except ProcessLookupError:
                pass
            try:
                p.wait(timeout=20)
            except subprocess.TimeoutExpired:
                try:
                    os.killpg(p.pid, signal.SIGKILL)
                except ProcessLookupError:
                    pass
                p.wait(timeout=10)
        if self._log:
            self._log.close()
            self._log = None
        if self.dir:
            shutil.rmtree(self.dir, ignore_errors=True)

    # -- requests, signed with the server's credentials unless told otherwise --

    def request(self, method, path, body=b"", query=None, endpoint=None, sign=True,
                access_key=None, secret_key=None, timeout=30, headers=None):
        """(status, headers, body) of a request to `path` ('/bucket/key'), SigV4-signed."""
        url = (endpoint or self.endpoint) + _quote(path, safe="/-_.~")
        if query:
            url += "?" + urllib.parse.urlencode(query, quote_via=urllib.parse.quote)
        h = dict(headers or {})
        if sign:
            h = sigv4_headers(method, url, body, access_key or self.access_key, secret_key or self.secret_key,
                              self.region, extra=h)
            h.pop("host")
        return http_request(method, url, body, h, timeout=timeout)

    def put(self, bucket, key, data):
        """Uploads bytes (or a file's, given its path) to bucket/key."""
        if isinstance(data, (str, os.PathLike)):
            with open(data, "rb") as f:
                data = f.read()
        st, _, body = self.request("PUT", f"/{bucket}/{key}", data)
        if st != 200:
            raise RuntimeError(f"PUT s3://{bucket}/{key}: HTTP {st}: {body[:300]!r}")

    def put_tree(self, local, bucket, prefix):
        """Uploads every file under folder `local` to bucket/prefix/<relative path>; returns the keys."""
        keys = []
        for d, _, files in sorted(os.walk(local)):
            for name in sorted(files):
                p = os.path.join(d, name)
                key = prefix.rstrip("/") + "/" + os.path.relpath(p, local).replace(os.sep, "/")
                self.put(bucket, key.lstrip("/"), p)
                keys.append(key.lstrip("/"))
        return keys

    def get(self, bucket, key):
        st, _, body = self.request("GET", f"/{bucket}/{key}")
        if st != 200:
            raise RuntimeError(f"GET s3://{bucket}/{key}: HTTP {st}")
        return body

    def list(self, bucket, prefix=""):
        """The keys under prefix (ListObjectsV2, every page)."""
        import xml.etree.ElementTree as ET

        keys, token = [], None
        for _ in range(10000):
            q = {"list-type": "2", "prefix": prefix}
            if token:
                q["continuation-token"] = token
            st, _, body = self.request("GET", f"/{bucket}", query=q)
            if st != 200:
                raise RuntimeError(f"list s3://{bucket}/{prefix}: HTTP {st}: {body[:300]!r}")
            root = ET.fromstring(body)
            ns = root.tag.split("}")[0] + "}" if root.tag.startswith("{") else ""
            keys += [c.find(ns + "Key").text for c in root.findall(ns + "Contents")]
            token = root.findtext(ns + "NextContinuationToken")
            if root.findtext(ns + "IsTruncated") != "true" or not token:
                return keys
        raise RuntimeError("list: too many pages")


# ---- HTTP: a folder's files with ranges ----------------------------------------------

class _Handler(http.server.BaseHTTPRequestHandler):
    protocol_version = "HTTP/1.1"
    timeout = 30  # an idle keep-alive connection ends after this

    def log_message(self, *args):
        pass

    def do_HEAD(self):
        self._serve(head=True)

    def do_GET(self):
        self._serve(head=False)

    def _send_simple(self, status, text, extra=None):
        body = text.encode()
        self.send_response(status)
        for k, v in (extra or {}).items():
            self.send_header(k, v)
        self.send_header("Content-Type", "text/plain")
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        if self.command != "HEAD":
            self.wfile.write(body)

    def _serve(self, head):
        srv = self.server.owner
        with srv.lock:
            srv.requests += 1
            srv.log.append((self.command, self.path, self.headers.get("Range")))
        path = urllib.parse.unquote(urllib.parse.urlsplit(self.path).path)
        full = os.path.realpath(os.path.join(srv.root, path.lstrip("/")))
        if not (full == srv.root or full.startswith(srv.root + os.sep)) or not os.path.isfile(full):
            return self._send_simple(404, "not found\n")
        st = os.stat(full)
        size = st.st_size
        etag = '"%x-%x"' % (st.st_mtime_ns, size)
        start, end, status = 0, size - 1, 200
        rng = self.headers.get("Range")
        if_range = self.headers.get("If-Range")
        if rng and (if_range is None or if_range == etag):
            spec = rng.strip()
            ok = spec.startswith("bytes=") and "," not in spec
            try:
                a, b = spec[6:].split("-", 1) if ok else ("", "")
                if a == "" and b != "":  # the last b bytes
                    n = int(b)
                    start, end = max(0, size - n), size - 1
                    ok = n > 0
                elif a != "":
                    start = int(a)
                    end = min(int(b), size - 1) if b else size - 1
                    ok = start <= int(b) if b else True
                else:
                    ok = False
            except ValueError:
                ok = False
            if not ok:
                return self._send_simple(400, "bad range\n") if not spec.startswith("bytes=") else \
                    self._send_simple(416, "range not satisfiable\n", {"Content-Range": f"bytes */{size}"})
            if start >= size:
                return self._send_simple(416, "range not satisfiable\n", {"Content-Range": f"bytes */{size}"})
            status = 206
        length = end - start + 1
        self.send_response(status)
        self.send_header("Content-Type", "application/octet-stream")
        self.send_header("Content-Length", str(length))
        self.send_header("Accept-Ranges", "bytes")
        self.send_header("ETag", etag)
        self.send_header("Last-Modified", formatdate(st.st_mtime, usegmt=True))
        if status == 206:
            self.send_header("Content-Range", f"bytes {start}-{end}/{size}")
        self.end_headers()
        if head:
            return
        with open(full, "rb") as f:
            f.seek(start)
            left = length
            while left > 0:
                chunk = f.read(min(left, 1 << 16))
                if not chunk:
                    break
                self.wfile.write(chunk)
                left -= len(chunk)
        with srv.lock:
            srv.bytes_sent += length


class _ThreadingServer(socketserver.ThreadingMixIn, http.server.HTTPServer):
    daemon_threads = True
    allow_reuse_address = True


class HTTPFileServer:
    """The files of folder `root` over HTTP/1.1 on 127.0.0.1 (a free port)."""

    def __init__(self, root, lifetime=3600.0):
        self.root = os.path.realpath(root)
        self.lifetime = lifetime
        self.lock = threading.Lock()
        self.requests = 0
        self.bytes_sent = 0
        self.log = []
        self._srv = None
        self._thread = None
        self._timer = None

    @property
    def port(self):
        return self._srv.server_address[1]

    @property
    def url(self):
        return f"http://{HOST}:{self.port}"

    def start(self):
        self._srv = _ThreadingServer((HOST, 0), _Handler)
        self._srv.owner = self
        self._thread = threading.Thread(target=self._srv.serve_forever, kwargs={"poll_interval": 0.1},
                                        name="http-file-server", daemon=True)
        self._thread.start()
        self._timer = threading.Timer(self.lifetime, self.stop)
        self._timer.daemon = True
        self._timer.start()
        return self

    def reset_counts(self):
        with self.lock:
            self.requests = 0
            self.bytes_sent = 0
            self.log = []

    def stop(self):
        if self._timer:
            self._timer.cancel()
        if self._srv:
            self._srv.shutdown()
            self._srv.server_close()
            self._thread.join(timeout=10)
            self._srv = None


# ---- the fault proxy -------------------------------------------------------------------

SLOWDOWN_BODY = (b'<?xml version="1.0" encoding="UTF-8"?>\n<Error><Code>SlowDown</Code>'
                 b"<Message>Please reduce your request rate.</Message>"
                 b"<RequestId>STOKERPROXY</RequestId></Error>")


class _Rule:
    """A fault for the next `count` requests that match: kind is 'status',
    'reset', 'truncate', 'stall' or 'auth'."""

    def __init__(self, kind, count, method=None, path=None, skip=0, **kw):
        self.kind, self.count, self.method, self.path, self.kw = kind, count, method, path, kw
        self.skip = skip  # matching requests let through before the fault applies

    def matches(self, method, path):
        """`path`: a substring of the request's path, or, ending in "$", its end."""
        if self.method is not None and method != self.method:
            return False
        if self.path is None:
            return True
        path = urllib.parse.unquote(path)
        if self.path.endswith("$"):
            return path.split("?", 1)[0].endswith(self.path[:-1])
        return self.path in path


class FaultProxy:
    """An HTTP/1.1 proxy on 127.0.0.1 in front of http://127.0.0.1:`upstream_port`.

    Each client request goes to the upstream on a connection of its own (the
    client's connection is kept alive). The Host header is passed unchanged,
    so SigV4 signatures made for the proxy's address still verify. Faults
    apply to the next N matching requests (method GET by default; `path`: a
    substring of the path, or its end when it ends in "$"), in the order
    they were added:

    - `latency` (s): added before each request is forwarded;
    - `fail_next(n, status=503)`: answered by the proxy with S3's SlowDown;
    - `reset_next(n, after_bytes)`: the body's first bytes, then a TCP reset;
    - `truncate_next(n, after_bytes)`: the body's first bytes, then a clean close;
    - `stall_next(n, after_bytes, seconds)`: the body's first bytes, then
      nothing for `seconds` (or until the proxy stops), then the rest (`skip`:
      the first matching requests pass untouched);
    - `spoil_auth_next(n)`: the Authorization signature altered (the server
      answers 403).

    Counts: `requests` (all seen), `forwarded`, `faults` (injected, by kind),
    `stalled_now` (bodies stalled at this moment), `body_bytes` (body bytes
    sent to clients), `log` [(method, path, range, status or fault)].
    """

    def __init__(self, upstream_port, upstream_host=HOST, lifetime=900.0, io_timeout=30.0):
        self.upstream = (upstream_host, upstream_port)
        self.lifetime = lifetime
        self.io_timeout = io_timeout
        self.latency = 0.0
        self.lock = threading.Lock()
        self.rules = []
        self.stop_event = threading.Event()
        self._sock = None
        self._thread = None
        self._conns = set()
        self.reset_counts()

    @property
    def port(self):
        return self._sock.getsockname()[1]

    @property
    def url(self):
        return f"http://{HOST}:{self.port}"

    def reset_counts(self):
        with self.lock:
            self.requests = 0
            self.forwarded = 0
            self.faults = {}
            self.stalled_now = 0
            self.body_bytes = 0
            self.log = []

    def count(self, method=None):
        with self.lock:
            return sum(1 for m, *_ in self.log if method is None or m == method)

    # -- faults --

    def _add(self, rule):
        with self.lock:
            self.rules.append(rule)
        return self

    def fail_next(self, n, status=503, method="GET", path=None):
        return self._add(_Rule("status", n, method, path, status=status))

    def reset_next(self, n, after_bytes, method="GET", path=None):
        return self._add(_Rule("reset", n, method, path, after=after_bytes))

    def truncate_next(self, n, after_bytes, method="GET", path=None):
        return self._add(_Rule("truncate", n, method, path, after=after_bytes))

    def stall_next(self, n, after_bytes, seconds, method="GET", path=None, skip=0):
        return self._add(_Rule("stall", n, method, path, skip, after=after_bytes, seconds=seconds))

    def spoil_auth_next(self, n, method=None, path=None):
        return self._add(_Rule("auth", n, method, path))

    def clear_faults(self):
        with self.lock:
            self.rules = []
            self.latency = 0.0

    def _take(self, method, path, kinds):
        """The first live rule of one of `kinds` matching the request, consumed once."""
        with self.lock:
            for r in self.rules:
                if r.count > 0 and r.kind in kinds and r.matches(method, path):
                    if r.skip > 0:
                        r.skip -= 1
                        continue
                    r.count -= 1
                    self.faults[r.kind] = self.faults.get(r.kind, 0) + 1
                    return r
        return None

    # -- life --

    def start(self):
        self._sock = socket.socket()
        self._sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        self._sock.bind((HOST, 0))
        self._sock.listen(64)
        self._sock.settimeout(0.2)
        self._deadline = time.monotonic() + self.lifetime
        self._thread = threading.Thread(target=self._accept_loop, name="fault-proxy", daemon=True)
        self._thread.start()
        return self

    def stop(self):
        self.stop_event.set()
        if self._thread:
            self._thread.join(timeout=10)
        with self.lock:
            conns = list(self._conns)
        for c in conns:
            try:
                c.shutdown(socket.SHUT_RDWR)
            except OSError:
                pass

    def _accept_loop(self):
        try:
            while not self.stop_event.is_set() and time.monotonic() < self._deadline:
                try:
                    c, _ = self._sock.accept()
                except socket.timeout:
                    continue
                except OSError:
                    break
                with self.lock:
                    self._conns.add(c)
                threading.Thread(target=self._serve_client, args=(c,), daemon=True,
                                 name="fault-proxy-conn").start()
        finally:
            self.stop_event.set()
            self._sock.close()

    # -- one client connection: requests one after the other --

    def _serve_client(self, c):
        c.settimeout(self.io_timeout)
        buf = b""
        idle_since = time.monotonic()
        try:
            while not self.stop_event.is_set():
                head, buf, eof = self._read_head(c, buf, idle_since)
                if head is None:
                    return
                idle_since = time.monotonic()
                holder = [buf]
                keep = self._one_request(c, head, holder)
                buf = holder[0]
                if not keep or eof:
                    return
        except OSError:
            return
        finally:
            with self.lock:
                self._conns.discard(c)
            try:
                c.close()
            except OSError:
                pass

    def _read_head(self, c, buf, idle_since):
        """(head bytes, rest, eof) of the next request; head None when the client left or idled out."""
        while b"\r\n\r\n" not in buf:
            if self.stop_event.is_set() or time.monotonic() - idle_since > self.io_timeout:
                return None, buf, True
            if len(buf) > 1 << 16:
                return None, buf, True
            if not select.select([c], [], [], 0.2)[0]:
                continue
            d = c.recv(65536)
            if not d:
                return None, buf, True
            buf += d
        head, rest = buf.split(b"\r\n\r\n", 1)
        return head, rest, False

    def _recv_exact(self, s, n, buf=b""):
        deadline = time.monotonic() + self.io_timeout
        while len(buf) < n:
            if self.stop_event.is_set() or time.monotonic() > deadline:
                raise OSError("proxy: timed out reading")
            if not select.select([s], [], [], 0.2)[0]:
                continue
            d = s.recv(min(65536, n - len(buf)))
            if not d:
                raise OSError("proxy: peer closed")
            buf += d
        return buf

    @staticmethod
    def _parse_headers(lines):
        out = []
        for ln in lines:
            if b":" in ln:
                k, v = ln.split(b":", 1)
                out.append((k.decode("latin-1").strip(), v.decode("latin-1").strip()))
        return out

    @staticmethod
    def _get(headers, name):
        for k, v in headers:
            if k.lower() == name:
                return v
        return None

    def _one_request(self, c, head, holder):
        lines = head.split(b"\r\n")
        method, path, version = lines[0].decode("latin-1").split(" ", 2)
        headers = self._parse_headers(lines[1:])
        if (self._get(headers, "transfer-encoding") or "").lower() == "chunked":
            self._reply(c, 501, b"chunked request bodies are not proxied\n", "text/plain")
            return False
        n = int(self._get(headers, "content-length") or 0)
        body = self._recv_exact(c, n, holder[0][:n]) if n else b""
        holder[0] = holder[0][n:] if n else holder[0]
        rng = self._get(headers, "range")
        client_keep = (self._get(headers, "connection") or "").lower() != "close" and version == "HTTP/1.1"
        with self.lock:
            self.requests += 1
            latency = self.latency
        if latency > 0:
            self.stop_event.wait(latency)

        rule = self._take(method, path, ("status",))
        if rule:
            status = rule.kw["status"]
            self._reply(c, status, SLOWDOWN_BODY if status == 503 else b"", "application/xml")
            self._record(method, path, rng, f"fault {status}")
            return client_keep
        if self._take(method, path, ("auth",)):
            headers = [(k, self._spoil(v) if k.lower() == "authorization" else v) for k, v in headers]
        body_rule = self._take(method, path, ("reset", "truncate", "stall"))

        up = socket.create_connection(self.upstream, timeout=self.io_timeout)
        try:
            out = [f"{method} {path} HTTP/1.1"]
            out += [f"{k}: {v}" for k, v in headers if k.lower() not in ("connection", "keep-alive",
                                                                          "proxy-connection")]
            out.append("Connection: close")
            up.sendall(("\r\n".join(out) + "\r\n\r\n").encode("latin-1") + body)
            with self.lock:
                self.forwarded += 1
            rbuf = b""
            while b"\r\n\r\n" not in rbuf:
                d = up.recv(65536)
                if not d:
                    raise OSError("proxy: upstream closed before its headers")
                rbuf += d
                if len(rbuf) > 1 << 20:
                    raise OSError("proxy: upstream headers too long")
            rhead, rest = rbuf.split(b"\r\n\r\n", 1)
            rlines = rhead.split(b"\r\n")
            status = int(rlines[0].split()[1])
            rheaders = self._parse_headers(rlines[1:])
            clen = self._get(rheaders, "content-length")
            chunked = (self._get(rheaders, "transfer-encoding") or "").lower() == "chunked"
            no_body = method == "HEAD" or status in (204, 304) or 100 <= status < 200
            keep = client_keep and (no_body or clen is not None or chunked)
            fwd = [rlines[0].decode("latin-1")]
            fwd += [f"{k}: {v}" for k, v in rheaders if k.lower() not in ("connection", "keep-alive")]
            fwd.append("Connection: keep-alive" if keep else "Connection: close")
            c.sendall(("\r\n".join(fwd) + "\r\n\r\n").encode("latin-1"))
            self._record(method, path, rng, status)
            if no_body:
                return keep
            total = int(clen) if clen is not None and not chunked else None
            return self._relay_body(c, up, rest, total, body_rule if status < 300 else None) and keep
        finally:
            up.close()

    def _relay_body(self, c, up, first, total, rule):
        """Sends the body (total bytes, or until the upstream closes) applying `rule`;
        False when the client connection must not be reused."""
        sent = 0
        after = rule.kw["after"] if rule else None
        pending = first
        deadline = time.monotonic() + self.lifetime
        while True:
            if not pending:
                if total is not None and sent >= total:
                    return True
                if self.stop_event.is_set() or time.monotonic() > deadline:
                    return False
                pending = up.recv(65536)
                if not pending:
                    return total is None or sent >= total
            if total is not None:
                pending = pending[:total - sent]
            if after is not None and sent + len(pending) >= after:
                k = after - sent
                self._send(c, pending[:k])
                sent += k
                pending = pending[k:]
                if rule.kind == "reset":
                    c.setsockopt(socket.SOL_SOCKET, socket.SO_LINGER, struct.pack("ii", 1, 0))
                    c.close()
                    return False
                if rule.kind == "truncate":
                    c.shutdown(socket.SHUT_RDWR)
                    return False
                with self.lock:  # stall
                    self.stalled_now += 1
                try:
                    self.stop_event.wait(rule.kw["seconds"])
                finally:
                    with self.lock:
                        self.stalled_now -= 1
                if self.stop_event.is_set():
                    return False
                after = None
                continue
            self._send(c, pending)
            sent += len(pending)
            pending = b""

    def _send(self, c, data):
        if data:
            c.sendall(data)
            with self.lock:
                self.body_bytes += len(data)

    def _record(self, method, path, rng, what):
        with self.lock:
            self.log.append((method, path, rng, what))

    @staticmethod
    def _spoil(auth):
        i = auth.find("Signature=")
        if i < 0:
            return auth + "x"
        j = i + len("Signature=")
        ch = "0" if auth[j:j + 1] != "0" else "1"
        return auth[:j] + ch + auth[j + 1:]

    def _reply(self, c, status, body, ctype):
        reason = {503: "Slow Down", 500: "Internal Server Error", 403: "Forbidden", 404: "Not Found"}.get(
            status, "Error")
        c.sendall((f"HTTP/1.1 {status} {reason}\r\nContent-Type: {ctype}\r\n"
                   f"Content-Length: {len(body)}\r\n\r\n").encode() + body)

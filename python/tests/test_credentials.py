"""The AWS credential chain: every provider against servers that follow AWS's
documented protocols, the S3 reads against SeaweedFS, renewal before expiry.

- S3 is SeaweedFS (servers.S3Server). SeaweedFS refuses a session token it
  did not issue itself (403 InvalidAccessKeyId for any x-amz-security-token),
  so a `SessionGateway` in front of it plays AWS's part for temporary
  credentials: it checks each request's SigV4 signature with the temporary
  secret, its x-amz-security-token and the session's expiry (400
  ExpiredToken past it, as S3 answers), then signs the request again with
  SeaweedFS's own identity and forwards it.
- `CredServer` is instance metadata (IMDSv2: a token PUT with
  X-aws-ec2-metadata-token-ttl-seconds, the role's name, its JSON
  credentials), the container endpoint (JSON, Authorization header) and STS
  (AssumeRole, AssumeRoleWithWebIdentity: form POSTs, XML answers). Every
  credential it issues is a new session of the gateway, with its own
  expiry.

They are reached through the standard variables (AWS_EC2_METADATA_SERVICE_ENDPOINT,
AWS_CONTAINER_CREDENTIALS_FULL_URI, AWS_ENDPOINT_URL_STS, ...), on 127.0.0.1.
No secret of any provider may appear in a message, the statistics or a file.
"""
import glob
import http.server
import json
import os
import random
import re
import socketserver
import string
import subprocess
import sys
import threading
import time
import urllib.parse

import pytest

import servers
from servers import HOST, S3Server, http_request, sigv4_headers
from test_remote import OPTS, assert_same, dataset, epoch, local_epoch  # noqa: F401 - fixtures

stoker = pytest.importorskip("stoker")

REPO = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))

# Every variable the chain reads: cleared so that this machine's own are not used.
CHAIN_VARS = S3Server.CLEARED + (
    "AWS_NO_SIGN_REQUEST", "AWS_WEB_IDENTITY_TOKEN_FILE", "AWS_ROLE_ARN", "AWS_ROLE_SESSION_NAME",
    "AWS_CONTAINER_CREDENTIALS_RELATIVE_URI", "AWS_CONTAINER_CREDENTIALS_FULL_URI",
    "AWS_CONTAINER_AUTHORIZATION_TOKEN", "AWS_CONTAINER_AUTHORIZATION_TOKEN_FILE",
    "AWS_EC2_METADATA_DISABLED", "AWS_EC2_METADATA_SERVICE_ENDPOINT",
    "AWS_EC2_METADATA_SERVICE_ENDPOINT_MODE", "AWS_EC2_METADATA_V1_DISABLED", "AWS_ENDPOINT_URL_STS",
    "AWS_ENDPOINT_URL_S3", "AWS_METADATA_SERVICE_TIMEOUT")


def _rand(n, alphabet=string.ascii_letters + string.digits + "/+"):
    return "".join(random.choice(alphabet) for _ in range(n))


def _iso(t):
    return time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime(t))


class _Server(socketserver.ThreadingMixIn, http.server.HTTPServer):
    daemon_threads = True
    allow_reuse_address = True


def _serve(handler):
    srv = _Server((HOST, 0), handler)
    threading.Thread(target=srv.serve_forever, daemon=True).start()
    return srv


# ---- the gateway: AWS's checks of temporary credentials in front of SeaweedFS ------

AUTH_RE = re.compile(r"AWS4-HMAC-SHA256 Credential=([^/]+)/(\d{8})/([^/]+)/s3/aws4_request, "
                     r"SignedHeaders=([^,]+), Signature=([0-9a-f]{64})")


def verify_sigv4(method, raw_path, headers, secret):
    """1 when the request's SigV4 signature is right for `secret` (headers: lower-case names)."""
    m = AUTH_RE.match(headers.get("authorization", ""))
    if not m:
        return False
    _, day, region, signed, sig = m.groups()
    path, _, query = raw_path.partition("?")
    names = signed.split(";")
    canon_headers = "".join(f"{k}:{headers.get(k, '').strip()}\n" for k in names)
    payload = headers.get("x-amz-content-sha256", "")
    canon = "\n".join([method, path, query, canon_headers, signed, payload])
    import hashlib
    import hmac

    scope = f"{day}/{region}/s3/aws4_request"
    to_sign = "\n".join(["AWS4-HMAC-SHA256", headers.get("x-amz-date", ""), scope,
                         hashlib.sha256(canon.encode()).hexdigest()])

    def h(key, msg):
        return hmac.new(key, msg.encode(), hashlib.sha256).digest()

    k = h(h(h(h(("AWS4" + secret).encode(), day), region), "s3"), "aws4_request")
    return hmac.compare_digest(hmac.new(k, to_sign.encode(), hashlib.sha256).hexdigest(), sig)


class SessionGateway:
    """Checks temporary credentials (signature, token, expiry), then forwards to S3."""

    def __init__(self, s3):
        self.s3 = s3
        self.sessions = {}  # key id -> dict(secret, token, expires)
        self.lock = threading.Lock()
        self.counts = {"ok": 0, "expired": 0, "bad_token": 0, "bad_signature": 0, "unknown": 0}
        self.keys_used = set()

    def add(self, key, secret, token, expires):
        with self.lock:
            self.sessions[key] = dict(secret=secret, token=token, expires=expires)

    def revoke_all(self):
        """Every session issued so far expires now (the next request with one gets ExpiredToken)."""
        with self.lock:
            for s in self.sessions.values():
                s["expires"] = time.time() - 1

    def check(self, method, raw_path, headers):
        """(status, S3 error code) of the checks, (200, None) when they pass."""
        m = AUTH_RE.match(headers.get("authorization", ""))
        with self.lock:
            sess = self.sessions.get(m.group(1)) if m else None
            if sess is None:
                self.counts["unknown"] += 1
                return 403, "InvalidAccessKeyId"
            if headers.get("x-amz-security-token") != sess["token"]:
                self.counts["bad_token"] += 1
                return 403, "InvalidToken"
            if "x-amz-security-token" not in m.group(4).split(";"):
                self.counts["bad_token"] += 1
                return 403, "InvalidToken"  # the token must be signed
            if time.time() >= sess["expires"]:
                self.counts["expired"] += 1
                return 400, "ExpiredToken"
            secret = sess["secret"]
        if not verify_sigv4(method, raw_path, headers, secret):
            with self.lock:
                self.counts["bad_signature"] += 1
            return 403, "SignatureDoesNotMatch"
        with self.lock:
            self.counts["ok"] += 1
            self.keys_used.add(m.group(1))
        return 200, None

    def start(self):
        gw = self

        class H(http.server.BaseHTTPRequestHandler):
            protocol_version = "HTTP/1.1"

            def log_message(self, *a):
                pass

            def _any(self):
                n = int(self.headers.get("Content-Length") or 0)
                body = self.rfile.read(n) if n else b""
                hdrs = {k.lower(): v for k, v in self.headers.items()}
                st, code = gw.check(self.command, self.path, hdrs)
                if st != 200:
                    err = (f"<?xml version=\"1.0\" encoding=\"UTF-8\"?>\n<Error><Code>{code}</Code>"
                           f"<Message>{code}</Message></Error>").encode()
                    self.send_response(st)
                    self.send_header("Content-Type", "application/xml")
                    self.send_header("Content-Length", str(len(err)))
                    self.end_headers()
                    if self.command != "HEAD":
                        self.wfile.write(err)
                    return
                url = gw.s3.endpoint + self.path
                extra = {"range": hdrs["range"]} if "range" in hdrs else {}
                h = sigv4_headers(self.command, url, body, servers.ACCESS_KEY, servers.SECRET_KEY,
                                  servers.REGION, extra=extra)
                h.pop("host")
                st, rh, data = http_request(self.command, url, body, h)
                self.send_response(st)
                for k in ("content-type", "content-range", "etag", "last-modified", "accept-ranges"):
                    if k in rh:
                        self.send_header(k, rh[k])
                self.send_header("Content-Length", rh.get("content-length", str(len(data)))
                                 if self.command == "HEAD" else str(len(data)))
                self.end_headers()
                if self.command != "HEAD":
                    self.wfile.write(data)

            do_GET = do_HEAD = do_PUT = do_POST = do_DELETE = _any

        self.srv = _serve(H)
        return self

    @property
    def url(self):
        return f"http://{HOST}:{self.srv.server_address[1]}"

    def stop(self):
        self.srv.shutdown()
        self.srv.server_close()


# ---- the providers' side: instance metadata, the container endpoint, STS ----------

class CredServer:
    """IMDSv2, a container credentials endpoint and STS, each handing out new
    gateway sessions that expire `ttl` seconds after they are issued."""

    ROLE = "stoker-reader"
    ROLE_ARN = "arn:aws:iam::123456789012:role/stoker-reader"

    def __init__(self, gateway, ttl=3600.0):
        self.gw = gateway
        self.ttl = ttl
        self.lock = threading.Lock()
        self.issued = []  # (key, secret, token, via)
        self.imds_tokens = set()
        self.imds_v2 = True  # False: the token PUT is refused (an IMDSv1-only service)
        self.container_token = "ContainerAuth-" + _rand(40, string.ascii_letters + string.digits)
        self.web_token = "eyJ" + _rand(200, string.ascii_letters + string.digits)
        self.sts_calls = []  # (action, form, authorization header)
        self.sso_token = "aoaAAAAA" + _rand(120, string.ascii_letters + string.digits)

    def issue(self, via):
        key = "ASIA" + _rand(16, string.ascii_uppercase + string.digits)
        secret = "tmpSecret/" + _rand(30)
        token = "IQoJb3JpZ2luX2Vj" + _rand(300)
        exp = time.time() + self.ttl
        self.gw.add(key, secret, token, exp)
        with self.lock:
            self.issued.append((key, secret, token, via))
        return key, secret, token, exp

    def secrets(self):
        with self.lock:
            return [s for _, s, _, _ in self.issued] + [t for _, _, t, _ in self.issued] + [
                self.container_token, self.web_token, self.sso_token] + list(self.imds_tokens)

    def count(self, via):
        with self.lock:
            return sum(1 for i in self.issued if i[3] == via)

    def _json(self, via):
        key, secret, token, exp = self.issue(via)
        return json.dumps({"Code": "Success", "LastUpdated": _iso(time.time()), "Type": "AWS-HMAC",
                           "AccessKeyId": key, "SecretAccessKey": secret, "Token": token,
                           "Expiration": _iso(exp), "RoleArn": self.ROLE_ARN}).encode()

    def _sts_xml(self, action):
        key, secret, token, exp = self.issue("sts")
        return (f'<{action}Response xmlns="https://sts.amazonaws.com/doc/2011-06-15/">'
                f"<{action}Result><Credentials><AccessKeyId>{key}</AccessKeyId>"
                f"<SecretAccessKey>{secret}</SecretAccessKey><SessionToken>{token}</SessionToken>"
                f"<Expiration>{_iso(exp)}</Expiration></Credentials>"
                f"<AssumedRoleUser><Arn>{self.ROLE_ARN}/stoker</Arn><AssumedRoleId>AROA:stoker"
                f"</AssumedRoleId></AssumedRoleUser></{action}Result>"
                f"<ResponseMetadata><RequestId>1</RequestId></ResponseMetadata></{action}Response>").encode()

    def handle(self, method, path, headers, body):
        """(status, content type, body) of one request."""
        if method == "PUT" and path == "/latest/api/token":
            if not self.imds_v2:
                return 403, "text/plain", b"Forbidden"
            if "x-aws-ec2-metadata-token-ttl-seconds" not in headers:
                return 400, "text/plain", b"Missing TTL header"
            tok = "IMDSTOKEN" + _rand(40, string.ascii_letters + string.digits)
            with self.lock:
                self.imds_tokens.add(tok)
            return 200, "text/plain", tok.encode()
        if method == "GET" and path.startswith("/latest/meta-data/iam/security-credentials/"):
            if self.imds_v2 and headers.get("x-aws-ec2-metadata-token") not in self.imds_tokens:
                return 401, "text/plain", b"Unauthorized"
            name = path[len("/latest/meta-data/iam/security-credentials/"):]
            if not name:
                return 200, "text/plain", self.ROLE.encode()
            if name != self.ROLE:
                return 404, "text/plain", b"Not Found"
            return 200, "text/plain", self._json("imds")
        if method == "GET" and path == "/container/creds":
            if headers.get("authorization") != self.container_token:
                return 403, "application/json", b'{"message": "bad token"}'
            return 200, "application/json", self._json("container")
        if method == "GET" and path.startswith("/federation/credentials?"):
            q = dict(urllib.parse.parse_qsl(path.split("?", 1)[1]))
            if headers.get("x-amz-sso_bearer_token") != self.sso_token:
                return 401, "application/json", b'{"message": "Session token not found or invalid"}'
            if q != {"account_id": "123456789012", "role_name": "reader"}:
                return 403, "application/json", b'{"message": "No access"}'
            key, secret, token, exp = self.issue("sso")
            return 200, "application/json", json.dumps({"roleCredentials": {
                "accessKeyId": key, "secretAccessKey": secret, "sessionToken": token,
                "expiration": int(exp * 1000)}}).encode()
        if method == "POST" and path == "/":
            form = dict(urllib.parse.parse_qsl(body.decode()))
            action = form.get("Action", "")
            with self.lock:
                self.sts_calls.append((action, form, headers.get("authorization", "")))
            if action == "AssumeRoleWithWebIdentity" and form.get("WebIdentityToken") == self.web_token \
                    and form.get("RoleArn") == self.ROLE_ARN and "authorization" not in headers:
                return 200, "text/xml", self._sts_xml(action)
            if action == "AssumeRole" and form.get("RoleArn") == self.ROLE_ARN and \
                    AUTH_RE.match(headers.get("authorization", "").replace("/sts/", "/s3/")):
                return 200, "text/xml", self._sts_xml(action)
            return 403, "text/xml", (b"<ErrorResponse><Error><Type>Sender</Type><Code>AccessDenied</Code>"
                                     b"<Message>Not authorized</Message></Error></ErrorResponse>")
        return 404, "text/plain", b"Not Found"

    def start(self):
        cs = self

        class H(http.server.BaseHTTPRequestHandler):
            protocol_version = "HTTP/1.1"

            def log_message(self, *a):
                pass

            def _any(self):
                n = int(self.headers.get("Content-Length") or 0)
                body = self.rfile.read(n) if n else b""
                hdrs = {k.lower(): v for k, v in self.headers.items()}
                st, ctype, data = cs.handle(self.command, self.path, hdrs, body)
                self.send_response(st)
                self.send_header("Content-Type", ctype)
                self.send_header("Content-Length", str(len(data)))
                self.end_headers()
                self.wfile.write(data)

            do_GET = do_PUT = do_POST = _any

        self.srv = _serve(H)
        return self

    @property
    def url(self):
        return f"http://{HOST}:{self.srv.server_address[1]}"

    def stop(self):
        self.srv.shutdown()
        self.srv.server_close()


# ---- fixtures ---------------------------------------------------------------------

@pytest.fixture(scope="module")
def gateway(s3_server):
    g = SessionGateway(s3_server).start()
    yield g
    g.stop()


@pytest.fixture()
def creds(gateway):
    c = CredServer(gateway).start()
    yield c
    c.stop()


@pytest.fixture()
def env(monkeypatch, tmp_path, gateway, s3_server):
    """Nothing of this machine's configuration: S3 through the gateway, no keys,
    HOME in the test's folder, instance metadata off until a test turns it on."""
    for k in CHAIN_VARS:
        monkeypatch.delenv(k, raising=False)
    home = tmp_path / "home"
    (home / ".aws").mkdir(parents=True)
    monkeypatch.setenv("HOME", str(home))
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path / "cache"))
    monkeypatch.setenv("AWS_ENDPOINT_URL_S3", gateway.url)
    monkeypatch.setenv("AWS_REGION", servers.REGION)
    monkeypatch.setenv("AWS_EC2_METADATA_DISABLED", "true")
    return home


def read_equals_local(dataset, tmp_path, url="s3://stoker/ds/"):  # noqa: F811
    """One epoch from S3 equals the local one, with an index folder and local
    copies under tmp_path (which no_secret searches); returns (stats, texts)."""
    with stoker.ImageLoader(url, pipeline="eval", index_dir=str(tmp_path / "idx"),
                            cache_dir=str(tmp_path / "copies"), **OPTS) as ld:
        got = epoch(ld)
        st = ld.stats()
        texts = [repr(st), ld.note, repr(ld.samples)]
    assert_same(got, local_epoch(dataset, pipeline="eval"), url)
    return st, texts


def no_secret(secrets, tmp_path, texts=()):
    """No secret of any provider in these texts nor in any file under tmp_path
    (index and cache files; the test's own token files aside)."""
    files = [p for p in glob.glob(os.path.join(str(tmp_path), "**"), recursive=True)
             if os.path.isfile(p) and "/home/" not in p and not p.endswith(".token")]
    blobs = [open(p, "rb").read() for p in files]
    for s in secrets:
        for t in texts:
            assert s not in t, "a secret is in a message or a statistic"
        for p, b in zip(files, blobs):
            assert s.encode() not in b, f"a secret is written in {p}"


def provider_of(stderr_or_text):
    m = re.search(r"credentials: (.*)", stderr_or_text)
    return m.group(1) if m else ""


# ---- each provider ----------------------------------------------------------------

def test_environment_session_token(dataset, env, creds, gateway, monkeypatch, tmp_path):
    key, secret, token, _ = creds.issue("env")
    monkeypatch.setenv("AWS_ACCESS_KEY_ID", key)
    monkeypatch.setenv("AWS_SECRET_ACCESS_KEY", secret)
    monkeypatch.setenv("AWS_SESSION_TOKEN", token)
    before = dict(gateway.counts)
    st, texts = read_equals_local(dataset, tmp_path)
    assert gateway.counts["ok"] > before["ok"]
    assert gateway.counts["bad_token"] == before["bad_token"]
    assert gateway.counts["bad_signature"] == before["bad_signature"]
    no_secret(creds.secrets(), tmp_path, texts)


def test_missing_named_profile_is_an_error(dataset, env, monkeypatch, tmp_path):
    (env / ".aws" / "credentials").write_text("[default]\naws_access_key_id = A\naws_secret_access_key = B\n")
    monkeypatch.setenv("AWS_PROFILE", "no-such-profile")
    with pytest.raises((OSError, ValueError)) as e:
        read_equals_local(dataset, tmp_path)
    assert "no-such-profile" in str(e.value) and "does not exist" in str(e.value), str(e.value)


def test_profile_credential_process(dataset, env, creds, monkeypatch, tmp_path):
    key, secret, token, exp = creds.issue("process")
    doc = tmp_path / "doc.json"
    doc.write_text(json.dumps({"Version": 1, "AccessKeyId": key, "SecretAccessKey": secret,
                               "SessionToken": token, "Expiration": _iso(exp)}))
    (env / ".aws" / "config").write_text(
        f"[profile proc]\nregion = {servers.REGION}\ncredential_process = {sys.executable} -c "
        f"\"import sys; sys.stdout.write(open('{doc}').read())\"\n")
    monkeypatch.setenv("AWS_PROFILE", "proc")
    st, texts = read_equals_local(dataset, tmp_path)
    doc.unlink()
    no_secret(creds.secrets(), tmp_path, texts)


def test_profile_assume_role_with_source_profile(dataset, env, creds, monkeypatch, tmp_path):
    (env / ".aws" / "credentials").write_text(
        "[base]\naws_access_key_id = AKIABASEKEY000000001\naws_secret_access_key = baseSecret/+1\n")
    (env / ".aws" / "config").write_text(
        f"[profile reader]\nrole_arn = {CredServer.ROLE_ARN}\nsource_profile = base\n"
        "role_session_name = train-job\ns3 =\n  addressing_style = path\n")
    monkeypatch.setenv("AWS_PROFILE", "reader")
    monkeypatch.setenv("AWS_ENDPOINT_URL_STS", creds.url)
    st, texts = read_equals_local(dataset, tmp_path)
    calls = [c for c in creds.sts_calls if c[0] == "AssumeRole"]
    assert calls, creds.sts_calls
    action, form, auth = calls[0]
    assert form["RoleSessionName"] == "train-job"
    # signed by the source profile's keys, for the STS service
    assert "Credential=AKIABASEKEY000000001/" in auth and "/sts/aws4_request" in auth, auth
    no_secret(creds.secrets() + ["baseSecret/+1"], tmp_path, texts)


def _token_file(tmp_path, creds):
    p = tmp_path / "web-identity.token"
    p.write_text(creds.web_token + "\n")
    return p


def test_profile_web_identity_token_file(dataset, env, creds, monkeypatch, tmp_path):
    tf = _token_file(tmp_path, creds)
    (env / ".aws" / "config").write_text(
        f"[default]\nrole_arn = {CredServer.ROLE_ARN}\nweb_identity_token_file = {tf}\n")
    monkeypatch.setenv("AWS_ENDPOINT_URL_STS", creds.url)
    st, texts = read_equals_local(dataset, tmp_path)
    assert creds.count("sts") == 1
    no_secret(creds.secrets(), tmp_path, texts)


def test_environment_web_identity(dataset, env, creds, monkeypatch, tmp_path):
    tf = _token_file(tmp_path, creds)
    monkeypatch.setenv("AWS_WEB_IDENTITY_TOKEN_FILE", str(tf))
    monkeypatch.setenv("AWS_ROLE_ARN", CredServer.ROLE_ARN)
    monkeypatch.setenv("AWS_ENDPOINT_URL_STS", creds.url)
    st, texts = read_equals_local(dataset, tmp_path)
    calls = [c for c in creds.sts_calls if c[0] == "AssumeRoleWithWebIdentity"]
    assert calls and calls[0][2] == "", "AssumeRoleWithWebIdentity is not signed"
    no_secret(creds.secrets(), tmp_path, texts)


@pytest.mark.parametrize("how", ["token", "token_file"])
def test_container_endpoint(dataset, env, creds, monkeypatch, tmp_path, how):
    monkeypatch.setenv("AWS_CONTAINER_CREDENTIALS_FULL_URI", creds.url + "/container/creds")
    if how == "token":
        monkeypatch.setenv("AWS_CONTAINER_AUTHORIZATION_TOKEN", creds.container_token)
    else:
        p = tmp_path / "container.token"
        p.write_text(creds.container_token)
        monkeypatch.setenv("AWS_CONTAINER_AUTHORIZATION_TOKEN_FILE", str(p))
    st, texts = read_equals_local(dataset, tmp_path)
    assert creds.count("container") == 1
    no_secret(creds.secrets(), tmp_path, texts)


def test_container_endpoint_wrong_token_names_it(dataset, env, creds, monkeypatch, tmp_path):
    monkeypatch.setenv("AWS_CONTAINER_CREDENTIALS_FULL_URI", creds.url + "/container/creds")
    monkeypatch.setenv("AWS_CONTAINER_AUTHORIZATION_TOKEN", "wrong-" + creds.container_token)
    with pytest.raises(OSError) as e:
        read_equals_local(dataset, tmp_path)
    msg = str(e.value)
    assert "container endpoint" in msg and "403" in msg, msg
    assert creds.container_token not in msg


def test_instance_metadata_v2(dataset, env, creds, monkeypatch, tmp_path):
    monkeypatch.delenv("AWS_EC2_METADATA_DISABLED")
    monkeypatch.setenv("AWS_EC2_METADATA_SERVICE_ENDPOINT", creds.url + "/")
    st, texts = read_equals_local(dataset, tmp_path)
    assert creds.count("imds") == 1 and creds.imds_tokens
    no_secret(creds.secrets(), tmp_path, texts)


def test_instance_metadata_v1_only_when_allowed(dataset, env, creds, monkeypatch, tmp_path):
    creds.imds_v2 = False
    monkeypatch.delenv("AWS_EC2_METADATA_DISABLED")
    monkeypatch.setenv("AWS_EC2_METADATA_SERVICE_ENDPOINT", creds.url)
    with pytest.raises(OSError) as e:
        read_equals_local(dataset, tmp_path)
    assert "IMDSv1" in str(e.value) and "AWS_EC2_METADATA_V1_DISABLED" in str(e.value), str(e.value)
    monkeypatch.setenv("AWS_EC2_METADATA_V1_DISABLED", "false")
    read_equals_local(dataset, tmp_path)
    assert creds.count("imds") == 1


def test_chain_order(dataset, env, creds, monkeypatch, tmp_path):
    """The environment's web identity comes before the container endpoint, which
    comes before instance metadata; the environment's keys before them all."""
    tf = _token_file(tmp_path, creds)
    monkeypatch.setenv("AWS_WEB_IDENTITY_TOKEN_FILE", str(tf))
    monkeypatch.setenv("AWS_ROLE_ARN", CredServer.ROLE_ARN)
    monkeypatch.setenv("AWS_ENDPOINT_URL_STS", creds.url)
    monkeypatch.setenv("AWS_CONTAINER_CREDENTIALS_FULL_URI", creds.url + "/container/creds")
    monkeypatch.setenv("AWS_CONTAINER_AUTHORIZATION_TOKEN", creds.container_token)
    monkeypatch.delenv("AWS_EC2_METADATA_DISABLED")
    monkeypatch.setenv("AWS_EC2_METADATA_SERVICE_ENDPOINT", creds.url)
    read_equals_local(dataset, tmp_path)
    assert (creds.count("sts"), creds.count("container"), creds.count("imds")) == (1, 0, 0)
    monkeypatch.delenv("AWS_WEB_IDENTITY_TOKEN_FILE")
    read_equals_local(dataset, tmp_path)
    assert (creds.count("sts"), creds.count("container"), creds.count("imds")) == (1, 1, 0)
    key, secret, token, _ = creds.issue("env")
    monkeypatch.setenv("AWS_ACCESS_KEY_ID", key)
    monkeypatch.setenv("AWS_SECRET_ACCESS_KEY", secret)
    monkeypatch.setenv("AWS_SESSION_TOKEN", token)
    read_equals_local(dataset, tmp_path)
    assert (creds.count("sts"), creds.count("container"), creds.count("imds")) == (1, 1, 0)


def test_no_credentials_says_what_was_tried(dataset, env, monkeypatch, tmp_path, s3_server):
    # public buckets are read unsigned, as before
    monkeypatch.setenv("AWS_ENDPOINT_URL_S3", s3_server.endpoint)
    read_equals_local(dataset, tmp_path, "s3://public/ds/")
    with pytest.raises(OSError) as e:
        read_equals_local(dataset, tmp_path)
    msg = str(e.value)
    assert "403" in msg and "no AWS credentials found (tried: environment" in msg, msg
    for what in ("profile 'default'", "web identity", "container endpoint", "instance metadata"):
        assert what in msg, msg


def test_stoker_info_names_the_provider(dataset, env, creds, monkeypatch, tmp_path):
    exe = os.path.join(REPO, "build", "stoker")
    if not os.access(exe, os.X_OK):
        pytest.skip("no build/stoker")
    monkeypatch.setenv("AWS_CONTAINER_CREDENTIALS_FULL_URI", creds.url + "/container/creds")
    monkeypatch.setenv("AWS_CONTAINER_AUTHORIZATION_TOKEN", creds.container_token)
    r = subprocess.run([exe, "info", "s3://stoker/ds/"], capture_output=True, text=True, timeout=120,
                       env={**os.environ, "XDG_CACHE_HOME": str(tmp_path / "cache")})
    assert r.returncode == 0, r.stderr
    line = provider_of(r.stdout)
    assert line.startswith(f"container endpoint ({creds.url}/container/creds), temporary"), r.stdout
    for s in creds.secrets():
        assert s not in r.stdout and s not in r.stderr


def _sso_profile(home, creds, legacy, expires_in=3600):
    import hashlib

    start = "https://corp.awsapps.com/start"
    if legacy:
        cfg = (f"[profile sso]\nsso_start_url = {start}\nsso_region = us-east-1\n"
               "sso_account_id = 123456789012\nsso_role_name = reader\n")
        key = start
    else:
        cfg = ("[profile sso]\nsso_session = corp\nsso_account_id = 123456789012\n"
               "sso_role_name = reader\nregion = us-east-1\n\n"
               f"[sso-session corp]\nsso_start_url = {start}\nsso_region = us-east-1\n"
               "sso_registration_scopes = sso:account:access\n")
        key = "corp"
    (home / ".aws" / "config").write_text(cfg)
    cache = home / ".aws" / "sso" / "cache"
    cache.mkdir(parents=True, exist_ok=True)
    (cache / (hashlib.sha1(key.encode()).hexdigest() + ".json")).write_text(json.dumps({
        "startUrl": start, "region": "us-east-1", "accessToken": creds.sso_token,
        "expiresAt": _iso(time.time() + expires_in)}))


@pytest.mark.parametrize("legacy", [False, True])
def test_profile_sso_cached_token(dataset, env, creds, monkeypatch, tmp_path, legacy):
    _sso_profile(env, creds, legacy)
    monkeypatch.setenv("AWS_PROFILE", "sso")
    monkeypatch.setenv("AWS_ENDPOINT_URL_SSO", creds.url)
    st, texts = read_equals_local(dataset, tmp_path)
    assert creds.count("sso") == 1
    no_secret(creds.secrets(), tmp_path, texts)


def test_profile_sso_expired_token_says_login(dataset, env, creds, monkeypatch, tmp_path):
    _sso_profile(env, creds, False, expires_in=-60)
    monkeypatch.setenv("AWS_PROFILE", "sso")
    monkeypatch.setenv("AWS_ENDPOINT_URL_SSO", creds.url)
    with pytest.raises((OSError, ValueError)) as e:
        read_equals_local(dataset, tmp_path)
    assert "aws sso login --profile sso" in str(e.value) and "expired" in str(e.value), str(e.value)
    assert creds.sso_token not in str(e.value)


# ---- renewal ------------------------------------------------------------------------

def _read_for(dataset, tmp_path, seconds):
    """Epochs for `seconds`, each compared with the local one; the loader's stats."""
    want = local_epoch(dataset, pipeline="eval")
    n = 0
    with stoker.ImageLoader("s3://stoker/ds/", pipeline="eval", index_dir=str(tmp_path / "idx"),
                            remote_memory=1, **OPTS) as ld:
        t0 = time.monotonic()
        while time.monotonic() - t0 < seconds:
            assert_same(epoch(ld), want, f"epoch {n}")
            n += 1
        return ld.stats(), n


def _use_provider(via, creds, monkeypatch, tmp_path, env):
    """Points the chain at one temporary-credential provider of creds."""
    if via == "imds":
        monkeypatch.delenv("AWS_EC2_METADATA_DISABLED")
        monkeypatch.setenv("AWS_EC2_METADATA_SERVICE_ENDPOINT", creds.url)
    elif via == "container":
        monkeypatch.setenv("AWS_CONTAINER_CREDENTIALS_FULL_URI", creds.url + "/container/creds")
        monkeypatch.setenv("AWS_CONTAINER_AUTHORIZATION_TOKEN", creds.container_token)
    elif via == "sts":
        monkeypatch.setenv("AWS_WEB_IDENTITY_TOKEN_FILE", str(_token_file(tmp_path, creds)))
        monkeypatch.setenv("AWS_ROLE_ARN", CredServer.ROLE_ARN)
        monkeypatch.setenv("AWS_ENDPOINT_URL_STS", creds.url)
    elif via == "sso":
        _sso_profile(env, creds, False)
        monkeypatch.setenv("AWS_PROFILE", "sso")
        monkeypatch.setenv("AWS_ENDPOINT_URL_SSO", creds.url)


@pytest.mark.parametrize("via", ["imds", "container", "sts", "sso"])
def test_renewal_before_expiry_mid_epoch(dataset, env, creds, gateway, monkeypatch, tmp_path, via):
    """Credentials of 4 s: renewed at half their life while epochs go on; no
    request is ever refused as expired, and the reads use the new ones."""
    creds.ttl = 4
    _use_provider(via, creds, monkeypatch, tmp_path, env)
    expired0 = gateway.counts["expired"]
    ok0 = gateway.counts["ok"]
    st, n = _read_for(dataset, tmp_path, 9)
    assert creds.count(via) >= 4, creds.count(via)
    assert gateway.counts["expired"] == expired0
    assert st["remote_failures"] == 0 and n >= 3
    # the epochs' reads went out signed with the renewed credentials
    assert gateway.counts["ok"] - ok0 >= 3 * n, (gateway.counts["ok"] - ok0, n)
    assert len(gateway.keys_used & {k for k, _, _, v in creds.issued if v == via}) >= 3
    no_secret(creds.secrets(), tmp_path, [repr(st)])


def test_expired_token_renews_once_and_retries(dataset, env, creds, gateway, monkeypatch, tmp_path):
    """A session revoked early (400 ExpiredToken): renewed at once, the request
    sent again; the epoch loses nothing."""
    monkeypatch.setenv("AWS_CONTAINER_CREDENTIALS_FULL_URI", creds.url + "/container/creds")
    monkeypatch.setenv("AWS_CONTAINER_AUTHORIZATION_TOKEN", creds.container_token)
    want = local_epoch(dataset, pipeline="eval")
    expired0 = gateway.counts["expired"]
    with stoker.ImageLoader("s3://stoker/ds/", pipeline="eval", index_dir=str(tmp_path / "idx"),
                            remote_memory=1, **OPTS) as ld:
        assert_same(epoch(ld), want, "before")
        gateway.revoke_all()
        assert_same(epoch(ld), want, "after the revocation")
        st = ld.stats()
    assert gateway.counts["expired"] > expired0
    assert creds.count("container") == 2
    assert st["remote_retries"] >= 1
    no_secret(creds.secrets(), tmp_path, [repr(st)])


@pytest.mark.skipif(not os.environ.get("STOKER_SLOW"), reason="long run: STOKER_SLOW=1")
def test_long_run_short_credentials(dataset, env, creds, gateway, monkeypatch, tmp_path):
    """Credentials that expire every 3 s, 5 minutes of reading: nothing lost."""
    creds.ttl = 3
    tf = _token_file(tmp_path, creds)
    monkeypatch.setenv("AWS_WEB_IDENTITY_TOKEN_FILE", str(tf))
    monkeypatch.setenv("AWS_ROLE_ARN", CredServer.ROLE_ARN)
    monkeypatch.setenv("AWS_ENDPOINT_URL_STS", creds.url)
    expired0 = gateway.counts["expired"]
    st, n = _read_for(dataset, tmp_path, 300)
    assert creds.count("sts") >= 100, creds.count("sts")
    assert gateway.counts["expired"] == expired0 and st["remote_failures"] == 0
    no_secret(creds.secrets(), tmp_path, [repr(st)])


@pytest.mark.parametrize("uri", ["http://127.evil.example:80/creds", "http://localhost.evil.example/creds",
                                 "http://169.254.170.2.evil.example/creds", "http://10.0.0.1/creds"])
def test_container_full_uri_plain_http_only_to_local_hosts(dataset, env, monkeypatch, tmp_path, uri):
    """The authorization token is not sent in clear to other hosts, as the SDKs refuse."""
    monkeypatch.setenv("AWS_CONTAINER_CREDENTIALS_FULL_URI", uri)
    monkeypatch.setenv("AWS_CONTAINER_AUTHORIZATION_TOKEN", "secret-container-token-xyz")
    with pytest.raises((OSError, ValueError)) as e:
        read_equals_local(dataset, tmp_path)
    assert "plain http only to loopback" in str(e.value), str(e.value)
    assert "secret-container-token-xyz" not in str(e.value)

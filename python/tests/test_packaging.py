"""Packaging: what setup.py and pyproject.toml promise, checked without
building a wheel (make test-wheel builds the sdist and a wheel from it).

- Python 3.10: requires-python, the wheel's stable-ABI tag and the
  extension's Py_LIMITED_API agree, and the extension compiles against the
  3.10 limited API (against a 3.10 interpreter's headers when one is here);
- nvcc: found on PATH, in CUDA_HOME, in the usual folders, or from the
  nvidia-cuda-nvcc-cu12 wheel; none is an error unless CPU-only is asked for;
- the long description PyPI shows has no relative links.
"""
import glob
import importlib.util
import os
import re
import shutil
import subprocess
import sys
import sysconfig

import pytest

from conftest import PKG_ROOT

REPO = os.path.dirname(PKG_ROOT)
SETUP = os.path.join(REPO, "setup.py")
EXT = os.path.join(PKG_ROOT, "stoker", "_stoker.c")
# the private module of the ops hooks, built and shipped beside _stoker
OPS_EXT = os.path.join(PKG_ROOT, "stoker", "_stoker_ops.c")

if not os.path.exists(SETUP):
    pytest.skip("the source tree is not here", allow_module_level=True)


@pytest.fixture(scope="module")
def setup_py():
    spec = importlib.util.spec_from_file_location("stoker_setup_under_test", SETUP)
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)  # defines, does not build: setup() runs only as __main__
    return mod


def pyproject():
    return open(os.path.join(REPO, "pyproject.toml")).read()


# ---- Python 3.10 ---------------------------------------------------------------

def limited_api_value(path=EXT):
    m = re.search(r"#define Py_LIMITED_API (0x[0-9A-Fa-f]+)", open(path).read())
    assert m, f"{os.path.basename(path)} defines no Py_LIMITED_API"
    return int(m.group(1), 16)


def test_python_310_everywhere(setup_py):
    assert re.search(r'^requires-python = ">=3\.10"$', pyproject(), re.M)
    assert '"Programming Language :: Python :: 3.10"' in pyproject()
    assert setup_py.LIMITED_API_TAG == "cp310"
    assert limited_api_value() == 0x030A0000
    assert limited_api_value(OPS_EXT) == 0x030A0000


def test_the_ops_module_is_built_and_shipped_beside_the_binding(setup_py):
    """stoker._stoker_ops (stoker.functional and the tests import it) is a
    CMake target of its own: setup.py must build it and copy it next to
    _stoker, and the wheel must leave out the C sources and their header."""
    cmake = open(os.path.join(PKG_ROOT, "CMakeLists.txt")).read()
    assert re.search(r"stk_python_module\(stoker_python_ops _stoker_ops\)", cmake)
    setup_src = open(SETUP).read()
    assert '"stoker_python_ops"' in setup_src and '"_stoker_ops.abi3.so"' in setup_src
    assert re.search(r'^stoker = \["\*\.c", "\*\.h"\]$', pyproject(), re.M)
    wheel_check = open(os.path.join(REPO, "scripts", "test-wheel.sh")).read()
    assert "stoker/_stoker_ops.abi3.so" in wheel_check
    # the binding holds no test hook: they live in the private module only
    binding = open(EXT).read()
    for hook in ("_apply_op", "_aug_draws", "_op_names", "_rrc_params"):
        assert f'"{hook}"' not in binding and f'"{hook}"' in open(OPS_EXT).read(), hook


def python_includes():
    """Header folders of the Pythons here: this one, and any 3.10 found."""
    out = [sysconfig.get_paths()["include"]]
    cands = [shutil.which("python3.10")] + glob.glob(
        os.path.expanduser("~/.pyenv/versions/3.10*/bin/python3.10"))
    for py in cands:
        if py:
            r = subprocess.run([py, "-c", "import sysconfig; print(sysconfig.get_paths()['include'])"],
                               capture_output=True, text=True)
            if r.returncode == 0 and os.path.exists(os.path.join(r.stdout.strip(), "Python.h")):
                out.append(r.stdout.strip())
                break
    return [d for d in out if os.path.exists(os.path.join(d, "Python.h"))]


def test_extension_compiles_against_the_310_limited_api():
    cc = shutil.which("cc") or shutil.which("gcc")
    if cc is None:
        pytest.skip("no C compiler")
    incs = python_includes()
    if not incs:
        pytest.skip("no Python headers")
    for inc in incs:
        # The file's own Py_LIMITED_API: a call newer than it is undeclared there.
        r = subprocess.run([cc, "-fsyntax-only", "-std=c11", "-I", inc,
                            "-I", os.path.join(REPO, "include"), "-I", os.path.join(REPO, "src"),
                            "-Werror=implicit-function-declaration", "-Werror=int-conversion",
                            "-Werror=incompatible-pointer-types", EXT, OPS_EXT],
                           capture_output=True, text=True)
        assert r.returncode == 0, f"{inc}:\n{r.stderr[-3000:]}"


# ---- nvcc ------------------------------------------------------------------------

def fake_nvcc(path):
    os.makedirs(os.path.dirname(path), exist_ok=True)
    with open(path, "w") as f:
        f.write("#!/bin/sh\n")
    os.chmod(path, 0o755)
    return str(path)


def nowhere(*a, **k):
    return None


def no_system_folders(p):
    return not p.startswith(("/usr/local/cuda", "/opt/cuda")) and os.path.isfile(p)


def test_nvcc_search_order(setup_py, tmp_path):
    on_path = fake_nvcc(tmp_path / "bin" / "nvcc")
    home = fake_nvcc(tmp_path / "cuda" / "bin" / "nvcc")
    wheel = fake_nvcc(tmp_path / "site" / "nvidia" / "cuda_nvcc" / "bin" / "nvcc")
    env = {"PATH": str(tmp_path / "bin"), "CUDA_HOME": str(tmp_path / "cuda")}
    sites = [str(tmp_path / "site")]
    f = setup_py.find_nvcc
    assert f(env, sites=sites, isfile=no_system_folders)[0] == on_path
    assert f(env, which=nowhere, sites=sites, isfile=no_system_folders)[0] == home
    del env["CUDA_HOME"]
    assert f(env, which=nowhere, sites=sites, isfile=no_system_folders) == (
        wheel, "the nvcc wheel (cuda_nvcc)")
    assert f(dict(env, STOKER_NVCC="/x/nvcc"), sites=sites)[0] == "/x/nvcc"
    assert f(env, which=nowhere, sites=[], isfile=no_system_folders)[0] is None
    # the system's folders before the wheel
    assert f(env, which=nowhere, sites=sites,
             isfile=lambda p: p == "/usr/local/cuda/bin/nvcc" or os.path.isfile(p))[0] == \
        "/usr/local/cuda/bin/nvcc"


def test_the_wheel_nvcc_of_the_target_environment(setup_py, monkeypatch, tmp_path):
    # pip's isolated build hides the target's site-packages from sys.path;
    # sysconfig still names it.
    site = tmp_path / "venv-site"
    wheel = fake_nvcc(site / "nvidia" / "cuda_nvcc" / "bin" / "nvcc")
    real = sysconfig.get_paths

    def paths(*a, **k):
        return dict(real(*a, **k), purelib=str(site))
    monkeypatch.setattr(sysconfig, "get_paths", paths)
    assert str(site) in setup_py.site_dirs()
    assert setup_py.find_nvcc({"PATH": ""}, which=nowhere, isfile=no_system_folders)[0] == wheel


def test_no_nvcc_is_an_error_unless_cpu_only(setup_py):
    kw = dict(which=nowhere, sites=[], isfile=no_system_folders)
    with pytest.raises(RuntimeError, match="STOKER_CPU_ONLY=1") as e:
        setup_py.gpu_cmake_args({"PATH": ""}, **kw)
    assert "CUDA toolkit" in str(e.value) and "R535" in str(e.value)
    assert setup_py.gpu_cmake_args({"STOKER_CPU_ONLY": "1"}, **kw) == ["-DSTK_GPU=OFF"]
    assert setup_py.gpu_cmake_args({"STOKER_CMAKE_ARGS": "-DSTK_GPU=OFF"}, **kw) == ["-DSTK_GPU=OFF"]
    assert setup_py.gpu_cmake_args({"STOKER_CMAKE_ARGS": "-DSTK_NVCC=/n/nvcc"}, **kw) == []
    assert setup_py.gpu_cmake_args({"STOKER_CPU_ONLY": "0", "STOKER_NVCC": "/n/nvcc"}, **kw) == [
        "-DSTK_NVCC=/n/nvcc"]


def test_driver_and_gpus_documented():
    readme = open(os.path.join(REPO, "README.md")).read()
    for s in ("R580", "R535", "sm_80", "STOKER_CPU_ONLY", "nvidia-cuda-nvcc-cu12", "nvidia-nvjpeg"):
        assert s in readme, s


# ---- the long description -----------------------------------------------------------

def test_long_description_has_no_relative_links(setup_py):
    assert re.search(r'^dynamic = \[.*"readme".*\]', pyproject(), re.M)
    assert not re.search(r"^readme\s*=", pyproject(), re.M)
    text = setup_py.long_description()
    assert "stoker.ImageLoader" in text
    rel = [u for u in re.findall(r"\]\(([^)\s]+)\)", text) if not re.match(r"[a-z]+://", u)]
    assert rel == [], rel
    assert "`docs/gpu.md` in the source distribution" in text

"""Where libstoker finds nvJPEG in a pip-only environment: the nvidia-nvjpeg
wheels' folders (nvidia/cu13/lib, nvidia/nvjpeg/lib) and torchvision's bundled
copy (torchvision.libs, whose file name carries a hash), found by the package
on import without LD_LIBRARY_PATH, and the copy used named by build_info() and
`stoker info`.

No GPU is needed: the copies here are stand-in libraries that have nvJPEG's
symbols and a version of their own, opened but never used to decode.
"""
import ctypes
import os
import re
import shutil
import subprocess
import sys

import pytest

from conftest import PKG_ROOT, HERE

import stoker

REPO = os.path.dirname(PKG_ROOT)
BINDING = os.path.join(REPO, "src", "gpu", "binding.c")


def system_nvjpeg():
    for name in ("libnvjpeg.so.13", "libnvjpeg.so.12", "libnvjpeg.so.11", "libnvjpeg.so"):
        try:
            ctypes.CDLL(name)
            return name
        except OSError:
            pass
    return None


def stand_in(path, minor):
    """A library with nvJPEG's symbols (as src/gpu/binding.c asks for them) that
    says it is nvJPEG 12.<minor>.7."""
    cc = shutil.which("cc") or shutil.which("gcc") or shutil.which("clang")
    if cc is None:
        pytest.skip("no C compiler")
    if not os.path.exists(BINDING):
        pytest.skip("the source tree is not here")
    names = re.findall(r'NJ_SYM\(\w+, "(\w+)"', open(BINDING).read())
    assert "nvjpegGetProperty" in names
    src = ["int nvjpegGetProperty(int t, int *v) { *v = t == 0 ? 12 : t == 1 ? %d : 7; "
           "return 0; }" % minor]
    src += [f"int {n}(void) {{ return 1; }}" for n in names if n != "nvjpegGetProperty"]
    c = str(path) + ".c"
    os.makedirs(os.path.dirname(str(path)), exist_ok=True)
    with open(c, "w") as f:
        f.write("\n".join(src) + "\n")
    subprocess.run([cc, "-shared", "-fPIC", "-o", str(path), c], check=True)
    os.remove(c)


@pytest.fixture()
def site(tmp_path):
    """A site-packages with the CUDA 12 nvidia-nvjpeg wheel's copy (12.1.7) and
    torchvision's (12.2.7); no CUDA 13 one."""
    s = tmp_path / "site-packages"
    stand_in(s / "nvidia" / "nvjpeg" / "lib" / "libnvjpeg.so.12", 1)
    stand_in(s / "torchvision.libs" / "libnvjpeg-3b2f4c1d.so.12", 2)
    (s / "nvidia" / "cublas" / "lib").mkdir(parents=True)  # another wheel: not a candidate
    return s


def test_candidate_folders_in_order(site):
    wheel = str(site / "nvidia" / "nvjpeg" / "lib")
    tv = str(site / "torchvision.libs")
    assert stoker._nvjpeg_dirs([str(site)]) == [wheel, tv]
    (site / "nvidia" / "cu13" / "lib").mkdir(parents=True)
    (site / "torchvision" / "lib").mkdir(parents=True)
    assert stoker._nvjpeg_dirs([str(site), "/nonexistent"]) == [
        str(site / "nvidia" / "cu13" / "lib"), wheel, tv, str(site / "torchvision" / "lib")]
    assert stoker._nvjpeg_dirs([]) == []


def probe(site, extra_env=None):
    """build_info() of a fresh interpreter that has `site` on its path, as a
    venv with the wheels would, and no STOKER_NVJPEG_PATH or LD_LIBRARY_PATH."""
    env = {k: v for k, v in os.environ.items()
           if k not in ("STOKER_NVJPEG_PATH", "STOKER_NVJPEG", "LD_LIBRARY_PATH")}
    pkg_parent = os.path.dirname(os.path.dirname(stoker.__file__))
    env["PYTHONPATH"] = os.pathsep.join([pkg_parent, str(site)])
    env.update(extra_env or {})
    r = subprocess.run([sys.executable, "-c", "import stoker; print(stoker.build_info())"],
                       env=env, capture_output=True, text=True, cwd=HERE)
    assert r.returncode == 0, r.stderr
    line = [ln for ln in r.stdout.splitlines() if ln.startswith("nvjpeg:")]
    assert line, r.stdout
    return line[0], env


@pytest.fixture()
def no_system_copy():
    name = system_nvjpeg()
    if name:
        pytest.skip(f"{name} is on the loader's path: it comes first, as documented")


def test_the_wheel_copy_is_found_and_reported(site, no_system_copy):
    line, env = probe(site)
    assert line == f"nvjpeg: 12.1.7 ({site / 'nvidia' / 'nvjpeg' / 'lib' / 'libnvjpeg.so.12'})"
    # the stoker command says the same (it inherits the package's search path)
    from stoker import cli
    if cli.binary():
        r = subprocess.run([sys.executable, "-m", "stoker", "info"], env=env,
                           capture_output=True, text=True, cwd=HERE)
        assert line in r.stdout.splitlines(), r.stdout + r.stderr


def test_torchvision_copy_when_there_is_no_wheel(site, no_system_copy):
    shutil.rmtree(site / "nvidia" / "nvjpeg")
    line, _ = probe(site)
    assert line == f"nvjpeg: 12.2.7 ({site / 'torchvision.libs' / 'libnvjpeg-3b2f4c1d.so.12'})"


def test_a_broken_copy_is_passed_over_and_named(site, no_system_copy):
    lib = site / "nvidia" / "nvjpeg" / "lib" / "libnvjpeg.so.12"
    lib.write_bytes(b"not a library")
    line, _ = probe(site)
    assert line.startswith("nvjpeg: 12.2.7 ("), line  # torchvision's, next in line
    # an explicit file comes first of all
    other = site / "mine" / "libnvjpeg.so.12"
    stand_in(other, 9)
    line, _ = probe(site, {"STOKER_NVJPEG": str(other)})
    assert line == f"nvjpeg: 12.9.7 ({other})"


def test_nothing_found_says_where_it_looked(tmp_path, no_system_copy):
    line, _ = probe(tmp_path)
    assert line.startswith("nvjpeg: not available (libnvjpeg.so.* cannot be opened"), line
    assert "nvidia-nvjpeg" in line

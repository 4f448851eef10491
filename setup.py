"""Builds stoker._stoker and the stoker command through the project's CMake build.

`pip install .` (or `pip wheel .`) configures CMake on this repository with
the Python extension switched on, builds the targets stoker_python (the module,
linked against the static libstoker) and stoker_cli (the `stoker` command), and
puts _stoker.abi3.so and bin/stoker into the package. pyproject.toml declares
CMake and Ninja, so a Python with a C compiler is enough, besides the
libjpeg-turbo, libspng, libwebp and libtiff development files (the configure
step names the packages when they are missing).

The GPU kernels are built with nvcc, the first found of: $STOKER_NVCC, nvcc
on PATH, $CUDA_HOME/$CUDA_PATH/$CUDA_ROOT/bin/nvcc, /usr/local/cuda/bin/nvcc,
/opt/cuda/bin/nvcc, and an nvcc inside an NVIDIA wheel in the environment
being installed into (site-packages/nvidia/cuda_nvcc/bin/nvcc or
nvidia/cu13/bin/nvcc; the nvidia-cuda-nvcc-cu12 wheels 12.1-12.9 ship only
ptxas there, so in practice a CUDA toolkit). Without one
the build fails, unless a CPU-only build is asked for (STOKER_CPU_ONLY=1).
Kernels from a CUDA 13 nvcc need an R580 driver or later; a CUDA 12 nvcc's
load on R535 and later (sm_80 and up either way).

Environment:
  STOKER_CPU_ONLY     1: build without the GPU kernels (device="cuda" then
                      reports that the build has none)
  STOKER_NVCC         the nvcc to use
  STOKER_CMAKE_ARGS   extra CMake arguments, split as a shell would, e.g.
                      "-DSTK_NVCC=/opt/cuda/bin/nvcc"
  STOKER_BUILD_DIR    the scratch folder (default build/setuptools)
  STK_BUILD_TYPE      the CMake build type (default Release)
"""
import os
import re
import shlex
import shutil
import subprocess
import sys

from setuptools import Extension, setup
from setuptools.command.build_ext import build_ext

ROOT = os.path.dirname(os.path.abspath(__file__))


def _cache_value(build_dir, name):
    """A variable of CMakeCache.txt, or None."""
    try:
        with open(os.path.join(build_dir, "CMakeCache.txt")) as f:
            for line in f:
                m = re.match(rf"{re.escape(name)}(?::[A-Z]+)?=(.*)$", line.rstrip("\n"))
                if m:
                    return m.group(1)
    except OSError:
        pass
    return None


def _truthy(v):
    return (v or "").strip().lower() not in ("", "0", "no", "off", "false")


def site_dirs():
    """The site-packages folders of the environment being installed into: pip's
    isolated build hides them from sys.path, not from sysconfig."""
    import sysconfig

    out = []
    for key in ("purelib", "platlib"):
        d = sysconfig.get_paths().get(key)
        if d and d not in out:
            out.append(d)
    for d in sys.path:
        if d.endswith(("site-packages", "dist-packages")) and d not in out:
            out.append(d)
    return out


# Where the nvcc wheels put nvcc: nvidia-cuda-nvcc-cu12 (CUDA 12, whose
# kernels load on R535+ drivers) first, then the CUDA 13 one.
NVCC_WHEEL_PATHS = ("nvidia/cuda_nvcc/bin/nvcc", "nvidia/cu13/bin/nvcc")


def find_nvcc(environ=None, which=shutil.which, sites=None, isfile=None):
    """(path, where) of the nvcc to build the kernels with, or (None, places looked)."""
    environ = os.environ if environ is None else environ
    isfile = isfile or (lambda p: os.path.isfile(p) and os.access(p, os.X_OK))
    if environ.get("STOKER_NVCC"):
        return environ["STOKER_NVCC"], "STOKER_NVCC"
    on_path = which("nvcc", path=environ.get("PATH", os.defpath))
    if on_path:
        return on_path, "PATH"
    for var in ("CUDA_HOME", "CUDA_PATH", "CUDA_ROOT"):
        if environ.get(var) and isfile(os.path.join(environ[var], "bin", "nvcc")):
            return os.path.join(environ[var], "bin", "nvcc"), var
    for d in ("/usr/local/cuda", "/opt/cuda"):
        if isfile(os.path.join(d, "bin", "nvcc")):
            return os.path.join(d, "bin", "nvcc"), d
    for site in site_dirs() if sites is None else sites:
        for rel in NVCC_WHEEL_PATHS:
            p = os.path.join(site, *rel.split("/"))
            if isfile(p):
                return p, "the nvcc wheel (" + rel.split("/")[1] + ")"
    return None, ("PATH, CUDA_HOME, CUDA_PATH, CUDA_ROOT, /usr/local/cuda, /opt/cuda and the "
                  "nvidia-cuda-nvcc-cu12 wheel")


def gpu_cmake_args(environ=None, **kw):
    """The CMake arguments that decide the GPU kernels: -DSTK_GPU=OFF for a
    CPU-only build (STOKER_CPU_ONLY=1, or STOKER_CMAKE_ARGS with -DSTK_GPU=OFF),
    else -DSTK_NVCC=<the nvcc found>. No nvcc and no CPU-only request: an error
    that says how to get either."""
    environ = os.environ if environ is None else environ
    extra = shlex.split(environ.get("STOKER_CMAKE_ARGS", ""))
    if _truthy(environ.get("STOKER_CPU_ONLY")) or any(
            re.fullmatch(r"-DSTK_GPU(:BOOL)?=(OFF|0|NO|FALSE)", a, re.I) for a in extra):
        return ["-DSTK_GPU=OFF"]
    if any(a.startswith("-DSTK_NVCC=") for a in extra):
        return []
    nvcc, where = find_nvcc(environ, **kw)
    if nvcc is None:
        raise RuntimeError(
            "stoker: no nvcc found (looked on " + where + "), so the GPU kernels "
            "(device='cuda') cannot be built. Either install a CUDA toolkit (a CUDA 12 "
            "toolkit's kernels load on R535 drivers and later, CUDA 13's on R580 and "
            "later; point STOKER_NVCC at its nvcc), or ask for a CPU-only build: "
            "STOKER_CPU_ONLY=1 pip install ...")
    _say(f"nvcc: {nvcc} (from {where})")
    return [f"-DSTK_NVCC={nvcc}"]


def _say(msg):
    # pip shows a build's output with -v (and always when it fails).
    sys.stderr.write(f"stoker: {msg}\n")
    sys.stderr.flush()


class CMakeBuild(build_ext):
    def build_extension(self, ext):
        build_dir = os.path.join(os.path.abspath(self.build_temp), "cmake")
        out_dir = os.path.join(build_dir, "module")
        cfg = os.environ.get("STK_BUILD_TYPE", "Release")
        cmake = shutil.which("cmake") or "cmake"
        ninja = shutil.which("ninja")
        generator = "Ninja" if ninja else "Unix Makefiles"
        # pip builds in a fresh environment each time, with its own CMake and
        # Ninja: a build folder configured by another CMake version, with
        # another generator or from another source folder (an unpacked sdist)
        # cannot be reused, so it starts afresh then.
        version = subprocess.run([cmake, "--version"], capture_output=True, text=True,
                                 check=True).stdout.splitlines()[0]
        _say(f"{version} ({cmake}), generator {generator}")
        stamp = os.path.join(build_dir, "stoker-build-stamp")
        want = f"{version}\n{generator}\n{ROOT}\n"  # and the source folder (an sdist's changes)
        try:
            with open(stamp) as f:
                same = f.read() == want
        except OSError:
            same = False
        if not same and os.path.isdir(build_dir):
            shutil.rmtree(build_dir)
        os.makedirs(build_dir, exist_ok=True)

        args = [
            cmake, "-S", ROOT, "-B", build_dir, "-G", generator,
            f"-DCMAKE_BUILD_TYPE={cfg}",
            "-DSTK_PYTHON=ON", "-DSTK_PYTHON_REQUIRED=ON", "-DSTK_TESTS=OFF",
            f"-DPython3_EXECUTABLE={sys.executable}",
            f"-DSTK_PYTHON_MODULE_DIR={out_dir}",
        ]
        if ninja:
            # The isolated environment's path changes from build to build.
            args.append(f"-DCMAKE_MAKE_PROGRAM={ninja}")
        extra = gpu_cmake_args() + shlex.split(os.environ.get("STOKER_CMAKE_ARGS", ""))
        if extra:
            _say(f"extra CMake arguments: {' '.join(extra)}")
        subprocess.check_call(args + extra)
        with open(stamp, "w") as f:
            f.write(want)

        # The same rule as cmake/gpu.cmake: kernels when STK_GPU is on and nvcc was found.
        nvcc = _cache_value(build_dir, "STK_NVCC") or ""
        gpu_on = (_cache_value(build_dir, "STK_GPU") or "ON").upper() in ("ON", "1", "TRUE", "YES")
        has_gpu = gpu_on and nvcc != "" and not nvcc.endswith("NOTFOUND")
        if has_gpu:
            gpu_line = f"GPU kernels: built (nvcc: {nvcc})"
        elif not gpu_on:
            gpu_line = ("GPU kernels: NOT built (CPU-only build, as asked); device='cuda' will "
                        "report no GPU")
        else:
            raise RuntimeError(f"stoker: CMake did not take the nvcc given ({nvcc or 'none'}): "
                               "the GPU kernels cannot be built; STOKER_CPU_ONLY=1 builds "
                               "without them")
        _say(gpu_line)

        jobs = str(self.parallel or os.cpu_count() or 1)
        subprocess.check_call([cmake, "--build", build_dir, "--target", "stoker_python",
                               "stoker_python_ops", "stoker_cli", "--config", cfg, "-j", jobs])
        dest = self.get_ext_fullpath(ext.name)
        os.makedirs(os.path.dirname(dest), exist_ok=True)
        shutil.copyfile(os.path.join(out_dir, "_stoker.abi3.so"), dest)
        # The private module of the ops hooks (stoker.functional imports it),
        # built by the same CMake run, beside the binding.
        shutil.copyfile(os.path.join(out_dir, "_stoker_ops.abi3.so"),
                        os.path.join(os.path.dirname(dest), "_stoker_ops.abi3.so"))
        # The command-line tool travels inside the package; the `stoker`
        # entry point (stoker.cli) runs it.
        bin_dir = os.path.join(os.path.dirname(dest), "bin")
        os.makedirs(bin_dir, exist_ok=True)
        shutil.copyfile(os.path.join(build_dir, "stoker"), os.path.join(bin_dir, "stoker"))
        os.chmod(os.path.join(bin_dir, "stoker"), 0o755)
        _say(gpu_line)  # again at the end, where it is seen


def long_description():
    """docs/python.md as PyPI shows it: its links are relative to docs/ in the
    source tree, which PyPI does not have, so each becomes its text and the
    file it names in the source distribution (the project has no public
    address yet to make them absolute)."""
    with open(os.path.join(ROOT, "docs", "python.md"), encoding="utf-8") as f:
        text = f.read()

    def plain(m):
        label, target = m.group(1), m.group(2).split("#")[0]
        if not target:  # a section of this page
            return label
        path = os.path.normpath(os.path.join("docs", target))
        return f"{label} (`{path}` in the source distribution)"
    return re.sub(r"\[([^\]]+)\]\((?![a-zA-Z][a-zA-Z0-9+.-]*:)([^)\s]+)\)", plain, text)


# One wheel for CPython 3.10 and later: the stable ABI of 3.10, the
# Py_LIMITED_API that python/stoker/_stoker.c defines.
LIMITED_API_TAG = "cp310"

if __name__ == "__main__":  # setuptools runs this file as __main__; the tests import it
    setup(
        ext_modules=[Extension("stoker._stoker", sources=[], py_limited_api=True)],
        cmdclass={"build_ext": CMakeBuild},
        long_description=long_description(),
        long_description_content_type="text/markdown",
        options={"bdist_wheel": {"py_limited_api": LIMITED_API_TAG},
                 # setuptools' scratch space goes inside an ignored build folder.
                 "build": {"build_base": os.environ.get("STOKER_BUILD_DIR",
                                                        os.path.join("build", "setuptools"))}},
    )

"""Builds stoker._stoker and the stoker command through the project's CMake build.

`pip install .` (or `pip wheel .`) configures CMake on this repository with
the Python extension switched on, builds the targets stoker_python (the module,
linked against the static libstoker) and stoker_cli (the `stoker` command), and
puts _stoker.abi3.so and bin/stoker into the package. pyproject.toml declares
CMake and Ninja, so a Python with a C compiler is enough, besides the
libjpeg-turbo and libspng development files (the configure step names the
packages when they are missing).

Environment:
  STOKER_CMAKE_ARGS   extra CMake arguments, split as a shell would, e.g.
                      "-DSTK_GPU=OFF" or "-DSTK_NVCC=/opt/cuda/bin/nvcc"
  STOKER_REQUIRE_GPU  1: fail the build when the GPU kernels cannot be built
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
        # Ninja: a build folder configured by another CMake version or with
        # another generator cannot be reused, so it starts afresh then.
        version = subprocess.run([cmake, "--version"], capture_output=True, text=True,
                                 check=True).stdout.splitlines()[0]
        _say(f"{version} ({cmake}), generator {generator}")
        stamp = os.path.join(build_dir, "stoker-build-stamp")
        want = f"{version}\n{generator}\n"
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
        extra = shlex.split(os.environ.get("STOKER_CMAKE_ARGS", ""))
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
        else:
            why = "STK_GPU=OFF" if not gpu_on else "nvcc not found (put it on PATH, or set " \
                  "STOKER_CMAKE_ARGS=-DSTK_NVCC=/path/to/nvcc)"
            gpu_line = f"GPU kernels: NOT built: {why}; device='cuda' will report no GPU"
            if os.environ.get("STOKER_REQUIRE_GPU", "") not in ("", "0"):
                raise RuntimeError(f"stoker: STOKER_REQUIRE_GPU is set but the GPU kernels "
                                   f"cannot be built: {why}")
        _say(gpu_line)

        jobs = str(self.parallel or os.cpu_count() or 1)
        subprocess.check_call([cmake, "--build", build_dir, "--target", "stoker_python",
                               "stoker_cli", "--config", cfg, "-j", jobs])
        dest = self.get_ext_fullpath(ext.name)
        os.makedirs(os.path.dirname(dest), exist_ok=True)
        shutil.copyfile(os.path.join(out_dir, "_stoker.abi3.so"), dest)
        # The command-line tool travels inside the package; the `stoker`
        # entry point (stoker.cli) runs it.
        bin_dir = os.path.join(os.path.dirname(dest), "bin")
        os.makedirs(bin_dir, exist_ok=True)
        shutil.copyfile(os.path.join(build_dir, "stoker"), os.path.join(bin_dir, "stoker"))
        os.chmod(os.path.join(bin_dir, "stoker"), 0o755)
        _say(gpu_line)  # again at the end, where it is seen


setup(
    ext_modules=[Extension("stoker._stoker", sources=[], py_limited_api=True)],
    cmdclass={"build_ext": CMakeBuild},
    # One wheel for CPython 3.11 and later (stable ABI).
    options={"bdist_wheel": {"py_limited_api": "cp311"},
             # setuptools' scratch space goes inside an ignored build folder.
             "build": {"build_base": os.environ.get("STOKER_BUILD_DIR",
                                                    os.path.join("build", "setuptools"))}},
)

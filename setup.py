"""Builds stoker._stoker through the project's CMake build (see pyproject.toml).

`pip install .` configures CMake on this repository with the Python extension
switched on, builds only the target stoker_python (the static libstoker and
the module linked against it), and copies _stoker.abi3.so into the wheel.
Needs cmake, a C11 compiler, libjpeg(-turbo) and libspng development files.
"""
import os
import shutil
import subprocess
import sys

from setuptools import Extension, setup
from setuptools.command.build_ext import build_ext

ROOT = os.path.dirname(os.path.abspath(__file__))


class CMakeBuild(build_ext):
    def build_extension(self, ext):
        build_dir = os.path.join(os.path.abspath(self.build_temp), "cmake")
        out_dir = os.path.join(build_dir, "module")
        cfg = os.environ.get("STK_BUILD_TYPE", "Release")
        subprocess.check_call([
            "cmake", "-S", ROOT, "-B", build_dir,
            f"-DCMAKE_BUILD_TYPE={cfg}",
            "-DSTK_PYTHON=ON", "-DSTK_PYTHON_REQUIRED=ON", "-DSTK_TESTS=OFF",
            f"-DPython3_EXECUTABLE={sys.executable}",
            f"-DSTK_PYTHON_MODULE_DIR={out_dir}",
        ])
        jobs = str(self.parallel or os.cpu_count() or 1)
        subprocess.check_call(["cmake", "--build", build_dir, "--target", "stoker_python",
                               "--config", cfg, "-j", jobs])
        built = os.path.join(out_dir, "_stoker.abi3.so")
        dest = self.get_ext_fullpath(ext.name)
        os.makedirs(os.path.dirname(dest), exist_ok=True)
        shutil.copyfile(built, dest)


setup(
    ext_modules=[Extension("stoker._stoker", sources=[], py_limited_api=True)],
    cmdclass={"build_ext": CMakeBuild},
    # One wheel for CPython 3.11 and later (stable ABI).
    options={"bdist_wheel": {"py_limited_api": "cp311"},
             # setuptools' scratch space goes inside the ignored CMake build folder.
             "build": {"build_base": os.path.join("build", "setuptools")}},
)

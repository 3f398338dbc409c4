"""Every Unicode code point through the C pre-tokenizer and BPE against HF tokenizers, and the
Unicode 16.0 class table (src/recipe/pretok_unicode16.c) against the Unicode 16.0 database.

HF tokenizers matches \\p{L}/\\p{N}/... with Oniguruma's Unicode tables; utf8proc on Debian 12 is
Unicode 15.0, so code points assigned in 15.1/16.0 come from the generated table.  The first test
fails if HF (or utf8proc) moves to another Unicode version without the table being regenerated."""
import ctypes
import os
import re
import sys

import pytest

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from test_tokenizer import ROOT, V3_JSON, CTokenizer, hf_tokenizer  # noqa: E402

TABLE = os.path.join(ROOT, "src", "recipe", "pretok_unicode16.c")
# Contexts that make each class visible: letters/marks join words, N splits by 3, P/S runs,
# the optional leading character of "[^\r\n\p{L}\p{P}\p{S}]?[\p{L}\p{M}]+", whitespace rules.
CONTEXTS = ["a{}b", " {}x", "{}{}", "x {} ", "{}\u0301", "1{}2", ".{}a", "\n{}\n"]


def code_points_to_check():
    """All 1.1M code points with DI_TOKENIZER_ALL_CODE_POINTS=1 (about 3 minutes: HF is the slow
    side); by default everything below U+0800, every code point of the Unicode 16.0 table and
    every 29th other one (a few seconds)."""
    every = [cp for cp in range(0x110000) if not 0xD800 <= cp <= 0xDFFF]
    if os.environ.get("DI_TOKENIZER_ALL_CODE_POINTS") == "1":
        return every
    with open(TABLE, encoding="utf-8") as f:
        table = {cp for a, b in re.findall(r"\{0x([0-9A-F]+), 0x([0-9A-F]+),", f.read())
                 for cp in range(int(a, 16), int(b, 16) + 1)}
    return [cp for cp in every if cp < 0x800 or cp in table or cp % 29 == 0]


def test_code_points_pretokenize_like_hf():
    hf = hf_tokenizer(V3_JSON, without_added=True)
    tok = CTokenizer(V3_JSON)
    try:
        cps = code_points_to_check()
        texts, step = [], 16
        for i in range(0, len(cps), step):
            # "|" + "\n" between contexts keeps each context's pieces apart.
            texts.append("|\n".join(ctx.replace("{}", chr(cp)) for cp in cps[i:i + step] for ctx in CONTEXTS))
        want = hf.encode_batch(texts, add_special_tokens=False)
        for i, (t, w) in enumerate(zip(texts, want)):
            got = tok.encode_plain(t)
            if got != w.ids:
                bad = [cp for cp in cps[i * step:(i + 1) * step]
                       if tok.encode_plain("|\n".join(c.replace("{}", chr(cp)) for c in CONTEXTS)) !=
                       hf.encode("|\n".join(c.replace("{}", chr(cp)) for c in CONTEXTS), add_special_tokens=False).ids]
                pytest.fail("ids differ from HF tokenizers at " + ", ".join(f"U+{cp:04X}" for cp in bad[:10]))
    finally:
        tok.close()


def test_unicode16_table_is_the_unicode_16_database():
    u2 = pytest.importorskip("unicodedata2")
    if u2.unidata_version != "16.0.0":
        pytest.skip(f"unicodedata2 has Unicode {u2.unidata_version}, the table is 16.0.0")
    utf8proc = ctypes.CDLL("libutf8proc.so.2")
    cls = {"L": "DI_CC_L", "M": "DI_CC_M", "N": "DI_CC_N", "P": "DI_CC_P", "S": "DI_CC_S"}
    want = []
    for cp in range(0x110000):
        if 0xD800 <= cp <= 0xDFFF or utf8proc.utf8proc_category(cp) != 0:
            continue
        cat = u2.category(chr(cp))
        if cat == "Cn":
            continue
        k = cls.get(cat[0], "0")
        if want and want[-1][1] == cp - 1 and want[-1][2] == k:
            want[-1][1] = cp
        else:
            want.append([cp, cp, k])
    with open(TABLE, encoding="utf-8") as f:
        got = [[int(a, 16), int(b, 16), k] for a, b, k in
               re.findall(r"\{0x([0-9A-F]+), 0x([0-9A-F]+), (\w+)\}", f.read())]
    assert got == want

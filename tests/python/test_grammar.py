"""Oracle tests of the grammar engine (src/engine/grammar) through tests/support/grammar_driver:
random-logit generation under the mask must always give text that an independent checker
accepts (Python `re.fullmatch` for regexes, `lark` for EBNF, `jsonschema` for JSON Schema), on
a synthetic vocabulary whose multi-byte tokens straddle grammar boundaries, on the built-in
tiny model's tokenizer and on the real V3/V4 tokenizer (129,280 ids, exact token bytes from
this project's tokenizer); masks equal brute force there too; bad input gets a clear error."""
import json
import os
import random
import re
import subprocess

import jsonschema
import lark
import pytest

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
SHARED = os.environ.get("SHARED_DIR") or os.path.join(os.path.dirname(ROOT), "shared")
V3_JSON = os.path.join(SHARED, "recipe-data", "tokenizer", "deepseek_v3_tokenizer.json")
BUILD = os.environ.get("BUILD", "build")
DRIVER = os.path.join(ROOT, BUILD, "tests-support", "grammar_driver")
EOS_V4 = 1  # <｜end▁of▁sentence｜>


def build_driver():
    """Build the driver against the library (like tests/support/build_harness.sh)."""
    src = os.path.join(ROOT, "tests", "support", "grammar_driver.c")
    lib = os.path.join(ROOT, BUILD, "libdeepinfer.a")
    if os.path.exists(DRIVER) and os.path.getmtime(DRIVER) > max(os.path.getmtime(src), os.path.getmtime(lib)):
        return DRIVER
    os.makedirs(os.path.dirname(DRIVER), exist_ok=True)
    subprocess.run(["gcc", "-std=c11", "-D_GNU_SOURCE", "-Wall", "-Wextra", "-Werror", "-O2", "-g", "-pthread",
                    "-Iinclude", "-Isrc", "-o", DRIVER, src, lib, "-ljansson", "-lutf8proc",
                    "-lxxhash", "-lisal", "-lmicrohttpd", "-lucp", "-lucs", "-lcrypto", "-lmvec", "-lm", "-lpthread"], cwd=ROOT, check=True)
    return DRIVER


@pytest.fixture(scope="session")
def driver():
    return build_driver()


def synthetic_tokens():
    """All 256 single bytes plus multi-byte tokens that cross JSON / regex boundaries and cut
    UTF-8 sequences; then two specials: EOS and a control token."""
    toks = [bytes([b]) for b in range(256)]
    toks += [s.encode() if isinstance(s, str) else s for s in [
        '{"', '":', '","', '"}', '},', '":"', '": ', ', "', '["', '"]', '],', '":{"', '":[', 'true', 'false',
        'null', 'tr', 'ue', '12', '0.', '.5', 'e-', '1e', '-1', '00', 'ab', 'abc', 'name', '"name', 'age',
        '":1', '1,', '\\"', '\\n', '\\u00', 'e9', 'é', 'é"', '中', b'\xe4\xb8', b'\xad"', b'a\xc3', b'\xa9b',
        '2024-', '-01', 'T1', ':00', 'Z"', 'xyz', 'xy', 'yz', '((', '))', 'x)', '(x', 'aaa', 'ba',
    ]]
    return toks, [b"<eos>", b"<ctl>"]


@pytest.fixture(scope="session")
def synth_vocab(tmp_path_factory):
    toks, specials = synthetic_tokens()
    path = tmp_path_factory.mktemp("vocab") / "synthetic.txt"
    with open(path, "w") as f:
        for t in toks:
            f.write(t.hex() + "\n")
        for t in specials:
            f.write("*" + t.hex() + "\n")
    return ["--vocab", str(path), "--eos", str(len(toks))]


@pytest.fixture(scope="session")
def tiny_vocab(tmp_path_factory):
    cli = os.path.join(ROOT, BUILD, "deepinfer")
    if not os.path.exists(cli):
        subprocess.run(["make", "-j2", f"{BUILD}/deepinfer"], cwd=ROOT, check=True, capture_output=True)
    out = tmp_path_factory.mktemp("tiny")
    subprocess.run([cli, "make-tiny", "--out", str(out), "--seed", "5"], check=True, capture_output=True)
    return ["--tokenizer", str(out / "tokenizer.json"), "--eos", str(EOS_V4)]


V4_VOCAB = ["--tokenizer", V3_JSON, "--eos", str(EOS_V4)]


def write(tmp_path, name, text):
    p = tmp_path / name
    p.write_text(text)
    return str(p)


def run(driver, mode, *args, check=True):
    res = subprocess.run([driver, mode, *map(str, args)], capture_output=True, text=True, timeout=600)
    if check and res.returncode != 0:
        raise AssertionError(f"grammar_driver {mode} failed: {res.stderr}")
    return res


def generate(driver, kind, src, vocab, samples=20, max_tokens=120, seed=1):
    out = run(driver, "gen", f"--{kind}", src, *vocab, "--samples", samples, "--max-tokens", max_tokens,
              "--seed", seed).stdout
    rows = [json.loads(line) for line in out.splitlines()]
    assert len(rows) == samples
    return [bytes.fromhex(r["hex"]) for r in rows if r["finished"]]


REGEXES = [
    r"[a-z]{2,5}(,[0-9]+)*",
    r"(ab|a)(bc|c)?x?y*z?",
    r"\d{4}-\d{2}-\d{2}T\d{2}:\d{2}(:\d{2})?Z",
    r"(é|中|[\u00c0-\u00ff])+\"?",
    r"\(x?\)|\((\(x\))+\)",
    r"[^a-z\n]{1,3}\.?\s*\w+",
    r"(true|false|null){1,3}",
]


@pytest.mark.parametrize("pattern", REGEXES)
def test_regex_generation_matches_python_re(driver, synth_vocab, tiny_vocab, tmp_path, pattern):
    src = write(tmp_path, "re.txt", pattern)
    for vocab in (synth_vocab, tiny_vocab):
        texts = generate(driver, "regex", src, vocab, samples=25)
        assert len(texts) >= 20, "most samples must end within the token budget"
        for t in texts:
            assert re.fullmatch(pattern, t.decode("utf-8"), re.ASCII), (pattern, t)


# The same language twice: GBNF for the engine, Lark for the independent checker.
EBNF_CASES = [
    ('root ::= "(" list? ")"\nlist ::= item ("," item)*\nitem ::= [0-9]+ | root\n',
     'start: "(" list? ")"\nlist: item ("," item)*\nitem: /[0-9]+/ | start\n'),
    ('root ::= obj\nobj ::= "{" (pair ("," pair)*)? "}"\npair ::= key ":" val\n'
     'key ::= "\\"" [a-z]+ "\\""\nval ::= obj | [0-9]{1,3} | "true" | key\n',
     'start: obj\nobj: "{" (pair ("," pair)*)? "}"\npair: KEY ":" val\nKEY: /"[a-z]+"/\n'
     'val: obj | /[0-9]{1,3}/ | "true" | KEY\n'),
    ('root ::= ("a" | "ab") ("bc" | "c")? [é中]{0,2} "x"+\n',
     'start: /(a|ab)(bc|c)?[é中]{0,2}x+/\n'),
]


@pytest.mark.parametrize("case", range(len(EBNF_CASES)))
def test_ebnf_generation_parses_with_lark(driver, synth_vocab, tiny_vocab, tmp_path, case):
    gbnf, lark_src = EBNF_CASES[case]
    parser = lark.Lark(lark_src, parser="earley", lexer="dynamic")
    src = write(tmp_path, "g.ebnf", gbnf)
    for vocab in (synth_vocab, tiny_vocab):
        texts = generate(driver, "ebnf", src, vocab, samples=25, max_tokens=150)
        assert len(texts) >= 15
        for t in texts:
            parser.parse(t.decode("utf-8"))  # raises on a string outside the language


SCHEMAS = [
    {"type": "object", "properties": {
        "name": {"type": "string", "maxLength": 8},
        "age": {"type": "integer", "minimum": 0},
        "email": {"type": "string", "format": "uuid"},
        "tags": {"type": "array", "items": {"enum": ["a", "b\"c", 3, None]}, "minItems": 1, "maxItems": 3},
        "ok": {"type": "boolean"}},
     "required": ["name", "ok"]},
    {"$defs": {"node": {"type": "object", "properties": {
        "v": {"type": ["integer", "null"]},
        "kids": {"type": "array", "items": {"$ref": "#/$defs/node"}, "maxItems": 2}},
        "required": ["v"]}},
     "$ref": "#/$defs/node"},
    {"anyOf": [{"type": "string", "pattern": "^[a-z]{1,4}-[0-9]{2}$"},
               {"type": "number"}, {"const": {"k": [1, "x"]}}]},
    {"type": "object", "additionalProperties": {"type": "string", "minLength": 1, "maxLength": 3}},
    {"type": "array", "items": {"oneOf": [{"type": "string", "format": "date"}, {"type": "boolean"}]},
     "maxItems": 4},
]


@pytest.mark.parametrize("case", range(len(SCHEMAS)))
def test_json_schema_generation_validates_with_jsonschema(driver, synth_vocab, tiny_vocab, tmp_path, case):
    schema = SCHEMAS[case]
    src = write(tmp_path, "s.json", json.dumps(schema))
    for vocab in (synth_vocab, tiny_vocab):
        texts = generate(driver, "json", src, vocab, samples=25, max_tokens=400)
        assert len(texts) >= 12, "most samples must end within the token budget"
        for t in texts:
            value = json.loads(t.decode("utf-8"))
            jsonschema.validate(value, schema)


def test_real_v4_tokenizer_generation_and_brute_force(driver, tmp_path):
    schema = SCHEMAS[0]
    src = write(tmp_path, "s.json", json.dumps(schema))
    texts = generate(driver, "json", src, V4_VOCAB, samples=6, max_tokens=120)
    assert len(texts) >= 3
    for t in texts:
        jsonschema.validate(json.loads(t.decode("utf-8")), schema)
    res = json.loads(run(driver, "brute", "--json", src, *V4_VOCAB, "--samples", 1, "--max-tokens", 6).stdout)
    assert res["steps"] >= 3 and res["mismatches"] == 0
    rsrc = write(tmp_path, "re.txt", REGEXES[3])
    res = json.loads(run(driver, "brute", "--regex", rsrc, *V4_VOCAB, "--samples", 1, "--max-tokens", 4).stdout)
    assert res["steps"] >= 2 and res["mismatches"] == 0


def test_brute_force_on_synthetic_and_tiny_vocabularies(driver, synth_vocab, tiny_vocab, tmp_path):
    srcs = [("json", write(tmp_path, "s.json", json.dumps(SCHEMAS[1]))), ("regex", write(tmp_path, "r", REGEXES[1])),
            ("ebnf", write(tmp_path, "e", EBNF_CASES[1][0]))]
    for kind, src in srcs:
        for vocab in (synth_vocab, tiny_vocab):
            res = json.loads(run(driver, "brute", f"--{kind}", src, *vocab, "--samples", 4, "--max-tokens", 25).stdout)
            assert res["steps"] >= 10 and res["mismatches"] == 0, (kind, res)


BAD = [
    ("json", '{"type": "string", "multipleOf": 3}', "unsupported keyword 'multipleOf'"),
    ("json", '{"type": "object", "properties": {"a": {"not": {}}}}', "#.properties.a: unsupported keyword 'not'"),
    ("json", '{"type": "object", "properties": {"a": true}, "required": ["b"]}', "required property 'b'"),
    ("json", '{"$ref": "#/$defs/x"}', "points to nothing"),
    ("json", '{"$ref": "#"}', "left-recursive"),
    ("json", '{"type": "integer", "minimum": 5}', "unsupported keyword 'minimum'"),
    ("json", '{"type": "string", "format": "hostname"}', "unsupported format 'hostname'"),
    ("json", '{"type": ', "JSON Schema:1:"),
    ("regex", "a(?=b)", "lookaround"),
    ("regex", r"(a)\1", "backreferences"),
    ("regex", r"a\bb", "word boundaries"),
    ("regex", "a**", "multiple repeat"),
    ("regex", "(ab", "missing ')'"),
    ("regex", "[b-a]", "reversed"),
    ("regex", "a{3,2}", "n < m"),
    ("ebnf", 'root ::= x', "rule 'x' is referenced but not defined"),
    ("ebnf", 'root ::= root "a"', "left-recursive"),
]


@pytest.mark.parametrize("case", range(len(BAD)))
def test_bad_input_gets_a_clear_error(driver, tmp_path, case):
    kind, text, needle = BAD[case]
    out = json.loads(run(driver, "compile", f"--{kind}", write(tmp_path, "bad", text)).stdout)
    assert not out["ok"] and needle in out["error"], out
    # and Python's own engine agrees the regexes are not plain Python re we could mirror
    if kind == "regex" and needle in ("n < m", "reversed", "missing ')'", "multiple repeat"):
        with pytest.raises(re.error):
            re.compile(text)

"""schemathesis against the server's own /openapi.json: generated requests for every operation
(bounded examples), no 5xx, and every response conforms to the documented status codes,
content types and schemas, and undocumented methods get 405 with Allow.  Skipped when schemathesis is not installed (an optional extra)."""
import os
import shutil
import subprocess
import sys

import pytest

sys.path.insert(0, os.path.dirname(__file__))
from server_fixture import Harness  # noqa: E402

pytest.importorskip("schemathesis")


def test_openapi_conformance_and_no_server_errors(tmp_path):
    exe = shutil.which("schemathesis") or shutil.which("st")
    if not exe:
        pytest.skip("schemathesis CLI not on PATH")
    h = Harness("--step-us", 100)
    try:
        out = subprocess.run([exe, "run", h.url + "/openapi.json", "--checks",
                              "not_a_server_error,response_schema_conformance,status_code_conformance,"
                              "content_type_conformance,unsupported_method", "--max-examples", "15", "--request-timeout", "10",
                              "--seed", "1"], capture_output=True, text=True, timeout=240,
                             cwd=tmp_path)  # schemathesis writes its .schemathesis/ cache there
        assert out.returncode == 0, out.stdout[-4000:] + out.stderr[-2000:]
        assert " passed" in out.stdout and "failed" not in out.stdout.split("SUMMARY")[-1]
    finally:
        assert h.stop()[0] == 0

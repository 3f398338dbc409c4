"""Start the server test harness (tests/support: the HTTP server over the deterministic fake
backend), or `deepinfer serve` on the built-in tiny model (Serve), on 127.0.0.1 with a free
port, and stop it at the end.  Shared by test_server_*.py."""
import contextlib
import json
import os
import platform
import re
import subprocess
import tempfile
import time
import urllib.error
import urllib.request

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
MODEL = "DeepSeek-V4.1-Flash"
DEEPINFER = os.path.join(ROOT, "build", "deepinfer")


def build_harness():
    out = subprocess.run([os.path.join(ROOT, "tests/support/build_harness.sh")], cwd=ROOT,
                         capture_output=True, text=True, timeout=300)
    if out.returncode != 0:
        raise RuntimeError("building the server harness failed:\n" + out.stderr)
    return os.path.join(ROOT, out.stdout.strip().splitlines()[-1])


class Harness:
    def __init__(self, *args):
        self.proc = subprocess.Popen([build_harness(), "--port", "0", *map(str, args)],
                                     stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
        line = self.proc.stdout.readline()
        if not line.startswith("port "):
            self.proc.kill()
            raise RuntimeError("harness did not start: " + line + self.proc.stderr.read())
        self.port = int(line.split()[1])
        self.url = f"http://127.0.0.1:{self.port}"

    def metrics(self, api_key=None):
        req = urllib.request.Request(self.url + "/metrics")
        if api_key:
            req.add_header("Authorization", "Bearer " + api_key)
        text = urllib.request.urlopen(req, timeout=10).read().decode()
        values = {}
        for line in text.splitlines():
            if line and not line.startswith("#"):
                name, value = line.rsplit(" ", 1)
                values[name] = float(value)
        return values

    def stop(self, timeout=20):
        """SIGTERM and wait; returns (exit status, remaining stdout); the log is left in .stderr."""
        if self.proc.poll() is None:
            self.proc.terminate()
        try:
            out, self.stderr = self.proc.communicate(timeout=timeout)
        except subprocess.TimeoutExpired:
            self.proc.kill()
            out, self.stderr = self.proc.communicate()
            return None, out
        return self.proc.returncode, out


def post_json(server, path, body, timeout=120):
    """POST a JSON body to a Harness or Serve; (HTTP status, decoded JSON answer), errors included."""
    req = urllib.request.Request(server.url + path, data=json.dumps(body).encode(),
                                 headers={"Content-Type": "application/json"})
    try:
        with urllib.request.urlopen(req, timeout=timeout) as r:
            return r.status, json.loads(r.read())
    except urllib.error.HTTPError as e:
        return e.code, json.loads(e.read())


def rss_kb(pid):
    """Resident set size of process `pid` in kB (0 when /proc does not say)."""
    with open(f"/proc/{pid}/status") as f:
        for line in f:
            if line.startswith("VmRSS:"):
                return int(line.split()[1])
    return 0


def cpu_model():
    """The CPU's model name, for benchmark reports."""
    with open("/proc/cpuinfo") as f:
        for line in f:
            if line.startswith("model name"):
                return line.split(":", 1)[1].strip()
    return platform.processor() or "unknown"


def cpu_seconds(pid):
    """User + system CPU seconds of process `pid` so far."""
    with open(f"/proc/{pid}/stat") as f:
        fields = f.read().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


def wait_until(pred, timeout=10.0):
    end = time.time() + timeout
    while time.time() < end:
        if pred():
            return True
        time.sleep(0.05)
    return False


def engine_idle(metrics):
    """No request in flight on the HTTP side, none running or queued in the engine.  The engine's
    two gauges are sampled once per engine-loop pass, after the FINISH events of that pass reach
    the HTTP side, so a test waits for all three together (a leaked request never settles)."""
    m = metrics()
    return (m["deepinfer_requests_in_flight"] == 0 and m["deepinfer_running_requests"] == 0
            and m["deepinfer_queue_length"] == 0)


def start_logged(command, args, env, log, log_path, timeout):
    """`deepinfer COMMAND --port 0 ARGS` logging to `log`; (process, the port it announced)."""
    proc = subprocess.Popen([DEEPINFER, command, "--port", "0", *map(str, args)], env=env, stdout=log,
                            stderr=subprocess.STDOUT)
    port = None
    end = time.time() + timeout
    while port is None and time.time() < end and proc.poll() is None:
        m = re.search(r"listening on http://127\.0\.0\.1:(\d+)", open(log_path).read())
        port = int(m.group(1)) if m else time.sleep(0.05)
    if port is None:
        proc.kill()
        raise RuntimeError(f"deepinfer {command} did not start:\n" + open(log_path).read())
    return proc, port


def scrape_metrics(url):
    """GET url/metrics as {series: value}."""
    text = urllib.request.urlopen(url + "/metrics", timeout=10).read().decode()
    return {k: float(v) for k, v in (ln.rsplit(" ", 1) for ln in text.splitlines() if ln and ln[0] != "#")}


class _LoggedProcess:
    """What Serve and Gateway share: a started `deepinfer` process with .proc, .url and .log."""

    def metrics(self):
        return scrape_metrics(self.url)

    def stop(self):
        self.proc.terminate()
        try:
            return self.proc.wait(timeout=30)
        finally:
            self.log.close()


class Serve(_LoggedProcess):
    """`deepinfer serve --port 0` on the built-in tiny model cached under `cache` (used as
    XDG_CACHE_HOME; generated on first use), with its log in a file (a pipe could fill and block
    it).  extra_env: variables added to its environment (a test's DEEPINFER_TEST_* knobs)."""

    def __init__(self, cache, *args, extra_env=None):
        self.log_path = os.path.join(cache, "serve.log")
        self.log = open(self.log_path, "w")
        env = dict(os.environ, XDG_CACHE_HOME=cache, **(extra_env or {}))
        env.pop("DEEPINFER_HF_MODEL_DIR", None)
        env.pop("DEEPINFER_API_KEY", None)
        # 120 s: the first use generates the tiny model
        self.proc, self.port = start_logged("serve", args, env, self.log, self.log_path, 120)
        self.url = f"http://127.0.0.1:{self.port}"
        self.model_dir = os.path.join(cache, "deepinfer", "tiny-v41")


def stop_all(servers):
    """Stop every server still running; close the logs of those that died."""
    for s in servers:
        if s.proc.poll() is None:
            s.stop()
        else:
            s.log.close()


@contextlib.contextmanager
def serving(prefix):
    """A Serve with its own cache directory (named from prefix), stopped cleanly at the end."""
    with tempfile.TemporaryDirectory(prefix=prefix) as cache:
        s = Serve(cache)
        yield s
        assert s.stop() == 0


class Gateway(_LoggedProcess):
    """`deepinfer gateway --port 0` over worker URLs (args: the role flags and URLs, options),
    with the tokenizer of the built-in tiny model under `cache`; its log in a file."""

    def __init__(self, cache, *args):
        self.log_path = os.path.join(cache, f"gateway-{time.monotonic_ns()}.log")
        self.log = open(self.log_path, "w")
        env = dict(os.environ, XDG_CACHE_HOME=cache)
        env.pop("DEEPINFER_HF_MODEL_DIR", None)
        self.proc, self.port = start_logged("gateway", args, env, self.log, self.log_path, 60)
        self.url = f"http://127.0.0.1:{self.port}"

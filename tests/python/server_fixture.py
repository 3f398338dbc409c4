"""Start the server test harness (tests/support: the HTTP server over the deterministic fake
backend) on 127.0.0.1 with a free port, and stop it at the end.  Shared by test_server_*.py."""
import os
import subprocess
import time
import urllib.request

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
MODEL = "DeepSeek-V4.1-Flash"


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
        """SIGTERM and wait; returns (exit status, remaining stdout)."""
        if self.proc.poll() is None:
            self.proc.terminate()
        try:
            out, _ = self.proc.communicate(timeout=timeout)
        except subprocess.TimeoutExpired:
            self.proc.kill()
            out, _ = self.proc.communicate()
            return None, out
        return self.proc.returncode, out


def wait_until(pred, timeout=10.0):
    end = time.time() + timeout
    while time.time() < end:
        if pred():
            return True
        time.sleep(0.05)
    return False

# SPDX-License-Identifier: MIT
"""What aiprof shows of a target and of its own credentials: a target's command-line
arguments that look like secrets are replaced by [redacted] in summary.json (the rest stays
readable), and aiprof's stderr gets the same credential redaction as its termination
message."""
import os
import subprocess
import sys

from conftest import AIPROF, load_summary, require_root, run_aiprof


def test_secret_looking_arguments_are_redacted_in_the_summary(procs, tmp_path):
    require_root()
    p, _ = procs.start([sys.executable, "-c", "import sys, time; print('ready', flush=True); time.sleep(60)",
                        "--lr=0.1", "--password=hunter2", "HF_TOKEN=hf_abc", "--api-key", "sk-123"],
                       ready="ready")
    out = tmp_path / "out"
    r = run_aiprof(["profile", "--pid", str(p.pid), "--duration", "1s", "--no-ebpf", "-o", str(out)])
    assert r.returncode == 0, r.stderr
    cmd = load_summary(out)["targets"][0]["cmdline"]
    assert "--lr=0.1" in cmd and "--password=[redacted]" in cmd and "HF_TOKEN=[redacted]" in cmd, cmd
    assert "--api-key [redacted]" in cmd, cmd
    for secret in ("hunter2", "hf_abc", "sk-123"):
        assert secret not in cmd and secret not in r.stderr, secret



def test_secret_values_with_spaces_short_p_and_json_config(procs, tmp_path):
    """A value with spaces is one argument and goes whole; `-pSECRET` (mysql's style) and
    the secret members of a JSON --config go too; the rest of the line stays readable."""
    require_root()
    p, _ = procs.start([sys.executable, "-c", "import sys, time; print('ready', flush=True); time.sleep(60)",
                        "--password", "correct horse battery", "-pS3CRETpw", "--port", "80",
                        '--config={"lr": 0.1, "wandb": {"api_key": "wb sk q7zx"}}'],
                       ready="ready")
    out = tmp_path / "out"
    r = run_aiprof(["profile", "--pid", str(p.pid), "--duration", "1s", "--no-ebpf", "-o", str(out)])
    assert r.returncode == 0, r.stderr
    cmd = load_summary(out)["targets"][0]["cmdline"]
    assert "--password [redacted] -p[redacted] --port 80" in cmd, cmd
    assert '--config={"lr": 0.1, "wandb": {"api_key": "[redacted]"}}' in cmd, cmd
    for secret in ("horse", "battery", "S3CRETpw", "wb sk q7zx", "q7zx"):
        assert secret not in cmd and secret not in r.stderr, secret

def test_stderr_is_redacted_like_the_termination_message(tmp_path):
    env = dict(os.environ, AWS_SECRET_ACCESS_KEY="s3cr3tvalue")
    log = tmp_path / "termination"
    r = subprocess.run([AIPROF, "profile", "--pid", "1", "--collectors", "s3cr3tvalue", "--termination-log",
                        str(log)], capture_output=True, text=True, timeout=30, env=env)
    assert r.returncode == 2
    assert "s3cr3tvalue" not in r.stderr and "[redacted]" in r.stderr, r.stderr
    assert "s3cr3tvalue" not in log.read_text()

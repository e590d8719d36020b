# SPDX-License-Identifier: MIT
"""`aiprof stacks` prints names the target chose (its threads' comm, set by prctl, and its
Python functions' qualnames) with their control characters escaped: a target cannot send a
terminal escape sequence or a bell to whoever reads its stacks."""
import os

from conftest import require_root, run_aiprof

WORKLOAD = r"""
import ctypes, threading, time
libc = ctypes.CDLL(None)
def wait():
    time.sleep(60)
# a qualname with an escape sequence and a bell in it, as the target may choose
wait.__code__ = wait.__code__.replace(co_qualname="w\x1b]0;owned\x07ait")
def named():
    libc.prctl(15, b"\x1b[2Jev\x07il", 0, 0, 0)    # PR_SET_NAME
    wait()
threading.Thread(target=named, daemon=True).start()
# a threading name that would close its quotes and say more of the line
threading.Thread(target=wait, daemon=True, name='w" (python3): R holding the GIL "x').start()
time.sleep(0.3)
print("ready", flush=True)
time.sleep(60)
"""


def test_target_names_reach_the_terminal_escaped(procs, tmp_path):
    require_root()
    script = tmp_path / "names.py"
    script.write_text(WORKLOAD)
    p, _ = procs.start(["/usr/bin/python3", "-u", str(script)], ready="ready")
    r = run_aiprof(["stacks", "--pid", str(p.pid)])
    assert r.returncode == 0, r.stderr
    assert "\x1b" not in r.stdout and "\x07" not in r.stdout, repr(r.stdout)
    assert "(\\x1b[2Jev\\x07il): S" in r.stdout, r.stdout
    # (the stack store writes a name's ";" as ":", its folded format's separator)
    assert "    w\\x1b]0:owned\\x07ait (" in r.stdout, r.stdout
    # its quotes in it escaped: the line's own quotes are the only ones that end it
    assert '"w\\" (python3): R holding the GIL \\"x" (python3' in r.stdout, r.stdout
    assert os.path.exists(f"/proc/{p.pid}")

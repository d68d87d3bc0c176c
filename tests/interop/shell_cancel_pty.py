"""Drives `etl sql` in a pseudo-terminal: starts a query that would run for minutes, presses
Ctrl-C, and checks the shell is still there: the next statement runs and Ctrl-D quits.

Usage: shell_cancel_pty.py ETL DATA_DIR HOME_DIR. Prints everything the terminal showed."""
import os
import pty
import select
import sys
import time

etl, data, home = sys.argv[1], sys.argv[2], sys.argv[3]
pid, fd = pty.fork()
if pid == 0:
    os.environ["HOME"] = home
    os.environ["NO_COLOR"] = "1"
    os.execv(etl, [etl, "sql", "--data", data, "--format", "csv"])
out = b""


def drain(until, timeout=20.0):
    global out
    end = time.time() + timeout
    while time.time() < end and until not in out:
        r, _, _ = select.select([fd], [], [], 0.1)
        if r:
            try:
                out += os.read(fd, 65536)
            except OSError:
                return


drain(b"etl> ")
# Counting 10^11 rows takes minutes: Ctrl-C lands while it runs.
os.write(fd, b"select count(*) from range(100000000000);\r")
drain(b"never", timeout=1.5)
os.write(fd, b"\x03")
drain(b"cancelled", timeout=10)
os.write(fd, b"select 7 as k;\r")
drain(b"k\r\n7")
os.write(fd, b"\x04")
drain(b"never", timeout=1.0)
code = "timeout"
for _ in range(100):
    done, status = os.waitpid(pid, os.WNOHANG)
    if done:
        code = os.waitstatus_to_exitcode(status)
        break
    time.sleep(0.1)
else:
    os.kill(pid, 9)
    os.waitpid(pid, 0)
sys.stdout.write(out.decode("utf-8", "replace"))
sys.stdout.write(f"\nexit {code}\n")

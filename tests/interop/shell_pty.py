"""Drives `etl sql` in a pseudo-terminal like a person at a keyboard, in one of two scenarios:

- `edit`: types a statement, recalls it with the up arrow, edits it in the middle, runs it again;
- `cancel`: starts a query that would run for minutes, presses Ctrl-C, then runs another
  statement (the shell must still be there).

Both quit with Ctrl-D. Usage: shell_pty.py SCENARIO ETL DATA_DIR HOME_DIR. Prints everything the
terminal showed, then `exit CODE` (`timeout` when Ctrl-D did not end the shell)."""
import os
import pty
import select
import sys
import time

scenario, etl, data, home = sys.argv[1], sys.argv[2], sys.argv[3], sys.argv[4]
pid, fd = pty.fork()
if pid == 0:
    os.environ["HOME"] = home
    os.environ["NO_COLOR"] = "1"
    os.execv(etl, [etl, "sql", "--data", data, "--format", "csv"])

out = b""


def drain(until, timeout=20.0):
    """Reads what the terminal shows until `until` appears in it."""
    global out
    end = time.time() + timeout
    while time.time() < end and until not in out:
        r, _, _ = select.select([fd], [], [], 0.1)
        if r:
            try:
                out += os.read(fd, 65536)
            except OSError:
                return


LEFT, UP = b"\x1b[D", b"\x1b[A"
drain(b"etl> ")
if scenario == "edit":
    os.write(fd, b"select 40+1 as n;\r")
    drain(b"41")
    # Up recalls the line; six lefts put the cursor after `1`; backspace and `2` make it `40+2`.
    os.write(fd, UP + LEFT * 6 + b"\x7f2\r")
    drain(b"42")
elif scenario == "cancel":
    # Counting 10^11 rows takes minutes: Ctrl-C lands while it runs.
    os.write(fd, b"select count(*) from range(100000000000);\r")
    drain(b"never", timeout=1.5)
    os.write(fd, b"\x03")
    drain(b"cancelled", timeout=10)
    os.write(fd, b"select 7 as k;\r")
    drain(b"k\r\n7")
else:
    sys.exit(f"unknown scenario {scenario}")
os.write(fd, b"\x04")
drain(b"never", timeout=1.0)
# Ctrl-D must end the shell; never wait forever for it.
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

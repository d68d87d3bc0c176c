"""Drives `etl sql` in a pseudo-terminal like a person at a keyboard, in one of three scenarios:

- `edit`: types a statement, recalls it with the up arrow, edits it in the middle, runs it again;
- `wide`: the same with a line holding wide (CJK) characters: after the recall and eight left
  arrows the cursor must sit where the terminal shows the eighth character from the end, and a
  character typed there lands there;
- `cancel`: starts a query that would run for minutes, presses Ctrl-C, then runs another
  statement (the shell must still be there).

All quit with Ctrl-D. Usage: shell_pty.py SCENARIO ETL DATA_DIR HOME_DIR. Prints everything the
terminal showed, then for `wide` the `cursor ROW COL` seen after the arrows and the emulated
screen (`screen| ` lines), then `exit CODE` (`timeout` when Ctrl-D did not end the shell)."""
import fcntl
import os
import pty
import select
import struct
import sys
import termios
import time
import unicodedata

ROWS, COLS = 24, 80
scenario, etl, data, home = sys.argv[1], sys.argv[2], sys.argv[3], sys.argv[4]
pid, fd = pty.fork()
if pid == 0:
    os.environ["HOME"] = home
    os.environ["NO_COLOR"] = "1"
    os.environ["TERM"] = "xterm"
    os.execv(etl, [etl, "sql", "--data", data, "--format", "csv"])

fcntl.ioctl(fd, termios.TIOCSWINSZ, struct.pack("HHHH", ROWS, COLS, 0, 0))
out = b""


def read_until(done, timeout=20.0):
    """Reads what the terminal shows until `done()` holds (or `timeout` seconds pass)."""
    global out
    end = time.time() + timeout
    while time.time() < end and not done():
        r, _, _ = select.select([fd], [], [], 0.1)
        if r:
            try:
                out += os.read(fd, 65536)
            except OSError:
                return


def drain(until, timeout=20.0):
    """Reads what the terminal shows until `until` appears in it."""
    read_until(lambda: until in out, timeout)


def prompt_after(marker, timeout=20.0):
    """Reads until the prompt shows again after `marker`: keys typed before the line editor is
    back in raw mode would be echoed by the terminal, not edited."""
    read_until(lambda: b"etl> " in out[out.find(marker):], timeout)


def settle(quiet=0.5, timeout=10.0):
    """Reads until the terminal has shown nothing new for `quiet` seconds."""
    global out
    end = time.time() + timeout
    while time.time() < end:
        r, _, _ = select.select([fd], [], [], quiet)
        if not r:
            return
        try:
            out += os.read(fd, 65536)
        except OSError:
            return


def emulate(data):
    """A small terminal: the cells and the cursor after `data`, for the sequences a line editor
    uses (CR, LF, BS, cursor moves, erases); wide characters take two cells."""
    screen = [[""] * COLS for _ in range(ROWS)]
    row = col = 0
    text = data.decode("utf-8", "replace")
    i = 0

    def down():
        nonlocal row
        if row == ROWS - 1:
            screen.pop(0)
            screen.append([""] * COLS)
        else:
            row += 1

    while i < len(text):
        ch = text[i]
        i += 1
        if ch == "\r":
            col = 0
        elif ch == "\n":
            down()
        elif ch == "\b":
            col = max(col - 1, 0)
        elif ch == "\x1b":
            if i < len(text) and text[i] == "[":
                j = i + 1
                while j < len(text) and not ("@" <= text[j] <= "~"):
                    j += 1
                params, final = text[i + 1 : j], text[j] if j < len(text) else ""
                i = j + 1
                nums = [int(p) if p.isdigit() else 0 for p in params.lstrip("?").split(";")]
                n = nums[0] or 1
                if final == "A":
                    row = max(row - n, 0)
                elif final == "B":
                    row = min(row + n, ROWS - 1)
                elif final == "C":
                    col = min(col + n, COLS - 1)
                elif final == "D":
                    col = max(col - n, 0)
                elif final == "G":
                    col = min(n - 1, COLS - 1)
                elif final == "K":
                    mode = nums[0]
                    lo, hi = {0: (col, COLS), 1: (0, col + 1), 2: (0, COLS)}.get(mode, (col, COLS))
                    for c in range(lo, hi):
                        screen[row][c] = ""
                elif final == "J" and nums[0] == 0:
                    for c in range(col, COLS):
                        screen[row][c] = ""
                    for r in range(row + 1, ROWS):
                        screen[r] = [""] * COLS
            else:
                i += 1
        elif ch >= " ":
            width = 2 if unicodedata.east_asian_width(ch) in ("W", "F") else 1
            if col + width > COLS:
                col = 0
                down()
            screen[row][col] = ch
            if width == 2:
                screen[row][col + 1] = None
            col += width
    rows = ["".join(c if c else " " for c in r if c is not None).rstrip() for r in screen]
    return rows, row, col


LEFT, UP = b"\x1b[D", b"\x1b[A"
drain(b"etl> ")
cursor = None
if scenario == "edit":
    os.write(fd, b"select 40+1 as n;\r")
    drain(b"41")
    prompt_after(b"41")
    # Up recalls the line; six lefts put the cursor after `1`; backspace and `2` make it `40+2`.
    os.write(fd, UP + LEFT * 6 + b"\x7f2\r")
    drain(b"42")
elif scenario == "wide":
    os.write(fd, "select '日本' as w;\r".encode())
    drain("w\r\n日本".encode())
    settle()
    # Up recalls the line; eight lefts cross `;`, `w`, ` `, `s`, `a`, ` `, `'` and `本`.
    os.write(fd, UP + LEFT * 8)
    settle()
    _, r, c = emulate(out)
    cursor = (r, c)
    os.write(fd, "語\r".encode())
    drain("w\r\n日語本".encode())
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
settle()
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
if cursor is not None:
    sys.stdout.write(f"\ncursor {cursor[0]} {cursor[1]}\n")
    rows, _, _ = emulate(out)
    for line in rows:
        if line:
            sys.stdout.write(f"screen| {line}\n")
sys.stdout.write(f"\nexit {code}\n")

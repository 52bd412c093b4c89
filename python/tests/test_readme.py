"""Runs every ```sh and ```python block of README.md, as a new user would (issue 10, finding 7).

One test per README section (a `## ` heading); a section's blocks run in order in one fresh
temporary folder, so that a file or a server one block makes is there for the next, as in a
user's shell:

- sh blocks run with `bash -eo pipefail` and the release `remora` on PATH;
- python blocks run with .venv/bin/python (skipped, with the reason printed, where .venv or the
  `remora` module is missing);
- a line that ends in `&` starts a server: its pid is kept, the runner waits until its port
  (`--listen HOST:PORT` or `-p PORT`) accepts, and the process is killed, by that pid, when the
  section ends. The README's fixed ports (those of such lines) are mapped to free ones, so that a
  run beside other servers or tests does not collide.

A block can be marked by HTML comments on the lines just before it (kept rare, each with why):

    <!-- readme-test: skip REASON -->                 the block is not run
    <!-- readme-test: omit "PREFIX" REASON -->        its lines starting with PREFIX are not run

A block fails its section when it exits non-zero or takes longer than BLOCK_TIMEOUT_S.
"""
import os
import re
import shutil
import signal
import socket
import subprocess
import sys
import time
from dataclasses import dataclass, field
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
README = ROOT / "README.md"
BLOCK_TIMEOUT_S = 300
RUNNABLE = {"sh": "sh", "bash": "sh", "python": "python"}

DIRECTIVE = re.compile(r"^<!--\s*readme-test:\s*(?P<body>.*?)\s*-->\s*$")
FENCE_OPEN = re.compile(r"^```(?P<lang>[\w-]*)\s*$")
# A background command: ends in `&`, maybe followed by a comment.
BACKGROUND = re.compile(r"^(?P<cmd>.*?[^&])&\s*(?:#.*)?$")
LISTEN_PORT = re.compile(r"(?:--listen\s+\S*:|\s-p\s+)(\d+)\b")


@dataclass
class Block:
    lang: str  # "sh" or "python"
    code: str
    line: int  # README line of the opening fence
    skip: str = ""  # reason, when the block is skipped
    omit: list = field(default_factory=list)  # (prefix, reason)


@dataclass
class Section:
    title: str
    blocks: list


def parse(text):
    """The README's sections with their runnable blocks; raises ValueError on a stray or
    malformed directive."""
    sections = [Section("(top)", [])]
    pending = []  # (line number, directive body)
    lines = text.splitlines()
    i = 0
    while i < len(lines):
        line = lines[i]
        if line.startswith("## "):
            if pending:
                raise ValueError(f"README line {pending[0][0]}: directive before a heading")
            sections.append(Section(line[3:].strip(), []))
        elif m := DIRECTIVE.match(line):
            pending.append((i + 1, m.group("body")))
        elif m := FENCE_OPEN.match(line):
            start = i + 1
            j = i + 1
            while j < len(lines) and lines[j].strip() != "```":
                j += 1
            if j == len(lines):
                raise ValueError(f"README line {start}: unclosed code block")
            lang = RUNNABLE.get(m.group("lang"))
            if lang is None:
                if pending:
                    raise ValueError(
                        f"README line {pending[0][0]}: directive before a ```{m.group('lang')} "
                        "block, which is never run"
                    )
            else:
                b = Block(lang, "\n".join(lines[i + 1 : j]) + "\n", start)
                for n, body in pending:
                    apply_directive(b, n, body)
                sections[-1].blocks.append(b)
            pending = []
            i = j
        elif line.strip() and pending:
            raise ValueError(f"README line {pending[0][0]}: directive not right before a block")
        i += 1
    if pending:
        raise ValueError(f"README line {pending[0][0]}: directive at the end")
    return [s for s in sections if s.blocks]


def apply_directive(block, n, body):
    if m := re.fullmatch(r"skip\s+(\S.*)", body):
        block.skip = m.group(1)
    elif m := re.fullmatch(r'omit\s+"([^"]+)"\s+(\S.*)', body):
        if not any(l.startswith(m.group(1)) for l in block.code.splitlines()):
            raise ValueError(f"README line {n}: omit {m.group(1)!r} matches no line")
        block.omit.append((m.group(1), m.group(2)))
    else:
        raise ValueError(
            f"README line {n}: unknown directive {body!r} (skip REASON, omit \"PREFIX\" REASON)"
        )


def free_port():
    """A port free for TCP and UDP on 127.0.0.1 right now."""
    while True:
        with socket.socket() as t:
            t.bind(("127.0.0.1", 0))
            port = t.getsockname()[1]
            with socket.socket(socket.AF_INET, socket.SOCK_DGRAM) as u:
                try:
                    u.bind(("127.0.0.1", port))
                except OSError:
                    continue
        return port


def remora_dir():
    """Folder of the release `remora`, or None."""
    tgt = Path(os.environ.get("CARGO_TARGET_DIR") or ROOT / "target")
    exe = tgt / "release" / "remora"
    return exe.parent if exe.is_file() and os.access(exe, os.X_OK) else None


def venv_python():
    """(.venv's python, None) or (None, why python blocks are skipped)."""
    py = ROOT / ".venv" / "bin" / "python"
    if not py.exists():
        return None, f"{py} is missing (make test creates it)"
    r = subprocess.run([str(py), "-c", "import remora._native"], capture_output=True, text=True)
    if r.returncode != 0:
        return None, "the remora module is not installed in .venv (make py)"
    return str(py), None


# The bash run before each sh block: start-and-wait for servers, kill on request.
PRELUDE = r"""
readme_wait_port() { # port pid
  for _ in $(seq 400); do
    # ss looks without connecting (a probe connection would show in the server's log).
    if command -v ss >/dev/null; then
      [ -n "$(ss -Htln "sport = :$1")" ] && return 0
    else
      (exec 3<>"/dev/tcp/127.0.0.1/$1") 2>/dev/null && return 0
    fi
    kill -0 "$2" 2>/dev/null || { echo "readme-test: the background command exited before port $1 accepted" >&2; return 1; }
    sleep 0.05
  done
  echo "readme-test: nothing accepted on port $1 within 20 s" >&2; return 1
}
"""


class Runner:
    """Runs one section's blocks in `tmp`; `close()` kills the servers they started."""

    def __init__(self, tmp, bin_dir, python, python_skip):
        self.tmp = Path(tmp)
        self.bin_dir = bin_dir
        self.python = python
        self.python_skip = python_skip
        self.pidfile = self.tmp / ".readme-test-pids"
        self.ports = {}
        self.env = dict(os.environ)
        if bin_dir is not None:
            self.env["PATH"] = f"{bin_dir}:{self.env.get('PATH', '')}"
        self.env.pop("NO_COLOR", None)
        self.log = []

    def map_ports(self, blocks):
        """Maps each README port a background line listens on to a free port."""
        for b in blocks:
            if b.lang != "sh" or b.skip:
                continue
            for line in b.code.splitlines():
                if BACKGROUND.match(line):
                    for p in LISTEN_PORT.findall(line):
                        self.ports.setdefault(p, str(free_port()))

    def rewrite(self, code):
        for old, new in self.ports.items():
            code = re.sub(rf"(?<![\d.]){old}(?!\d)", new, code)
        return code

    def sh_script(self, b):
        out = ["set -eo pipefail", PRELUDE]
        for line in self.rewrite(b.code).splitlines():
            if any(line.startswith(p) for p, _ in b.omit):
                out.append(f"# readme-test: omitted: {line}")
                continue
            out.append(line)
            if m := BACKGROUND.match(line):
                ports = LISTEN_PORT.findall(m.group("cmd"))
                if not ports:
                    raise AssertionError(
                        f"README line {b.line}: background command without --listen HOST:PORT "
                        f"or -p PORT to wait for: {line!r}"
                    )
                out.append(f'echo "$!" >> {self.pidfile}')
                out.append(f'readme_wait_port {ports[0]} "$!"')
        return "\n".join(out) + "\n"

    def run_block(self, b):
        """Returns None when the block passed or was skipped, else the failure's text."""
        if b.skip:
            return self.note(f"line {b.line}: skipped: {b.skip}")
        for prefix, why in b.omit:
            self.note(f"line {b.line}: lines starting {prefix!r} not run: {why}")
        if b.lang == "sh":
            if self.bin_dir is None:
                return self.note(f"line {b.line}: skipped: no release remora (make build)")
            cmd = ["bash", "-c", self.sh_script(b)]
        else:
            if self.python is None:
                return self.note(f"line {b.line}: skipped: {self.python_skip}")
            src = self.tmp / f"readme_line_{b.line}.py"
            src.write_text(self.rewrite(b.code))
            cmd = [self.python, str(src)]
        t0 = time.monotonic()
        # Output goes to a file, not a pipe: a server the block leaves running holds it open.
        out_path = self.tmp / f".readme_line_{b.line}.out"
        with open(out_path, "wb") as out_file:
            try:
                rc = subprocess.run(
                    cmd,
                    cwd=self.tmp,
                    env=self.env,
                    stdin=subprocess.DEVNULL,
                    stdout=out_file,
                    stderr=subprocess.STDOUT,
                    timeout=BLOCK_TIMEOUT_S,
                ).returncode
            except subprocess.TimeoutExpired:
                rc = f"timeout after {BLOCK_TIMEOUT_S} s"
        out = out_path.read_bytes().decode(errors="replace")
        self.note(f"line {b.line}: {b.lang} block, exit {rc}, {time.monotonic() - t0:.1f} s")
        self.log.append(out)
        if rc != 0:
            return (
                f"README line {b.line}: the {b.lang} block failed (exit {rc}).\n"
                f"--- block (ports mapped: {self.ports})\n{self.rewrite(b.code)}"
                f"--- output (last 3000 characters)\n{out[-3000:]}"
            )
        return None

    def note(self, text):
        print(f"readme-test: {text}", file=sys.stderr)
        self.log.append(text)

    def close(self):
        """Kills the background processes this section started, by pid."""
        if not self.pidfile.exists():
            return
        pids = [int(p) for p in self.pidfile.read_text().split()]
        for sig in (signal.SIGTERM, signal.SIGKILL):
            for pid in pids:
                try:
                    os.kill(pid, sig)
                except ProcessLookupError:
                    pass
            t0 = time.monotonic()
            while time.monotonic() - t0 < 5 and any(alive(p) for p in pids):
                time.sleep(0.05)
            if not any(alive(p) for p in pids):
                break
        self.pidfile.unlink()


def alive(pid):
    """Whether pid still runs (a zombie counts as gone)."""
    try:
        with open(f"/proc/{pid}/stat") as f:
            return f.read().rsplit(")", 1)[1].split()[0] != "Z"
    except (FileNotFoundError, IndexError):
        return False


def run_section(section, tmp):
    """Runs a section's blocks in order; returns the first failure's text, or None."""
    python, python_skip = venv_python()
    r = Runner(tmp, remora_dir(), python, python_skip)
    r.map_ports(section.blocks)
    try:
        for b in section.blocks:
            err = r.run_block(b)
            if err:
                return err
        return None
    finally:
        r.close()


SECTIONS = parse(README.read_text())


@pytest.mark.parametrize("section", SECTIONS, ids=[s.title for s in SECTIONS])
def test_readme_section_runs(section, tmp_path):
    runnable = [b for b in section.blocks if not b.skip]
    if not runnable:
        pytest.skip("; ".join(f"line {b.line}: {b.skip}" for b in section.blocks))
    if remora_dir() is None and any(b.lang == "sh" for b in runnable):
        print("readme-test: no release remora binary (make build): sh blocks skipped", file=sys.stderr)
    err = run_section(section, tmp_path)
    if err:
        pytest.fail(err, pytrace=False)


def test_readme_skips_are_rare_and_say_why():
    """Every skip and omit gives a reason, and most blocks run."""
    blocks = [b for s in SECTIONS for b in s.blocks]
    skipped = [b for b in blocks if b.skip]
    assert all(b.skip.strip() for b in skipped)
    assert all(why.strip() for b in blocks for _, why in b.omit)
    assert len(skipped) * 3 <= len(blocks), [(b.line, b.skip) for b in skipped]


BROKEN = """\
## Broken

```sh
echo fine
remora no-such-subcommand
```
"""

BROKEN_PY = """\
## Broken python

```python
import sys
sys.exit(3)
```
"""


def test_runner_fails_a_broken_snippet(tmp_path):
    """The runner can fail: a shell block with a bad command, a python block that exits 3."""
    if remora_dir() is None:
        pytest.skip("no release remora binary (make build)")
    [sec] = parse(BROKEN)
    err = run_section(sec, tmp_path)
    assert err and "README line 3" in err and "no-such-subcommand" in err, err
    python, why = venv_python()
    if python is None:
        pytest.skip(why)
    [sec] = parse(BROKEN_PY)
    err = run_section(sec, tmp_path)
    assert err and "exit 3" in err, err


def test_runner_waits_for_and_kills_background_servers(tmp_path):
    """A `&` server is up before the next line runs, on a mapped port, and gone afterwards."""
    if remora_dir() is None:
        pytest.skip("no release remora binary (make build)")
    text = """\
## Servers

```sh
remora fabric serve --listen 127.0.0.1:7471 &     # a responder
remora fabric bench write-lat --transport tcp --size 8 --iters 10 --connect 127.0.0.1:7471
```
"""
    [sec] = parse(text)
    python, why = venv_python()
    r = Runner(tmp_path, remora_dir(), python, why)
    r.map_ports(sec.blocks)
    assert "7471" in r.ports and r.ports["7471"] != "7471"
    try:
        assert r.run_block(sec.blocks[0]) is None
        pids = [int(p) for p in r.pidfile.read_text().split()]
        assert len(pids) == 1 and alive(pids[0])
    finally:
        r.close()
    assert not alive(pids[0])


def test_parse_rejects_stray_or_unknown_directives():
    with pytest.raises(ValueError, match="not right before a block"):
        parse("<!-- readme-test: skip x -->\ntext\n```sh\ntrue\n```\n")
    with pytest.raises(ValueError, match="unknown directive"):
        parse("<!-- readme-test: frobnicate -->\n```sh\ntrue\n```\n")
    with pytest.raises(ValueError, match="matches no line"):
        parse('<!-- readme-test: omit "bash bench/" slow -->\n```sh\ntrue\n```\n')
    with pytest.raises(ValueError, match="never run"):
        parse("<!-- readme-test: skip x -->\n```\n$ make demo\n```\n")

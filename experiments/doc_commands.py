"""Run every shell command the docs show, and say which still work.

Users copy commands from README.md and docs/*.md; flags get renamed and plan keys grow, and
nothing else checks that a shown command still runs. This script extracts the commands and
runs them one at a time from the repository root, each under ``nice -n 10`` and a timeout:

- fenced code blocks labelled ``bash``, ``sh``, ``shell`` or ``console``: every line (a
  leading ``$ `` is dropped, ``\\`` continues a line, ``# ...`` is a comment);
- unlabelled fenced blocks: the lines (a leading ``$ `` dropped) that start with
  ``paraplan ``, ``python -m simulator.cli `` or ``python experiments/``; the lines that follow
  a ``$`` line up to the next one are its shown output;
- inline code spans that are whole commands: ``paraplan`` followed by a flag or by a
  subcommand and its arguments, or ``python experiments/X.py ...``. A span that names only a
  subcommand (`` `paraplan search` ``) is a name, not a command, and is not extracted; a span
  that names a flag without the rest of the line (`` `paraplan simulate --json` ``) is
  skipped as a fragment when the real parser refuses it. A leading ``time`` or
  ``/usr/bin/time`` is dropped.

docs/calibration.md and docs/reports/*.md are not read: they quote hundreds of experiment
commands, many of them minutes long (the reports' own scripts regenerate those pages).

``paraplan`` runs as ``python -m simulator.cli`` and ``python`` as this interpreter, with
``PYTHONPATH`` set to this checkout. Paths a command writes (``--out``, ``--csv``,
``--results``, ``--save-plan``, ``--save-top``, ``--trace``, ``--timeline``, ``--plot``,
``--sweep``) are rewritten into a temporary folder, and a later command that reads such a
file (``--plan best.yaml``) reads the rewritten one; a report script that writes
docs/reports by default gets ``--out`` in the temporary folder. Skipped, with the reason
printed: ``pip install`` lines, ``calibrate`` on the real backend (needs PyTorch and a GPU;
the ``--backend fake`` lines run), ``--backend ray``, shell pipelines, placeholders
(``FILE``, ``<...>``, ``...``, ``[...]``, ``--model M``), ``--tree`` (another checkout),
``--spy`` (a py-spy profile to read), fragments, a file only the reader writes
(``--cluster cluster.yaml``), this script itself, and the benchmark and profile scripts
(``bench_*``, ``profile_*``, ``instructions_*``, ``ab_engine``, ``report_speed``: minutes of
CPU each; ``--benchmarks`` runs them).

A command is expected to exit 0, or 2 where the doc shows it refused (its shown output holds
``error:``, or its comment or the sentence before its block says "exit 2" or "refused"); a
shown error line must be the one printed, and the lines of a literal output block right after
a one-command block (cli.md's export files and notes, layout.md's layout table; not a block
with ``…``) must be printed. Any "Traceback" fails. Each distinct command runs once; every
place it is shown is listed. A whole run takes about 17 minutes on the shared 2-core machine
(1,044 s at the first run, 116 commands, 69 run and passed, 1 past the 120 s timeout).

    python experiments/doc_commands.py [--list] [--only FILE] [--match TEXT] [--timeout S] [--json]

A run on a host shared with other jobs (session 24: 144 distinct commands, 82 passed, 1 failed,
4 past the 120 s timeout, 57 skipped, 2,033 s) is re-run for its failures alone with
``--match``, each failing command's text once (``--match 'gpt-1t' --match 'straggler='``);
a ``--match`` no command holds (a typo), a blank one, or an ``--only`` that names no doc exits
2 in one line, not a run of nothing that passes.
"""
from __future__ import annotations

import argparse
import contextlib
import glob
import io
import json
import os
import re
import shlex
import signal
import subprocess
import sys
import tempfile
import time
from dataclasses import dataclass, field

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
sys.path.insert(0, ROOT)     # the parser check imports simulator.cli from this checkout

from experiments._report import refuse  # noqa: E402

PREFIXES = ("paraplan ", "python -m simulator.cli ", "python experiments/")
SHELL_LANGS = {"bash", "sh", "shell", "console"}
# Flags whose value is a path the command writes.
OUTPUT_FLAGS = {"--out", "--csv", "--results", "--save-plan", "--save-top", "--trace",
                "--timeline", "--plot", "--sweep"}
_FENCE = re.compile(r"^(\s*)(```+|~~~+)\s*([\w+-]*)")
_DIAGRAM = re.compile(r"[\u2500-\u25ff]")      # box drawing and arrows: a diagram
_TIMER = re.compile(r"^(?:/usr/bin/)?time (?:-v )?")   # `time paraplan search`: the command
_REFUSED = re.compile(r"\bexit(?:s| status)? 2\b|\brefused\b", re.I)


@dataclass
class Command:
    """One distinct command and every place it is shown."""

    text: str                                   # as the doc writes it (continuations joined)
    where: list[str] = field(default_factory=list)   # "docs/cli.md:42"
    expect: int = 0                             # the exit status the doc shows
    shown_error: str | None = None              # the error line the doc shows, if any
    shown_output: list[str] = field(default_factory=list)  # lines the doc quotes it prints
    inline: bool = False                        # only shown as an inline code span
    skip: str | None = None                     # the reason it is not run
    benchmarks: bool = False                    # run benchmarks and profiles too


def doc_files(only: str | None = None) -> list[str]:
    """README.md and docs/*.md but docs/calibration.md, repository-relative."""
    files = ["README.md"] + sorted(
        os.path.relpath(f, ROOT) for f in glob.glob(os.path.join(ROOT, "docs", "*.md"))
        if os.path.basename(f) != "calibration.md")
    if only is not None:
        want = os.path.normpath(only)
        files = [f for f in files if f == want or os.path.basename(f) == want]
        if not files:
            refuse("doc_commands", "--only", only, "not one of the docs read (README.md, "
                   "docs/*.md but calibration.md)")
    return files


def _is_command(line: str) -> bool:
    return line.startswith(PREFIXES) or line == "paraplan"


def _strip_comment(line: str) -> tuple[str, str]:
    """The command and its trailing ``# comment`` (a ``#`` after whitespace, outside quotes)."""
    quote = None
    for i, ch in enumerate(line):
        if quote:
            quote = None if ch == quote else quote
        elif ch in "\"'":
            quote = ch
        elif ch == "#" and (i == 0 or line[i - 1].isspace()):
            return line[:i].rstrip(), line[i + 1:].strip()
    return line.rstrip(), ""


def _block_commands(start: int, lang: str, lines: list[str],
                    before: str) -> list[tuple[str, int, int, str | None]]:
    """(command, line number, expected exit, shown error) of one fenced block."""
    out: list[tuple[str, int, int, str | None]] = []
    shell = lang in SHELL_LANGS
    prompts = any(ln.strip().startswith("$ ") for ln in lines)   # only `$` lines are commands
    i = 0
    while i < len(lines):
        raw = lines[i].strip()
        lineno = start + 1 + i
        dollar = raw.startswith("$ ")
        if dollar:
            raw = raw[2:].strip()
        while raw.endswith("\\") and i + 1 < len(lines):
            i += 1
            raw = raw[:-1].rstrip() + " " + lines[i].strip()
        i += 1
        cmd, comment = _strip_comment(raw)
        cmd = _TIMER.sub("", cmd)
        if not cmd or (not shell and not _is_command(cmd)) or (prompts and not dollar):
            continue
        if _DIAGRAM.search(cmd) or re.match(r"paraplan [\w-]+:", cmd):
            continue                             # a diagram's arrow, a printed error line
        if dollar and not _is_command(cmd) and not cmd.startswith("pip "):
            continue                             # `$ echo $?` and the like
        shown: list[str] = []
        if dollar:                               # its output: up to the next `$` line
            j = i
            while j < len(lines) and not lines[j].strip().startswith("$ "):
                shown.append(lines[j].strip())
                j += 1
        err = next((s for s in shown if "error:" in s), None)
        expect = 2 if (err or _REFUSED.search(comment)
                       or (len(lines) == 1 and _REFUSED.search(before))) else 0
        out.append((cmd, lineno, expect, err))
    return out


def _inline_commands(text: str, first_line: int) -> list[tuple[str, int]]:
    """Whole commands among the inline code spans of a stretch of prose."""
    out = []
    for m in re.finditer(r"(?<!`)`([^`]+)`(?!`)", text):
        span = _TIMER.sub("", " ".join(m.group(1).split()))
        if not _is_command(span) or re.match(r"paraplan [\w-]+:", span):
            continue                             # prose, or a printed error line
        words = span.split()
        prog = 1 if words[0] == "paraplan" else (3 if words[1] == "-m" else 2)
        rest = words[prog:]
        if words[0] != "python" or words[1] == "-m":
            if not rest or (len(rest) == 1 and not rest[0].startswith("-")):
                continue                         # `paraplan`, `paraplan search`: names
        out.append((span, first_line + text.count("\n", 0, m.start())))
    return out


def extract(files: list[str], benchmarks: bool = False) -> list[Command]:
    """The distinct commands of ``files``, in the order first shown (``benchmarks``: the
    benchmark and profile scripts are run, not skipped)."""
    found: dict[str, Command] = {}

    def add(text: str, where: str, expect: int, err: str | None, inline: bool) -> None:
        c = found.get(text)
        if c is None:
            c = found[text] = Command(text, expect=expect, shown_error=err, inline=inline)
        else:
            c.inline = c.inline and inline
            if expect and not c.expect:
                c.expect, c.shown_error = expect, err
        c.where.append(where)

    for path in files:
        with open(os.path.join(ROOT, path), encoding="utf-8") as f:
            lines = f.read().split("\n")
        prose: list[str] = []
        prose_start = 1
        last: Command | None = None              # the one command of the last shell block
        quoted = 0                               # output blocks quoted after it
        i = 0
        while i < len(lines):
            m = _FENCE.match(lines[i])
            if not m:
                if not prose:
                    prose_start = i + 1
                prose.append(lines[i])
                i += 1
                continue
            for span, ln in _inline_commands("\n".join(prose), prose_start):
                add(span, f"{path}:{ln}", 0, None, True)
            before = " ".join(prose[-3:])
            prose_block, prose = prose, []
            fence, lang, start = m.group(2), m.group(3).lower(), i + 1
            j = i + 1
            while j < len(lines) and not lines[j].strip().startswith(fence):
                j += 1
            body = lines[i + 1:j]
            got = (_block_commands(start, lang, body, before)
                   if lang in SHELL_LANGS or lang == "" else [])
            for cmd, ln, expect, err in got:
                add(cmd, f"{path}:{ln}", expect, err, False)
            if got or lang in SHELL_LANGS:
                last = found[got[0][0]] if len(got) == 1 else None
                quoted = 0
            elif (last is not None and quoted < 2 and lang in ("", "toml", "yaml")
                  and sum(1 for p in prose_block if p.strip()) <= 4
                  and not any(_PLACEHOLDER_OUT.search(b) or _DIAGRAM.search(b) for b in body)):
                # a literal output block right after a one-command block: what it prints
                last.shown_output += [b.strip() for b in body if b.strip()]
                quoted += 1
            else:
                last = None
            i = j + 1
            prose_start = i + 1
        for span, ln in _inline_commands("\n".join(prose), prose_start):
            add(span, f"{path}:{ln}", 0, None, True)
    cmds = list(found.values())
    outputs = {w[k + 1] for w in (c.text.split() for c in cmds)
               for k in range(len(w) - 1) if w[k] in OUTPUT_FLAGS}
    for c in cmds:
        c.benchmarks = benchmarks
        c.skip = skip_reason(c, outputs)
    return cmds


_PLACEHOLDER_OUT = re.compile(r"…|\.\.\.|<-")       # a schematic output block
_PLACEHOLDER = re.compile(r"…|\.\.\.|<[^>]*>|^\[|\]$")


def _argv(text: str) -> list[str]:
    words = shlex.split(text)
    if words[0] == "paraplan":
        words = ["python", "-m", "simulator.cli"] + words[1:]
    return words


def _parse_error(words: list[str]) -> str | None:
    """The real parser's refusal of a ``paraplan`` argv (None: it parses)."""
    from simulator.cli.main import build_parser
    argv = words[3:]
    err = io.StringIO()
    with contextlib.redirect_stderr(err), contextlib.redirect_stdout(io.StringIO()):
        try:
            build_parser(argv).parse_args(argv)
        except SystemExit as e:
            if e.code not in (0, None):
                return err.getvalue().strip().splitlines()[-1] if err.getvalue() else "refused"
    return None


def skip_reason(c: Command, outputs: set[str] = frozenset()) -> str | None:
    """Why ``c`` is not run (None: it runs); ``outputs``: the files shown commands write
    (``search --save-plan best.yaml``), which a later command may read."""
    t = c.text
    if re.search(r"\bpip install\b", t):
        return "installs packages (pip install)"
    try:
        words = shlex.split(t)
    except ValueError as e:
        return f"does not split as a shell line ({e})"
    for k, w in enumerate(words):
        prev = words[k - 1] if k else ""
        if _PLACEHOLDER.search(w) or (len(w) > 1 and w.isupper() and w.isalpha()) or (
                prev.startswith("--") and re.fullmatch(r"[A-Z]", w)):   # --case C
            return f"placeholder ({w})"
    if re.search(r"(^|\s)(&&|\|\|?|;|>|<)(\s|$)", t):
        return "shell pipeline"
    if "--backend" in words and words[words.index("--backend") + 1:][:1] == ["ray"]:
        return "needs Ray (--backend ray)"
    argv = _argv(t)
    if argv[:4] == ["python", "-m", "simulator.cli", "calibrate"] and not (
            "--backend" in words and words[words.index("--backend") + 1:][:1] == ["fake"]):
        return "needs PyTorch and a GPU (calibrate on the real backend; --backend fake runs)"
    tree = next((f for f in ("--tree", "--before-tree", "--other") if f in words), None)
    if tree:
        return f"needs another checkout ({tree})"
    if "--spy" in words:
        return "needs a py-spy profile to read (--spy)"
    script = next((w for w in words if w.startswith("experiments/")), "")
    if script == "experiments/doc_commands.py":
        return "this runner itself"
    if re.match(r"experiments/(bench_|profile_|instructions_|ab_engine|report_speed)",
                script) and not c.benchmarks:
        return "benchmark or profile (minutes of CPU; --benchmarks runs it)"
    for flag in ("--model", "--cluster", "--plan"):
        val = words[words.index(flag) + 1] if flag in words[:-1] else ""
        if (val.endswith((".yaml", ".yml", ".json")) and val not in outputs
                and not os.path.exists(os.path.join(ROOT, val))):
            return f"reads a file the reader writes ({flag} {val})"
    if c.inline and argv[:3] == ["python", "-m", "simulator.cli"]:
        err = _parse_error(argv)
        if err:
            return f"fragment (a flag named in prose; the parser says: {err})"
    return None


def _rewrite(words: list[str], tmp: str, written: dict[str, str]) -> list[str]:
    """``words`` with output paths in ``tmp`` and earlier outputs read from there."""
    out: list[str] = []
    k = 0
    while k < len(words):
        w = words[k]
        flag, eq, val = w.partition("=")
        if flag in OUTPUT_FLAGS and eq:
            new = written.setdefault(val, os.path.join(tmp, val.replace("/", "_")))
            out.append(f"{flag}={new}")
        elif w in OUTPUT_FLAGS and k + 1 < len(words):
            val = words[k + 1]
            new = written.setdefault(val, os.path.join(tmp, val.replace("/", "_")))
            out += [w, new]
            k += 1
        else:
            out.append(written.get(w, w))
        k += 1
    script = next((x for x in out if x.startswith("experiments/") and x.endswith(".py")), None)
    if script and "--out" not in out:
        with open(os.path.join(ROOT, script), encoding="utf-8") as f:
            src = f.read()
        if "DEFAULT_OUT" in src and '"--out"' in src:      # a report writing docs/reports
            out += ["--out", os.path.join(tmp, os.path.basename(script)[:-3])]
    return out


@dataclass
class Result:
    command: Command
    status: str          # pass, fail, timeout, skip
    exit: int | None
    seconds: float
    error: str           # the first error line, or why it failed


def _first_error(text: str) -> str:
    lines = [ln for ln in text.splitlines() if ln.strip()]
    for ln in lines:
        if "Traceback" in ln:
            return next((x for x in reversed(lines) if x.strip() and not x.startswith(" ")),
                        ln).strip()
    for ln in lines:
        if "error" in ln.lower():
            return ln.strip()
    return lines[-1].strip() if lines else ""


def run_one(c: Command, tmp: str, written: dict[str, str], timeout: float) -> Result:
    """Run ``c`` from the repository root (nice -n 10, ``timeout`` seconds)."""
    if c.skip:
        return Result(c, "skip", None, 0.0, c.skip)
    argv = [sys.executable if w == "python" else w for w in _rewrite(_argv(c.text), tmp, written)]
    env = dict(os.environ, PYTHONPATH=ROOT + os.pathsep + os.environ.get("PYTHONPATH", ""),
               MPLBACKEND="Agg")
    env.pop("PARAPLAN_DEBUG", None)
    t0 = time.perf_counter()
    proc = subprocess.Popen(["nice", "-n", "10"] + argv, cwd=ROOT, env=env, text=True,
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                            start_new_session=True)
    try:
        out, err = proc.communicate(timeout=timeout)
    except subprocess.TimeoutExpired:
        os.killpg(proc.pid, signal.SIGTERM)
        try:
            out, err = proc.communicate(timeout=5)
        except subprocess.TimeoutExpired:
            os.killpg(proc.pid, signal.SIGKILL)
            out, err = proc.communicate()
        return Result(c, "timeout", None, time.perf_counter() - t0,
                      f"still running after {timeout:g} s")
    secs = time.perf_counter() - t0
    rc = proc.returncode
    both = err + "\n" + out
    first = _first_error(err) if rc else ""
    if "Traceback" in both:
        return Result(c, "fail", rc, secs, "traceback: " + _first_error(both))
    if rc != c.expect:
        why = first or _first_error(both)
        return Result(c, "fail", rc, secs, f"exit {rc}, the doc shows {c.expect}: {why}")
    if c.shown_error is not None:
        got = err.strip().splitlines()
        if len(got) != 1 or got[0].strip() != c.shown_error:
            return Result(c, "fail", rc, secs,
                          f"the doc shows {c.shown_error!r}, it prints {err.strip()!r}")
    printed = {ln.strip() for ln in both.splitlines()}
    missing = [ln for ln in c.shown_output if ln not in printed and ln not in both]
    if missing:
        return Result(c, "fail", rc, secs, f"the doc quotes {len(c.shown_output)} output "
                      f"lines, {len(missing)} not printed, first: {missing[0]!r}")
    return Result(c, "pass", rc, secs, first)


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--list", action="store_true", help="print the commands, run nothing")
    ap.add_argument("--only", default=None, metavar="FILE", help="one doc (README.md, cli.md)")
    ap.add_argument("--timeout", type=float, default=120.0, help="seconds per command (120)")
    ap.add_argument("--json", action="store_true", help="one JSON object on stdout")
    ap.add_argument("--benchmarks", action="store_true",
                    help="run the benchmark and profile scripts too (skipped by default)")
    ap.add_argument("--match", action="append", default=None, metavar="TEXT",
                    help="only the commands whose text holds TEXT (repeat for more: re-run "
                         "the failures of a run; a file an unmatched command writes is not "
                         "there for a matched one that reads it)")
    a = ap.parse_args(argv)
    cmds = extract(doc_files(a.only), a.benchmarks)
    for m in a.match or ():     # a typo or a blank (an unset variable) is not a passing run
        if not m.strip() or not any(m in c.text for c in cmds):
            refuse("doc_commands", "--match", m, "is empty: give text a command holds"
                   if not m.strip() else f"no command of {a.only or 'the docs'} holds it")
    if a.match:
        cmds = [c for c in cmds if any(m in c.text for m in a.match)]
    if a.list:
        for c in cmds:
            tag = f"skip: {c.skip}" if c.skip else f"expect {c.expect}"
            print(f"{', '.join(c.where)}\n    {c.text}\n    [{tag}]")
        print(f"{len(cmds)} distinct commands ({sum(len(c.where) for c in cmds)} shown), "
              f"{sum(1 for c in cmds if not c.skip)} to run")
        return 0
    results = []
    t0 = time.perf_counter()
    with tempfile.TemporaryDirectory(prefix="doc_commands_") as tmp:
        written: dict[str, str] = {}
        for c in cmds:
            r = run_one(c, tmp, written, a.timeout)
            results.append(r)
            if not a.json:
                ex = "-" if r.exit is None else str(r.exit)
                print(f"{r.status:7} exit {ex:>3} {r.seconds:7.1f} s  {c.where[0]}"
                      f"{' (+%d)' % (len(c.where) - 1) if len(c.where) > 1 else ''}\n"
                      f"        {c.text}" + (f"\n        {r.error}" if r.error else ""),
                      flush=True)
    total = time.perf_counter() - t0
    counts = {s: sum(1 for r in results if r.status == s)
              for s in ("pass", "fail", "timeout", "skip")}
    reasons: dict[str, int] = {}
    for r in results:
        if r.status == "skip":
            key = r.error.split(" (")[0]
            reasons[key] = reasons.get(key, 0) + 1
    if a.json:
        json.dump({"commands": [{"command": r.command.text, "where": r.command.where,
                                 "status": r.status, "exit": r.exit,
                                 "expect": r.command.expect, "seconds": round(r.seconds, 2),
                                 "error": r.error} for r in results],
                   "counts": counts, "skipped_by_reason": reasons,
                   "total_s": round(total, 1)}, sys.stdout, indent=1)
        print()
    else:
        print(f"\n{len(cmds)} distinct commands ({sum(len(c.where) for c in cmds)} shown): "
              f"{counts['pass']} passed, {counts['fail']} failed, {counts['timeout']} timed "
              f"out, {counts['skip']} skipped; {total:.1f} s")
        for k, n in sorted(reasons.items()):
            print(f"  skipped {n:3d}: {k}")
    return 1 if counts["fail"] or counts["timeout"] else 0


if __name__ == "__main__":
    sys.exit(main())

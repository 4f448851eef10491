"""docs/design.md against the source tree: what the essay names exists.

- every file it names (`loader.c`, `src/core/workers.h`, `include/stoker.h`,
  [remote.md](remote.md)) is a file of the tree;
- every function or type it names (`stk__plan_refuses`, `route()`,
  `stk_loader_create`) is defined or declared in the C sources;
- the stages table names every file of src/ in its folder's row (a header
  with a .c of the same name goes with it);
- the Threads section names every file that starts a thread of its own
  (pthread_create) and every name the pool's threads are given, and no
  name the code does not give.

A file renamed, a function removed or a thread added without the essay
fails here.
"""
import os
import re

import pytest

from conftest import PKG_ROOT

REPO = os.path.dirname(PKG_ROOT)
DOC = os.path.join(REPO, "docs", "design.md")
SRC = os.path.join(REPO, "src")

pytestmark = pytest.mark.skipif(not os.path.exists(DOC) or not os.path.isdir(SRC),
                                reason="the source tree is not here")

CODE_DIRS = ("src", "include", "tools", os.path.join("python", "stoker"))


def _read(path):
    with open(path, errors="replace") as f:
        return f.read()


def _doc():
    return _read(DOC)


def _section(title):
    text = _doc()
    start = text.index("\n## " + title)
    end = text.find("\n## ", start + 1)
    return text[start:end if end > 0 else len(text)]


def _tree_files():
    out = []
    for d, dirs, names in os.walk(REPO):
        dirs[:] = [x for x in dirs if not x.startswith((".", "build")) and x != "__pycache__"]
        out += [os.path.relpath(os.path.join(d, n), REPO) for n in names]
    return out


def _code():
    """The C (and CUDA) text of the library, the tools and the binding."""
    texts = {}
    for top in CODE_DIRS:
        for d, _, names in os.walk(os.path.join(REPO, top)):
            for n in names:
                if n.endswith((".c", ".h", ".cu")):
                    p = os.path.join(d, n)
                    texts[os.path.relpath(p, REPO)] = _read(p)
    return texts


def _spans(text):
    """The `code spans` of the text, outside fenced blocks too."""
    return re.findall(r"`([^`\n]+)`", text)


FILE_RE = re.compile(r"^[\w./-]+\.(?:c|h|cu|md|py|sh|txt)$")


def test_every_file_named_exists():
    files = _tree_files()
    by_name = {}
    for f in files:
        by_name.setdefault(os.path.basename(f), []).append(f)
    named = {s for s in _spans(_doc()) if FILE_RE.match(s)}
    named |= {m for m in re.findall(r"\]\(([\w./-]+\.md)(?:#[\w-]+)?\)", _doc())}
    assert len(named) > 60
    missing = []
    for name in sorted(named):
        if "/" in name:
            ok = any(f == name or f.endswith("/" + name) or f == os.path.join("docs", name)
                     for f in files)
        else:
            ok = name in by_name
        if not ok:
            missing.append(name)
    assert not missing, f"docs/design.md names files the tree does not have: {missing}"


IDENT_RE = re.compile(r"^(?:(stk_\w+|STK_\w+|STK__\w+)|([a-z_][a-z0-9_]*)\(\))$")


def test_every_function_named_exists():
    """Identifiers of the library (stk_..., stk__..., STK_...) and any
    name written as a call (`route()`) appear in the C sources."""
    code = "\n".join(_code().values())
    words = set(re.findall(r"\b\w+\b", code))
    named = set()
    for s in _spans(_doc()):
        m = IDENT_RE.match(s.strip())
        if m:
            named.add(m.group(1) or m.group(2))
        # spans such as `stk__mix_draw`, `stk__mix_draw_timm` in one sentence, or
        # `stk__plan` in `pipeline.h`: every stk name inside a span
        named |= set(re.findall(r"\b(stk_\w+|STK__?\w+)\b", s))
    assert len(named) > 40
    missing = sorted(n for n in named if n not in words)
    assert not missing, f"docs/design.md names what the C sources do not define: {missing}"


def test_the_stages_table_names_every_file_of_src():
    sec = _section("The stages and their files")
    rows = {}
    for line in sec.splitlines():
        m = re.match(r"\| `(\w+)/` \| (.*) \|\s*$", line)
        if m:
            rows[m.group(1)] = set(_spans(m.group(2)))
    folders = sorted(d for d in os.listdir(SRC) if os.path.isdir(os.path.join(SRC, d)))
    assert sorted(rows) == folders, "the table's rows are not src/'s folders"
    missing = []
    for d in folders:
        names = sorted(os.listdir(os.path.join(SRC, d)))
        for n in names:
            stem, ext = os.path.splitext(n)
            if ext == ".h" and stem + ".c" in names and stem + ".c" in rows[d]:
                continue  # a header goes with its .c
            if n not in rows[d]:
                missing.append(f"{d}/{n}")
    assert not missing, f"the stages table of docs/design.md does not name: {missing}"
    for d, named in rows.items():
        files = [s for s in named if FILE_RE.match(s) and "/" not in s and not s.endswith(".md")]
        stray = [f for f in files if not os.path.exists(os.path.join(SRC, d, f))]
        assert not stray, f"the row of {d}/ names files that are not in it: {stray}"


def _thread_names_in_code(code):
    """The names the library gives its threads: the pool's and fan-outs'."""
    names = set()
    for text in code.values():
        for m in re.finditer(r"stk__workers_(?:create|fanout|detached)\(\s*\"(stk-[\w-]+)\"", text):
            names.add(m.group(1))
        for m in re.finditer(r"stk__workers_create\([^,]*,\s*\"(stk-[\w-]+)\"", text):
            names.add(m.group(1))
    return names


def test_the_thread_list_is_the_code():
    sec = _section("Threads")
    code = _code()
    # every file that starts a thread outside the pool
    own = sorted(p for p, t in code.items()
                 if p.startswith("src") and p != os.path.join("src", "core", "workers.c")
                 and re.search(r"\bpthread_create\s*\(", re.sub(r"/\*.*?\*/", "", t, flags=re.S)))
    assert own, "no thread outside the pool: the section's list of them must go"
    missing = [p for p in own if f"`{os.path.basename(p)}`" not in sec]
    assert not missing, f"the Threads section of docs/design.md does not name: {missing}"
    # the names the threads are given, both ways
    given = _thread_names_in_code(code)
    assert {"stk-worker", "stk-scan"} <= given
    listed = set(re.findall(r"`(stk-[a-z]+)(?:-\d+|-N)?`", sec))
    assert given - listed == set(), f"threads the Threads section does not list: {given - listed}"
    assert listed - given == set(), f"threads the code no longer names: {listed - given}"

"""docs/python.md against the code: the ImageLoader signature block lists
every argument with its default, the argument table has a row for each, and
the porting table maps DataLoader's idioms."""
import ast
import inspect
import os
import re

import pytest

from conftest import PKG_ROOT

import stoker

DOC = os.path.join(os.path.dirname(PKG_ROOT), "docs", "python.md")
if not os.path.exists(DOC):
    pytest.skip("the source tree is not here", allow_module_level=True)


def doc():
    return open(DOC).read()


def documented_signature():
    m = re.search(r"```python\n(stoker\.ImageLoader\(.*?\))\n```", doc(), re.S)
    assert m, "docs/python.md has no ImageLoader signature block"
    call = ast.parse(m.group(1).replace("stoker.ImageLoader(", "def f(", 1) + ": pass").body[0]
    a = call.args
    names = [x.arg for x in a.args] + [x.arg for x in a.kwonlyargs]
    defaults = [ast.literal_eval(d) for d in a.defaults] + [
        ast.literal_eval(d) for d in a.kw_defaults]
    return names, defaults, len(a.args)


def test_signature_block_lists_every_argument():
    names, defaults, npos = documented_signature()
    params = list(inspect.signature(stoker.ImageLoader.__init__).parameters.values())[1:]
    assert names == [p.name for p in params]
    assert defaults == [p.default for p in params]
    assert npos == sum(p.kind == p.POSITIONAL_OR_KEYWORD for p in params)


def test_argument_table_has_a_row_for_each():
    rows = set()
    for line in doc().splitlines():
        m = re.match(r"\| ((?:`\w+`(?:, )?)+) \|", line)
        if m:
            rows.update(re.findall(r"`(\w+)`", m.group(1)))
    params = list(inspect.signature(stoker.ImageLoader.__init__).parameters)[1:]
    assert [p for p in params if p not in rows] == []


def test_porting_table():
    text = doc()
    m = re.search(r"^## Porting from `DataLoader`\n(.*?)^## ", text, re.S | re.M)
    assert m, "no 'Porting from DataLoader' section"
    table = m.group(1)
    for left, right in [("num_workers", "threads="), ("sampler.set_epoch", "loader.set_epoch"),
                        ("pin_memory=True", "pin_memory=True"), ("collate_fn", "mix="),
                        ("holding on to batches", "prefetch + 2")]:
        row = [ln for ln in table.splitlines() if ln.startswith("|") and left in ln.split("|")[1]]
        assert row and right in row[0].split("|")[2], (left, right)

"""Every default and range of the Python layer is the C library's.

The options tables of src/core/options.h own them (_stoker.options() and
_stoker.pack_options() read them out). ImageLoader's and pack()'s
signatures, the options ImageLoader hands the extension when an argument is
left alone, the transforms that map to C options, the docstrings and
docs/python.md that name a default for readers: each is compared with the
table here, so a default or a range changed on one side only fails.
"""
import inspect
import math
import os
import re

import pytest

from conftest import PKG_ROOT

torch = pytest.importorskip("torch")

import stoker  # noqa: E402
from stoker import _stoker  # noqa: E402
from stoker import transforms as T  # noqa: E402
from stoker._common import GPU_MAX_SIDE, OPTIONS, PACK_OPTIONS  # noqa: E402

LOADER = {d["name"]: d for d in _stoker.options()}
PACK = {d["keyword"]: d for d in _stoker.pack_options()}
C = {name: row["default"] for name, row in LOADER.items()}
C_PACK = {kw: row["default"] for kw, row in PACK.items()}

# ImageLoader arguments that are not C options of the same name, with the
# option they set and how their default maps onto it.
LOADER_ALIASES = {
    "channels_last": ("layout", lambda v: "nhwc" if v else "nchw"),
    "device": ("device", lambda v: stoker.loader._device_index(v)),
}
# Defaults that are Python's own decision, not C's (documented in docs/python.md).
PYTHON_OWN = {
    "threads": "the CPUs this process may use / LOCAL_WORLD_SIZE (C: 0 = every CPU)",
    "seed": "drawn from torch's default generator",
}


def params(fn):
    return [p for p in inspect.signature(fn).parameters.values()
            if p.name != "self" and p.default is not inspect.Parameter.empty]


def same(a, b):
    """Equal, floats as the C table stores them (float32) and tuples element-wise."""
    if isinstance(a, (tuple, list)) or isinstance(b, (tuple, list)):
        return len(a) == len(b) and all(same(x, y) for x, y in zip(a, b))
    if isinstance(a, float) or isinstance(b, float):
        return math.isclose(a, b, rel_tol=1e-6, abs_tol=1e-9)
    return a == b


# ---- the tables the Python layer reads ------------------------------------------


def test_the_python_tables_are_the_c_tables():
    assert OPTIONS == LOADER and stoker.OPTIONS == LOADER
    assert PACK_OPTIONS == PACK
    assert GPU_MAX_SIDE == LOADER["size"]["max"] == stoker.loader.GPU_MAX_SIDE
    # the pack table: every keyword of the extension's pack(), with the
    # format each format-only row belongs to
    assert {r["only"] for r in PACK.values()} <= {None, "cache", "tar"}
    assert PACK["source"]["name"] == "root" and PACK["format"]["choices"] == ["cache", "tar"]


# ---- ImageLoader --------------------------------------------------------------------


def test_every_image_loader_default_is_c_default_or_left_to_c():
    """Each argument with a C option: its default is C's, or None (the
    option is then left out and C fills it in)."""
    checked = 0
    for p in params(stoker.ImageLoader.__init__):
        if p.name in LOADER_ALIASES:
            name, to_c = LOADER_ALIASES[p.name]
            assert to_c(p.default) == C[name], p.name
            checked += 1
        elif p.name in LOADER and p.default is not None:
            assert same(p.default, C[p.name]), (p.name, p.default, C[p.name])
            checked += 1
        elif p.name == "cache_max_side":  # the cache's stoker.pack(max_side=)
            assert p.default == C_PACK["max_side"]
            checked += 1
    # batch_size, drop_last, on_error, prefetch, shard_drop_last,
    # max_consecutive_failures, verify, allow_stale_cache, ra_reps, cache_bytes,
    # remote_memory, channels_last, device, cache_max_side at least
    assert checked >= 14


def test_what_image_loader_passes_by_default_is_c_default(small_folder):
    """A loader built with every argument left alone hands the extension
    either nothing for an option (C's default) or C's default itself, apart
    from the defaults that are Python's own."""
    ld = stoker.ImageLoader(small_folder)
    try:
        passed = {k: v for k, v in ld._c_args.items() if k in LOADER and v is not None}
        for name, value in passed.items():
            if name in PYTHON_OWN or name == "root":
                continue
            assert same(value, C[name]), (name, value, C[name])
        assert set(PYTHON_OWN) <= set(passed)
        assert ld.batch_size == C["batch_size"] and ld.size == C["size"]
        assert ld.pipeline == C["pipeline"]
    finally:
        ld.close()


# C's -1/0/1 modes that ImageLoader takes as None/False/True
AS_BOOL = {"shuffle", "dct_scaling"}


def _int_arguments():
    """ImageLoader's integer arguments that are C options with a range."""
    names = {p.name for p in params(stoker.ImageLoader.__init__)}
    return [LOADER[n] for n in sorted(names) if n in LOADER and n not in AS_BOOL
            and LOADER[n]["type"] in ("int", "uint64") and n not in PYTHON_OWN]


def _c_message(small_folder, name, value):
    """The extension's own refusal of name=value."""
    with pytest.raises(ValueError) as e:
        _stoker.Loader(root=small_folder, **{name: value})
    return str(e.value)


@pytest.mark.parametrize("row", _int_arguments(), ids=lambda r: r["name"])
def test_image_loader_ranges_are_c_ranges(small_folder, row):
    """Out of range, ImageLoader raises the C library's own message, naming
    the argument; at the range's low end it accepts the value: Python holds
    no bound of its own, tighter or looser."""
    name, lo, hi = row["name"], row["min"], row["max"]
    base = dict(threads=1, batch_size=2, size=16)
    if name == "cache_bytes":
        base["cache_dir"] = os.path.join(small_folder, "..", "remote-copies")
    bad = [lo - 1]
    if row["type"] == "int" and hi < 2**31 - 1:
        bad.append(hi + 1)
    for v in bad:
        kw = dict(base, **{name: v})
        with pytest.raises(ValueError) as e:
            stoker.ImageLoader(small_folder, **kw)
        assert name in str(e.value)
        assert str(e.value) == _c_message(small_folder, name, v)
    kw = dict(base, **{name: lo})
    if name == "world_size":
        kw["rank"] = 0
    stoker.ImageLoader(small_folder, **kw).close()


@pytest.mark.parametrize("name, bad, good", [
    ("max_skipped_fraction", 1.5, 1.0),
    ("gpu_cpu_share", 1.5, 1.0),
    ("read_timeout", -1.0, 0.0),
])
def test_image_loader_number_ranges_are_c_ranges(small_folder, name, bad, good):
    with pytest.raises(ValueError) as e:
        stoker.ImageLoader(small_folder, threads=1, **{name: bad})
    assert str(e.value) == _c_message(small_folder, name, bad) and name in str(e.value)
    assert LOADER[name]["max"] is None or good <= LOADER[name]["max"]
    stoker.ImageLoader(small_folder, threads=1, batch_size=2, size=16, **{name: good}).close()


def test_image_loader_choices_are_c_choices(small_folder):
    """on_error, pipeline and dtype take C's names; their messages list them."""
    with pytest.raises(ValueError) as e:
        stoker.ImageLoader(small_folder, on_error="ignore")
    assert str(e.value) == _c_message(small_folder, "on_error", "ignore")
    with pytest.raises(ValueError) as e:
        stoker.ImageLoader(small_folder, pipeline="fancy")
    assert all(repr(c) in str(e.value) for c in LOADER["pipeline"]["choices"])
    with pytest.raises(ValueError) as e:
        stoker.ImageLoader(small_folder, dtype="int32")
    assert all(c in str(e.value) for c in LOADER["dtype"]["choices"])
    for choice in LOADER["dtype"]["choices"]:
        stoker.ImageLoader(small_folder, threads=1, batch_size=2, size=16,
                           pipeline="eval", dtype=choice).close()


def test_jax_loader_defaults_are_image_loader_defaults():
    """JaxLoader passes its other arguments to ImageLoader; the one it names
    itself, batch_size, has the same (C's) default."""
    from stoker.jax import JaxLoader

    own = {p.name: p.default for p in params(JaxLoader.__init__)}
    assert own["batch_size"] == C["batch_size"]


# ---- pack ------------------------------------------------------------------------


def test_every_pack_default_is_c_default_or_left_to_c():
    checked = 0
    for p in params(stoker.pack):
        if p.name not in PACK:
            assert p.name == "progress", p.name  # the one keyword that is Python's own
            continue
        if p.default is None:
            continue  # left out: C's default (threads: Python's own, as the loader's)
        assert same(p.default, C_PACK[p.name]), (p.name, p.default, C_PACK[p.name])
        checked += 1
    # format, encoding, max_side, quality, shard_bytes, check, plain_chroma
    assert checked == 7
    # every keyword of the table is an argument of pack()
    assert set(PACK) <= {p.name for p in inspect.signature(stoker.pack).parameters.values()}


@pytest.mark.parametrize("kw", ["max_side", "quality", "shard_bytes", "threads"])
def test_pack_ranges_are_c_ranges(small_folder, tmp_path, kw):
    row = PACK[kw]
    fmt = {"shard_bytes": "tar"}.get(kw, "cache")
    out = str(tmp_path / "o")
    for v in [row["min"] - 1] + ([row["max"] + 1] if row["type"] == "int" else []):
        with pytest.raises(ValueError) as e:
            stoker.pack(small_folder, out, format=fmt, **{kw: v})
        with pytest.raises(ValueError) as c:
            _stoker.pack(small_folder, out, format=fmt, **{kw: v})
        assert str(e.value) == str(c.value) and kw in str(e.value)
    assert not os.path.exists(out)


def test_pack_format_rule_is_the_table_only_column(small_folder, tmp_path):
    """A format-only keyword given (not at its default) with the other format
    is refused, for exactly the rows the table marks."""
    other = {"cache": "tar", "tar": "cache"}
    values = {"encoding": "jpeg", "max_side": 64, "quality": 50, "shard_bytes": 1 << 20,
              "check": True, "device": 0, "plain_chroma": True}
    only = {kw: r["only"] for kw, r in PACK.items() if r["only"]}
    assert set(only) == set(values), "a new format-only row: give it a value here"
    for kw, fmt in only.items():
        with pytest.raises(ValueError, match=f"{kw} applies to format='{fmt}' only"):
            stoker.pack(small_folder, tmp_path / "o", format=other[fmt], **{kw: values[kw]})
        # at its default it is no request: accepted with either format
        assert PACK[kw]["default"] != values[kw]
    assert os.listdir(tmp_path) == []


def test_gpu_max_side_is_the_device_pack_bound(small_folder, tmp_path):
    with pytest.raises(ValueError, match=rf"max_side in 1\.\.{GPU_MAX_SIDE}\b"):
        stoker.pack(small_folder, tmp_path / "a.stkc", max_side=GPU_MAX_SIDE + 1, device=0)


# ---- transforms that map to C options -----------------------------------------------


def test_transform_defaults_are_the_c_defaults():
    """stoker.transforms keeps torchvision's (and timm's) defaults; the C
    options they map to default to the same values."""
    def d(cls, arg):
        return inspect.signature(cls.__init__).parameters[arg].default

    pairs = [
        (d(T.RandomResizedCrop, "scale"), "scale"),
        (d(T.RandomResizedCrop, "ratio"), "ratio"),
        (d(T.RandomHorizontalFlip, "p"), "flip_prob"),
        (d(T.TrivialAugmentWide, "num_magnitude_bins"), "magnitude_bins"),
        (d(T.RandAugment, "num_ops"), "ra_num_ops"),
        (d(T.RandAugment, "magnitude"), "ra_magnitude"),
        (d(T.RandAugment, "num_magnitude_bins"), "magnitude_bins"),
        (d(T.AugMix, "severity"), "augmix_severity"),
        (d(T.AugMix, "mixture_width"), "augmix_width"),
        (d(T.AugMix, "chain_depth"), "augmix_depth"),
        (d(T.AugMix, "alpha"), "augmix_alpha"),
        (d(T.AugMix, "all_ops"), "augmix_all_ops"),
        (d(T.GaussianBlur, "sigma"), "blur_sigma"),
        (d(T.RandomErasing, "scale"), "erase_scale"),
        (d(T.RandomErasing, "ratio"), "erase_ratio"),
        (T.IMAGENET_MEAN, "mean"),
        (T.IMAGENET_STD, "std"),
    ]
    for value, name in pairs:
        assert same(value, C[name]), (name, value, C[name])
    # timm's RandAugment string with no sections: the timm_ options' defaults
    timm = T.parse_timm_rand_augment("rand")
    for key, name in [("magnitude", "timm_magnitude"), ("num_ops", "ra_num_ops"),
                      ("mstd", "timm_mstd"), ("mmax", "timm_mmax"),
                      ("increasing", "timm_increasing"), ("prob", "timm_prob"),
                      ("translate_pct", "timm_translate_pct")]:
        assert same(timm[key], C[name]), (key, timm[key], C[name])


def test_the_train_recipe_maps_to_the_c_defaults():
    """RandomResizedCrop(224) + flip + ToTensor + ImageNet Normalize is the
    train pipeline at C's defaults, option for option."""
    opts = T.pipeline_options([T.RandomResizedCrop(C["size"]), T.RandomHorizontalFlip(),
                               T.ToTensor(), T.Normalize(T.IMAGENET_MEAN, T.IMAGENET_STD)])
    for name, value in opts.items():
        assert same(value, C[name]), (name, value, C[name])


@pytest.mark.parametrize("section, name, key", [("n", "ra_num_ops", "num_ops"),
                                                ("m", "timm_magnitude", "magnitude"),
                                                ("mmax", "timm_mmax", "mmax")])
def test_timm_string_ranges_are_c_ranges(section, name, key):
    hi = int(LOADER[name]["max"])
    assert T.parse_timm_rand_augment(f"rand-{section}{hi}")[key] == hi
    with pytest.raises(ValueError, match=rf"{section} must be in \[0, {hi}\]"):
        T.parse_timm_rand_augment(f"rand-{section}{hi + 1}")


# ---- the values docstrings and docs/python.md name for readers ------------------------

DOC = os.path.join(os.path.dirname(PKG_ROOT), "docs", "python.md")


def mib(n):
    return f"{n >> 20} MiB"


def test_docstrings_name_the_c_defaults():
    loader_doc = inspect.getdoc(stoker.ImageLoader.__init__)
    m = re.search(r"size: output side; default (\d+)", loader_doc)
    assert m and int(m.group(1)) == C["size"]
    pack_doc = inspect.getdoc(stoker.pack)
    m = re.search(r"``read_timeout``\s+\(seconds, default (\d+)", pack_doc)
    assert m and int(m.group(1)) == C_PACK["read_timeout"]
    m = re.search(r"``max_side`` must then be 1\.\.(\d+)", pack_doc)
    assert m and int(m.group(1)) == GPU_MAX_SIDE


@pytest.mark.skipif(not os.path.exists(DOC), reason="the source tree is not here")
def test_docs_name_the_c_defaults():
    text = re.sub(r"\s+", " ", open(DOC).read())
    found = {
        "max_pixels": (r"decompression-bomb limit \(([\d,]+) pixels\)",
                       lambda s: int(s.replace(",", ""))),
        "max_file_bytes": (r"pixels\), (\d+ MiB) per file", str),
        "max_consecutive_failures": (r"per file, and (\d+) failures in a row", int),
        "ra_reps": (r"`ra_reps` \| repeated augmentation: `(\d+)` \(default\)", int),
        "read_timeout": (r"`read_timeout` \(seconds, (\d+) by default", int),
    }
    want = dict(C, max_file_bytes=mib(C["max_file_bytes"]), read_timeout=C_PACK["read_timeout"])
    for name, (pattern, conv) in found.items():
        m = re.search(pattern, text)
        assert m, f"docs/python.md no longer says {pattern!r}"
        assert same(conv(m.group(1)), want[name]), (name, m.group(1), want[name])
    m = re.search(r"`1`\.\.`(\d+)` = the order of torchvision's `RASampler", text)
    assert m and int(m.group(1)) == LOADER["ra_reps"]["max"]
    # the GPU bound, where the pack and the loader's cache= name it
    for m in re.finditer(r"max_side`? (?:must then be|is) 1\.\.(\d+)", text):
        assert int(m.group(1)) == GPU_MAX_SIDE
    assert len(re.findall(r"max_side`? (?:must then be|is) 1\.\.(\d+)", text)) >= 2


# ---- each default written once in C -------------------------------------------------

REPO = os.path.dirname(PKG_ROOT)
OPTIONS_H = os.path.join(REPO, "src", "core", "options.h")
# Spellings of a default that are still in files others are restructuring:
# (file, the literal) tolerated until that file takes the named constant.
PENDING = set()


def _c_files():
    for top in ("src", "tools", os.path.join("python", "stoker")):
        for d, _, names in os.walk(os.path.join(REPO, top)):
            for n in sorted(names):
                if n.endswith((".c", ".h", ".cu")):
                    p = os.path.join(d, n)
                    yield os.path.relpath(p, REPO), open(p, errors="replace").read()


def _code(text):
    """C text without its comments and string literals."""
    text = re.sub(r"/\*.*?\*/", lambda m: "\n" * m.group(0).count("\n"), text, flags=re.S)
    text = re.sub(r"//[^\n]*", "", text)
    return re.sub(r'"(?:\\.|[^"\\\n])*"', '""', text)  # messages may name a value


def _named_defaults():
    """The named constants of options.h's defaults: name -> value (ints)."""
    text = open(OPTIONS_H).read()
    consts = {}
    for name, expr in re.findall(r"#define (STK__\w+_(?:DEFAULT|DEFAULT_MIB|PART_MIB|PART_BYTES))"
                                 r"\s+([^\n/]+)", text):
        expr = expr.strip().replace("(uint64_t)", "")
        for k, v in consts.items():
            expr = re.sub(rf"\b{k}\b", str(v), expr)
        consts[name] = int(eval(expr, {}))  # numbers and << * only
    return consts


@pytest.mark.skipif(not os.path.exists(OPTIONS_H), reason="the source tree is not here")
def test_rows_of_both_tables_share_named_defaults():
    """A field in both tables (the loader's and the pack's) takes its
    default from one named constant unless it is a plain 0 or -1."""
    text = open(OPTIONS_H).read()
    loader = text[text.index("#define STK__OPTIONS(X)"):text.index("#define STK__PACK_OPTIONS(X)")]
    pack = text[text.index("#define STK__PACK_OPTIONS(X)"):]
    row = re.compile(r"X\((\w+), \w+, STK__V\(([^)]*(?:\([^)]*\))?[^)]*)\)")
    a, b = dict(row.findall(loader)), dict(row.findall(pack))
    shared = set(a) & set(b)
    assert {"max_pixels", "max_file_bytes", "read_timeout", "max_decode_bytes"} <= shared
    for name in sorted(shared):
        if a[name] in ("0", "-1"):
            continue
        assert a[name] == b[name] and re.fullmatch(r"STK__\w+", a[name]), (
            f"{name}: the default is written in both tables ({a[name]!r}, {b[name]!r}): "
            "give it a named constant in options.h")


@pytest.mark.skipif(not os.path.exists(OPTIONS_H), reason="the source tree is not here")
def test_no_default_is_written_again_in_code():
    """The values of options.h's named defaults appear nowhere else in the C
    sources as literals: a decoder, the GPU config, a source's "0 = default"
    take the constant (or stk_options_init()'s values)."""
    consts = _named_defaults()
    assert {"STK__MAX_PIXELS_DEFAULT", "STK__MAX_DECODE_BYTES_DEFAULT",
            "STK__SHUFFLE_BUFFER_DEFAULT", "STK__REMOTE_MEMORY_DEFAULT",
            "STK__REMOTE_PART_BYTES", "STK__READ_TIMEOUT_DEFAULT"} <= set(consts)
    patterns = []
    for name, v in consts.items():
        if name.endswith("_MIB"):
            continue
        if v >= 1 << 20 and v % (1 << 20) == 0:
            mib = v >> 20
            patterns.append((name, rf"\b{mib}u?\s*<<\s*20\b"))
            patterns.append((name, rf"\b{mib}(?:\.0)?\s*\*\s*1024\s*\*\s*1024\b"))
        if v >= 10000:
            patterns.append((name, rf"\b{v}(?:u|ull|ULL)?\b"))
    # "0 = default" written in code: `opt ? opt : 1000`, and the timeouts
    for opt, const in [("shuffle_buffer", "STK__SHUFFLE_BUFFER_DEFAULT"),
                       ("remote_memory", "STK__REMOTE_MEMORY_DEFAULT"),
                       ("timm_mmax", "STK__TIMM_MMAX_DEFAULT"),
                       ("read_timeout", "STK__READ_TIMEOUT_DEFAULT")]:
        patterns.append((const, rf"\b{opt}\b[^;]*[?:=]\s*\(?{consts[const]}(?:\.0)?u?\b"))
    # ImageNet's mean and std: the options' default, read by the GPU config
    patterns.append(("mean/std", r"\b0\.(?:485|456|406|229|224|225)f?\b"))
    found = []
    for path, text in _c_files():
        if path == os.path.join("src", "core", "options.h"):
            continue
        code = _code(text)
        for name, pat in patterns:
            for m in re.finditer(pat, code):
                if (path, m.group(0)) in PENDING:
                    continue
                line = code.count("\n", 0, m.start()) + 1
                found.append(f"{path}:{line}: {m.group(0)!r} is {name}")
    assert not found, "defaults written again:\n" + "\n".join(found)


def test_gpu_config_takes_the_loader_defaults():
    """stk__gpu_config_init assigns no literal to a field the options give."""
    path = os.path.join(REPO, "src", "gpu", "gpu.c")
    if not os.path.exists(path):
        pytest.skip("the source tree is not here")
    text = _code(open(path).read())
    body = text[text.index("void stk__gpu_config_init("):]
    body = body[:body.index("\n}\n")]
    for field in ("max_batch", "out_w", "out_h", "dtype", "layout", "mean", "std", "max_pixels"):
        assert not re.search(rf"c->{field}\b[^;]*=\s*[-\d.A-Z]", body.replace("= o.", "")), field


def test_zero_values_are_the_docs():
    """The options whose 0 stands for a value of the library's: options()
    gives it ("zero"), the row's doc line and docs/python.md name it."""
    zero = {n: r["zero"] for n, r in LOADER.items() if r["zero"] is not None}
    assert zero.keys() == {"shuffle_buffer", "remote_memory", "timm_mmax"}
    assert all(r["zero"] is None for n, r in LOADER.items() if n not in zero)
    assert f"0 = {zero['shuffle_buffer']}," in LOADER["shuffle_buffer"]["doc"]
    assert f"0 = {mib(zero['remote_memory'])}" in LOADER["remote_memory"]["doc"]
    assert LOADER["remote_memory"]["doc"].startswith("remote shards: bytes of 8 MiB parts")
    assert LOADER["timm_mmax"]["doc"].endswith(f"0 = {zero['timm_mmax']}")
    if not os.path.exists(DOC):
        return
    text = re.sub(r"\s+", " ", open(DOC).read())
    m = re.search(r"`shuffle_buffer` \| [^|]*`None` = (\d+)", text)
    assert m and int(m.group(1)) == zero["shuffle_buffer"]
    m = re.search(r"`remote_memory` \| remote tar shards: bytes of (\d+ MiB) parts[^|]*"
                  r"\(`0` = (\d+ MiB)\)", text)
    assert m and m.group(1) == "8 MiB" and m.group(2) == mib(zero["remote_memory"])

"""BMP, PPM/PGM, WebP and TIFF: the pixels stoker decodes equal Pillow's
Image.open(f).convert("RGB") (torchvision's ImageFolder), exactly for the
lossless formats; lossy WebP at least 50 dB.

Images are square (S x S) so that the eval pipeline Resize(S) +
CenterCrop(S) is the identity: the loader's uint8 output is the decoded
image itself.
"""
import io
import math
import os

import numpy as np
import pytest

torch = pytest.importorskip("torch")
Image = pytest.importorskip("PIL.Image")

import stoker  # noqa: E402
from stoker import _stoker  # noqa: E402
from stoker import transforms as T  # noqa: E402

from conftest import photo  # noqa: E402

S = 72


def decoded(paths, size=S):
    """stoker's decode of each file (S x S), as H x W x 3 uint8 arrays."""
    root = os.path.dirname(os.path.dirname(paths[0]))
    ld = stoker.ImageLoader(root, batch_size=len(paths), threads=2, shuffle=False,
                            pipeline=[T.Resize(size), T.CenterCrop(size), T.PILToTensor()])
    names = [p for p, _ in ld.samples]
    assert sorted(names) == sorted(paths)
    out = {}
    for x, _ in ld:
        for i, p in enumerate(names):
            out[p] = x[i].permute(1, 2, 0).numpy()
    return [out[p] for p in paths]


def pillow(path):
    with Image.open(path) as im:
        return np.asarray(im.convert("RGB"))


def psnr(a, b):
    mse = float(((a.astype(np.float64) - b.astype(np.float64)) ** 2).mean())
    return 100.0 if mse == 0 else 10 * math.log10(255.0 ** 2 / mse)


def save_all(folder, items):
    """items: [(name, save(path))]; returns the paths, one class folder."""
    d = folder / "c0"
    d.mkdir(parents=True, exist_ok=True)
    paths = []
    for name, save in items:
        p = str(d / name)
        save(p)
        paths.append(p)
    return paths


def check_exact(paths):
    for p, got in zip(paths, decoded(paths)):
        ref = pillow(p)
        assert got.shape == ref.shape, p
        diff = np.argwhere(got != ref)
        assert diff.size == 0, f"{os.path.basename(p)}: {len(diff)} samples differ, first at {diff[0]}"


def rgb(seed):
    return photo(S, S, seed)


def im(a, mode=None):
    return Image.fromarray(a) if mode is None else Image.fromarray(a).convert(mode)


# ---- BMP --------------------------------------------------------------------------


def test_bmp_matches_pillow(tmp_path):
    a = rgb(1)
    items = [
        ("24.bmp", lambda p: im(a).save(p)),
        ("8pal.bmp", lambda p: im(a).convert("P", palette=Image.ADAPTIVE, colors=200).save(p)),
        ("4pal.bmp", lambda p: im(a).convert("P", palette=Image.ADAPTIVE, colors=16).save(p)),
        ("1bit.bmp", lambda p: im(a, "1").save(p)),
        ("grey.bmp", lambda p: im(a, "L").save(p)),
        ("32.bmp", lambda p: im(a, "RGBA").save(p)),
    ]
    check_exact(save_all(tmp_path, items))


def _bmp_bytes(a, bits, masks=None, top_down=False):
    """A BMP written here: 16-bit 5-5-5 / 5-6-5 and 32-bit with masks, which
    Pillow reads but does not write."""
    import struct

    h, w, _ = a.shape
    r, g, b = (a[..., c].astype(np.uint32) for c in range(3))
    if bits == 16:
        if masks == (0xF800, 0x7E0, 0x1F):
            px = (r >> 3) << 11 | (g >> 2) << 5 | (b >> 3)
        else:
            px = (r >> 3) << 10 | (g >> 3) << 5 | (b >> 3)
        rows = px.astype("<u2")
    else:  # 32: R in the low byte (the RGBA layout)
        rows = (r | g << 8 | b << 16 | np.uint32(0x55) << 24).astype("<u4")
    stride = (w * bits // 8 + 3) & ~3
    data = b"".join(rows[y].tobytes().ljust(stride, b"\0")
                    for y in (range(h) if top_down else range(h - 1, -1, -1)))
    comp = 3 if masks else 0
    hdr = struct.pack("<IiiHHIIiiII", 124, w, -h if top_down else h, 1, bits, comp,
                      len(data), 2835, 2835, 0, 0)
    hdr += struct.pack("<IIII", *(masks or (0, 0, 0)), 0xFF000000 if bits == 32 and masks else 0)
    hdr = hdr.ljust(124, b"\0")
    off = 14 + len(hdr)
    return b"BM" + struct.pack("<IHHI", off + len(data), 0, 0, off) + hdr + data


def test_bmp_bit_fields_and_top_down(tmp_path):
    a = rgb(2)
    variants = [
        ("555.bmp", _bmp_bytes(a, 16)),
        ("565.bmp", _bmp_bytes(a, 16, (0xF800, 0x7E0, 0x1F))),
        ("565td.bmp", _bmp_bytes(a, 16, (0xF800, 0x7E0, 0x1F), top_down=True)),
        ("rgba.bmp", _bmp_bytes(a, 32, (0xFF, 0xFF00, 0xFF0000))),
    ]
    items = [(n, lambda p, d=d: open(p, "wb").write(d)) for n, d in variants]
    check_exact(save_all(tmp_path, items))


def test_bmp_rle_is_refused_with_its_reason(tmp_path):
    # an 8-bit BMP marked RLE8 (compression 1): refused by name, not misread
    buf = io.BytesIO()
    im(rgb(3)).convert("P", palette=Image.ADAPTIVE, colors=50).save(buf, "BMP")
    data = bytearray(buf.getvalue())
    data[30:34] = (1).to_bytes(4, "little")
    p = tmp_path / "rle.bmp"
    p.write_bytes(bytes(data))
    with pytest.raises(stoker.DecodeError, match="RLE-compressed BMP"):
        _stoker.check_file(str(p))


# ---- PPM/PGM ----------------------------------------------------------------------


def _pnm(kind, a, maxval):
    """P2/P3/P5/P6 bytes of `a` (values 0..maxval)."""
    h, w = a.shape[:2]
    head = f"P{kind}\n# made by the tests\n{w} {h}\n{maxval}\n".encode()
    if kind in (2, 3):
        return head + " ".join(str(int(v)) for v in a.reshape(-1)).encode() + b"\n"
    return head + a.astype(">u2" if maxval > 255 else "u1").tobytes()


def test_ppm_pgm_match_pillow(tmp_path):
    a = rgb(4)
    rng = np.random.default_rng(4)
    items = [
        ("rgb.ppm", lambda p: im(a).save(p)),
        ("grey.pgm", lambda p: im(a, "L").save(p)),
    ]
    for maxval in (1, 15, 100, 1023, 4095, 65535):
        scaled = (a.astype(np.float64) / 255 * maxval + rng.uniform(-0.5, 0.5, a.shape)).round()
        scaled = np.clip(scaled, 0, maxval).astype(np.uint32)
        for kind in (5, 6):
            data = _pnm(kind, scaled[..., 0] if kind == 5 else scaled, maxval)
            items.append((f"p{kind}_{maxval}.pnm.{'pgm' if kind == 5 else 'ppm'}",
                          lambda p, d=data: open(p, "wb").write(d)))
    for kind in (2, 3):
        data = _pnm(kind, a[..., 0] if kind == 2 else a, 255)
        items.append((f"plain{kind}.{'pgm' if kind == 2 else 'ppm'}",
                      lambda p, d=data: open(p, "wb").write(d)))
    check_exact(save_all(tmp_path, items))


def test_truncated_ppm_is_refused(tmp_path):
    p = tmp_path / "t.ppm"
    buf = io.BytesIO()
    im(rgb(5)).save(buf, "PPM")
    p.write_bytes(buf.getvalue()[:-1])
    with pytest.raises(stoker.DecodeError, match="truncated PPM"):
        _stoker.check_file(str(p))


# ---- WebP -------------------------------------------------------------------------


def _rgba(seed):
    a = rgb(seed)
    y, x = np.mgrid[0:S, 0:S]
    alpha = ((x * 7 + y * 3) % 256).astype(np.uint8)
    alpha[: S // 4] = 0  # fully transparent rows: their colour must still come through
    return np.dstack([a, alpha])


def test_webp_lossless_and_alpha_match_pillow_exactly(tmp_path):
    a, ra = rgb(6), _rgba(7)
    frames = [Image.fromarray(_rgba(8)), Image.fromarray(rgb(9))]
    items = [
        ("lossless.webp", lambda p: im(a).save(p, lossless=True)),
        ("lossless_alpha.webp", lambda p: im(ra).save(p, lossless=True, exact=True)),
        ("anim_lossless.webp", lambda p: frames[0].save(p, save_all=True, append_images=frames[1:],
                                                         duration=50, lossless=True)),
    ]
    check_exact(save_all(tmp_path, items))


def test_webp_lossy_matches_pillow(tmp_path):
    frames = [Image.fromarray(rgb(12)), Image.fromarray(_rgba(13))]
    items = [
        ("q90.webp", lambda p: im(rgb(10)).save(p, quality=90)),
        ("q50.webp", lambda p: im(rgb(11)).save(p, quality=50, method=6)),
        ("alpha.webp", lambda p: im(_rgba(11)).save(p, quality=80)),
        ("anim.webp", lambda p: frames[0].save(p, save_all=True, append_images=frames[1:],
                                               duration=50, quality=75)),
    ]
    paths = save_all(tmp_path, items)
    for p, got in zip(paths, decoded(paths)):
        ref = pillow(p)
        db = psnr(got, ref)
        print(f"{os.path.basename(p)}: {db:.1f} dB")
        # the same libwebp as Pillow's (a system Pillow) gives the same pixels
        assert db >= 50, p


def test_webp_limits_and_truncation(tmp_path):
    buf = io.BytesIO()
    im(rgb(14)).save(buf, "WEBP", lossless=True)
    data = buf.getvalue()
    p = tmp_path / "cut.webp"
    p.write_bytes(data[: len(data) * 2 // 3])
    with pytest.raises(stoker.DecodeError, match="WebP"):
        _stoker.check_file(str(p))
    # a lossless file needs 4 bytes a pixel beside its RGB: over a small budget
    big = tmp_path / "c0" / "big.webp"
    big.parent.mkdir()
    im(photo(600, 600, 15)).save(big, lossless=True)
    ld = stoker.ImageLoader(str(tmp_path), batch_size=1, size=16, threads=1,
                            max_decode_bytes=1 << 20)
    with pytest.raises(stoker.DecodeError, match="max_decode_bytes"):
        next(iter(ld))


# ---- TIFF -------------------------------------------------------------------------


def _tiff_bytes(a, tile=None, big_endian=False, photometric=None, tags=()):
    """An uncompressed TIFF of `a` (H x W [x C], uint8 or uint16) written
    here: tiled layouts and 16-bit RGB, which this Pillow does not write.
    photometric=False leaves the PhotometricInterpretation tag out."""
    import struct

    e = ">" if big_endian else "<"
    h, w = a.shape[:2]
    spp = 1 if a.ndim == 2 else a.shape[2]
    bits = a.dtype.itemsize * 8
    pix = a.astype(a.dtype.newbyteorder(e))
    if tile:
        tw, th = tile
        chunks = []
        for ty in range(0, h, th):
            for tx in range(0, w, tw):
                t = np.zeros((th, tw) + a.shape[2:], pix.dtype)
                part = pix[ty:ty + th, tx:tx + tw]
                t[:part.shape[0], :part.shape[1]] = part
                chunks.append(t.tobytes())
    else:
        chunks = [pix[y:y + 8].tobytes() for y in range(0, h, 8)]  # 8 rows a strip
    if photometric is None:
        photometric = 1 if spp == 1 else 2
    data_off = 8
    offsets = []
    blob = b""
    for c in chunks:
        offsets.append(data_off + len(blob))
        blob += c
    extra = b""
    ifd_off = data_off + len(blob)
    n = len(chunks)
    # arrays that do not fit in an entry go after the IFD
    entries = [(256, 4, 1, w), (257, 4, 1, h), (258, 3, spp, [bits] * spp), (259, 3, 1, 1),
               (262, 3, 1, photometric), (277, 3, 1, spp), (284, 3, 1, 1)] + list(tags)
    if photometric is False:
        entries = [t for t in entries if t[0] != 262]
    if tile:
        entries += [(322, 4, 1, tile[0]), (323, 4, 1, tile[1]), (324, 4, n, offsets),
                    (325, 4, n, [len(c) for c in chunks])]
    else:
        entries += [(273, 4, n, offsets), (278, 4, 1, 8), (279, 4, n, [len(c) for c in chunks])]
    entries.sort()
    after = ifd_off + 2 + 12 * len(entries) + 4
    body = struct.pack(e + "H", len(entries))
    for tag, typ, count, val in entries:
        vals = val if isinstance(val, list) else [val]
        fmt = e + ("H" if typ == 3 else "I") * count
        raw = struct.pack(fmt, *vals)
        if len(raw) <= 4:
            body += struct.pack(e + "HHI", tag, typ, count) + raw.ljust(4, b"\0")
        else:
            body += struct.pack(e + "HHII", tag, typ, count, after + len(extra))
            extra += raw
    body += struct.pack(e + "I", 0)
    head = (b"MM\0*" if big_endian else b"II*\0") + struct.pack(e + "I", ifd_off)
    return head + blob + body + extra


def test_tiff_matches_pillow_exactly(tmp_path):
    a = rgb(20)
    g16 = (rgb(21)[..., 0].astype(np.uint16) * 1.2).astype(np.uint16)  # some above 255: clipped
    rgb16 = (rgb(22).astype(np.uint32) * 257 + np.random.default_rng(0).integers(0, 257, a.shape)).astype(np.uint16)
    written = {
        "tiled.tif": _tiff_bytes(a, tile=(16, 32)),
        "tiled_mm.tif": _tiff_bytes(a, tile=(32, 16), big_endian=True),
        "rgb16.tif": _tiff_bytes(rgb16),
        "rgb16_mm.tif": _tiff_bytes(rgb16, big_endian=True, tile=(16, 16)),
        "grey16_mm.tif": _tiff_bytes(g16, big_endian=True),
        # 16-bit grey in tiles that do not divide the width (S is not a
        # multiple of 32): libtiff's RGBA reader misplaces these rows, and
        # white-is-zero 16-bit is not inverted (Pillow's I;16)
        "grey16_tiled.tif": _tiff_bytes(g16, tile=(32, 16)),
        "grey16_white_tiled.tif": _tiff_bytes(g16, tile=(32, 16), photometric=0),
    }
    items = [
        ("raw.tif", lambda p: im(a).save(p)),
        ("lzw.tif", lambda p: im(a).save(p, compression="tiff_lzw")),
        ("deflate.tif", lambda p: im(a).save(p, compression="tiff_adobe_deflate")),
        ("packbits_rgba.tif", lambda p: im(a, "RGBA").save(p, compression="packbits")),
        ("grey.tif", lambda p: im(a, "L").save(p, compression="tiff_lzw")),
        ("grey16.tif", lambda p: Image.fromarray(g16).save(p)),
        ("palette.tif", lambda p: im(a).convert("P", palette=Image.ADAPTIVE, colors=100).save(p)),
        ("cmyk.tif", lambda p: im(a, "CMYK").save(p)),
        ("cmyk_lzw.tif", lambda p: im(rgb(23), "CMYK").save(p, compression="tiff_lzw")),
        ("bilevel_g4.tif", lambda p: im(a, "1").save(p, compression="group4")),
        ("jpeg.tif", lambda p: im(a).save(p, compression="jpeg", quality=90)),
    ] + [(n, lambda p, d=d: open(p, "wb").write(d)) for n, d in written.items()]
    check_exact(save_all(tmp_path, items))


def test_tiff_truncated_and_limits(tmp_path):
    buf = io.BytesIO()
    im(rgb(24)).save(buf, "TIFF")  # uncompressed: the directory first, then the strips
    data = buf.getvalue()
    p = tmp_path / "cut.tif"
    p.write_bytes(data[: len(data) * 2 // 3])
    with pytest.raises(stoker.DecodeError, match="TIFF: corrupt or truncated"):
        _stoker.check_file(str(p))
    p.write_bytes(data[:6])
    with pytest.raises(stoker.DecodeError, match="TIFF"):
        _stoker.check_file(str(p))
    # a tiled image of 8 x 8 pixels whose tiles claim 4096 x 4096 each:
    # over a small decode budget from the header, before any tile is read
    p.write_bytes(_tiff_bytes(rgb(25)[:8, :8], tile=(16, 16)).replace(
        (16).to_bytes(4, "little"), (4096).to_bytes(4, "little")))
    (tmp_path / "c0").mkdir()
    os.replace(p, tmp_path / "c0" / "tiles.tif")
    ld = stoker.ImageLoader(str(tmp_path), batch_size=1, size=8, threads=1,
                            max_decode_bytes=4 << 20)
    with pytest.raises(stoker.DecodeError, match="max_decode_bytes"):
        next(iter(ld))


def test_tiff_16bit_grey_never_misplaced(tmp_path):
    """16-bit grey with extra samples, in tiles that do not divide the width,
    is read as its first sample clipped at 255 (Pillow opens none of these;
    libtiff's RGBA reader misplaced their rows); 16-bit grey that stoker does
    not read itself (signed samples) is refused, not misplaced."""
    a = (np.stack([rgb(26)[..., 0], rgb(27)[..., 0], rgb(28)[..., 0]], -1).astype(np.uint16) * 1.2).astype(np.uint16)
    items = [(f"grey16x3_{ph}.tif", lambda p, ph=ph: open(p, "wb").write(_tiff_bytes(a, tile=(32, 16), photometric=ph)))
             for ph in (0, 1)]
    paths = save_all(tmp_path, items)
    want = np.repeat(np.minimum(a[..., :1], 255).astype(np.uint8), 3, axis=2)
    for p, got in zip(paths, decoded(paths)):
        assert np.array_equal(got, want), p
    p = tmp_path / "signed16.tif"
    p.write_bytes(_tiff_bytes(a[..., 0], tile=(32, 16), tags=[(339, 3, 1, 2)]))
    with pytest.raises(stoker.DecodeError, match="16-bit greyscale other than unsigned"):
        _stoker.check_file(str(p))


def _without_photometric(save):
    """A TIFF that `save(path)` writes with Pillow, its Photometric tag
    (262) renamed Threshholding (263, which no reader here uses): the entry
    keeps its place, so the directory stays sorted."""
    def write(p):
        save(p)
        data = bytearray(open(p, "rb").read())
        assert data[:4] == b"II*\0"
        ifd = int.from_bytes(data[4:8], "little")
        n = int.from_bytes(data[ifd:ifd + 2], "little")
        for i in range(n):
            e = ifd + 2 + 12 * i
            if int.from_bytes(data[e:e + 2], "little") == 262:
                data[e:e + 2] = (263).to_bytes(2, "little")
                break
        else:
            raise AssertionError("no Photometric tag")
        open(p, "wb").write(bytes(data))
    return write


def test_tiff_without_photometric_reads_as_pillow(tmp_path):
    """PhotometricInterpretation is required, but files without it exist.
    Pillow reads a missing tag as 0, white-is-zero: 1- and 8-bit grey come
    out inverted (16-bit, read as I;16, does not invert), where libtiff's RGBA
    reader would assume black-is-zero. stoker reads them as Pillow does."""
    a = rgb(29)
    g16 = (rgb(30)[..., 0].astype(np.uint16) * 1.2).astype(np.uint16)
    items = [
        ("grey_raw.tif", lambda p: open(p, "wb").write(_tiff_bytes(a[..., 0], photometric=False))),
        ("grey_tiled.tif", lambda p: open(p, "wb").write(_tiff_bytes(a[..., 1], tile=(32, 16), photometric=False))),
        ("grey16.tif", lambda p: open(p, "wb").write(_tiff_bytes(g16, photometric=False))),
        ("grey_lzw.tif", _without_photometric(lambda p: im(a, "L").save(p, compression="tiff_lzw"))),
        ("bilevel.tif", _without_photometric(lambda p: im(a, "1").save(p))),
        ("bilevel_g4.tif", _without_photometric(lambda p: im(a, "1").save(p, compression="group4"))),
    ]
    paths = save_all(tmp_path, items)
    # the reference is Pillow's, but make sure it is the inverted reading
    assert np.array_equal(pillow(paths[0])[..., 0], 255 - a[..., 0])
    check_exact(paths)


# ---- pack: caches and tar shards take every format -------------------------------


def test_pack_cache_and_tar_take_the_new_formats(tmp_path):
    import tarfile

    a = rgb(30)
    items = [
        ("a.webp", lambda p: im(a).save(p, lossless=True)),
        ("b.tif", lambda p: im(rgb(31)).save(p, compression="tiff_lzw")),
        ("c.bmp", lambda p: im(rgb(32)).save(p)),
        ("d.ppm", lambda p: im(rgb(33)).save(p)),
        ("e.pgm", lambda p: im(rgb(34), "L").save(p)),
        ("f.webp", lambda p: im(rgb(35)).save(p, quality=85)),
    ]
    src = tmp_path / "src"
    paths = save_all(src, items)
    ref = decoded(paths)
    for p, r in zip(paths, ref):
        assert np.array_equal(r, pillow(p)), p

    def through(root):
        ld = stoker.ImageLoader(str(root), batch_size=len(paths), threads=2, shuffle=False,
                                pipeline=[T.Resize(S), T.CenterCrop(S), T.PILToTensor()])
        return [x for x, _ in ld][0].permute(0, 2, 3, 1).numpy()

    want = np.stack(ref)
    r = stoker.pack(str(src), str(tmp_path / "data.stkc"), threads=2)
    assert (r.packed, r.failed) == (len(paths), 0)
    assert np.array_equal(through(tmp_path / "data.stkc"), want)
    r = stoker.pack(str(src), str(tmp_path / "shards"), format="tar", threads=2)
    assert (r.packed, r.failed) == (len(paths), 0)
    names = []
    for t in sorted((tmp_path / "shards").glob("*.tar")):
        with tarfile.open(t) as tf:
            names += [os.path.splitext(n)[1] for n in tf.getnames()]
    # each member named by its content's format
    assert sorted(n for n in names if n not in (".cls", ".txt")) == \
        [".bmp", ".pgm", ".ppm", ".tif", ".webp", ".webp"]
    got = through(tmp_path / "shards")
    # shards are read shard by shard; with shuffle off, in the packed order
    assert sorted(g.tobytes() for g in got) == sorted(w.tobytes() for w in want)

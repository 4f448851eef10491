"""bench/plot.py draws result files of TAG<TAB>JSON lines (bench/cache_suite.sh's form)."""
import importlib.util
import json
import os
import subprocess
import sys

import pytest

from conftest import PKG_ROOT

REPO = os.path.dirname(PKG_ROOT)
PLOT = os.path.join(REPO, "bench", "plot.py")


def load_plot():
    spec = importlib.util.spec_from_file_location("stoker_bench_plot", PLOT)
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    return mod


def suite_file(path):
    lines = [
        ("pack", {"seconds": 1.5, "bytes": 100}),
        ("stoker_t1", {"images": 10, "images_per_s": 1000.0}),
        ("stoker_t2", {"images": 10, "images_per_s": 1900.0}),
        ("dali_t2", {"loader": "dali-cache", "images_per_s": 1500.0}),
        ("dali_t4", {"loader": "dali-cache", "skipped": "no DALI"}),
        ("r18_synthetic", {"arch": "resnet18", "loader": "synthetic", "images_per_s": 4000.0}),
        ("r18_stoker_t1", {"arch": "resnet18", "loader": "stoker", "images_per_s": 3000.0}),
        ("r50_synthetic", {"arch": "resnet50", "loader": "synthetic", "images_per_s": 1000.0}),
        ("r50_stoker_t1", {"arch": "resnet50", "loader": "stoker", "images_per_s": 990.0}),
    ]
    with open(path, "w") as f:
        for tag, js in lines:
            f.write(f"{tag}\t{json.dumps(js)}\n")


def test_collect_groups_series_and_ceilings(tmp_path):
    plot = load_plot()
    p = tmp_path / "r.tsv"
    suite_file(p)
    figs = plot.collect(plot.read_results([str(p)]))
    assert set(figs) == {"loaders", "training"}
    loaders = {(g, s): v for g, s, v, _ in figs["loaders"]["rows"]}
    assert loaders == {("1 thread", "stoker"): 1000.0, ("2 threads", "stoker"): 1900.0,
                       ("2 threads", "dali"): 1500.0}  # the skipped run and pack left out
    training = {(g, s): v for g, s, v, _ in figs["training"]["rows"]}
    assert training[("ResNet-18", "synthetic")] == 4000.0
    assert training[("ResNet-50", "stoker, 1 thread")] == 990.0


def test_draws_pngs(tmp_path):
    pytest.importorskip("matplotlib")
    p = tmp_path / "r.tsv"
    suite_file(p)
    out = tmp_path / "img"
    r = subprocess.run([sys.executable, PLOT, str(p), "--out", str(out), "--prefix", "x-"],
                       capture_output=True, text=True)
    assert r.returncode == 0, r.stderr
    for name in ("x-loaders.png", "x-training.png"):
        data = (out / name).read_bytes()
        assert data.startswith(b"\x89PNG") and len(data) > 5000


def test_recorded_results_parse():
    plot = load_plot()
    figs = plot.collect(plot.read_results([os.path.join(REPO, "bench", "results",
                                                        "recorded-benchmarks.tsv")]))
    assert set(figs) == {"cpu-loaders", "gpu-loaders", "gpu-training"}
    ceilings = [js for _, _, _, js in figs["gpu-training"]["rows"]
                if js.get("loader") == "synthetic"]
    assert len(ceilings) == 2

"""DataLoader habits: its other arguments name the stoker way, "~" in paths
is the home folder, and loader.dataset / loader.sampler answer what code
written for DataLoader reads from them."""
import os

import pytest

torch = pytest.importorskip("torch")

import stoker  # noqa: E402

from conftest import make_folder  # noqa: E402


@pytest.fixture(scope="module")
def folder(tmp_path_factory):
    return make_folder(tmp_path_factory.mktemp("habits"), classes=3, per_class=5)  # 15 images


@pytest.mark.parametrize("name, value, names", [
    ("collate_fn", lambda b: b, "mix="),
    ("batch_sampler", [[0, 1]], "batch_size="),
    ("worker_init_fn", lambda i: None, "seed="),
    ("generator", None, "seed="),
    ("timeout", 5, "read_timeout="),
])
def test_dataloader_arguments_name_the_stoker_way(folder, name, value, names):
    with pytest.raises(TypeError) as e:
        stoker.ImageLoader(folder, batch_size=4, **{name: value})
    assert repr(name) in str(e.value) and names in str(e.value)


def test_tilde_is_the_home_folder(folder, monkeypatch):
    monkeypatch.setenv("HOME", os.path.dirname(folder))
    with stoker.ImageLoader(os.path.join("~", os.path.basename(folder)), batch_size=4,
                            size=16, threads=1, seed=0) as ld:
        assert ld.num_samples == 15
        assert ld.dataset.root == folder


def test_dataset_and_sampler(folder):
    with stoker.ImageLoader(folder, batch_size=4, size=16, threads=1, seed=3, rank=1,
                            world_size=2) as ld:
        ds = ld.dataset
        assert len(ds) == 15
        assert ds.classes == ["class00", "class01", "class02"]
        assert ds.class_to_idx == {"class00": 0, "class01": 1, "class02": 2}
        assert ds.samples == ld.samples and len(ds.samples) == 15
        assert ds.targets == [label for _, label in ld.samples]
        sp = ld.sampler
        assert len(sp) == 8  # DistributedSampler's: ceil(15 / 2)
        assert (sp.rank, sp.num_replicas, sp.seed, sp.shuffle) == (1, 2, 3, True)
        sp.set_epoch(4)  # the loop's loader.sampler.set_epoch(epoch)
        assert ld.epoch == sp.epoch == 4
        assert [b.epoch for b in ld.iter_batches()] == [4, 4]

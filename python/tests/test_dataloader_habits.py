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


@pytest.mark.parametrize("make, names", [
    (lambda: torch.utils.data.WeightedRandomSampler([1.0] * 15, 15), "weights="),
    (lambda: torch.utils.data.SubsetRandomSampler([0, 2, 4]), "torch.utils.data.Subset"),
    (lambda: torch.utils.data.RandomSampler(range(15)), "shuffle=True"),
    (lambda: torch.utils.data.distributed.DistributedSampler(range(15), 2, 0), "world_size="),
])
def test_samplers_name_what_replaces_them(folder, make, names):
    with pytest.raises(TypeError) as e:
        stoker.ImageLoader(folder, batch_size=4, sampler=make())
    assert names in str(e.value), str(e.value)


def test_subset_with_shuffle_is_subset_random_sampler(folder):
    """What the SubsetRandomSampler message proposes works: the subset's
    samples, each once an epoch, in another order each epoch."""
    from torch.utils.data import Subset
    from torchvision.datasets import ImageFolder

    idx = [0, 2, 4, 6, 8, 10]
    with stoker.ImageLoader(Subset(ImageFolder(folder), idx), batch_size=2, size=16, threads=1,
                            shuffle=True, seed=1) as ld:
        orders = []
        for e in range(3):
            ld.set_epoch(e)
            orders.append([ld.samples[i][0] for b in ld.iter_batches() for i in b.indices])
    want = sorted(ImageFolder(folder).samples[i][0] for i in idx)
    assert all(sorted(o) == want for o in orders)
    assert len({tuple(o) for o in orders}) > 1


def test_imagefolder_transform_changed_after_the_loader_is_refused(folder):
    """The loader reads an ImageFolder's transform once, when it is built: a
    transform changed later (replaced, or the same Compose changed in place)
    would be ignored, so the next pass raises, saying what to do."""
    T = pytest.importorskip("torchvision.transforms")
    from torchvision.datasets import ImageFolder

    ds = ImageFolder(folder, transform=T.Compose([T.Resize(20), T.CenterCrop(16),
                                                  T.ToTensor()]))
    with stoker.ImageLoader(ds, batch_size=4, threads=1) as ld:
        assert next(iter(ld))[0].shape == (4, 3, 16, 16)
        ds.transform.transforms[1].size = (12, 12)  # in place
        with pytest.raises(RuntimeError, match="transform changed after the loader was built"):
            next(iter(ld))
        ds.transform.transforms[1].size = (16, 16)  # back: fine again
        assert next(iter(ld))[0].shape == (4, 3, 16, 16)
        ds.transform = T.Compose([T.RandomResizedCrop(16), T.ToTensor()])  # replaced
        with pytest.raises(RuntimeError, match="build another ImageLoader"):
            next(iter(ld))


class RandomMixup(torch.nn.Module):
    """torchvision 0.14's references/classification/transforms.py classes, as
    recipes built them (their batch-mixing code is not needed here)."""

    def __init__(self, num_classes, p=0.5, alpha=1.0, inplace=False):
        super().__init__()
        self.num_classes, self.p, self.alpha, self.inplace = num_classes, p, alpha, inplace


class RandomCutmix(RandomMixup):
    pass


def test_reference_random_mixup_names_stokers_mixup(folder):
    T = pytest.importorskip("torchvision.transforms")
    with pytest.raises(ValueError) as e:
        stoker.ImageLoader(folder, batch_size=4, mix=RandomMixup(3, p=1.0, alpha=0.2))
    assert "stoker.transforms.MixUp(alpha=0.2, num_classes=3)" in str(e.value)
    choice = T.RandomChoice([RandomMixup(3, p=1.0, alpha=0.2), RandomCutmix(3, p=1.0)])
    with pytest.raises(ValueError, match=r"stoker\.transforms\.MixUp"):
        stoker.ImageLoader(folder, batch_size=4, mix=choice)
    with pytest.raises(ValueError) as e:
        stoker.ImageLoader(folder, batch_size=4, mix=RandomCutmix(3, p=0.5))
    msg = str(e.value)
    assert "stoker.transforms.CutMix(alpha=1.0, num_classes=3)" in msg
    # the share of batches that p gives: timm's Mixup, and the one it names is accepted
    assert "Mixup(mixup_alpha=0.0, cutmix_alpha=1.0, prob=0.5, label_smoothing=0.0" in msg
    from stoker import transforms as ST

    ST.mix_options(ST.Mixup(mixup_alpha=0.0, cutmix_alpha=1.0, prob=0.5, label_smoothing=0.0,
                            num_classes=3))

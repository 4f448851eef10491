"""Subsets of an ImageFolder (torch's Subset, random_split's parts) as the
loader's root, and list files that carry their class names."""
import os

import pytest

torch = pytest.importorskip("torch")
datasets = pytest.importorskip("torchvision.datasets")

import stoker  # noqa: E402

from conftest import make_folder  # noqa: E402


@pytest.fixture(scope="module")
def folder(tmp_path_factory):
    return make_folder(tmp_path_factory.mktemp("subsets"), classes=5, per_class=4)


def _all(loader):
    return [(x.clone(), y.clone()) for x, y in loader]


def test_subset_keeps_samples_order_and_class_names(folder):
    ds = datasets.ImageFolder(folder)
    idx = [17, 3, 4, 9, 0, 12]  # classes 4, 0, 1, 2, 0, 3: not every class, not in order
    sub = torch.utils.data.Subset(ds, idx)
    loader = stoker.ImageLoader(sub, 3, pipeline="eval", size=32, shuffle=False, threads=2)
    assert loader.classes == ds.classes  # all five names, not max label + 1
    assert loader.dataset.samples == [(os.path.abspath(ds.samples[i][0]), ds.samples[i][1])
                                      for i in idx]
    assert len(loader.dataset) == len(idx)
    labels = torch.cat([y for _, y in _all(loader)]).tolist()
    assert labels == [ds.targets[i] for i in idx]
    # the same pixels as the folder's loader gives those files
    whole = stoker.ImageLoader(folder, 20, pipeline="eval", size=32, shuffle=False, threads=2)
    (xall, _), = _all(whole)
    xs = torch.cat([x for x, _ in _all(loader)])
    assert torch.equal(xs, xall[idx])


def test_random_split_and_nested_subsets(folder):
    ds = datasets.ImageFolder(folder)
    train, val = torch.utils.data.random_split(ds, [15, 5],
                                               generator=torch.Generator().manual_seed(0))
    loader = stoker.ImageLoader(val, 5, pipeline="eval", size=32, shuffle=False)
    assert loader.classes == ds.classes and len(loader.dataset) == 5
    assert [p for p, _ in loader.dataset.samples] == [os.path.abspath(ds.samples[i][0])
                                                       for i in val.indices]
    inner = torch.utils.data.Subset(train, [2, 0])
    loader = stoker.ImageLoader(inner, 2, pipeline="eval", size=32, shuffle=False)
    want = [train.indices[2], train.indices[0]]
    assert [y for _, y in loader.dataset.samples] == [ds.targets[i] for i in want]


def test_subset_of_something_else_is_refused():
    data = torch.utils.data.TensorDataset(torch.zeros(4, 3))
    with pytest.raises(TypeError, match="Subset of TensorDataset"):
        stoker.ImageLoader(torch.utils.data.Subset(data, [0, 1]), 2)


def test_a_list_file_carries_its_class_names(folder, tmp_path):
    ds = datasets.ImageFolder(folder)
    lst = tmp_path / "val.txt"
    lines = ["# a comment", *(f"# class: {c}" for c in ds.classes)]
    lines += [f"{p} {y}" for p, y in ds.samples if y in (0, 2)]  # classes 0 and 2 only
    lst.write_text("\n".join(lines) + "\n")
    loader = stoker.ImageLoader(list_file=str(lst), batch_size=4, pipeline="eval", size=32)
    assert loader.classes == ds.classes and len(loader.classes) == 5
    # without the names: max label + 1, as before
    plain = tmp_path / "plain.txt"
    plain.write_text("\n".join(lines[6:]) + "\n")
    loader = stoker.ImageLoader(list_file=str(plain), batch_size=4, pipeline="eval", size=32)
    assert len(loader.classes) == 3
    # fewer names than the labels need is an error naming both
    short = tmp_path / "short.txt"
    short.write_text("# class: a\n" + "\n".join(lines[6:]) + "\n")
    with pytest.raises(ValueError, match="labels up to 2 but 1"):
        stoker.ImageLoader(list_file=str(short), batch_size=4, pipeline="eval", size=32)

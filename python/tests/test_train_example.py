"""examples/reference/train.py on the CPU on a tiny generated dataset: validation each epoch,
checkpoints, an exact --resume (mid-epoch too), --evaluate, TensorBoard events, and
torchvision's reference recipe flags (TrivialAugment, RandomErasing, MixUp/CutMix, label
smoothing, repeated augmentation) on both loaders."""
import glob
import importlib.util
import json
import math
import os
import subprocess
import sys

import pytest

from conftest import PKG_ROOT, make_folder

REPO = os.path.dirname(PKG_ROOT)
TRAIN = os.path.join(REPO, "examples", "reference", "train.py")
BUILD = os.path.join(REPO, "build")


@pytest.fixture(scope="module")
def dataset(tmp_path_factory):
    root = tmp_path_factory.mktemp("trainex")
    make_folder(root / "train", classes=3, per_class=8)  # 24 images: 4 batches of 6
    make_folder(root / "val", classes=3, per_class=3, seed=300)
    return str(root)


def run(python, args, cwd, timeout=120):
    env = dict(os.environ)
    env["PYTHONPATH"] = os.pathsep.join(p for p in (env.get("PYTHONPATH"), PKG_ROOT) if p)
    env.pop("WORLD_SIZE", None)
    r = subprocess.run([python, TRAIN] + args, cwd=str(cwd), env=env, capture_output=True,
                       text=True, timeout=timeout)
    assert r.returncode == 0, r.stdout[-3000:] + r.stderr[-3000:]
    lines = r.stdout.splitlines()
    return json.loads([ln for ln in lines if ln.startswith("{")][-1]), lines


def base(dataset):
    return [dataset, "-a", "tiny", "-b", "6", "--image-size", "32", "--epochs", "2",
            "--device", "cpu", "-j", "1", "--json"]


@pytest.mark.slow
def test_validation_checkpoint_and_exact_resume(dataset, tmp_path):
    straight, lines = run(sys.executable, base(dataset) + ["-p", "2", "--checkpoint-dir",
                                                           str(tmp_path / "a")], tmp_path)
    assert straight["steps"] == 8 and straight["epoch"] == 2
    assert straight["val_images"] == 9
    assert 0 <= straight["val_acc1"] <= straight["val_acc5"] <= 100
    # pytorch/examples' progress lines and one validation line per epoch
    progress = [ln for ln in lines if ln.startswith("Epoch: [")]
    assert len(progress) == 4 and all(" Time " in ln and " Data " in ln for ln in progress)
    assert sum(ln.startswith(" * Epoch") for ln in lines) == 2
    ck = tmp_path / "a" / "checkpoint.pth.tar"
    assert ck.is_file() and (tmp_path / "a" / "model_best.pth.tar").is_file()

    # Stop mid-epoch 0, resume and stop mid-epoch 1, resume to the end: the same weights.
    d = str(tmp_path / "b")
    first, _ = run(sys.executable, base(dataset) + ["-p", "0", "--steps", "3",
                                                    "--checkpoint-dir", d], tmp_path)
    assert first["steps"] == 3 and first["val_images"] is None
    import torch

    state = torch.load(os.path.join(d, "checkpoint.pth.tar"), map_location="cpu")
    assert (state["epoch"], state["batch"], state["step"]) == (0, 3, 3)
    assert state["loader"][0]["epoch"] == 0 and state["loader"][0]["batch"] == 3
    resume = ["--resume", os.path.join(d, "checkpoint.pth.tar"), "--checkpoint-dir", d]
    second, _ = run(sys.executable, base(dataset) + ["-p", "0", "--steps", "3"] + resume,
                    tmp_path)
    assert second["steps"] == 3 and second["global_step"] == 6
    third, _ = run(sys.executable, base(dataset) + ["-p", "0"] + resume, tmp_path)
    assert third["steps"] == 2 and third["global_step"] == 8 and third["epoch"] == 2
    assert third["weights_sha256"] == straight["weights_sha256"]
    assert third["val_acc1"] == straight["val_acc1"]
    assert third["val_loss"] == straight["val_loss"]

    # --evaluate on the final checkpoint gives the last validation's figures.
    ev, _ = run(sys.executable, [dataset, "-a", "tiny", "-b", "6", "--image-size", "32",
                                 "--device", "cpu", "-j", "1", "--json", "--evaluate",
                                 "--resume", str(ck)], tmp_path)
    assert ev["evaluate"] and ev["val_images"] == 9
    assert ev["val_acc1"] == straight["val_acc1"] and ev["val_loss"] == straight["val_loss"]


def test_old_flags_still_work(dataset, tmp_path):
    # the benchmark scripts' spelling: --data, --arch, --batch-size, --workers, --steps
    res, _ = run(sys.executable, ["--data", os.path.join(dataset, "train"), "--arch", "tiny",
                                  "--batch-size", "6", "--image-size", "32", "--workers", "1",
                                  "--epochs", "3", "--steps", "5", "--warmup-steps", "2",
                                  "--log-every", "0", "--device", "cpu", "--json"], tmp_path)
    assert res["steps"] == 5 and res["measured_steps"] == 3 and res["val_images"] is None
    assert res["images_per_s"] > 0 and 0 <= res["data_wait_fraction"] <= 1
    syn, _ = run(sys.executable, ["--synthetic", "-a", "tiny", "--num-classes", "4", "-b", "4",
                                  "--image-size", "32", "--steps", "3", "--device", "cpu",
                                  "--json"], tmp_path)
    assert syn["loader"] == "synthetic" and syn["steps"] == 3


def test_cache_flag_packs_then_trains_from_the_cache(dataset, tmp_path):
    cache = tmp_path / "train.stkc"
    res, _ = run(sys.executable, base(dataset) + ["--cache", str(cache)], tmp_path)
    assert cache.is_file() and res["steps"] == 8 and res["val_images"] == 9
    stamp = cache.stat().st_mtime_ns
    again, _ = run(sys.executable, base(dataset) + ["--cache", str(cache)], tmp_path)
    assert cache.stat().st_mtime_ns == stamp and again["steps"] == 8  # read, not packed again
    assert again["weights_sha256"] == res["weights_sha256"]  # the same batches both times


def test_flags_are_not_abbreviated(dataset, tmp_path):
    # pytorch/examples' --gpu 0 is not a flag of train.py: refused, not read as --gpu-cpu-share 0
    env = dict(os.environ)
    env["PYTHONPATH"] = os.pathsep.join(p for p in (env.get("PYTHONPATH"), PKG_ROOT) if p)
    env.pop("WORLD_SIZE", None)
    for flag in ("--gpu", "--gpu-cpu"):
        r = subprocess.run([sys.executable, TRAIN] + base(dataset) + [flag, "0"], cwd=str(tmp_path),
                           env=env, capture_output=True, text=True, timeout=120)
        assert r.returncode == 2, r.stdout[-2000:] + r.stderr[-2000:]
        assert f"unrecognized arguments: {flag} 0" in r.stderr


def tensorboard_python():
    """An interpreter with torch and tensorboard: this one, or a virtualenv under build/
    that sees the system's packages and adds tensorboard from PyPI (made once)."""
    probe = "import torch.utils.tensorboard, tensorboard.backend.event_processing"
    if subprocess.run([sys.executable, "-c", probe], capture_output=True).returncode == 0:
        return sys.executable
    venv = os.path.join(BUILD, "tb-venv")
    py = os.path.join(venv, "bin", "python")
    if not os.path.exists(py):
        r = subprocess.run([sys.executable, "-m", "venv", "--system-site-packages", venv],
                           capture_output=True)
        if r.returncode != 0:
            pytest.skip("cannot make a virtualenv for tensorboard")
    if subprocess.run([py, "-c", probe], capture_output=True).returncode != 0:
        r = subprocess.run([py, "-m", "pip", "install", "-q", "tensorboard"],
                           capture_output=True, text=True, timeout=600)
        if r.returncode != 0:
            pytest.skip(f"tensorboard cannot be installed: {r.stderr[-300:]}")
    if subprocess.run([py, "-c", probe], capture_output=True).returncode != 0:
        pytest.skip("tensorboard cannot be imported")
    return py


@pytest.mark.slow
def test_tensorboard_scalars(dataset, tmp_path):
    py = tensorboard_python()
    logdir = tmp_path / "tb"
    run(py, base(dataset) + ["-p", "2", "--tensorboard", str(logdir)], tmp_path)
    assert glob.glob(str(logdir / "events.out.tfevents.*"))
    read = ("import json, sys\n"
            "from tensorboard.backend.event_processing.event_accumulator import "
            "EventAccumulator\n"
            "a = EventAccumulator(sys.argv[1]); a.Reload()\n"
            "print(json.dumps({t: len(a.Scalars(t)) for t in a.Tags()['scalars']}))\n")
    r = subprocess.run([py, "-c", read, str(logdir)], capture_output=True, text=True)
    assert r.returncode == 0, r.stderr
    tags = json.loads(r.stdout)
    for t in ("train/loss", "train/acc1", "perf/images_per_s", "perf/data_wait_fraction",
              "loader/images", "loader/decode_seconds", "val/loss", "val/acc1", "val/acc5"):
        assert t in tags, (t, sorted(tags))
    assert tags["train/loss"] == 4 and tags["val/acc1"] == 2  # every 2 steps; every epoch


@pytest.fixture(scope="module")
def recipe_dataset(tmp_path_factory):
    # 300 images: RASampler keeps 300 // 256 * 256 = 256 per epoch (8 batches of 32),
    # where the plain order gives 9
    root = tmp_path_factory.mktemp("recipe")
    make_folder(root / "train", classes=3, per_class=100)
    make_folder(root / "val", classes=3, per_class=3, seed=300)
    return str(root)


# torchvision's ResNet-50 recipe, scaled down to 32-pixel crops
NEW_RECIPE = ["--auto-augment", "ta_wide", "--random-erase", "0.1", "--mixup-alpha", "0.2",
              "--cutmix-alpha", "1.0", "--label-smoothing", "0.1", "--train-crop-size", "32",
              "--val-resize-size", "37", "--val-crop-size", "32", "--ra-sampler",
              "--ra-reps", "4"]


def recipe_run(recipe_dataset, tmp_path, loader):
    res, lines = run(sys.executable, [recipe_dataset, "--loader", loader, "-a", "tiny", "-b",
                                      "32", "--epochs", "1", "--device", "cpu", "-j", "1",
                                      "-p", "2", "--json"] + NEW_RECIPE, tmp_path)
    # it trained: one epoch of RASampler's 256 images, a finite loss printed on the way
    assert res["steps"] == 8 and res["epoch"] == 1
    assert res["soft_labels"] is True  # MixUp/CutMix made the targets probabilities
    assert math.isfinite(res["final_loss"]) and res["final_loss"] > 0
    progress = [ln for ln in lines if ln.startswith("Epoch: [0]")]
    assert len(progress) == 4 and all(" Loss " in ln for ln in progress)
    assert any(ln.startswith(f"tiny {loader} cpu x1:") and " loss " in ln for ln in lines)
    recipe = [ln for ln in lines if ln.startswith("train: ")]
    assert recipe == [res["recipe"]]
    for part in ("RandomResizedCrop(32, bilinear)", "TrivialAugmentWide", "RandomErasing(0.1)",
                 "MixUp(0.2) or CutMix(1.0)", "repeated augmentation x4",
                 "label_smoothing=0.1", "Resize(37), CenterCrop(32)"):
        assert part in res["recipe"], (part, res["recipe"])
    assert res["val_images"] == 9 and 0 <= res["val_acc1"] <= 100
    return res


def test_new_recipe_flags_train_on_stoker(recipe_dataset, tmp_path):
    recipe_run(recipe_dataset, tmp_path, "stoker")


def test_new_recipe_flags_train_on_torchvision(recipe_dataset, tmp_path):
    recipe_run(recipe_dataset, tmp_path, "torchvision")


def test_bicubic_flag_reaches_both_loaders(dataset, tmp_path):
    base_args = [dataset, "-a", "tiny", "-b", "6", "--epochs", "1", "--device", "cpu", "-j",
                 "1", "-p", "0", "--json", "--image-size", "32", "--interpolation", "bicubic"]
    for loader in ("stoker", "torchvision"):
        res, _ = run(sys.executable, base_args + ["--loader", loader], tmp_path)
        assert res["steps"] == 4 and math.isfinite(res["final_loss"])
        assert "RandomResizedCrop(32, bicubic)" in res["recipe"]
    # a policy gets the recipe's interpolation too (as torchvision's reference passes it):
    # stoker runs it or says that this build cannot, naming the policy
    env = dict(os.environ)
    env["PYTHONPATH"] = os.pathsep.join(p for p in (env.get("PYTHONPATH"), PKG_ROOT) if p)
    env.pop("WORLD_SIZE", None)
    r = subprocess.run([sys.executable, TRAIN] + base_args + ["--auto-augment", "ta_wide"],
                       cwd=str(tmp_path), env=env, capture_output=True, text=True, timeout=120)
    if r.returncode != 0:
        assert r.returncode == 1 and "Traceback" not in r.stderr, r.stderr[-2000:]
        assert ("--interpolation bicubic for the --auto-augment ta_wide policy's warps is not "
                "available in this build of stoker: TrivialAugmentWide") in r.stderr, r.stderr


def load_train_module():
    spec = importlib.util.spec_from_file_location("stoker_train_example", TRAIN)
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    return mod


def test_recipe_sizes_and_eval_resize_rounding():
    import torchvision.transforms as TV

    from stoker import transforms as ST

    train = load_train_module()
    a = train.parse_args(["--synthetic"])
    assert (a.train_crop_size, a.val_resize_size, a.val_crop_size) == (224, 256, 224)
    # derived resize: round(160 * 256 / 224) = round(182.86) = 183, as the C code computes
    # it, on both loaders (flooring gives 182)
    a = train.parse_args(["--synthetic", "--image-size", "160"])
    assert (a.train_crop_size, a.val_resize_size, a.val_crop_size) == (160, 183, 160)
    for T in (TV, ST):
        resize, crop = train.recipe_transforms(a, T, train=False)[:2]
        assert (resize.size, crop.size) in ((183, 160), (183, (160, 160)))
    a = train.parse_args(["--synthetic", "--train-crop-size", "176", "--val-resize-size",
                          "232", "--auto-augment", "ra", "--ra-magnitude", "7",
                          "--random-erase", "0.25", "--interpolation", "bicubic"])
    assert (a.train_crop_size, a.val_resize_size, a.val_crop_size) == (176, 232, 224)
    assert a.image_size == 176  # what loaders added to LOADERS (bench/dali_*.py) read
    for T in (TV, ST):
        steps = train.recipe_transforms(a, T, train=True)
        names = [type(t).__name__ for t in steps]
        assert names == ["RandomResizedCrop", "RandomHorizontalFlip", "RandAugment",
                         "ToTensor", "Normalize", "RandomErasing"]
        assert steps[0].interpolation == T.InterpolationMode.BICUBIC
        assert steps[2].magnitude == 7 and steps[2].interpolation == T.InterpolationMode.BICUBIC
        assert steps[5].p == 0.25
    with pytest.raises(SystemExit):
        train.parse_args(["--synthetic", "--val-resize-size", "200"])  # smaller than the crop


def test_batch_mix_has_torchvision_v2_semantics():
    # the fallback MixUp/CutMix of --loader torchvision on a torchvision without v2
    import torch

    train = load_train_module()
    torch.manual_seed(0)
    images = torch.arange(4, dtype=torch.float32).view(4, 1, 1, 1).expand(4, 3, 8, 8).clone()
    labels = torch.tensor([0, 1, 2, 3])
    for mode in ("mixup", "cutmix"):
        mix = train.BatchMix(5, mixup_alpha=1.0 if mode == "mixup" else 0.0,
                             cutmix_alpha=1.0 if mode == "cutmix" else 0.0)
        for _ in range(20):
            out, soft = mix(images.clone(), labels)
            assert soft.shape == (4, 5) and soft.dtype == torch.float32
            assert torch.allclose(soft.sum(1), torch.ones(4))
            lam = float(soft[1, 1])  # image i is mixed with image i - 1 (roll(1))
            assert torch.allclose(soft[1, 0], torch.tensor(1 - lam))
            # the weight of each image's own pixels is its label weight
            own = (out[1] == 1).float().mean() if mode == "cutmix" else None
            if mode == "mixup":
                assert torch.allclose(out[1], torch.full((3, 8, 8), lam * 1 + (1 - lam) * 0))
            else:
                assert abs(float(own) - lam) < 1e-6
                assert torch.allclose(soft[0, 3], torch.tensor(1 - lam))

"""Batch ownership, slot exhaustion, closing and teardown without hangs."""
import gc
import os
import subprocess
import sys
import textwrap
import threading

import pytest

torch = pytest.importorskip("torch")

import stoker  # noqa: E402
from stoker import _stoker  # noqa: E402

from conftest import PKG_ROOT, make_folder  # noqa: E402


@pytest.fixture(scope="module")
def folder(tmp_path_factory):
    return make_folder(tmp_path_factory.mktemp("life"), classes=4, per_class=8)  # 32 images


def loader(root, **kw):
    kw.setdefault("batch_size", 2)
    kw.setdefault("size", 16)
    kw.setdefault("threads", 3)
    kw.setdefault("prefetch", 2)  # 4 slots
    return stoker.ImageLoader(root, **kw)


def test_held_batches_are_never_overwritten(folder):
    ld = loader(folder)
    assert ld.num_slots == 4
    held, copies = [], []
    for images, labels in ld:
        # Hold 2: the loop variables keep a third batch alive while the next
        # is asked for, which leaves the 4th slot to the loader.
        if len(held) < ld.num_slots - 2:
            held.append((images, labels))
            copies.append((images.clone(), labels.clone()))
    assert len(held) == 2
    # The loop went through 16 batches and the next epoch is being prepared
    # meanwhile: the held ones must still hold their own values.
    for (x, y), (cx, cy) in zip(held, copies):
        assert torch.equal(x, cx) and torch.equal(y, cy)


def test_holding_every_slot_raises_and_keeps_values(folder):
    ld = loader(folder)
    it = iter(ld)
    held = [next(it) for _ in range(ld.num_slots)]
    copies = [(x.clone(), y.clone()) for x, y in held]
    with pytest.raises(RuntimeError, match="slot"):
        next(it)
    for (x, y), (cx, cy) in zip(held, copies):
        assert torch.equal(x, cx) and torch.equal(y, cy)
    # Letting one batch go makes room: the same pass continues where it was.
    del held[0]
    images, _ = next(it)
    assert images.shape[0] == 2
    held.clear()
    del images
    assert sum(1 for _ in it) == len(ld) - 5


def test_keeping_only_the_labels_holds_no_slot(folder):
    # DataLoader's habit: targets.append(y) for a confusion matrix. The
    # labels are copied out of the slot, so the loop keeps every batch's
    # labels (16 batches, 4 slots) and each keeps its own values.
    ld = loader(folder, seed=5)
    kept, want = [], []
    for b in ld.iter_batches():
        kept.append(b.labels)
        want.append([ld.samples[i][1] for i in b.indices])
    assert len(kept) == len(ld) == 16 > ld.num_slots
    assert [y.tolist() for y in kept] == want
    # mix=: the soft labels are copied too
    ld = loader(folder, seed=5, mix=stoker.transforms.MixUp(alpha=1.0))
    kept = [y for _, y in ld]
    assert len(kept) == 16 and all(y.shape == (2, 4) for y in kept)
    assert all(torch.allclose(y.sum(1), torch.ones(2)) for y in kept)


def test_a_batch_is_released_only_when_its_images_are_gone(folder):
    ld = loader(folder)
    it = iter(ld)
    images_only = []
    for _ in range(ld.num_slots):
        images, labels = next(it)
        images_only.append(images)  # the labels are dropped, the images kept
        del labels
    with pytest.raises(RuntimeError, match="slot"):
        next(it)
    images_only.clear()
    assert next(it)[0].shape[0] == 2


def test_unconsumed_capsules_release_their_slot(folder):
    ld = loader(folder)
    c = ld._c
    for _ in range(3 * ld.num_slots):
        out = c.next()  # capsules never handed to torch
        assert out is not None
        del out


def test_tensors_outlive_the_loader(folder):
    ld = loader(folder)
    images, labels = next(iter(ld))
    ref = images.clone()
    ld.close()
    del ld
    gc.collect()
    assert torch.equal(images, ref)
    images.add_(1)  # still the batch's own memory, writable
    del images, labels  # the last reference: this destroys the C loader


def test_tensors_freed_on_another_thread(folder):
    ld = loader(folder)
    batches = [next(iter(ld)) for _ in range(3)]
    ld.close()
    t = threading.Thread(target=batches.clear)
    t.start()
    t.join(30)
    assert not t.is_alive()


def test_superseded_iterator_refuses_to_continue(folder):
    ld = loader(folder)
    old = iter(ld)
    next(old)
    new = iter(ld)
    next(new)
    with pytest.raises(RuntimeError, match="superseded"):
        next(old)
    assert sum(1 for _ in new) == len(ld) - 1


def test_concurrent_consumers_are_refused_not_corrupted(folder):
    """One consumer at a time: a second thread gets an error, never a broken batch."""
    ld = loader(folder, batch_size=4)
    errors, count = [], [0]

    def consume():
        try:
            for _ in range(50):
                out = ld._c.next()
                if out is None:
                    continue
                count[0] += 1
        except RuntimeError as e:
            errors.append(str(e))

    threads = [threading.Thread(target=consume) for _ in range(3)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(60)
    assert not any(t.is_alive() for t in threads)
    assert all("another thread" in e for e in errors)
    assert count[0] > 0



def test_close_while_another_thread_seeks(tmp_path):
    """close() on one thread while seek() waits for the workers on another:
    the seek keeps the loader alive until it returns."""
    root = make_folder(tmp_path / "big", classes=2, per_class=4, sizes=((800, 600),))
    for _ in range(10):
        c = _stoker.Loader(root=root, batch_size=2, size=32, threads=4, prefetch=2,
                           pipeline="eval")
        started = threading.Event()

        def seek():
            try:
                for k in range(500):
                    c.seek(k % 3, k % 4)
                    started.set()
            except ValueError:  # closed
                pass
            finally:
                started.set()

        t = threading.Thread(target=seek)
        t.start()
        started.wait(30)
        c.close()
        t.join(60)
        assert not t.is_alive()
        assert c.closed


def run_script(code, timeout=60):
    env = dict(os.environ, PYTHONPATH=PKG_ROOT + os.pathsep + os.environ.get("PYTHONPATH", ""))
    return subprocess.run([sys.executable, "-c", textwrap.dedent(code)], env=env, timeout=timeout,
                          capture_output=True, text=True)


@pytest.mark.parametrize("ending", [
    "del ld",                      # delete mid-epoch, no batch held
    "ld.close()",                  # close mid-epoch
    "kept = batch; del ld",        # delete while a batch is held, then exit holding it
    "pass",                        # leave it all to interpreter shutdown
])
def test_break_and_delete_never_hang(folder, ending):
    r = run_script(f"""
        import gc, stoker
        ld = stoker.ImageLoader({folder!r}, batch_size=2, size=64, threads=4, prefetch=4)
        for i, batch in enumerate(ld):
            if i == 2:
                break
        for i, batch in enumerate(ld):  # a new pass (the next epoch)
            if i == 1:
                break
        {ending}
        gc.collect()
        print("done")
    """)
    assert r.returncode == 0, r.stderr
    assert r.stdout.strip() == "done"


@pytest.mark.skipif(not hasattr(os, "fork"), reason="needs fork()")
def test_a_forked_child_never_touches_the_parents_loader(folder):
    r = run_script(f"""
        import os, warnings, stoker
        warnings.simplefilter("ignore", DeprecationWarning)  # fork() with threads running
        ld = stoker.ImageLoader({folder!r}, batch_size=2, size=16, threads=3)
        it = iter(ld)
        images, labels = next(it)
        pid = os.fork()
        if pid == 0:
            try:
                next(it)
                os._exit(3)
            except RuntimeError as e:
                ok = "fork" in str(e)
            del images, labels, it  # frees the tensors: must not touch the loader
            ld.close()
            del ld
            os._exit(0 if ok else 4)
        _, status = os.waitpid(pid, 0)
        assert os.waitstatus_to_exitcode(status) == 0, status
        assert sum(x.shape[0] for x, _ in it) == 30  # the parent goes on unharmed
        print("done")
    """)
    assert r.returncode == 0, r.stderr
    assert r.stdout.strip() == "done"


def test_error_codes_are_exposed():
    assert _stoker.EBUSY == -10 and _stoker.ETOOMANY == -12
    assert "slot" in _stoker.strerror(_stoker.EBUSY)

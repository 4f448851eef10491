"""pin_memory=True: a freed batch's slot is not rewritten before the copies
queued from it have run.

torch does not keep cudaHostRegister'ed memory alive for a queued
x.cuda(non_blocking=True), so the loader records an event on torch's current
stream when the images tensor is freed and holds the slot until the event
has completed. The CPU tests drive that logic with stand-in events; the
CUDA test checks real copies queued behind a busy stream.
"""
import ctypes
import gc

import pytest

torch = pytest.importorskip("torch")
np = pytest.importorskip("numpy")

import stoker  # noqa: E402

from conftest import make_folder  # noqa: E402


@pytest.fixture(scope="module")
def folder(tmp_path_factory):
    return make_folder(tmp_path_factory.mktemp("pinned"), classes=2, per_class=12)  # 24 images


class FakeEvent:
    """Stands for torch.cuda.Event: done when synchronize() is called, or
    at once when `done` is set."""

    def __init__(self, log, done=False):
        self.log, self.done = log, done
        log.append(("record", self))

    def query(self):
        return self.done

    def synchronize(self):
        self.log.append(("sync", self))
        self.done = True


def cpu_pinned_loader(folder, log, done=False, **kw):
    """A loader that takes the pinned path without CUDA: pinning itself is a no-op."""
    ld = stoker.ImageLoader(folder, batch_size=4, size=16, threads=2, shuffle=False, seed=1,
                            prefetch=1, **kw)  # 3 slots
    ld._pin = True
    ld._pin_slot = lambda images: None
    ld._new_event = lambda: FakeEvent(log, done)
    return ld


def memory_at(ptr, n):
    return np.frombuffer((ctypes.c_uint8 * n).from_address(ptr), np.uint8).copy()


def test_a_freed_slot_waits_for_its_event_before_refill(folder):
    log = []
    ld = cpu_pinned_loader(folder, log)
    it = iter(ld)
    images, labels = next(it)
    ptr, nbytes = images.data_ptr(), images.numel() * images.element_size()
    first = memory_at(ptr, nbytes)
    del images, labels  # as `x = x.cuda(non_blocking=True)` frees the host tensor
    gc.collect()
    assert [k for k, _ in log] == ["record"] and len(ld._held) == 1
    event = log[0][1]
    # the two other slots, held by the caller: only the held slot could be refilled
    b2, b3 = next(it), next(it)
    intact = []
    event.synchronize = lambda: (intact.append(np.array_equal(memory_at(ptr, nbytes), first)),
                                 FakeEvent.synchronize(event))
    b4 = next(it)  # every slot is held: the loader waits for the event, then refills it
    assert ("sync", event) in log and intact == [True]
    assert len(ld._held) == 0
    assert b4[0].data_ptr() == ptr  # the slot came back after its event
    del b2, b3, b4
    ld.close()


def test_completed_events_give_their_slots_back_without_waiting(folder):
    log = []
    ld = cpu_pinned_loader(folder, log, done=True)
    n = 0
    for images, labels in ld:  # each batch freed at the next step
        n += 1
    assert n == len(ld) == 6
    assert not any(k == "sync" for k, _ in log)  # query() said done: no wait
    assert sum(k == "record" for k, _ in log) >= 5
    ld.close()
    assert len(ld._held) == 0


def test_at_most_prefetch_slots_wait_on_events(folder):
    log = []
    ld = cpu_pinned_loader(folder, log)
    for images, labels in ld:
        # prefetch=1 held at the C call, plus the batch the loop variables
        # let go of when this one was bound
        assert len(ld._held) <= 2
    ld.close()  # waits for what is still held
    assert len(ld._held) == 0
    assert any(k == "sync" for k, _ in log)


@pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA device")
def test_queued_copies_read_their_own_batch(folder):
    want = []
    with stoker.ImageLoader(folder, batch_size=4, size=16, threads=2, shuffle=True,
                            seed=5) as ref:
        for images, _ in ref:
            want.append(images.clone())
    got = []
    stream = torch.cuda.Stream()
    with torch.cuda.stream(stream), stoker.ImageLoader(
            folder, batch_size=4, size=16, threads=2, shuffle=True, seed=5, prefetch=1,
            pin_memory=True) as ld:
        for images, _ in ld:
            assert images.is_pinned()
            # a busy stream: the copy runs well after the host tensor is freed,
            # while the workers would be refilling its slot
            torch.cuda._sleep(50_000_000)
            images = images.cuda(non_blocking=True)
            got.append(images)
        torch.cuda.synchronize()
    assert len(got) == len(want)
    for g, w in zip(got, want):
        assert torch.equal(g.cpu(), w)

"""Checkpoints at URLs: ``Trainer.save_checkpoint("s3://...")`` and ``Trainer(load_path="s3://...")``
go through fsspec (here its ``memory://`` filesystem), refuse to overwrite as local files do, and
without fsspec a URL is refused in one line before anything is written. A local path is never
altered: the path returned is the path asked for."""

from __future__ import annotations

import sys
import uuid

import pytest
import torch
from torch.utils.data import DataLoader, TensorDataset

from algorithms import CutMix
from algorithms.core import Trainer
from algorithms.core.checkpoint import CheckpointError

fsspec = pytest.importorskip("fsspec")


def _build(duration, load_path=None):
    torch.manual_seed(0)
    model = torch.nn.Sequential(
        torch.nn.Conv2d(3, 6, 3), torch.nn.ReLU(), torch.nn.Dropout(0.3), torch.nn.AdaptiveAvgPool2d(1),
        torch.nn.Flatten(), torch.nn.Linear(6, 5),
    )  # fmt: skip
    g = torch.Generator().manual_seed(1)
    data = TensorDataset(torch.randn(32, 3, 8, 8, generator=g), torch.randint(0, 5, (32,), generator=g))
    optimizer = torch.optim.SGD(model.parameters(), lr=0.1, momentum=0.9)
    return Trainer(
        model,
        DataLoader(data, batch_size=8),
        duration,
        optimizer=optimizer,
        algorithms=[CutMix(alpha=1.0)],
        seed=3,
        device="cpu",
        load_path=load_path,
    )


@pytest.fixture
def url():
    """A fresh folder on fsspec's in-memory filesystem, removed afterwards."""
    folder = f"memory://bucket-{uuid.uuid4().hex}"
    yield f"{folder}/run/ckpt.pt"
    fs = fsspec.filesystem("memory")
    if fs.exists(folder.removeprefix("memory://")):
        fs.rm(folder.removeprefix("memory://"), recursive=True)


def test_a_run_saved_to_a_url_resumes_from_it_in_a_new_trainer_bit_for_bit(url, tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    uninterrupted = _build("7ba")
    uninterrupted.fit()
    interrupted = _build("5ba")
    interrupted.fit()
    assert interrupted.save_checkpoint(url) == url
    fs, where = fsspec.core.url_to_fs(url)
    assert fs.ls(where.rpartition("/")[0], detail=False) == [where]  # no temporary object left beside it
    assert list(tmp_path.iterdir()) == []  # nothing written locally (as ./memory:/...)

    resumed = _build("7ba", load_path=url)
    assert resumed.state.timestamp.batch == 5
    resumed.fit()
    assert resumed.state.timestamp == uninterrupted.state.timestamp
    got, expected = resumed.state.model.state_dict(), uninterrupted.state.model.state_dict()
    assert got.keys() == expected.keys() and all(torch.equal(got[k], expected[k]) for k in got)


def test_a_url_is_not_overwritten_without_overwrite(url):
    trainer = _build("1ba")
    trainer.fit()
    trainer.save_checkpoint(url)
    with fsspec.open(url, "rb") as handle:
        first = handle.read()
    trainer.state.timestamp.batch = 99  # a later state, to tell the two files apart
    with pytest.raises(CheckpointError) as refused:
        trainer.save_checkpoint(url)
    assert str(refused.value) == f"{url}: exists — pass overwrite=True to replace it, or choose another path"
    with fsspec.open(url, "rb") as handle:
        assert handle.read() == first
    assert trainer.save_checkpoint(url, overwrite=True) == url
    with fsspec.open(url, "rb") as handle:
        assert torch.load(handle, weights_only=True)["timestamp"]["batch"] == 99


def test_a_missing_url_is_refused_naming_it(url):
    with pytest.raises(CheckpointError) as refused:
        _build("2ba", load_path=url)
    assert str(refused.value) == f"{url}: no such checkpoint file — check load_path"


def test_without_fsspec_a_url_is_refused_in_one_line_before_anything_is_written(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    trainer = _build("1ba")
    trainer.fit()
    monkeypatch.setitem(sys.modules, "fsspec", None)  # import fsspec now fails, as where it is not installed
    for call in (lambda: trainer.save_checkpoint("s3://bucket/run/ckpt.pt"), lambda: _build("2ba", "gs://b/c.pt")):
        with pytest.raises(CheckpointError) as refused:
            call()
        url = str(refused.value).split(": ", 1)[0]
        assert str(refused.value) == (
            f"{url}: a URL checkpoint is written and read by fsspec, not installed — "
            "pip install 'methods-library[fsspec]'"
        )
    assert list(tmp_path.iterdir()) == []  # not ./s3:/bucket/run/ckpt.pt


def test_a_scheme_fsspec_does_not_know_is_refused_in_one_line(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    trainer = _build("1ba")
    with pytest.raises(CheckpointError) as refused:
        trainer.save_checkpoint("nosuchfs://bucket/ckpt.pt")
    message = str(refused.value)
    assert message.startswith("nosuchfs://bucket/ckpt.pt: fsspec cannot open nosuchfs:// (") and "\n" not in message
    assert message.endswith("— install the filesystem's package (s3fs for s3://, gcsfs for gs://, adlfs for az://) "
                            "or check the URL")  # fmt: skip
    assert list(tmp_path.iterdir()) == []


@pytest.mark.parametrize("asked", ["ckpt.pt", "runs/a/ckpt.pt", "./ckpt.pt", "C:/ckpt.pt"])
def test_a_local_path_is_written_where_asked_and_returned_as_asked(asked, tmp_path, monkeypatch):
    """A str without a scheme (a one-letter one is a Windows drive, a local folder here) is a local
    path: written there, and returned as given, also after a resume reads it."""
    monkeypatch.chdir(tmp_path)
    trainer = _build("1ba")
    trainer.fit()
    returned = trainer.save_checkpoint(asked)
    assert returned == asked and type(returned) is str
    assert (tmp_path / asked).is_file()
    assert _build("2ba", load_path=asked).state.timestamp.batch == 1


def test_deepspeeds_checkpoint_folders_refuse_a_url_in_one_line():
    """DeepSpeed writes its folder with its own file I/O: a URL is refused before anything starts."""
    from algorithms.core.strategies import DeepSpeed

    deepspeed = DeepSpeed()
    deepspeed.bind("fp32", torch.device("cpu"))
    for call in (lambda: deepspeed.save("s3://bucket/run", None), lambda: deepspeed.load("s3://bucket/run", None)):
        with pytest.raises(CheckpointError) as refused:
            call()
        assert str(refused.value) == (
            "s3://bucket/run: parallel='deepspeed' checkpoints are folders DeepSpeed writes itself, on a local or "
            "mounted file system — save to a local path (and copy the folder to remote storage)"
        )


def test_a_file_url_is_written_through_fsspec_where_it_points(tmp_path):
    url = f"file://{tmp_path}/runs/ckpt.pt"
    trainer = _build("2ba")
    trainer.fit()
    assert trainer.save_checkpoint(url) == url
    assert sorted(p.name for p in (tmp_path / "runs").iterdir()) == ["ckpt.pt"]  # renamed, no temporary left
    with pytest.raises(CheckpointError, match=r"exists — pass overwrite=True"):
        trainer.save_checkpoint(url)
    assert _build("4ba", load_path=url).state.timestamp.batch == 2

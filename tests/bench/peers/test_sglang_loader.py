"""Extraction and loading of SGLang kernel files, on fake wheels (no network, no SGLang code)."""

import builtins
import json
import zipfile

import pytest
import torch

from replayssm.bench.peers.sglang import host
from replayssm.bench.peers.sglang.extract import MANIFEST, PeerKernelsError, extract_all, extract_release, sha256
from replayssm.bench.peers.sglang.loader import PeerKernelsMissingError, load_release
from replayssm.bench.peers.sglang.releases import ABSENT, FILE, HOST, Release
from replayssm.bench.peers.sglang.source import PeerSourceError, check_source, restricted_import, sglang_imports

KERNEL = "sglang/kernels/fake/kernel.py"
HELPER = "sglang/kernels/fake/helper.py"
KERNEL_SRC = """
from __future__ import annotations
import torch
from sglang.kernels.fake.helper import twice
from sglang.srt.utils import is_cuda

CUDA = is_cuda()


def double_plus_one(x: torch.Tensor) -> torch.Tensor:
    return twice(x) + 1
"""
HELPER_SRC = """import torch


def twice(x):
    return x * 2


def kda_only():
    from sglang.kernels.cuda import kda

    return kda
"""


def fake_release(version="9.9.9", *, pins=False):
    files = {KERNEL: KERNEL_SRC, HELPER: HELPER_SRC}
    return Release(
        version=version,
        files={m: sha256(s.encode()) if pins else None for m, s in files.items()},
        exports={"double_plus_one": (KERNEL, "double_plus_one"), "twice": (HELPER, "twice")},
        bound={
            ("sglang.kernels.fake.helper", "twice"): FILE,
            ("sglang.srt.utils", "is_cuda"): HOST,
            ("sglang.kernels.cuda", "kda"): ABSENT,
        },  # fmt: skip
    )


def fake_wheel(path, version="9.9.9", files=None):
    files = {KERNEL: KERNEL_SRC, HELPER: HELPER_SRC} if files is None else files
    with zipfile.ZipFile(path, "w") as z:
        meta = f"Metadata-Version: 2.1\nName: sglang\nVersion: {version}\n\n"
        z.writestr(f"sglang-{version}.dist-info/METADATA", meta)
        for member, source in files.items():
            z.writestr(member, source)
    return path


def test_extract_then_load(tmp_path):
    release = fake_release(pins=True)
    wheel = fake_wheel(tmp_path / "sglang-9.9.9-py3-none-any.whl")
    folder = extract_release(wheel, tmp_path / "peers", release)
    assert sorted(p.relative_to(folder).as_posix() for p in folder.rglob("*.py")) == sorted([HELPER, KERNEL])
    manifest = json.loads((folder / MANIFEST).read_text())
    assert manifest["version"] == "9.9.9" and manifest["files"][KERNEL] == sha256(KERNEL_SRC.encode())
    ns = load_release("9.9.9", tmp_path / "peers", release=release)
    assert torch.equal(ns.double_plus_one(torch.tensor([1.0, 2.0])), torch.tensor([3.0, 5.0]))  # helper bound as FILE
    assert ns.modules[KERNEL].CUDA is host.is_cuda()  # bound to replayssm's host query
    assert load_release("9.9.9", tmp_path / "peers", release=release) is ns  # cached
    with pytest.raises(ImportError, match="sglang.kernels.cuda"):  # declared absent: loads, fails only if run
        ns.modules[HELPER].kda_only()


def test_extract_all_picks_wheels_by_version(tmp_path):
    fake_wheel(tmp_path / "sglang-9.9.9-py3-none-any.whl")
    fake_wheel(tmp_path / "sglang-9.9.8-py3-none-any.whl", version="9.9.8")
    done = extract_all([fake_release(), fake_release("9.9.8")], tmp_path / "peers", wheels=[tmp_path])
    assert [p.name for p in done.values()] == ["sglang-9.9.9", "sglang-9.9.8"]
    with pytest.raises(PeerKernelsError, match="sglang-9.9.7"):
        extract_all([fake_release("9.9.7")], tmp_path / "peers", wheels=[tmp_path])


def test_extract_refuses_other_version(tmp_path):
    wheel = fake_wheel(tmp_path / "sglang-9.9.8-py3-none-any.whl", version="9.9.8")
    with pytest.raises(PeerKernelsError, match="is sglang 9.9.8; this peer needs sglang==9.9.9"):
        extract_release(wheel, tmp_path / "peers", fake_release())
    assert not (tmp_path / "peers" / "sglang-9.9.9").exists()


def test_extract_refuses_missing_member(tmp_path):
    wheel = fake_wheel(tmp_path / "w.whl", files={KERNEL: KERNEL_SRC})
    with pytest.raises(PeerKernelsError, match=f"has no {HELPER}"):
        extract_release(wheel, tmp_path / "peers", fake_release())


def test_extract_refuses_modified_file_and_keeps_the_old_copy(tmp_path):
    release = fake_release(pins=True)
    good = extract_release(fake_wheel(tmp_path / "good.whl"), tmp_path / "peers", release)
    patched = fake_wheel(tmp_path / "bad.whl", files={KERNEL: KERNEL_SRC + "\n# patched\n", HELPER: HELPER_SRC})
    with pytest.raises(PeerKernelsError, match="sha256 differs"):
        extract_release(patched, tmp_path / "peers", release)
    assert (good / KERNEL).read_text() == KERNEL_SRC


def test_load_refuses_a_file_modified_after_extraction(tmp_path):
    release = fake_release(pins=True)
    folder = extract_release(fake_wheel(tmp_path / "w.whl"), tmp_path / "peers", release)
    (folder / HELPER).write_text(HELPER_SRC.replace("* 2", "* 3"))
    with pytest.raises(PeerKernelsError, match="sha256 differs"):
        load_release("9.9.9", tmp_path / "peers", release=release)


def test_load_missing_folder_is_one_line(tmp_path):
    with pytest.raises(PeerKernelsMissingError) as e:
        load_release("0.5.23", tmp_path / "nowhere")
    msg = str(e.value)
    assert "\n" not in msg and "sglang-0.5.23" in msg and "replayssm bench peers" in msg


@pytest.mark.parametrize(
    "line, match",
    [
        ("import os", "kernel files may import"),
        ("from sglang.srt.server import launch", "sglang.srt.server.launch"),
        ("from . import helper", "refused import"),
        ("from sglang.srt.utils import *", "refused import"),
        ("import sglang.srt.utils", "kernel files may import"),
        ("def f():\n    from sglang.srt.managers import x", "sglang.srt.managers.x"),  # nested imports count too
    ],
)
def test_import_check_refuses(line, match):
    source = KERNEL_SRC + "\n" + line + "\n"
    with pytest.raises(PeerSourceError, match=match):
        check_source(KERNEL, source, fake_release().bound)


def test_import_check_lists_sglang_imports():
    want = [("sglang.kernels.fake.helper", "twice"), ("sglang.srt.utils", "is_cuda")]
    assert sglang_imports(KERNEL, KERNEL_SRC) == want


def test_restricted_import_serves_only_bindings():
    imp = restricted_import({"sglang.srt.utils": {"is_cuda": host.is_cuda}})
    assert imp("torch") is torch
    assert imp("sglang.srt.utils", fromlist=("is_cuda",)).is_cuda is host.is_cuda
    for name, fromlist in (("os", ()), ("sglang.srt.utils", ("is_hip",)), ("sglang.srt.utils", ())):
        with pytest.raises(ImportError, match="not provided"):
            imp(name, fromlist=fromlist)
    assert builtins.__import__ is not imp


@pytest.mark.skipif(torch.cuda.is_available(), reason="checks the answers on a machine without a GPU")
def test_host_queries_without_gpu():
    for name in ("is_cuda", "is_sm90_supported", "is_gfx95_supported", "is_arch_support_pdl"):
        assert host.binding(name)() is False, name
    assert host.get_device_sm() == 0 and host.get_device_core_count() == 0
    assert host.binding("is_tf32_supported") is False


def test_cli_peers_without_wheels_is_one_line(tmp_path, capsys, monkeypatch):
    from replayssm.cli import main

    monkeypatch.setenv("REPLAYSSM_WHEEL_CACHE", str(tmp_path / "cache"))  # an empty cache
    assert (
        main(["bench", "peers", "--peers-dir", str(tmp_path / "peers")]) == 2
    )  # (a --wheels folder without any: refused)
    err = capsys.readouterr().err.strip()
    assert "\n" not in err and "no sglang-0.5.16-*.whl" in err and "--download" in err
    assert str(tmp_path / "cache") in err  # where it also looked
    assert not (tmp_path / "peers").exists()


def test_cli_peers_takes_a_wheel_already_in_the_cache_without_download(tmp_path, capsys, monkeypatch):
    """A wheel that ``--download`` left in the cache is used by a later ``bench peers`` without flags (it used to be
    refused as missing). Here the cached file is not a wheel, so the command fails on that very file."""
    from replayssm.cli import main

    cache = tmp_path / "cache"
    cache.mkdir()
    (cache / "sglang-0.5.16-py3-none-any.whl").write_text("not a zip")
    monkeypatch.setenv("REPLAYSSM_WHEEL_CACHE", str(cache))
    assert main(["bench", "peers", "--peers-dir", str(tmp_path / "peers")]) == 2
    err = capsys.readouterr().err.strip()
    assert "\n" not in err and "sglang-0.5.16-py3-none-any.whl is not a wheel" in err

"""ember.data's readers on files built here in each format's exact byte layout (IDX, CIFAR binary
batches, image folders, CSV/NPZ), compared with independent readers (numpy, Pillow, the `tokenizers`
package); scikit-learn's bundled digits and iris read as numpy reads them; hostile files refused."""
from __future__ import annotations

import gzip
import hashlib
import importlib.util
import struct

import numpy as np
import pytest

import ember
from ember.data import (CIFARDataset, DataLoader, IDXDataset, ImageFolder, TableDataset, TokenBlocks,
                        TokenStream, load_digits, load_iris, read_cifar, read_cifar100_coarse, read_csv,
                        read_idx, read_npz, sklearn_data_file, write_idx)
from ember.errors import FormatError, LimitError


def idx_bytes(a: np.ndarray, code: int) -> bytes:
    """The IDX layout spelled out: magic 0x0000, type byte, ndim byte, big-endian sizes, big-endian data."""
    be = {0x08: ">u1", 0x09: ">i1", 0x0B: ">i2", 0x0C: ">i4", 0x0D: ">f4", 0x0E: ">f8"}[code]
    return b"\0\0" + bytes([code, a.ndim]) + b"".join(struct.pack(">I", s) for s in a.shape) + a.astype(be).tobytes()


@pytest.mark.parametrize("code,dtype", [(0x08, np.uint8), (0x09, np.int8), (0x0B, np.int16), (0x0C, np.int32),
                                        (0x0D, np.float32), (0x0E, np.float64)])
def test_idx_reads_every_element_type(tmp_path, code, dtype):
    rng = np.random.default_rng(code)
    a = (rng.standard_normal((5, 7, 3)) * 50).astype(dtype)
    p = tmp_path / "x.idx"
    p.write_bytes(idx_bytes(a, code))
    got = read_idx(p)
    assert got.dtype == np.dtype(dtype) and np.array_equal(got, a)
    (tmp_path / "x.idx.gz").write_bytes(gzip.compress(idx_bytes(a, code)))
    assert np.array_equal(read_idx(tmp_path / "x.idx.gz"), a)
    write_idx(tmp_path / "w.idx", a)
    assert (tmp_path / "w.idx").read_bytes() == idx_bytes(a, code)


def test_mnist_layout_dataset(tmp_path):
    rng = np.random.default_rng(0)
    images = rng.integers(0, 256, (9, 28, 28), dtype=np.uint8)
    labels = rng.integers(0, 10, 9).astype(np.uint8)
    (tmp_path / "train-images-idx3-ubyte.gz").write_bytes(gzip.compress(idx_bytes(images, 0x08)))
    (tmp_path / "train-labels-idx1-ubyte.gz").write_bytes(gzip.compress(idx_bytes(labels, 0x08)))
    ds = IDXDataset(tmp_path / "train-images-idx3-ubyte.gz", tmp_path / "train-labels-idx1-ubyte.gz")
    x, y = next(iter(DataLoader(ds, batch_size=4)))
    assert x.shape == (4, 1, 28, 28) and x.dtype == ember.uint8 and y.dtype == ember.int64
    assert np.array_equal(x.numpy()[:, 0], images[:4]) and np.array_equal(y.numpy(), labels[:4])
    from ember.data.transforms import ToFloat
    scaled = IDXDataset(tmp_path / "train-images-idx3-ubyte.gz", tmp_path / "train-labels-idx1-ubyte.gz", ToFloat())
    assert scaled[2][0].dtype == np.float32 and np.array_equal(scaled[2][0][0], images[2] / np.float32(255))


def test_idx_refuses_hostile_files(tmp_path, monkeypatch):
    good = idx_bytes(np.zeros((4, 4), np.uint8), 0x08)
    with pytest.raises(FormatError, match="not an IDX file"):
        read_idx(b"\x01" + good[1:])
    with pytest.raises(FormatError, match="element type 0x07"):
        read_idx(good[:2] + b"\x07" + good[3:])
    with pytest.raises(FormatError, match="the file holds 15"):
        read_idx(good[:-1])
    with pytest.raises(FormatError, match="truncated"):
        read_idx(b"\0\0\x08\x03\0\0")
    from ember.limits import budget
    monkeypatch.setattr(budget, "load_allowance", 1 << 20)  # the default (256 MB) applies alike, just slower to test
    bomb = gzip.compress(b"\0\0\x08\x01" + struct.pack(">I", 8 << 20) + bytes(8 << 20))  # 8 KB -> 8 MB
    with pytest.raises(LimitError, match="decompressed size"):
        read_idx(bomb)


def cifar_record(label, pixels, coarse=None):
    return (bytes([coarse]) if coarse is not None else b"") + bytes([label]) + pixels.tobytes()


def test_cifar10_and_100_binary_batches(tmp_path):
    rng = np.random.default_rng(1)
    imgs = rng.integers(0, 256, (6, 3, 32, 32), dtype=np.uint8)   # R plane, G plane, B plane
    labels = [3, 0, 9, 1, 1, 7]
    (tmp_path / "data_batch_1.bin").write_bytes(b"".join(cifar_record(l, im) for l, im in zip(labels, imgs)))
    x, y = read_cifar(tmp_path / "data_batch_1.bin")
    assert np.array_equal(x, imgs) and y.tolist() == labels
    # the red plane is the first 1024 bytes of a record, row-major
    assert x[2, 0, 1, 5] == (tmp_path / "data_batch_1.bin").read_bytes()[2 * 3073 + 1 + 32 + 5]
    fine, coarse = [55, 99, 0, 12, 12, 70], [3, 19, 0, 5, 5, 11]
    (tmp_path / "train.bin").write_bytes(b"".join(cifar_record(f, im, c) for f, c, im in zip(fine, coarse, imgs)))
    x, y = read_cifar(tmp_path / "train.bin", 100)
    assert np.array_equal(x, imgs) and y.tolist() == fine and read_cifar100_coarse(tmp_path / "train.bin").tolist() == coarse
    ds = CIFARDataset([tmp_path / "data_batch_1.bin"] * 2)
    assert len(ds) == 12 and ds[7][1] == labels[1]
    with pytest.raises(FormatError, match="whole number of CIFAR-10 records"):
        read_cifar((tmp_path / "data_batch_1.bin").read_bytes()[:-1])
    with pytest.raises(FormatError, match="past CIFAR-10"):
        read_cifar(cifar_record(10, imgs[0]))


def test_image_folder_matches_pillow(tmp_path):
    Image = pytest.importorskip("PIL.Image")
    rng = np.random.default_rng(2)
    want = {}
    for cls in ("dog", "cat"):
        (tmp_path / cls).mkdir()
        for i in range(3):
            a = rng.integers(0, 256, (5, 6, 3), dtype=np.uint8)
            Image.fromarray(a).save(tmp_path / cls / f"{i}.png")
            want[(cls, i)] = a
    (tmp_path / "cat" / "notes.txt").write_text("not an image")
    ds = ImageFolder(tmp_path)
    assert ds.classes == ["cat", "dog"] and len(ds) == 6 and ds.targets == [0, 0, 0, 1, 1, 1]
    img, label = ds[4]
    assert label == 1 and np.array_equal(img, want[("dog", 1)])
    gray = ImageFolder(tmp_path, mode="L")
    with Image.open(tmp_path / "cat" / "2.png") as im:
        assert np.array_equal(gray[2][0], np.asarray(im.convert("L")))
    (tmp_path / "dog" / "3.png").write_bytes(b"\x89PNG broken")
    with pytest.raises(FormatError, match="3.png"):
        ImageFolder(tmp_path)[6]


def test_csv_and_npz_tables(tmp_path):
    rng = np.random.default_rng(3)
    a = np.round(rng.standard_normal((20, 4)), 4)
    a[:, 3] = rng.integers(0, 3, 20)
    np.savetxt(tmp_path / "t.csv", a, delimiter=",", header="f1,f2,f3,label", comments="", fmt="%.4f")
    got, head = read_csv(tmp_path / "t.csv")
    assert head == ["f1", "f2", "f3", "label"]
    np.testing.assert_array_equal(got, np.loadtxt(tmp_path / "t.csv", delimiter=",", skiprows=1))
    ds = TableDataset(tmp_path / "t.csv")
    assert len(ds) == 20 and ds[5][0].dtype == np.float32 and ds[5][1] == int(a[5, 3])
    np.savez(tmp_path / "t.npz", x=a[:, :3], y=a[:, 3].astype(np.int64))
    assert set(read_npz(tmp_path / "t.npz")) == {"x", "y"}
    assert np.array_equal(TableDataset(tmp_path / "t.npz")[7][0], a[7, :3].astype(np.float32))
    (tmp_path / "bad.csv").write_text("1,2\n3,x\n")
    with pytest.raises(FormatError, match="line 2: 'x' is not a number"):
        read_csv(tmp_path / "bad.csv")
    (tmp_path / "ragged.csv").write_text("1,2\n3\n")
    with pytest.raises(FormatError, match="line 2 has 1 fields"):
        read_csv(tmp_path / "ragged.csv")
    np.savez(tmp_path / "obj.npz", x=np.array([{"a": 1}], dtype=object))
    with pytest.raises(FormatError, match="pickle-free"):
        read_npz(tmp_path / "obj.npz")


def test_digits_and_iris_from_the_scikit_learn_files():
    if importlib.util.find_spec("sklearn") is None:  # its data files are the fixture; the package is not imported
        pytest.skip("scikit-learn is not installed (pip install scikit-learn): its digits/iris files are the fixture")
    path = sklearn_data_file("digits.csv.gz")
    ref = np.loadtxt(path, delimiter=",")                          # numpy's own reading of the file
    x, y = load_digits()
    assert x.shape == (1797, 8, 8) and x.dtype == np.float32 and y.shape == (1797,)
    assert np.array_equal(x.reshape(1797, 64), ref[:, :64].astype(np.float32)) and np.array_equal(y, ref[:, 64])
    assert hashlib.sha256(x.tobytes()).hexdigest() == hashlib.sha256(ref[:, :64].astype(np.float32).tobytes()).hexdigest()
    assert x.min() == 0 and x.max() == 16 and np.bincount(y).tolist() == np.bincount(ref[:, 64].astype(int)).tolist()
    ipath = sklearn_data_file("iris.csv")
    iref = np.loadtxt(ipath, delimiter=",", skiprows=1)
    f, t, names = load_iris()
    assert f.shape == (150, 4) and np.array_equal(f, iref[:, :4]) and np.array_equal(t, iref[:, 4])
    assert names == ["setosa", "versicolor", "virginica"] and np.bincount(t).tolist() == [50, 50, 50]
    # the loader gives them as batches like any table
    xb, yb = next(iter(DataLoader(TableDataset(ipath), batch_size=150)))
    assert xb.shape == (150, 4) and np.array_equal(yb.numpy(), t)


def test_token_blocks_from_text_match_the_tokenizers_package(tmp_path):
    tokenizers = pytest.importorskip("tokenizers")
    from pydoc_data.topics import topics

    from ember.models.llama.corpus import train_tokenizer
    text = "\n\n".join(topics[k] for k in sorted(topics)[:20])
    tok_json = train_tokenizer(text, vocab_size=400)
    (tmp_path / "tokenizer.json").write_text(tok_json)
    ref_ids = tokenizers.Tokenizer.from_str(tok_json).encode(text, add_special_tokens=False).ids
    ds = TokenBlocks.from_text(text, ember.Tokenizer.from_file(str(tmp_path / "tokenizer.json")), block_size=64)
    assert ds.ids.tolist() == ref_ids
    assert len(ds) == (len(ref_ids) - 1) // 64
    x, y = ds[3]
    assert x.tolist() == ref_ids[192:256] and y.tolist() == ref_ids[193:257]
    xb, yb = next(iter(DataLoader(ds, batch_size=8, shuffle=True, seed=0)))
    assert xb.shape == (8, 64) and xb.dtype == ember.int64 and np.array_equal(xb.numpy()[:, 1:], yb.numpy()[:, :-1])
    # the streaming variant packs the same stream into the same blocks
    tok = ember.Tokenizer.from_file(str(tmp_path / "tokenizer.json"))
    stream = list(TokenStream([text], tok, 64))
    assert len(stream) == len(ds) and all(np.array_equal(a, b) for (a, _), (b, _) in zip(stream, (ds[i] for i in range(len(ds)))))

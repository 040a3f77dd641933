"""Real-data loaders: small files in each exact real format are written, read back and checked;
malformed and missing files give one-line DataErrors naming the file."""

from __future__ import annotations

import gzip
import importlib.util
import io
import pickle
import pickletools
import struct
from pathlib import Path

import numpy as np
import pytest

from dlbench.data import Batch, DataError, Dataset, adapt, input_forms, load_dataset, make_batch, models_for
from dlbench.data.imdb import build_vocab, tokenize
from dlbench.data.mnist import IMAGES_MAGIC, LABELS_MAGIC
from dlbench.gate.reference import loss
from dlbench.models import get_model


def one_line(exc: pytest.ExceptionInfo) -> str:
    text = str(exc.value)
    assert "\n" not in text
    return text


# --- MNIST ----------------------------------------------------------------------------------
def idx_bytes(magic: int, array: np.ndarray) -> bytes:
    return struct.pack(">I", magic) + b"".join(struct.pack(">I", d) for d in array.shape) + array.astype(np.uint8).tobytes()


def write_mnist(directory: Path, split: str = "train", n: int = 5, gz: bool = False, seed: int = 0):
    directory.mkdir(parents=True, exist_ok=True)
    rng = np.random.default_rng(seed)
    images = rng.integers(0, 256, (n, 28, 28), dtype=np.uint8)
    labels = rng.integers(0, 10, n, dtype=np.uint8)
    prefix = "train" if split == "train" else "t10k"
    for name, data in ((f"{prefix}-images-idx3-ubyte", idx_bytes(IMAGES_MAGIC, images)),
                       (f"{prefix}-labels-idx1-ubyte", idx_bytes(LABELS_MAGIC, labels))):
        if gz:
            (directory / f"{name}.gz").write_bytes(gzip.compress(data))
        else:
            (directory / name).write_bytes(data)
    return images, labels


@pytest.mark.parametrize("gz", [False, True])
def test_mnist_reads_idx_files(tmp_path, gz):
    images, labels = write_mnist(tmp_path / "mnist", "train", 7, gz=gz)
    ds = load_dataset("mnist", tmp_path, "train")
    assert ds.x.shape == (7, 1, 28, 28) and ds.x.dtype == np.float32
    assert ds.y.dtype == np.int64 and ds.y.tolist() == labels.tolist()
    np.testing.assert_array_equal(ds.x[:, 0], images.astype(np.float32) / 255)
    assert 0.0 <= ds.x.min() and ds.x.max() <= 1.0
    assert ds.num_classes == 10 and ds.kind == "image"


def test_mnist_test_split_and_files_in_the_root(tmp_path):
    _, labels = write_mnist(tmp_path, "test", 3)
    ds = load_dataset("mnist", tmp_path, "test")
    assert ds.y.tolist() == labels.tolist()


def test_mnist_truncated_file_names_it(tmp_path):
    write_mnist(tmp_path / "mnist", n=4)
    path = tmp_path / "mnist" / "train-images-idx3-ubyte"
    path.write_bytes(path.read_bytes()[:-10])
    with pytest.raises(DataError) as exc:
        load_dataset("mnist", tmp_path, "train")
    assert str(path) in one_line(exc) and "truncated" in str(exc.value)


def test_mnist_truncated_gzip_names_it(tmp_path):
    write_mnist(tmp_path / "mnist", n=4, gz=True)
    path = tmp_path / "mnist" / "train-labels-idx1-ubyte.gz"
    path.write_bytes(path.read_bytes()[:-12])
    with pytest.raises(DataError) as exc:
        load_dataset("mnist", tmp_path, "train")
    assert str(path) in one_line(exc)


def test_mnist_wrong_magic_names_it(tmp_path):
    write_mnist(tmp_path / "mnist", n=4)
    path = tmp_path / "mnist" / "train-labels-idx1-ubyte"
    path.write_bytes(struct.pack(">I", IMAGES_MAGIC) + path.read_bytes()[4:])
    with pytest.raises(DataError) as exc:
        load_dataset("mnist", tmp_path, "train")
    assert str(path) in one_line(exc) and "2051" in str(exc.value) and "2049" in str(exc.value)


def test_mnist_wrong_dimensions_and_trailing_bytes(tmp_path):
    d = tmp_path / "mnist"
    write_mnist(d, n=2)
    good = (d / "train-images-idx3-ubyte").read_bytes()
    (d / "train-images-idx3-ubyte").write_bytes(idx_bytes(IMAGES_MAGIC, np.zeros((2, 27, 28))))
    with pytest.raises(DataError, match="27x28"):
        load_dataset("mnist", tmp_path)
    (d / "train-images-idx3-ubyte").write_bytes(good + b"\0")
    with pytest.raises(DataError, match="trailing bytes"):
        load_dataset("mnist", tmp_path)


def test_mnist_label_count_must_match(tmp_path):
    d = tmp_path / "mnist"
    write_mnist(d, n=3)
    (d / "train-labels-idx1-ubyte").write_bytes(idx_bytes(LABELS_MAGIC, np.zeros(2)))
    with pytest.raises(DataError, match="2 labels for 3 images"):
        load_dataset("mnist", tmp_path)


def test_missing_directory_and_files(tmp_path):
    with pytest.raises(DataError) as exc:
        load_dataset("mnist", tmp_path / "nowhere")
    assert str(tmp_path / "nowhere") in one_line(exc)
    with pytest.raises(DataError, match="--data-dir"):
        load_dataset("cifar10", None)
    with pytest.raises(DataError) as exc:
        load_dataset("mnist", tmp_path, "test")
    assert "t10k-images-idx3-ubyte" in one_line(exc)
    write_mnist(tmp_path / "mnist", n=2)
    (tmp_path / "mnist" / "train-labels-idx1-ubyte").unlink()
    with pytest.raises(DataError, match="train-labels-idx1-ubyte"):
        load_dataset("mnist", tmp_path)
    for name in ("cifar10", "imdb", "ptb"):
        with pytest.raises(DataError, match="not found"):
            load_dataset(name, tmp_path)


# --- CIFAR-10 --------------------------------------------------------------------------------
class Py2Pickler(pickle._Pickler):
    """Writes str and bytes as Python 2 ``str`` (BINSTRING), as the real CIFAR-10 files (pickled by
    Python 2's cPickle, protocol 2) hold them."""

    dispatch = pickle._Pickler.dispatch.copy()

    def save_bytes(self, obj: bytes) -> None:
        n = len(obj)
        self.write((pickle.SHORT_BINSTRING + bytes([n]) if n < 256 else pickle.BINSTRING + struct.pack("<i", n)) + obj)
        self.memoize(obj)

    def save_str(self, obj: str) -> None:
        self.save_bytes(obj.encode("latin1"))

    dispatch[bytes] = save_bytes
    dispatch[str] = save_str


def py2_pickle(obj: object) -> bytes:
    buf = io.BytesIO()
    Py2Pickler(buf, protocol=2).dump(obj)
    return buf.getvalue().replace(b"numpy._core.multiarray", b"numpy.core.multiarray")  # NumPy 1's module name


def write_cifar(root: Path, n: int = 4, seed: int = 0, python2: bool = True) -> dict[str, tuple[np.ndarray, list[int]]]:
    d = root / "cifar-10-batches-py"
    d.mkdir(parents=True)
    rng = np.random.default_rng(seed)
    out = {}
    for name in [f"data_batch_{i}" for i in range(1, 6)] + ["test_batch"]:
        data = rng.integers(0, 256, (n, 3072), dtype=np.uint8)
        labels = rng.integers(0, 10, n).tolist()
        content = {b"batch_label": b"training batch 1 of 5", b"labels": labels, b"data": data,
                   b"filenames": [b"x.png"] * n}
        # the real files: Python 2 pickles; also accept a Python 3 re-pickle (protocol 5)
        (d / name).write_bytes(py2_pickle(content) if python2 else pickle.dumps(content, protocol=5))
        out[name] = (data, labels)
    return out


def test_real_format_fixture_is_a_python2_pickle(tmp_path):
    write_cifar(tmp_path, n=1)
    raw = (tmp_path / "cifar-10-batches-py" / "test_batch").read_bytes()
    ops = [(op.name, arg) for op, arg, _ in pickletools.genops(raw)]
    assert ("GLOBAL", "numpy.core.multiarray _reconstruct") in ops and ("SHORT_BINSTRING", "data") in ops
    assert not {name for name, _ in ops} & {"BINUNICODE", "SHORT_BINUNICODE", "STACK_GLOBAL"}


@pytest.mark.parametrize("python2", [True, False])
def test_cifar_reads_batches_and_normalises_with_training_stats(tmp_path, python2):
    files = write_cifar(tmp_path, python2=python2)
    train = load_dataset("cifar10", tmp_path, "train")
    assert train.x.shape == (20, 3, 32, 32) and train.x.dtype == np.float32 and train.y.dtype == np.int64
    raw = np.concatenate([files[f"data_batch_{i}"][0] for i in range(1, 6)]).reshape(-1, 3, 32, 32) / 255.0
    mean, std = raw.mean(axis=(0, 2, 3)), raw.std(axis=(0, 2, 3))
    np.testing.assert_allclose(train.info["mean"], mean, rtol=1e-12)
    np.testing.assert_allclose(train.info["std"], std, rtol=1e-12)
    np.testing.assert_allclose(train.x, (raw - mean[:, None, None]) / std[:, None, None], atol=1e-5)
    assert train.y.tolist() == sum((files[f"data_batch_{i}"][1] for i in range(1, 6)), [])
    test = load_dataset("cifar10", tmp_path, "test")
    assert test.y.tolist() == files["test_batch"][1]
    assert test.info["mean"] == train.info["mean"]
    expected = (files["test_batch"][0].reshape(-1, 3, 32, 32) / 255.0 - mean[:, None, None]) / std[:, None, None]
    np.testing.assert_allclose(test.x, expected, atol=1e-5)


@pytest.mark.parametrize("content, message", [
    ({b"labels": [1]}, "missing key"),
    ({b"data": np.zeros((1, 3000), np.uint8), b"labels": [1]}, "expected a uint8 array"),
    ({b"data": np.zeros((2, 3072), np.uint8), b"labels": [1]}, "1 labels for 2 images"),
    ({b"data": np.zeros((1, 3072), np.uint8), b"labels": [10]}, "expected 0..9"),
    ([1, 2], "expected a pickled dict"),
])
def test_cifar_malformed_batch_names_the_file(tmp_path, content, message):
    write_cifar(tmp_path)
    path = tmp_path / "cifar-10-batches-py" / "data_batch_3"
    path.write_bytes(pickle.dumps(content, protocol=2))
    with pytest.raises(DataError, match=message) as exc:
        load_dataset("cifar10", tmp_path, "train")
    assert str(path) in one_line(exc)


class _Evil:
    def __reduce__(self):
        import os

        return (os.getcwd, ())


def test_cifar_unpicklable_or_unsafe_file(tmp_path):
    write_cifar(tmp_path)
    path = tmp_path / "cifar-10-batches-py" / "test_batch"
    path.write_bytes(b"this is not a pickle")
    with pytest.raises(DataError, match="pickle") as exc:
        load_dataset("cifar10", tmp_path, "test")
    assert str(path) in one_line(exc)
    path.write_bytes(pickle.dumps({b"data": _Evil(), b"labels": []}, protocol=2))
    with pytest.raises(DataError, match="refusing to load posix.getcwd|refusing to load os.getcwd"):
        load_dataset("cifar10", tmp_path, "test")


# --- IMDB ------------------------------------------------------------------------------------
TRAIN_REVIEWS = {
    "pos": ["A great, great film!<br /><br />I LOVED it.", "great acting; don't miss it", "'Great' fun 2 watch"],
    "neg": ["Bad film. Bad acting.<br />Boring", "the worst film, bad bad"],
}
TEST_REVIEWS = {"pos": ["great unseenword film"], "neg": ["bad"]}


def write_imdb(root: Path, train=TRAIN_REVIEWS, test=TEST_REVIEWS) -> Path:
    base = root / "aclImdb"
    for split, reviews in (("train", train), ("test", test)):
        for label, texts in reviews.items():
            d = base / split / label
            d.mkdir(parents=True)
            for i, text in enumerate(texts):
                (d / f"{i}_{7 if label == 'pos' else 2}.txt").write_text(text, encoding="utf-8")
    return base


def test_tokenize():
    assert tokenize("A great, GREAT film!<br /><br />I'm 'quoted' l'amour 90's x_y") == \
        ["a", "great", "great", "film", "i'm", "quoted", "l'amour", "90's", "x", "y"]
    assert tokenize("café<br/>Déjà ''") == ["café", "déjà"]


def test_imdb_vocabulary_is_deterministic_and_ranked():
    reviews = [tokenize(t) for ts in TRAIN_REVIEWS.values() for t in ts]
    vocab = build_vocab(reviews, 10000)
    assert build_vocab(list(reversed(reviews)), 10000) == vocab
    # counts: bad 4, great 4, film 3, acting 2, it 2; ties alphabetical; ids from 2
    assert list(vocab)[:5] == ["bad", "great", "film", "acting", "it"]
    assert vocab["bad"] == 2 and vocab["great"] == 3
    small = build_vocab(reviews, 5)
    assert small == {"bad": 2, "great": 3, "film": 4}


def test_imdb_reads_tree_with_padding_and_oov(tmp_path):
    write_imdb(tmp_path)
    ds = load_dataset("imdb", tmp_path, "train", vocab_size=6)
    assert ds.kind == "tokens" and ds.x.dtype == np.int64 and ds.num_classes == 2 and ds.vocab == 6
    assert ds.y.tolist() == [0, 0, 1, 1, 1]  # neg then pos, each by file name
    words = ds.info["words"]
    assert words == ["bad", "great", "film", "acting"]
    first = tokenize(TRAIN_REVIEWS["neg"][0])
    ids = [words.index(w) + 2 if w in words else 1 for w in first]
    assert ds.lengths[0] == len(first) and ds.x[0, : len(first)].tolist() == ids
    assert (ds.x[0, len(first):] == 0).all()
    assert ds.x.max() < 6 and 1 in ds.x  # out-of-vocabulary words are 1
    test = load_dataset("imdb", tmp_path, "test", vocab_size=6)
    assert test.info["words"] == words  # the training vocabulary
    assert test.x[0, :1].tolist() == [2] and test.x[1, :3].tolist() == [3, 1, 4]  # unseenword -> 1


def test_imdb_cuts_long_reviews(tmp_path):
    write_imdb(tmp_path, train={"pos": ["word " * 150], "neg": ["bad"]}, test={"pos": ["a"], "neg": ["b"]})
    ds = load_dataset("imdb", tmp_path, "train")
    assert ds.x.shape == (2, 100) and ds.lengths.tolist() == [1, 100]
    assert load_dataset("imdb", tmp_path, "train", max_len=10).x.shape == (2, 10)


def test_imdb_malformed(tmp_path):
    base = write_imdb(tmp_path)
    bad = base / "train" / "pos" / "9_8.txt"
    bad.write_bytes(b"caf\xe9")
    with pytest.raises(DataError, match="not UTF-8") as exc:
        load_dataset("imdb", tmp_path)
    assert str(bad) in one_line(exc)
    bad.write_text("<br /> ... !", encoding="utf-8")
    with pytest.raises(DataError, match="no words"):
        load_dataset("imdb", tmp_path)
    bad.unlink()
    for f in (base / "train" / "neg").iterdir():
        f.unlink()
    (base / "train" / "neg").rmdir()
    with pytest.raises(DataError) as exc:
        load_dataset("imdb", tmp_path)
    assert str(base / "train" / "neg") in one_line(exc)


# --- PTB -------------------------------------------------------------------------------------
PTB_TRAIN = " the cat sat on the mat \n the dog sat \n a <unk> cat \n"


def write_ptb(root: Path, train: str = PTB_TRAIN, valid: str = " the cat ran \n", test: str = " a dog \n") -> Path:
    d = root / "simple-examples" / "data"
    d.mkdir(parents=True)
    for split, text in (("train", train), ("valid", valid), ("test", test)):
        (d / f"ptb.{split}.txt").write_text(text)
    return d


def test_ptb_stream_and_vocabulary(tmp_path):
    write_ptb(tmp_path)
    ds = load_dataset("ptb", tmp_path, "train")
    words = ds.info["words"]
    # counts: <eos> 3, the 3, cat 2, sat 2, then singletons alphabetically
    assert words == ["<eos>", "the", "cat", "sat", "<unk>", "a", "dog", "mat", "on"]
    assert ds.kind == "stream" and ds.y is None and ds.vocab == ds.num_classes == 9 and ds.seq_len == 32
    text = [w for line in PTB_TRAIN.splitlines() for w in [*line.split(), "<eos>"]]
    assert [words[i] for i in ds.x] == text
    valid = load_dataset("ptb", tmp_path, "valid")
    assert [valid.info["words"][i] for i in valid.x] == ["the", "cat", "<unk>", "<eos>"]  # ran -> <unk>


def test_ptb_targets_are_inputs_shifted_by_one(tmp_path):
    train = "".join(f" w{i % 37} w{i % 11} \n" for i in range(200))
    write_ptb(tmp_path, train=train)
    ds = load_dataset("ptb", tmp_path, "train", seq_len=5)
    batch_size = 3
    row_len = len(ds) // batch_size
    rows = ds.x[: batch_size * row_len].reshape(batch_size, row_len)
    batches = list(ds.batches(batch_size, shuffle=False))
    assert len(batches) == ds.num_batches(batch_size) == (row_len - 1) // 5
    for i, b in enumerate(batches):
        assert b.x.shape == b.y.shape == (3, 5) and b.x.dtype == b.y.dtype == np.int64 and b.mask is None
        np.testing.assert_array_equal(b.x, rows[:, 5 * i: 5 * i + 5])
        np.testing.assert_array_equal(b.y, rows[:, 5 * i + 1: 5 * i + 6])
    stream = np.concatenate([b.x for b in batches], axis=1)  # each row continues the stream
    np.testing.assert_array_equal(stream[:, 1:], np.concatenate([b.y for b in batches], axis=1)[:, :-1])
    shuffled = list(ds.batches(batch_size, seed=3))
    assert sorted(b.x.tobytes() for b in shuffled) == sorted(b.x.tobytes() for b in batches)
    with pytest.raises(DataError, match="too few"):
        next(ds.batches(400))


def test_ptb_errors(tmp_path):
    d = write_ptb(tmp_path, train=" ".join(f"w{i}" for i in range(10000)) + "\n")  # + <eos> = 10,001
    with pytest.raises(DataError, match="10001 distinct words") as exc:
        load_dataset("ptb", tmp_path)
    assert str(d / "ptb.train.txt") in one_line(exc)
    (d / "ptb.train.txt").write_text("the cat\n")
    with pytest.raises(DataError, match="'ran' is not in the training vocabulary"):
        load_dataset("ptb", tmp_path, "valid")
    (d / "ptb.test.txt").unlink()
    with pytest.raises(DataError, match="ptb.test.txt"):
        load_dataset("ptb", tmp_path, "test")


# --- digits ----------------------------------------------------------------------------------
needs_sklearn = pytest.mark.skipif(importlib.util.find_spec("sklearn") is None, reason="scikit-learn is not installed")


def test_digits_shapes_split_and_range():
    train, test = load_dataset("digits", split="train"), load_dataset("digits", split="test")
    assert (len(train), len(test)) == (1437, 360)
    for ds in (train, test):
        assert ds.x.shape[1:] == (1, 28, 28) and ds.x.dtype == np.float32 and ds.y.dtype == np.int64
        assert ds.x.min() == 0.0 and ds.x.max() == 1.0
    assert np.bincount(test.y).tolist() == [36] * 10
    again = load_dataset("digits", split="test")
    np.testing.assert_array_equal(again.x, test.x)


@needs_sklearn
def test_bundled_digits_are_scikit_learns():
    """The archive dlbench ships holds scikit-learn's images and labels, in its order, and the NumPy
    resize computes what scipy.ndimage.zoom (order 1, corners aligned) did before it."""
    from scipy import ndimage
    from sklearn.datasets import load_digits

    from dlbench.data.digits import _raw, held_out_indices, resize

    raw = load_digits()
    images, labels = _raw()
    np.testing.assert_array_equal(images, raw.images)
    np.testing.assert_array_equal(labels, raw.target)
    scaled = raw.images[:50] / 16
    zoomed = np.clip(ndimage.zoom(scaled, (1, 3.5, 3.5), order=1, grid_mode=False), 0, 1).astype(np.float32)
    np.testing.assert_allclose(resize(scaled), zoomed, atol=1e-6)
    test = load_dataset("digits", split="test")
    first = raw.images[held_out_indices(raw.target)[0]] / 16  # corners line up with the 8x8 original
    np.testing.assert_allclose(test.x[0, 0, [0, 0, -1, -1], [0, -1, 0, -1]], first[[0, 0, -1, -1], [0, -1, 0, -1]],
                               atol=1e-6)


def test_digits_archive_is_checked(monkeypatch):
    """A damaged archive is a DataError naming the checksum, not wrong data."""
    from dlbench.data import digits

    monkeypatch.setattr(digits, "SHA256", "0" * 64)
    with pytest.raises(DataError, match="sha256") as exc:
        load_dataset("digits")
    assert "reinstall dlbench" in one_line(exc)


def _digit_interpreters() -> list:
    """This Python, and every framework environment's (``dlbench envs``) present here."""
    import sys

    from dlbench import envs

    found = [pytest.param(sys.executable, id="main")]
    return found + [pytest.param(r.python, id=r.framework) for r in envs.list_envs()]


@pytest.mark.parametrize("python", _digit_interpreters())
def test_digits_load_without_scikit_learn_or_scipy(python):
    """A measuring process in a framework's environment reads digits with neither scikit-learn nor
    SciPy there (issue 14: every environment framework's LeNet-on-digits cell failed with 'digits needs
    scikit-learn'); both are blocked here, so the test holds in an interpreter that has them too."""
    import json
    import os
    import subprocess

    code = ("import sys, json; sys.modules['sklearn'] = None; sys.modules['scipy'] = None\n"
            "from dlbench.data import load_dataset\n"
            "d = load_dataset('digits', split='test')\n"
            "print(json.dumps({'shape': list(d.x.shape), 'sum': float(d.x.astype('float64').sum()),"
            " 'labels': d.y.tolist()}))")
    src = str(Path(__file__).resolve().parents[1] / "src")
    out = subprocess.run([python, "-c", code], capture_output=True, text=True, timeout=120,
                         env={**os.environ, "PYTHONPATH": src})
    assert out.returncode == 0, out.stderr[-2000:]
    got = json.loads(out.stdout.strip().splitlines()[-1])
    here = load_dataset("digits", split="test")
    assert got["shape"] == [360, 1, 28, 28] and got["labels"] == here.y.tolist()
    assert got["sum"] == pytest.approx(float(here.x.astype(np.float64).sum()), rel=1e-9)


def test_digits_fit_mnist_models():
    ds = load_dataset("digits", split="test")
    assert set(models_for(ds)) >= {"lenet", "fcn-r", "sae"}
    assert input_forms(ds) == ["image 1x28x28", "vector 784"]
    spec = get_model("lenet")
    from dlbench.models.weights import init_weights

    batch = next(adapt(ds, spec).batches(8, seed=0))
    assert np.isfinite(loss(spec, init_weights(spec), batch))
    vec = next(adapt(ds, get_model("fcn-r")).batches(8, seed=0))
    assert vec.x.shape == (8, 784)
    np.testing.assert_array_equal(vec.x, batch.x.reshape(8, 784))


# --- batches and adapt -----------------------------------------------------------------------
def token_dataset(n: int = 10) -> Dataset:
    rng = np.random.default_rng(0)
    lengths = rng.integers(1, 9, n)
    x = np.where(np.arange(8)[None, :] < lengths[:, None], rng.integers(2, 50, (n, 8)), 0).astype(np.int64)
    x[:, 0] = np.arange(n) + 2  # first id names the sample
    return Dataset("toy", "train", "tokens", x, rng.integers(0, 2, n), 2, lengths=lengths, vocab=50)


def test_batches_order_is_seeded():
    ds = Dataset("toy", "train", "image", np.arange(10, dtype=np.float32).reshape(10, 1, 1, 1), np.arange(10), 10)
    order = lambda seed: [b.y.tolist() for b in ds.batches(3, seed=seed)]  # noqa: E731
    assert order(1) == order(1)
    assert order(1) != order(2)
    assert order(1) == [list(c) for c in np.split(np.random.default_rng(1).permutation(10)[:9], 3)]
    assert [b.y.tolist() for b in ds.batches(4, shuffle=False, drop_last=False)] == [[0, 1, 2, 3], [4, 5, 6, 7], [8, 9]]
    assert ds.num_batches(4) == 2 and ds.num_batches(4, drop_last=False) == 3
    b = next(ds.batches(3, seed=5))
    assert isinstance(b, Batch) and b.x.shape == (3, 1, 1, 1)
    with pytest.raises(DataError, match="fewer than one batch"):
        next(ds.batches(11))


def test_token_batches_pad_to_longest_with_mask():
    ds = token_dataset()
    for b in ds.batches(4, seed=0, drop_last=False):
        idx = b.x[:, 0] - 2
        np.testing.assert_array_equal(b.y, ds.y[idx])
        lengths = ds.lengths[idx]
        assert b.x.shape == (len(idx), lengths.max()) and b.mask.dtype == np.float32
        np.testing.assert_array_equal(b.mask.sum(axis=1), lengths)
        np.testing.assert_array_equal(b.mask, (np.arange(lengths.max()) < lengths[:, None]).astype(np.float32))
        assert (b.x[b.mask == 0] == 0).all() and (b.x[b.mask == 1] >= 2).all()
    synthetic = make_batch(get_model("lstm-imdb"), 4)  # the same convention as synthetic batches
    assert synthetic.mask.shape == synthetic.x.shape and (synthetic.x[synthetic.mask == 0] == 0).all()


def test_adapt_checks_shapes():
    cifar_like = Dataset("cifar10", "train", "image", np.zeros((4, 3, 32, 32), np.float32), np.zeros(4, np.int64), 10)
    with pytest.raises(DataError, match=r"cifar10 \(image 3x32x32, vector 3072\) does not fit lenet \(image 1x28x28\)"):
        adapt(cifar_like, get_model("lenet"))
    with pytest.raises(DataError, match="3072 values per sample"):
        adapt(cifar_like, get_model("fcn-r"))
    assert adapt(cifar_like, get_model("alexnet-r")) is cifar_like
    with pytest.raises(DataError, match="not a set of token sequences"):
        adapt(cifar_like, get_model("lstm-imdb"))
    mnist_like = Dataset("mnist", "train", "image", np.zeros((4, 1, 28, 28), np.float32), np.zeros(4, np.int64), 10)
    pre = adapt(mnist_like, get_model("sae:phase=pretrain1"))
    assert pre.y is None and next(pre.batches(2)).y is None and pre.x.shape == (4, 784)
    toks = token_dataset()
    assert adapt(toks, get_model("lstm-imdb")) is toks
    short = adapt(toks, get_model("lstm-imdb:max_len=5"))
    assert short.x.shape == (10, 5) and short.lengths.max() == 5
    with pytest.raises(DataError, match="embedding has 20 rows"):
        adapt(toks, get_model("lstm-imdb:vocab=20"))
    stream = Dataset("ptb", "train", "stream", np.arange(100) % 7, None, 7, vocab=7, seq_len=32)
    assert adapt(stream, get_model("lstm-ptb")).seq_len == 32
    assert adapt(stream, get_model("lstm-ptb:seq_len=8")).seq_len == 8
    with pytest.raises(DataError, match="needs a token stream"):
        adapt(toks, get_model("lstm-ptb"))
    assert models_for(stream) == ["lstm-ptb", "gpt2", "smollm2-135m"]  # the language models


def test_load_dataset_rejects_unknown_names():
    with pytest.raises(DataError, match="unknown data set 'imagenet'"):
        load_dataset("imagenet", ".")
    with pytest.raises(DataError, match="ptb has splits train, valid, test"):
        load_dataset("ptb", ".", "dev")
    with pytest.raises(DataError, match="unknown option"):
        load_dataset("mnist", ".", "train", seq_len=3)
    assert issubclass(DataError, ValueError)
    assert str(DataError("a\n  b")) == "a b"


def test_genesis_is_bundled_checked_and_split_by_verse(tmp_path, monkeypatch):
    """The shipped text: three disjoint splits of whole verses in order, byte ids under 256, a small GPT
    with a byte vocabulary reads it, and a changed file is refused by its checksum."""
    from dlbench.data import genesis

    splits = [load_dataset("genesis", None, s) for s in ("train", "valid", "test")]
    text = genesis.TEXT.read_bytes()
    assert b"".join(bytes(d.x.astype(np.uint8)) for d in splits) == text  # in order, nothing lost or repeated
    assert bytes(splits[0].x[:16].astype(np.uint8)) == b"In the beginning"
    assert all(d.kind == "stream" and d.vocab == 256 and int(d.x.max()) < 128 for d in splits)
    assert len(splits[0]) > 15 * len(splits[2])  # 90% of the verses against 5%
    gpt = get_model("gpt2:layers=1:dim=32:heads=2:vocab=256:seq_len=32")
    fitted = adapt(splits[0], gpt)
    b = next(fitted.batches(4, shuffle=False))
    assert b.x.shape == (4, 32) and np.array_equal(b.x[:, 1:], b.y[:, :-1])
    with pytest.raises(DataError, match="vocab"):
        adapt(splits[0], get_model("gpt2:layers=1:dim=32:heads=2:vocab=64:seq_len=32"))
    changed = tmp_path / "genesis.txt"
    changed.write_bytes(text.replace(b"beginning", b"Beginning", 1))
    monkeypatch.setattr(genesis, "TEXT", changed)
    with pytest.raises(DataError, match="sha256"):
        load_dataset("genesis", None, "train")


def test_a_small_stream_is_evaluated_in_as_many_rows_as_it_holds():
    """The convergence evaluation's batch of 256 rows of 65 bytes did not fit the shipped text's 10 KB test
    split (a DataError ended every framework's cell); it takes the rows the split holds."""
    import types

    from dlbench.scenarios.convergence import evaluate

    test = adapt(load_dataset("genesis", None, "test"), get_model("gpt2:layers=1:dim=32:heads=2:vocab=256:seq_len=64"))
    assert test.max_batch == 10422 // 65
    seen = []

    def predict(placed):
        seen.append(placed.x.shape)
        return np.zeros((*placed.x.shape, 256))
    backend = types.SimpleNamespace(place=lambda batch, model: batch, to_numpy=lambda a: a)
    loss, acc = evaluate(backend, None, predict, test, 256)
    assert seen[0] == (160, 64) and np.isclose(loss, np.log(256))

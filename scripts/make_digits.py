"""Make src/dlbench/data/digits.npz, the digits data set dlbench ships, from scikit-learn's copy.

Run once, by hand, when the archive must be remade (it is kept in the repo):

    python scripts/make_digits.py        # needs scikit-learn; prints the archive's sha256

The archive holds ``images`` (uint8, 1797 x 8 x 8, values 0..16) and ``labels`` (uint8, 1797), in
scikit-learn's order. Its bytes are reproducible (fixed zip timestamps), so the sha256 printed here
must equal ``dlbench.data.digits.SHA256``, which the loader checks. Measuring processes in a
framework's own environment read it without scikit-learn (or SciPy) installed there.
"""

from __future__ import annotations

import hashlib
import io
import sys
import zipfile
from pathlib import Path

import numpy as np

OUT = Path(__file__).resolve().parents[1] / "src" / "dlbench" / "data" / "digits.npz"


def npz_bytes(arrays: dict[str, np.ndarray]) -> bytes:
    """What ``np.savez_compressed`` writes, with every member dated 1980-01-01 so the bytes depend
    on the arrays alone (numpy stamps the current time)."""
    buf = io.BytesIO()
    with zipfile.ZipFile(buf, "w", zipfile.ZIP_DEFLATED) as zf:
        for name, array in arrays.items():
            member = io.BytesIO()
            np.lib.format.write_array(member, np.ascontiguousarray(array), allow_pickle=False)
            info = zipfile.ZipInfo(f"{name}.npy", date_time=(1980, 1, 1, 0, 0, 0))
            info.compress_type = zipfile.ZIP_DEFLATED
            info.external_attr = 0o644 << 16
            zf.writestr(info, member.getvalue(), compresslevel=9)
    return buf.getvalue()


def main() -> int:
    from sklearn.datasets import load_digits

    bunch = load_digits()
    images, labels = np.asarray(bunch.images), np.asarray(bunch.target)
    if images.shape != (1797, 8, 8) or images.min() < 0 or images.max() > 16 or np.any(images != np.round(images)):
        print(f"unexpected digits data: shape {images.shape}, range {images.min()}..{images.max()}", file=sys.stderr)
        return 1
    data = npz_bytes({"images": images.astype(np.uint8), "labels": labels.astype(np.uint8)})
    OUT.write_bytes(data)
    print(f"{OUT.name}: {len(data):,} bytes, sha256 {hashlib.sha256(data).hexdigest()}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())

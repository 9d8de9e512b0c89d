"""Writes the .npz fixtures of tests/sparse.rs with SciPy's own save_npz.

Run from this folder: python make_npz.py (needs numpy and scipy).
"""
import numpy as np
import scipy.sparse as sp

dense = np.array(
    [
        [1.5, 0.0, 0.0, -2.0, 0.0],
        [0.0, 0.0, 0.0, 0.0, 0.0],
        [0.0, 3.25, 0.0, 0.0, 4.0],
        [0.5, 0.0, -1.0, 0.0, 0.0],
    ]
)
csr = sp.csr_matrix(dense)
sp.save_npz("csr.npz", csr)
sp.save_npz("csr_uncompressed.npz", csr, compressed=False)
sp.save_npz("csc.npz", sp.csc_matrix(dense))
sp.save_npz("coo.npz", sp.coo_matrix(dense))
wide = sp.csr_matrix(dense)
wide.indices = wide.indices.astype(np.int64)
wide.indptr = wide.indptr.astype(np.int64)
sp.save_npz("csr_i64.npz", wide)
# Duplicates: the (0, 0) entry split in two, summed on reading as SciPy does.
row = np.array([0, 0, 0, 2, 2, 3, 3])
col = np.array([0, 0, 3, 1, 4, 0, 2])
val = np.array([1.0, 0.5, -2.0, 3.25, 4.0, 0.5, -1.0])
sp.save_npz("coo_dups.npz", sp.coo_matrix((val, (row, col)), shape=(4, 5)))
np.savetxt("npz_dense.txt", dense.reshape(1, -1), fmt="%.17g")
# Complex data (complex128, complex64): imaginary parts on the same pattern as the real ones.
zdense = dense + 1j * np.where(dense != 0, np.arange(20).reshape(4, 5) - 7.5, 0)
sp.save_npz("csr_c128.npz", sp.csr_matrix(zdense))
sp.save_npz("coo_c64.npz", sp.coo_matrix(zdense.astype(np.complex64)))

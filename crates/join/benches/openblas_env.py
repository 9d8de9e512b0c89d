"""This workplace's OpenBLAS overrides, split between the two sides of a bench (grid.sh and
join.sh start Python without OPENBLAS_CORETYPE and OPENBLAS_L2_SIZE and pass their given values
as *_GIVEN). Import before NumPy."""

import os


def deinsum_env():
    """Drops both overrides from this process, so that NumPy (loaded after) runs as its users
    get it, and returns the environment for deinsum with them as they were given."""
    env = dict(os.environ)
    for var in ("OPENBLAS_CORETYPE", "OPENBLAS_L2_SIZE"):
        given = env.pop(var + "_GIVEN", None)
        if given:
            env[var] = given
        os.environ.pop(var, None)
    return env

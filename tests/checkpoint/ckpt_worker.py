"""A separate process that commits versions, so a test can kill it at a failpoint.

usage: PYTHONPATH=ROOT:ROOT/tests python ckpt_worker.py STATE_DIR DFS_URL FIRST_VERSION LAST_VERSION
Version v writes keys [1000*v, 1000*v+1000) and is checkpointed and uploaded.
"""

import sys

from state_helpers import fill

from misa.config import MisaConfig
from misa.state.store import StateStore


def main() -> None:
    state_dir, dfs_url, first, last = sys.argv[1], sys.argv[2], int(sys.argv[3]), int(sys.argv[4])
    config = MisaConfig.from_mapping({"spark.misa.state.shards": "2", "spark.misa.state.retainVersions": "3"})
    with StateStore(config, state_dir, dfs_url) as store:
        if first > 0:
            store.load(first - 1)
        for version in range(first, last + 1):
            fill(store, 1000, seed=version, start=1000 * version)
            store.checkpoint(version)
            store.checkpoints.upload_and_retain(version)
            print(f"committed {version}", flush=True)


if __name__ == "__main__":
    main()

"""Replay: a second data.list mixed into each training epoch (wenet/dataset/replay.py),
checked against brute-force bookkeeping of which lines and utterances every epoch reads."""
from __future__ import annotations

import math
import subprocess
from typing import List

import pytest
from torch.utils.data import DataLoader

from tests.common import recipe_copy
from tests.dataset.test_pipeline import (PLAIN, TABLE, _assert_same_batches, _train_conf, collect,
                                         make_corpus, write_shards)
from wenet.dataset.dataset import Dataset
from wenet.dataset.replay import Replay


def write_list(tmp_path, name: str, n: int) -> str:
    path = tmp_path / name
    path.write_text("".join(f"{name}-line{i}\n" for i in range(n)))
    return str(path)


@pytest.mark.parametrize("lines,own,ratio", [(59, 12, 1.0), (7, 10, 1.0), (10, 4, 0.5),
                                             (5, 3, 2.0), (1, 1, 3.0)])
def test_epochs_walk_the_list_without_repeats(tmp_path, lines, own, ratio):
    """Each epoch reads round(ratio x own) lines; read in epoch order, the first L lines
    are a permutation of the list, the next L another, and so on."""
    replay = Replay(write_list(tmp_path, "r", lines), ratio, own)
    per_epoch = max(1, round(ratio * own))
    assert replay.per_epoch == per_epoch
    epochs = math.ceil(3 * lines / per_epoch) + 1
    stream: List[int] = []
    for e in range(epochs):
        got = replay.indices(seed=3, epoch=e)
        assert len(got) == per_epoch
        stream += got
    for start in range(0, len(stream) - lines + 1, lines):
        assert sorted(stream[start:start + lines]) == list(range(lines))


def test_selection_depends_only_on_seed_and_epoch(tmp_path):
    path = write_list(tmp_path, "r", 23)
    a, b = Replay(path, 1.0, 5), Replay(path, 1.0, 5)
    assert [a.indices(7, e) for e in (4, 0, 9)] == [b.indices(7, e) for e in (4, 0, 9)]
    assert a.indices(7, 2) != a.indices(8, 2)
    assert a.items(7, 1) == [(f"{path}:{i + 1}", f"r-line{i}") for i in a.indices(7, 1)]


@pytest.mark.parametrize("ratio", [0, -1.0, float("nan"), float("inf"), "1"])
def test_bad_ratio_is_refused(tmp_path, ratio):
    with pytest.raises(ValueError, match="replay ratio"):
        Replay(write_list(tmp_path, "r", 3), ratio, 4)


def test_empty_replay_list_is_refused(tmp_path):
    (tmp_path / "empty.list").write_text("\n\n")
    with pytest.raises(ValueError, match="empty.list: the replay list has no lines"):
        Replay(str(tmp_path / "empty.list"), 1.0, 4)


def _two_corpora(tmp_path):
    own = make_corpus(6, seed=1)
    other = [(f"rep{k[3:]}", t, a) for k, t, a in make_corpus(20, seed=2)]
    (tmp_path / "own").mkdir()
    (tmp_path / "other").mkdir()
    return (own, write_shards(tmp_path / "own", own, 2),
            other, write_shards(tmp_path / "other", other, 2))


def test_training_epochs_read_own_data_once_and_replayed_shards(tmp_path):
    """Every epoch delivers each own utterance once, plus the utterances of exactly the
    replay shards Replay.indices names for that epoch; all 10 replay shards are read
    once over epochs 0..3 (3 shards per epoch, 3 own shards, ratio 1) before repeating."""
    own, own_list, other, other_list = _two_corpora(tmp_path)
    ds = Dataset("shard", own_list, TABLE, dict(PLAIN), training=True, seed=5,
                 replay_list=other_list, replay_ratio=1.0)
    drawn: List[int] = []
    for epoch in range(4):
        ds.set_epoch(epoch)
        keys = set(collect(ds))
        want_shards = ds.replay.indices(5, epoch)
        want = {k for k, _, _ in own} | {other[2 * s + j][0] for s in want_shards for j in (0, 1)}
        assert keys == want
        drawn += want_shards
    assert len(drawn) == 12 and sorted(drawn[:10]) == list(range(10))


def test_ranks_split_own_and_replayed_lines_between_them(tmp_path):
    own, own_list, other, other_list = _two_corpora(tmp_path)
    ranks = [Dataset("shard", own_list, TABLE, dict(PLAIN), training=True, seed=5, rank=r,
                     world_size=2, replay_list=other_list, replay_ratio=1.0) for r in (0, 1)]
    for ds in ranks:
        ds.set_epoch(2)
    keys = [set(collect(ds)) for ds in ranks]
    assert not keys[0] & keys[1]
    single = Dataset("shard", own_list, TABLE, dict(PLAIN), training=True, seed=5,
                     replay_list=other_list, replay_ratio=1.0)
    single.set_epoch(2)
    assert keys[0] | keys[1] == set(collect(single))


def test_cv_dataset_refuses_replay(tmp_path):
    _, own_list, _, other_list = _two_corpora(tmp_path)
    with pytest.raises(ValueError, match="replay_list"):
        Dataset("shard", own_list, TABLE, dict(PLAIN), training=False, replay_list=other_list)


def test_run_sh_refuses_a_missing_replay_list_and_a_bad_ratio(tmp_path):
    recipe = recipe_copy(tmp_path / "recipe")
    for args, msg in [(["--replay_data", str(tmp_path / "none.list")], "--replay_data takes a data.list"),
                      (["--replay_ratio", "0"], "--replay_ratio takes a number > 0")]:
        r = subprocess.run(["bash", "run.sh", "--stage", "4", "--stop_stage", "4", *args],
                           cwd=recipe, capture_output=True, text=True)
        assert r.returncode != 0 and msg in r.stderr, r.stderr


def test_resumed_epoch_replays_the_same_batches(tmp_path):
    """Interrupted after 3 batches of epoch 1 and resumed in a new Dataset (2 DataLoader
    workers), the batches equal the uninterrupted epoch's, replayed shards included."""
    _, own_list, _, other_list = _two_corpora(tmp_path)

    def make():
        return Dataset("shard", own_list, TABLE, _train_conf(), seed=9,
                       replay_list=other_list, replay_ratio=2.0)

    def run(ds, stop=None):
        ds.set_epoch(1)
        out = []
        for b in ds.consume(DataLoader(ds, batch_size=None, num_workers=2)):
            out.append(b)
            if len(out) == stop:
                break
        return out, ds.state_dict()

    full, _ = run(make())
    assert any(k.startswith("rep") for b in full for k in b["keys"])
    first, state = run(make(), stop=3)
    resumed = make()
    resumed.load_state_dict(state)
    rest, _ = run(resumed)
    _assert_same_batches(first + rest, full)


def test_run_sh_refuses_a_replay_list_inside_the_dirs_it_rewrites(tmp_path):
    """A pretraining list left in raw_wav/train would be this corpus's own list after
    stages 1 and 3: refused, whatever the spelling of the path."""
    feat = tmp_path / "feats"
    (feat / "train").mkdir(parents=True)
    (feat / "train" / "data.list").write_text("x.tar\n")
    (tmp_path / "elsewhere.list").write_text("x.tar\n")
    recipe = recipe_copy(tmp_path / "recipe")
    for path in (feat / "train" / "data.list", feat / "train" / ".." / "train" / "data.list"):
        r = subprocess.run(["bash", "run.sh", "--stage", "4", "--stop_stage", "4", "--feat_dir",
                            str(feat), "--replay_data", str(path)],
                           cwd=recipe, capture_output=True, text=True)
        assert r.returncode != 0 and "which this corpus's stages 1 and 3 rewrite" in r.stderr
    # a list elsewhere passes this check and reaches the next one (the ratio's)
    r = subprocess.run(["bash", "run.sh", "--stage", "4", "--stop_stage", "4", "--feat_dir",
                        str(feat), "--replay_data", str(tmp_path / "elsewhere.list"),
                        "--replay_ratio", "0"], cwd=recipe, capture_output=True, text=True)
    assert r.returncode != 0 and "--replay_ratio takes a number > 0" in r.stderr, r.stderr

#!/usr/bin/env python3
"""A small synthetic Mandarin corpus for ``--corpus custom --token_type char``.

espeak-ng's ``cmn`` voice reads sentences drawn from a small grammar (subject, time,
verb, optional number + measure word, object; sometimes a second clause after "，"), each
"speaker" a speed and pitch of the voice. Writes ``OUT/{train,dev,test}.tsv`` (id, path,
sentence, speaker; Chinese punctuation kept, stage 0 drops it) and ``OUT/audio/*.wav``
(22.05 kHz: stage 0 counts them as resampled). Train: 12 speakers, 900 sentences; dev
and test: one unseen speaker each, 60 and 100 sentences. Needs espeak-ng (apt-get
install espeak-ng).

    python bench/synth_mandarin_corpus.py /tmp/cmn/corpus
    ./run.sh --corpus custom --data_root /tmp/cmn/corpus --token_type char --stop_stage 5 \\
      --train_overrides "max_epoch 20; scheduler_conf.max_steps 1000; scheduler_conf.warmup_steps 100"
"""
from __future__ import annotations

import argparse
import os
import random
import subprocess

SUBJECTS = "我 你 他 她 我们 你们 他们 老师 学生 妈妈 爸爸 朋友".split()
TIMES = "今天 明天 昨天 早上 晚上 现在".split()
VERBS = "去 看 买 吃 喝 写 读 喜欢 想要".split()
OBJECTS = "学校 书 苹果 米饭 茶 水 电影 报纸 衣服 汉字 公园 饺子".split()
NUMBERS = list("一二三四五六七八九十")


def sentence(rng: random.Random) -> str:
    s = rng.choice(SUBJECTS) + rng.choice(TIMES) + rng.choice(VERBS)
    if rng.random() < 0.4:
        s += rng.choice(NUMBERS) + "个"
    s += rng.choice(OBJECTS)
    if rng.random() < 0.3:
        s += "，" + rng.choice(SUBJECTS) + rng.choice(VERBS) + rng.choice(OBJECTS)
    return s + "。"


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("out")
    p.add_argument("--seed", type=int, default=7)
    args = p.parse_args()
    rng = random.Random(args.seed)
    speakers = [(f"spk{i:02d}", 120 + 7 * i, 25 + 4 * i) for i in range(14)]
    sets = {"train": (speakers[:12], 900), "dev": (speakers[12:13], 60),
            "test": (speakers[13:], 100)}
    os.makedirs(os.path.join(args.out, "audio"), exist_ok=True)
    for name, (spks, n) in sets.items():
        with open(os.path.join(args.out, f"{name}.tsv"), "w", encoding="utf-8") as f:
            f.write("id\tpath\tsentence\tspeaker\n")
            for i in range(n):
                spk, speed, pitch = spks[i % len(spks)]
                key = f"{spk}-{name}{i:04d}"
                text = sentence(rng)
                path = f"audio/{key}.wav"
                subprocess.run(["espeak-ng", "-v", "cmn", "-s", str(speed), "-p", str(pitch),
                                "-w", os.path.join(args.out, path), text], check=True)
                f.write(f"{key}\t{path}\t{text}\t{spk}\n")


if __name__ == "__main__":
    main()

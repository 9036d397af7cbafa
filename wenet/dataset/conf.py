"""The keys of a ``dataset_conf`` (WeNet 2.x's, plus ``cache_features`` and ``vtlp``) and
their checks: one place that says what the pipeline of ``wenet.dataset.dataset`` accepts."""
from __future__ import annotations

import logging
from typing import Tuple

from wenet.dataset.fbank import FBANK_CONF_KEYS

logger = logging.getLogger(__name__)

KNOWN_CONF_KEYS = frozenset({
    "filter_conf", "resample_conf", "speed_perturb", "fbank_conf", "feats_type",
    "spec_aug", "spec_aug_conf", "spec_sub", "spec_sub_conf", "spec_trim", "spec_trim_conf",
    "shuffle", "shuffle_conf", "sort", "sort_conf", "batch_conf", "cache_features",
    "vtlp", "vtlp_conf", "edge_pad", "edge_pad_conf"})
# The keys each sub-configuration may hold (they become keyword arguments of a stage).
SUB_CONF_KEYS = {
    "filter_conf": {"max_length", "min_length", "token_max_length", "token_min_length",
                    "min_output_input_ratio", "max_output_input_ratio"},
    "resample_conf": {"resample_rate"},
    "vtlp_conf": {"min_warp", "max_warp"},
    "fbank_conf": FBANK_CONF_KEYS,
    "spec_aug_conf": {"num_t_mask", "num_f_mask", "max_t", "max_f", "warp", "max_w"},
    "spec_sub_conf": {"max_t", "num_t_sub"},
    "spec_trim_conf": {"max_t"},
    "edge_pad_conf": {"max_t", "prob", "digital_prob", "max_drop_db", "search"},
    "shuffle_conf": {"shuffle_size"},
    "sort_conf": {"sort_size"},
    "batch_conf": {"batch_type", "batch_size", "max_frames_in_batch"},
}


def sub_conf(conf: dict, name: str) -> dict:
    """A copy of the sub-configuration ``name`` (empty when absent or null)."""
    return dict(conf.get(name) or {})


def check_conf(conf: dict) -> None:
    """Refuse what the pipeline cannot do: features other than fbank, sub-configuration
    keys it does not know (a typo would be ignored), a batch type other than static or
    dynamic, a VTLP range that is not 0 < min_warp <= max_warp; unknown top-level keys
    are logged and ignored (WeNet configs carry some this pipeline has no use for)."""
    feats_type = conf.get("feats_type", "fbank")
    if feats_type != "fbank":
        raise ValueError(f"dataset_conf.feats_type {feats_type!r} is not supported (fbank)")
    unknown = sorted(set(conf) - KNOWN_CONF_KEYS)
    if unknown:
        logger.warning("dataset_conf: ignoring unknown keys %s", unknown)
    for name, allowed in SUB_CONF_KEYS.items():
        sub = conf.get(name) or {}
        if not isinstance(sub, dict):
            raise ValueError(f"dataset_conf.{name} must be a mapping, got {sub!r}")
        bad = sorted(set(sub) - allowed)
        if bad:
            raise ValueError(f"dataset_conf.{name}: unknown keys {bad} (known: {sorted(allowed)})")
    batch_type = sub_conf(conf, "batch_conf").get("batch_type", "static")
    if batch_type not in ("static", "dynamic"):
        raise ValueError(f"batch_conf.batch_type must be static or dynamic, got {batch_type!r}")
    if conf.get("vtlp", False):
        low, high = vtlp_range(conf)
        if not 0 < low <= high:
            raise ValueError(f"dataset_conf.vtlp_conf: need 0 < min_warp <= max_warp, got "
                             f"min_warp {low}, max_warp {high}")


def vtlp_range(conf: dict) -> Tuple[float, float]:
    """The (min, max) VTLP warp factors of a ``dataset_conf`` (default 0.9 and 1.1, the
    range of Jaitly and Hinton's VTLP paper)."""
    sub = sub_conf(conf, "vtlp_conf")
    return float(sub.get("min_warp", 0.9)), float(sub.get("max_warp", 1.1))

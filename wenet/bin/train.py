"""Train an ASR model (run.sh stage 4; one process per GPU or CPU worker, see tools/launch_train.sh).

Resume: ``--checkpoint DIR/NAME.pt`` continues from that checkpoint (exactly,
when its ``NAME.resume.pt`` exists; weights only otherwise). Without
``--checkpoint``, a model_dir that already holds complete checkpoints is
resumed from the newest one, so rerunning an interrupted stage 4 continues it
and rerunning a finished one does nothing. Use a fresh --model_dir to start over.

Disk: rank 0 removes the temporary files that writers killed in an earlier run
left in the model_dir, and keeps the resume states and running averages of the
newest ``keep_last_k`` epochs only (wenet/train/checkpoint_manager.py, the one
owner of saving, resuming and retention).

Errors: a fault found while setting up (a config error naming file:line, a
missing file, ranks that did not all join within ``--ddp_timeout``) or an epoch
that trained on nothing is one line on stderr and exit status 1.

Transfer: ``--init_checkpoint OTHER/NAME.pt`` starts a new run from another
experiment's weights (those with the same name and shape, minus
``--init_exclude REGEX``); optimizer, scheduler and epochs start afresh.
"""
from __future__ import annotations

import argparse
import contextlib
import logging
import os
import sys
from typing import Any, Callable, Dict, Iterator, List, Optional, Tuple

import torch

from wenet.dataset.dataset import Dataset
from wenet.models import init_model
from wenet.train.checkpoint import (CheckpointWriteError, check_init_architecture,
                                    load_init_weights)
from wenet.train.checkpoint_manager import CheckpointManager, format_usage
from wenet.train.config import (TrainConf, TrainingError, input_dim_of, override_config,
                                save_yaml, train_yaml_configs)
from wenet.train.device import (AMP_DTYPES, amp_dtype_for, compile_model, grad_scaler_for,
                                pin_memory_for, seed_everything, set_tf32, training_device,
                                tune_host_memory)
from wenet.train.distributed import DistInfo, init_distributed, shutdown_distributed, under_torchrun
from wenet.train.executor import Executor
from wenet.train.guards import DiagnosticsDone, add_guard_arguments, guards_from_args
from wenet.train.model_average import ModelAverager
from wenet.train.optim import build_optimizer
from wenet.train.scheduler import build_scheduler
from wenet.utils.file_utils import load_yaml, read_symbol_table

LoaderFactories = Tuple[Callable[[int], torch.utils.data.DataLoader],
                        Callable[[], torch.utils.data.DataLoader]]


def _positive_seconds(text: str) -> float:
    """argparse type: a finite number of seconds > 0."""
    try:
        value = float(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"expected seconds (a number > 0), got {text!r}") from None
    if not 0 < value < float("inf"):
        raise argparse.ArgumentTypeError(f"expected seconds (a number > 0), got {text!r}")
    return value


def _add_transfer_arguments(p: argparse.ArgumentParser) -> None:
    """--init_checkpoint and what it copies."""
    p.add_argument("--init_checkpoint", default=None,
                   help="start a new run from these weights (another experiment's NAME.pt): "
                        "tensors with matching name and shape are copied")
    p.add_argument("--init_exclude", default="",
                   help="regular expression: tensors of --init_checkpoint not to copy")
    p.add_argument("--init_allow_mismatch", action="store_true",
                   help="start from --init_checkpoint although the train.yaml beside it builds "
                        "a model computing another function (e.g. another activation); "
                        "without it training refuses to start and names the options")


def get_parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--config", required=True, help="training yaml")
    p.add_argument("--model_dir", required=True, help="experiment dir for checkpoints and train.yaml")
    p.add_argument("--train_data", required=True, help="train data.list")
    p.add_argument("--cv_data", required=True, help="cv data.list")
    p.add_argument("--replay_data", default=None,
                   help="a second data.list (same --data_type), e.g. the pretraining corpus's: "
                        "every epoch also reads REPLAY_RATIO x (train data.list lines) of its "
                        "lines, walking through it without repeats (rehearsal when fine-tuning)")
    p.add_argument("--replay_ratio", type=float, default=1.0,
                   help="replayed lines per train data.list line (with --replay_data)")
    p.add_argument("--symbol_table", "--dict", dest="symbol_table", required=True,
                   help="units.txt, 'token id' per line (WeNet's name; --dict, as in "
                        "recognize.py, is accepted too)")
    p.add_argument("--data_type", default="shard", choices=["shard", "raw"])
    p.add_argument("--bpe_model", default=None, help="sentencepiece model (none: characters)")
    p.add_argument("--cmvn", default=None, help="global_cmvn JSON")
    p.add_argument("--gpu", type=int, default=-1, help="GPU id; -1: CPU")
    p.add_argument("--checkpoint", default=None, help="resume from this NAME.pt")
    _add_transfer_arguments(p)
    p.add_argument("--tensorboard_dir", default=None, help="default: MODEL_DIR/tensorboard")
    p.add_argument("--num_workers", type=int, default=0,
                   help="DataLoader worker processes per training process (WeNet's meaning; "
                        "0: the data pipeline runs in the training process). Not the number "
                        "of training processes: that is the launcher's --num_cpu_workers")
    p.add_argument("--prefetch", type=int, default=100, help="batches prefetched per worker")
    p.add_argument("--pin_memory", nargs="?", const="true", default="auto",
                   choices=["auto", "true", "false"],
                   help="page-locked batches, copied to the GPU asynchronously; auto (default): "
                        "on when training on CUDA (bare --pin_memory: true)")
    p.add_argument("--tf32", default="true", choices=["true", "false"], help="on CUDA, float32 "
                   "matmuls and convolutions in TF32 (tensor cores); false: full float32")
    p.add_argument("--use_amp", nargs="?", const="fp16", default="none",
                   choices=sorted(AMP_DTYPES) + ["auto"],
                   help="mixed precision: fp16 (with a grad scaler; bare --use_amp), bf16, none, "
                        "or auto (bf16 where the GPU/CPU computes it natively, else none)")
    p.add_argument("--override_config", action="append", default=[],
                   help='"key.sub value" (value read as YAML); repeatable')
    p.add_argument("--compile", action="store_true",
                   help="torch.compile the model (off by default: on a 2-core CPU its "
                        "minutes of compilation did not pay)")
    p.add_argument("--seed", type=int, default=777)
    p.add_argument("--ddp.init_method", dest="ddp_init_method", default=None,
                   help="e.g. file:///shared/dir/ddp_init (ignored under torchrun: env://)")
    p.add_argument("--ddp.world_size", dest="ddp_world_size", type=int, default=1)
    p.add_argument("--ddp.rank", dest="ddp_rank", type=int, default=0)
    p.add_argument("--ddp.dist_backend", dest="ddp_dist_backend", default=None,
                   choices=["nccl", "gloo"], help="default: nccl on GPU, gloo on CPU")
    p.add_argument("--ddp_timeout", "--ddp.timeout", dest="ddp_timeout", type=_positive_seconds,
                   default=60.0,
                   help="seconds a rank waits for the others: at the rendezvous (how late a "
                        "second node may join), in every collective (how long peers wait while "
                        "rank 0 writes a checkpoint); then it fails")
    add_guard_arguments(p)  # --inf_check, --print_diagnostics, --scan_oom (wenet/train/guards.py)
    return p


def init_logging(args: argparse.Namespace) -> None:
    """Log lines carry the rank (torchrun's, else --ddp.rank)."""
    rank_hint = os.environ.get("RANK", str(args.ddp_rank))
    logging.basicConfig(level=logging.INFO,
                        format=f"%(asctime)s rank{rank_hint} %(levelname)s %(message)s")


def init_process_group(args: argparse.Namespace) -> DistInfo:
    """Narrow CUDA to --gpu (before CUDA starts) and join the DDP group when there is one."""
    if args.gpu >= 0 and not under_torchrun():
        os.environ["CUDA_VISIBLE_DEVICES"] = str(args.gpu)
    backend = args.ddp_dist_backend or ("nccl" if args.gpu >= 0 else "gloo")
    return init_distributed(args.ddp_init_method, args.ddp_world_size, args.ddp_rank, backend,
                            args.ddp_timeout)


def init_configs(args: argparse.Namespace, info: DistInfo
                 ) -> Tuple[Dict[str, Any], TrainConf, Dict[str, int]]:
    """The config with overrides and the dimensions, its training keys, and the units;
    rank 0 writes it to MODEL_DIR/train.yaml."""
    configs = override_config(load_yaml(args.config), args.override_config)
    conf = TrainConf.from_configs(configs)
    symbols = read_symbol_table(args.symbol_table)
    output_dim = max(symbols.values()) + 1
    configs = train_yaml_configs(configs, input_dim_of(configs), output_dim, args.cmvn,
                                 args.symbol_table, args.bpe_model)
    os.makedirs(args.model_dir, exist_ok=True)
    if info.rank == 0:
        save_yaml(configs, os.path.join(args.model_dir, "train.yaml"))
    return configs, conf, symbols


def init_checkpoints(args: argparse.Namespace, conf: TrainConf, info: DistInfo
                     ) -> CheckpointManager:
    """The owner of MODEL_DIR's checkpoints; rank 0 first removes the temporary files
    that writers killed in an earlier run left there."""
    checkpoints = CheckpointManager.for_run(args.model_dir, conf, info)
    if info.rank == 0:
        checkpoints.remove_stale_temp_files()
    return checkpoints


def init_datasets(args: argparse.Namespace, configs: Dict[str, Any], symbols: Dict[str, int]
                  ) -> Tuple[Dataset, Dataset]:
    """The training and CV datasets (the training one shuffles and can be positioned)."""
    dataset_conf = configs.get("dataset_conf") or {}
    train_set = Dataset(args.data_type, args.train_data, symbols, dataset_conf, args.bpe_model,
                        training=True, seed=args.seed, replay_list=args.replay_data,
                        replay_ratio=args.replay_ratio)
    if train_set.replay is not None:
        logging.info("replay: %d of the %d lines of %s per epoch, beside the %d of %s",
                     train_set.replay.per_epoch, len(train_set.replay.lines), args.replay_data,
                     len(train_set.lists), args.train_data)
    cv_set = Dataset(args.data_type, args.cv_data, symbols, dataset_conf, args.bpe_model,
                     training=False, seed=args.seed)
    return train_set, cv_set


def init_dataloaders(args: argparse.Namespace, info: DistInfo, train_set: Dataset,
                     cv_set: Dataset, device: torch.device) -> LoaderFactories:
    """Factories of the epoch's training DataLoader and of the CV DataLoader (batches
    pinned per --pin_memory for ``device``)."""
    num_workers = args.num_workers
    if train_set.cache_features and (num_workers > 0 or device.type == "cuda"):
        # workers are started afresh each epoch and would take their cache with them
        log = logging.warning if device.type == "cuda" else logging.info
        log("dataset_conf.cache_features: the data pipeline runs in the training process "
            "(num_workers 0 instead of %d)%s", num_workers,
            ", where it can starve the GPU: on a GPU use --override_config "
            "'dataset_conf.cache_features false' --num_workers 4" if device.type == "cuda" else "")
        num_workers = 0
    pin_memory = pin_memory_for(args.pin_memory, device)
    for dataset in (train_set, cv_set):  # refuses a raw list too short for every reader
        dataset.check_readers(info.world_size, num_workers)

    def loader(dataset: Dataset, epoch: int) -> torch.utils.data.DataLoader:
        # An explicit generator: creating the iterator must not draw from the global RNG,
        # or a resumed run's dropout stream would differ from an uninterrupted one.
        extra = {"prefetch_factor": args.prefetch} if num_workers > 0 else {}
        return torch.utils.data.DataLoader(
            dataset, batch_size=None, num_workers=num_workers, pin_memory=pin_memory,
            generator=torch.Generator().manual_seed(args.seed + epoch), **extra)

    return (lambda epoch: loader(train_set, epoch)), (lambda: loader(cv_set, 0))


def init_model_for_training(args: argparse.Namespace, configs: Dict[str, Any],
                            device: torch.device, info: DistInfo) -> torch.nn.Module:
    """The model (from --init_checkpoint's weights when given) on ``device``, DDP-wrapped."""
    model = init_model(configs)
    if args.init_checkpoint:  # a resumed run's own checkpoint replaces these later
        check_init_architecture(configs, args.init_checkpoint, args.init_allow_mismatch)
        copied, skipped = load_init_weights(model, args.init_checkpoint, args.init_exclude)
        logging.info("initialised %d of %d tensors from %s; not copied: %s", len(copied),
                     len(copied) + len(skipped), args.init_checkpoint,
                     ", ".join(skipped) or "none")
    model = model.to(device)
    if args.compile:
        model = compile_model(model)
    if info.distributed:
        model = torch.nn.parallel.DistributedDataParallel(
            model, device_ids=[device.index] if device.type == "cuda" else None)
    return model


def init_executor(args: argparse.Namespace, conf: TrainConf, model: torch.nn.Module,
                  device: torch.device, info: DistInfo, train_set: Dataset,
                  checkpoints: CheckpointManager) -> Executor:
    """Optimizer, schedule, mixed precision and model average around ``model``."""
    optimizer = build_optimizer(model.parameters(), conf.optim, conf.optim_conf)
    scheduler = build_scheduler(optimizer, conf.scheduler, conf.scheduler_conf)
    amp_dtype = amp_dtype_for(args.use_amp, device)
    logging.info("mixed precision (--use_amp %s): %s", args.use_amp,
                 amp_dtype if amp_dtype is not None else "off, float32")
    scaler = grad_scaler_for(device, amp_dtype)
    module = model.module if info.distributed else model
    averager = ModelAverager(module.state_dict(), conf.average_period) if info.rank == 0 else None
    return Executor(model, optimizer, scheduler, conf, device, info, args.model_dir,
                    scaler=scaler, amp_dtype=amp_dtype, averager=averager, train_set=train_set,
                    checkpoints=checkpoints)


def init_resume(args: argparse.Namespace, checkpoints: CheckpointManager,
                executor: Executor) -> None:
    """Continue from --checkpoint, else from the newest complete checkpoint of MODEL_DIR."""
    if checkpoints.resume(executor, args.checkpoint) is None:
        logging.info("no checkpoint in %s: %s", args.model_dir,
                     f"starting from {args.init_checkpoint}" if args.init_checkpoint
                     else "starting from scratch")


def run_training(args: argparse.Namespace, executor: Executor, loaders: LoaderFactories,
                 checkpoints: CheckpointManager) -> None:
    """Train to max_epoch; rank 0 writes tensorboard (from the resumed step on)."""
    if executor.dist.rank == 0:
        from tensorboardX import SummaryWriter
        executor.writer = SummaryWriter(args.tensorboard_dir or os.path.join(args.model_dir, "tensorboard"),
                                        purge_step=executor.state.step or None)
    try:
        executor.fit(*loaders)
    finally:
        if executor.writer is not None:
            executor.writer.close()
    logging.info("training finished: %d epochs, %d updates", executor.conf.max_epoch,
                 executor.state.step)
    if executor.dist.rank == 0:
        logging.info("%s holds %s", args.model_dir, format_usage(checkpoints.usage()))


@contextlib.contextmanager
def _setup_errors() -> Iterator[None]:
    """A bad file or option found while setting up (ValueError, OSError: a config error
    naming file:line, a missing file) becomes a TrainingError: one line, no traceback."""
    try:
        yield
    except (ValueError, OSError) as e:
        raise TrainingError(str(e)) from e


def main(argv: Optional[List[str]] = None) -> None:
    args = get_parser().parse_args(argv)
    init_logging(args)
    tune_host_memory()  # before the data loader forks its workers
    with _setup_errors():
        info = init_process_group(args)
    _train(args, info)
    # only now are _train's locals (the DDP model that holds the group) gone; an
    # exception skips this, so a failing rank never waits on its peers' barrier
    if info.distributed:
        shutdown_distributed()


def _train(args: argparse.Namespace, info: DistInfo) -> None:
    """Everything between joining and leaving the process group, in this order (the RNG
    draws of dataset, model and dropout depend on it)."""
    with _setup_errors():
        device = training_device(args.gpu, info.local_rank)
        set_tf32(device, args.tf32 == "true")
        configs, conf, symbols = init_configs(args, info)
        checkpoints = init_checkpoints(args, conf, info)
        seed_everything(args.seed)
        train_set, cv_set = init_datasets(args, configs, symbols)
        loaders = init_dataloaders(args, info, train_set, cv_set, device)
        model = init_model_for_training(args, configs, device, info)
        seed_everything(args.seed + info.rank)  # distinct dropout streams per rank
        executor = init_executor(args, conf, model, device, info, train_set, checkpoints)
        executor.guards = guards_from_args(args, configs, executor.module)
        init_resume(args, checkpoints, executor)
    run_training(args, executor, loaders, checkpoints)


def cli(argv: Optional[List[str]] = None) -> int:
    """``main`` with the exit status: 1 and one line on stderr for a TrainingError, 130 on ^C."""
    try:
        main(argv)
    except (TrainingError, CheckpointWriteError) as e:
        print(f"train.py: error: {e}", file=sys.stderr, flush=True)
        return 1
    except DiagnosticsDone as e:  # --print_diagnostics stops training on purpose
        logging.info("%s", e)
        return 0
    except KeyboardInterrupt:
        return 130
    return 0


if __name__ == "__main__":
    sys.exit(cli())

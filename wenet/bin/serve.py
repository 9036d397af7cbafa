"""Streaming speech recognition over WebSocket, with a browser page at ``/``.

    python wenet/bin/serve.py --model_dir exp/u2pp --port 10086
    python wenet/bin/serve.py --onnx_dir exp/u2pp/onnx [--int8] --port 10086

``--model_dir`` holds ``train.yaml``, ``units.txt`` (and the BPE model) and the
exported ``final.zip``, or give ``--checkpoint`` to load weights into train.yaml's
model instead; or ``--onnx_dir`` an exported ONNX directory (its ``encoder_chunk.onnx``
fixes the chunk size and left chunks; onnxruntime runs the model). Only streaming
models are served, as the model says (its encoder's ``is_streaming()``: U2/U2++
encoders trained with ``use_dynamic_chunk`` or ``static_chunk_size``, causal
Zipformers); any other model is refused at start-up with the reason. CTC + attention models decode with the CTC prefix beam search (hotwords from
the start message, or a word n-gram LM with ``--lm_path``) and attention rescoring;
transducers with modified beam search (hotwords) or ``--transducer_search greedy``.
Protocol: wenet/serve/protocol.py; docs/server.md.
"""
from __future__ import annotations

import argparse
import asyncio
import logging
import sys
from dataclasses import replace
from typing import Any, List, Optional

import torch

from wenet.decode.stream_state import EndpointRules
from wenet.decode.options import (STREAM, STREAM_CHUNK_SIZE, add_search_options,
                                  search_options)
from wenet.inference.stream_search import TRANSDUCER_SEARCHES, is_transducer_model
from wenet.serve.loading import (NotServableError, load_onnx_streaming_model,
                                 load_streaming_model)
from wenet.serve.onnx_model import chunking
from wenet.serve.origins import parse_allowed_origins
from wenet.serve.server import RecognitionServer, ServerConfig


def get_parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    source = p.add_mutually_exclusive_group(required=True)
    source.add_argument("--model_dir",
                        help="train.yaml + units.txt + final.zip (or with --checkpoint)")
    source.add_argument("--onnx_dir", help="an ONNX model directory of a streaming model "
                        "(wenet/bin/export_onnx.py; its encoder_chunk.onnx fixes the chunk "
                        "size and left chunks)")
    p.add_argument("--checkpoint", default=None, help="a checkpoint instead of final.zip")
    p.add_argument("--int8", action="store_true", help="--onnx_dir: the *.int8.onnx files")
    p.add_argument("--host", default="127.0.0.1",
                   help="address to listen on: 127.0.0.1 (default) serves this machine only; "
                        "0.0.0.0 (or the machine's address) serves the network")
    p.add_argument("--port", type=int, default=10086, help="0: any free port")
    p.add_argument("--max_clients", type=int, default=16)
    p.add_argument("--allowed_origins", nargs="+", default=[], metavar="ORIGIN",
                   help="web pages (scheme://host[:port], or * for any) that may open "
                        "sessions besides the server's own page; scripts and programs (no "
                        "Origin header) are always served. Default: none")
    add_search_options(p, STREAM, stream=True)  # a start message may ask for another chunk
    p.add_argument("--transducer_search", choices=TRANSDUCER_SEARCHES, default="beam",
                   help="transducer models: modified beam search (takes hotwords) or "
                        "greedy search")
    p.add_argument("--endpoint_blank_prob", type=float, default=0.8,
                   help="a frame with p(blank) above this is silence")
    p.add_argument("--endpoint_silence_ms", type=float, default=1000.0,
                   help="continuous decoding: silence after speech that ends a sentence")
    p.add_argument("--endpoint_leading_silence_ms", type=float, default=5000.0,
                   help="continuous decoding: silence without speech that is dropped")
    p.add_argument("--endpoint_vad_silence_ms", type=float, default=0.0,
                   help="continuous decoding: also end a sentence after this much silence "
                        "by the energy VAD (wenet/inference/vad.py); 0: off")
    p.add_argument("--max_sentence_s", type=float, default=20.0,
                   help="a sentence ends at this length (continuous or not)")
    p.add_argument("--max_session_s", type=float, default=3600.0,
                   help="audio seconds one stream may send")
    p.add_argument("--idle_timeout_s", type=float, default=60.0,
                   help="seconds without any message that close a connection")
    p.add_argument("--min_audio_rate", type=float, default=0.5,
                   help="audio seconds a connection must send per second the server waits "
                        "for it, over each --rate_window_s (real time is 1; 0: no minimum); "
                        "a client trickling bytes to hold a slot is closed (1008)")
    p.add_argument("--rate_window_s", type=float, default=30.0,
                   help="the window of --min_audio_rate, seconds")
    p.add_argument("--max_connection_s", type=float, default=7200.0,
                   help="wall-clock seconds one connection may stay open (1008 after)")
    p.add_argument("--max_message_bytes", type=int, default=1 << 18)
    p.add_argument("--num_workers", type=int, default=2, help="threads running the model")
    p.add_argument("--num_threads", type=int, default=1, help="torch threads per worker")
    return p


def build_server(args: argparse.Namespace) -> RecognitionServer:
    """The server the arguments describe (the model loaded and checked)."""
    if args.decoding_chunk_size is not None and args.decoding_chunk_size <= 0:
        raise ValueError(f"a stream is encoded chunk by chunk: --chunk_size must be > 0, "
                         f"got {args.decoding_chunk_size}")
    if args.onnx_dir is not None:
        if args.checkpoint is not None:
            raise ValueError("--checkpoint goes with --model_dir, not --onnx_dir")
        loaded: Any = load_onnx_streaming_model(args.onnx_dir, args.int8, args.num_threads)
        # the export fixed the chunking: not given (None) takes it, any given value that
        # differs is an error
        chunk, left = chunking(loaded.model, args.decoding_chunk_size,
                               args.num_decoding_left_chunks)
        args.decoding_chunk_size, args.num_decoding_left_chunks = chunk, left
    else:
        if args.int8:
            raise ValueError("--int8 goes with --onnx_dir (a model dir's int8 TorchScript is "
                             "final_quant.zip: --checkpoint DIR/final_quant.zip)")
        loaded = load_streaming_model(args.model_dir, args.checkpoint)
        if args.decoding_chunk_size is None:
            args.decoding_chunk_size = STREAM_CHUNK_SIZE
        if args.num_decoding_left_chunks is None:
            args.num_decoding_left_chunks = -1
    options = search_options(args, loaded.tokenizer)  # reads --lm_path with the units
    if options.lm_fusion is not None and is_transducer_model(loaded.model):
        raise ValueError("--lm_path: an n-gram LM is fused into CTC searches only; this "
                         "model is a transducer")
    rules = EndpointRules(blank_prob=args.endpoint_blank_prob,
                          max_leading_silence_ms=args.endpoint_leading_silence_ms,
                          trailing_silence_ms=args.endpoint_silence_ms,
                          max_sentence_ms=args.max_sentence_s * 1000.0,
                          vad_silence_ms=args.endpoint_vad_silence_ms)
    options = replace(options, endpoint=rules)
    config = ServerConfig(host=args.host, port=args.port, max_clients=args.max_clients,
                          num_workers=args.num_workers, max_message_bytes=args.max_message_bytes,
                          max_session_s=args.max_session_s, idle_timeout_s=args.idle_timeout_s,
                          allowed_origins=parse_allowed_origins(args.allowed_origins),
                          min_audio_rate=args.min_audio_rate, rate_window_s=args.rate_window_s,
                          max_connection_s=args.max_connection_s,
                          max_chunk_size=options.chunk_size if args.onnx_dir is not None
                          else max(64, options.chunk_size))
    return RecognitionServer(loaded, options, config, hotword_score=args.context_score,
                             transducer_search=args.transducer_search)


def main(argv: Optional[List[str]] = None) -> int:
    args = get_parser().parse_args(argv)
    logging.basicConfig(level=logging.INFO, format="%(asctime)s %(levelname)s %(message)s")
    torch.set_num_threads(args.num_threads)
    try:
        server = build_server(args)
    except (NotServableError, ValueError, FileNotFoundError) as e:
        print(f"serve.py: {e}", file=sys.stderr)
        return 1
    try:
        asyncio.run(server.serve_forever())
    except KeyboardInterrupt:
        pass
    return 0


if __name__ == "__main__":
    sys.exit(main())

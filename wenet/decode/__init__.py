"""Decoding: the searches (ctc, attention, transducer), the registry of modes and the one
entry point ``decode(model, encoder_out, encoder_mask, modes, options)``."""
from wenet.decode.batch_context import BatchContext, ModeResult
from wenet.decode.options import DecodeOptions
from wenet.decode.modes import MODES, DecodeMode, check_modes, decode, register_mode

__all__ = ["MODES", "BatchContext", "DecodeMode", "DecodeOptions", "ModeResult", "check_modes",
           "decode", "register_mode"]

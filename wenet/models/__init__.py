"""The model factory and its registries: ``init_model``, ``load_trained_model``."""
from wenet.models.factory import (DECODERS, ENCODERS, init_model, is_transducer_config,
                                  load_model, load_trained_model)
from wenet.models.losses import LOSSES

__all__ = ["DECODERS", "ENCODERS", "LOSSES", "init_model", "is_transducer_config",
           "load_model", "load_trained_model"]
